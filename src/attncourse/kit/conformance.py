"""The attention conformance suite: one set of properties for any ``causal_attention``.

Any implementation of the signature ::

    causal_attention(query, key, value, query_offset=0, dropout=None, *, key_valid=None)
        -> (output, probabilities)

with its backward pass ::

    backward(query, key, value, G, query_offset=0, *, key_valid=None)
        -> (dquery, dkey, dvalue)

is held to the same properties, the entries of :data:`PROPERTIES`: values, gradients,
causality, padding, the prefix interface, extreme scores, bad input, the dropout
contract and the query offset. Each property is a function ``f(implementation)`` that
returns ``None`` or raises :class:`~attncourse.kit.failed.CheckFailed` naming what
failed and the likely fix. The reference is :data:`REFERENCE`; a faster implementation
(Chapter 9's tiled and fast dense versions, :data:`FAST` and
:func:`tiled_implementation`) or the cached one (Chapter 10, :data:`CACHED`: the cache's
attention pattern, :func:`incremental_attention`) joins the list in
``tests/test_conformance.py`` and gets no tests of its own for what the suite covers.

Values are compared with an independent witness, :func:`definition`, which computes each
query's softmax over its visible keys one query at a time. Gradients are compared with
central differences (:func:`attncourse.kit.gradients.gradcheck`: steps ``1e-5`` and
``1e-6``, tolerance ``1e-7``, every coordinate) of the implementation's own forward
pass. Masked weights must be exact zeros, so causality and padding are checked exactly.

Also the two failure listers of Chapter 4, which name the properties an ``attend``
function violates: :func:`causal_failures` and :func:`padding_failures`.

>>> assert_conforms(REFERENCE)  # doctest: +NORMALIZE_WHITESPACE
['values', 'gradients', 'causality', 'padding', 'prefix interface', 'extreme scores',
 'bad input', 'dropout contract', 'query offset']
"""

import math
from typing import Callable, NamedTuple

import numpy as np

from ..layers.attention import (
    AttentionSaved,
    _batch_shape,
    _validate_causal,
    attention_backward,
    causal_attention,
    causal_attention_backward,
    causal_mask,
    causal_visible,
    combine_masks,
    key_padding_mask,
    key_valid_from_lengths,
)
from ..layers.head import project
from ..layers.linear import matmul_backward
from ..fast import fast_causal_attention, fast_causal_attention_backward
from .._validate import require_sizes, shaped
from ..tiled import (
    tiled_causal_attention,
    tiled_causal_attention_backward,
)
from .failed import CheckFailed
from .gradients import STEPS, TOLERANCE, gradcheck
from .prefix import prefix_report

__all__ = [
    "FAST",
    "tiled_implementation",
    "CACHED",
    "incremental_attention",
    "incremental_attention_backward",
    "Implementation",
    "REFERENCE",
    "PROPERTIES",
    "VALUE_TOLERANCE",
    "definition",
    "assert_values",
    "assert_gradients",
    "assert_causality",
    "assert_padding",
    "assert_padded_case",
    "assert_prefix",
    "assert_extreme_scores",
    "assert_bad_input",
    "assert_dropout_contract",
    "assert_query_offset",
    "conformance_failures",
    "assert_conforms",
    "causal_failures",
    "padding_failures",
]

EPS = np.finfo(np.float64).eps
VALUE_TOLERANCE = 1e-12  # rtol and atol against the definition (float64 rounding)


class Implementation(NamedTuple):
    """An attention implementation under test: a name, its forward and its backward.

    ``offsets`` declares whether it implements a non-zero ``query_offset`` (the
    key/value cache of Chapter 10). If True, the "query offset" property holds it to the
    offset's meaning; if False (the default: a kernel for whole sequences, such as
    Chapter 9's), it must refuse a non-zero offset with ``NotImplementedError``, never
    ignore it.
    """

    name: str
    # attend(query, key, value, query_offset=0, dropout=None, *, key_valid=None)
    attend: Callable
    # backward(query, key, value, G, query_offset=0, *, key_valid=None)
    backward: Callable
    offsets: bool = False


REFERENCE = Implementation("reference", causal_attention, causal_attention_backward,
                           offsets=True)


# --- helpers --------------------------------------------------------------------------

def _run(property, fn, *args, **kwargs):
    """Call the implementation; an exception becomes CheckFailed naming the property."""
    try:
        return fn(*args, **kwargs)
    except CheckFailed:
        raise
    except Exception as e:  # the implementation may fail in any way
        shapes = ", ".join(str(np.shape(a)) for a in args)
        name = getattr(fn, "__name__", "it")
        raise CheckFailed(
            property,
            f"{name} on inputs of shapes {shapes} raised {type(e).__name__}: {e}",
            "accept the causal_attention signature and run on these inputs",
        ) from e


def _attend(impl, property, Q, K, V, key_valid=None, **kwargs):
    if key_valid is not None:
        kwargs["key_valid"] = key_valid
    result = _run(property, impl.attend, Q, K, V, **kwargs)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise CheckFailed(
            property,
            f"must return a pair (output, probabilities), got {type(result).__name__}",
            "return output, probabilities",
        )
    return np.asarray(result[0]), np.asarray(result[1])


def _backward(impl, property, Q, K, V, G, key_valid=None):
    kwargs = {} if key_valid is None else {"key_valid": key_valid}
    grads = _run(property, impl.backward, Q, K, V, G, **kwargs)
    if not (isinstance(grads, tuple) and len(grads) == 3):
        raise CheckFailed(property, "backward must return three gradients "
                          "(dquery, dkey, dvalue)", "return dquery, dkey, dvalue")
    for name, x, g in zip(("dquery", "dkey", "dvalue"), (Q, K, V), grads):
        if np.shape(g) != np.shape(x):
            raise CheckFailed(
                property, f"{name} has shape {np.shape(g)}, its input {np.shape(x)}",
                "sum the gradient over the batch axes that broadcasting added",
            )
    return tuple(np.asarray(g) for g in grads)


def _qkv(rng, batch_q, batch_k, batch_v, T_q, T_k, d, r):
    Q = rng.standard_normal((*batch_q, T_q, d))
    K = rng.standard_normal((*batch_k, T_k, d))
    V = rng.standard_normal((*batch_v, T_k, r))
    return Q, K, V


def definition(Q, K, V, key_valid=None):
    """Return ``O, A`` of causal attention from the definition, one query at a time.

    Query ``i`` reads the keys ``j <= i`` that ``key_valid`` marks real (all keys when
    it is ``None``), with weights ``exp(s_j - max s) / sum exp(s - max s)`` for the
    scores ``s_j = q_i . k_j / sqrt(d)`` of those keys only; a query with no visible key
    gets a zero row and a zero output. Batch axes broadcast. An independent witness for
    the values of every implementation (it shares no code with them).

    >>> O, A = definition(np.zeros((2, 1)), np.zeros((2, 1)), np.array([[2.0], [4.0]]))
    >>> A
    array([[1. , 0. ],
           [0.5, 0.5]])
    """
    Q, K, V = (np.asarray(x, dtype=np.float64) for x in (Q, K, V))
    (T_q, d), (T_k, r) = Q.shape[-2:], V.shape[-2:]
    batch = np.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    valid = np.ones(batch + (T_k,), dtype=bool) if key_valid is None else key_valid
    valid = np.broadcast_to(valid, batch + (T_k,))
    Qb, Kb, Vb = (np.broadcast_to(x, batch + x.shape[-2:]) for x in (Q, K, V))
    O, A = np.zeros(batch + (T_q, r)), np.zeros(batch + (T_q, T_k))
    for b in np.ndindex(*batch):
        for i in range(T_q):
            keys = [j for j in range(min(i + 1, T_k)) if valid[b][j]]
            if not keys:
                continue
            s = Kb[b][keys] @ Qb[b][i] / math.sqrt(d)  # (n, d) x (d,) -> (n,)
            w = np.exp(s - s.max())
            w = w / w.sum()
            A[b][i, keys] = w
            O[b][i] = w @ Vb[b][keys]  # (n,) x (n, r) -> (r,)
    return O, A


def _close(actual, desired, rtol=VALUE_TOLERANCE, atol=VALUE_TOLERANCE):
    same_shape = actual.shape == desired.shape
    return same_shape and np.allclose(actual, desired, rtol=rtol, atol=atol)


def _max_diff(actual, desired):
    if actual.shape != desired.shape:
        return f"shape {actual.shape}, expected {desired.shape}"
    worst = float(np.max(np.abs(actual - desired), initial=0.0))
    return f"max |difference| {worst:.1e}"


def _floating_point_errors(property, where, fix, *calls):
    """Run ``calls`` with overflow, 0/0 and division by zero raised; name the first."""
    try:
        with np.errstate(over="raise", invalid="raise", divide="raise"):
            return [call() for call in calls]
    except CheckFailed as e:
        if isinstance(e.__cause__, FloatingPointError):
            raise CheckFailed(property, f"{where}floating-point error: {e.__cause__}",
                              fix) from None
        raise


# --- the properties -------------------------------------------------------------------

def _value_cases(seed):
    """(label, Q, K, V, key_valid): unequal sizes T != d != r throughout."""
    rng = np.random.default_rng(seed)
    return [
        ("unbatched", *_qkv(rng, (), (), (), 5, 5, 3, 4), None),
        ("batched", *_qkv(rng, (2,), (2,), (2,), 6, 6, 4, 3), None),
        ("broadcast batch axes", *_qkv(rng, (2, 1), (3,), (1, 3), 4, 4, 3, 2), None),
        ("T_q < T_k (query i reads keys 0..i)", *_qkv(rng, (), (), (), 3, 5, 4, 2),
         None),
        ("batched, padded", *_qkv(rng, (3,), (3,), (3,), 5, 5, 3, 2),
         key_valid_from_lengths([2, 5, 0], 5, side="left")),
    ]


def assert_values(impl, seed=0):
    """Output and probabilities equal :func:`definition` to ``1e-12`` (unbatched,
    batched, broadcast batch axes, ``T_q < T_k``, padded)."""
    for label, Q, K, V, key_valid in _value_cases(seed):
        O, A = _attend(impl, "values", Q, K, V, key_valid)
        O_def, A_def = definition(Q, K, V, key_valid)
        if not _close(A, A_def):
            raise CheckFailed(
                "values", f"{label}: the probabilities differ from the softmax of "
                f"q_i . k_j / sqrt(d) over the keys j <= i ({_max_diff(A, A_def)})",
                "scale by 1/sqrt(d), hide keys j > i before the softmax, normalise "
                "over the keys",
            )
        if not _close(O, O_def):
            raise CheckFailed(
                "values", f"{label}: the output differs from probabilities @ value "
                f"({_max_diff(O, O_def)})", "output = probabilities @ value",
            )


def _gradient_cases(seed):
    rng = np.random.default_rng(seed)
    return [
        ("unbatched, T=5 d=3 r=2", *_qkv(rng, (), (), (), 5, 5, 3, 2), None),
        ("batched, padded, with queries that see no key",
         *_qkv(rng, (2,), (2,), (2,), 4, 4, 3, 2),
         key_valid_from_lengths([2, 4], 4, side="left")),
        ("broadcast batch axes", *_qkv(rng, (2, 1), (3,), (1, 3), 4, 4, 3, 2), None),
        ("T_q < T_k", *_qkv(rng, (), (), (), 3, 5, 4, 2), None),
        ("a batch held by the values alone", *_qkv(rng, (), (), (2,), 3, 5, 4, 2),
         None),
    ]


def assert_gradients(impl, seed=1, steps=STEPS, tolerance=TOLERANCE):
    """``backward`` agrees with central differences of ``J = sum(output * G)`` on every
    coordinate of query, key and value (float64, seeded, unequal sizes, broadcast batch
    axes summed back, padded rows), steps and tolerance of
    :mod:`attncourse.kit.gradients`."""
    rng = np.random.default_rng(seed + 1000)
    for label, Q, K, V, key_valid in _gradient_cases(seed):
        O, _ = _attend(impl, "gradients", Q, K, V, key_valid)
        G = rng.standard_normal(O.shape)
        dQ, dK, dV = _backward(impl, "gradients", Q, K, V, G, key_valid)

        def J(Q, K, V):
            O, _ = _attend(impl, "gradients", Q, K, V, key_valid)
            return float(np.sum(O * G))

        report = gradcheck(J, {"Q": Q, "K": K, "V": V}, {"Q": dQ, "K": dK, "V": dV},
                           steps=steps, tolerance=tolerance)
        if not report.passed:
            name, h = max(report.errors, key=report.errors.get)
            raise CheckFailed(
                "gradients", f"{label}: d{name} disagrees with central differences "
                f"(max |error| {report.worst:.1e} >= {tolerance:.0e}, h={h:.0e})",
                "dV = A^T G, dA = G V^T, dS = A (dA - rowsum(A dA)), "
                "dQ = dS K / sqrt(d), dK = dS^T Q / sqrt(d)",
            )


def assert_causality(impl, seed=2):
    """Future keys get weight exactly 0 (:func:`causal_failures` is empty); outputs up
    to ``t`` are exactly unchanged when keys and values after ``t`` change; the gradient
    of the output at ``t`` with respect to keys and values after ``t``, and to any
    other query, is exactly 0."""
    rng = np.random.default_rng(seed)
    B, T, d, r = 2, 6, 3, 4
    Q, K, V = _qkv(rng, (B,), (B,), (B,), T, T, d, r)

    def attend(Q, K, V):
        return _attend(impl, "causality", Q, K, V)

    failed = causal_failures(attend, Q, K, V)
    if failed:
        raise CheckFailed("causality", "violated: " + ", ".join(failed),
                          "hide keys j > i (not j >= i) before the softmax, with -inf")
    O, _ = attend(Q, K, V)
    for t in range(T - 1):
        K2, V2 = K.copy(), V.copy()
        K2[..., t + 1:, :] = rng.standard_normal(K2[..., t + 1:, :].shape)
        V2[..., t + 1:, :] = 10.0 * rng.standard_normal(V2[..., t + 1:, :].shape)
        O2, _ = attend(Q, K2, V2)
        if not np.array_equal(O2[..., : t + 1, :], O[..., : t + 1, :]):
            raise CheckFailed(
                "causality", f"outputs at positions 0..{t} changed when only the keys "
                f"and values after {t} changed",
                "mask the scores before the softmax, so later keys never enter it",
            )
        G = np.zeros(O.shape)
        G[..., t, :] = rng.standard_normal(G[..., t, :].shape)  # only the output at t
        dQ, dK, dV = _backward(impl, "causality", Q, K, V, G)
        if np.any(dK[..., t + 1:, :] != 0) or np.any(dV[..., t + 1:, :] != 0):
            raise CheckFailed(
                "causality", f"the output at {t} has a non-zero gradient with respect "
                f"to keys or values after {t}",
                "use the masked weights (exact zeros) in the backward pass",
            )
        if np.any(dQ[..., np.arange(T) != t, :] != 0):
            raise CheckFailed(
                "causality", f"the output at {t} alone has a non-zero gradient with "
                "respect to another query", "dQ_i depends on row i of dS only",
            )


def assert_padded_case(impl, Q, K, V, G, key_valid):
    """The padding properties on one batch: ``Q (B, T, d)``, ``K (B, T, d)``,
    ``V (B, T, r)``, upstream ``G (B, T, r)``, ``key_valid (B, T)``.

    No floating-point error and everything finite; :func:`padding_failures` is empty,
    and real outputs are exactly unchanged by large new content at the padding; a query
    with no visible key gets a zero row, a zero output and a zero gradient; padded keys
    and values get exactly zero gradient; hidden keys get weight 0 and the other rows
    sum to one.
    """
    key_valid = np.asarray(key_valid)
    where = f" (key_valid = {key_valid.astype(int).tolist()})"

    def attend(Q, K, V, key_valid):
        return _attend(impl, "padding", Q, K, V, key_valid)

    (O, A), (dQ, dK, dV) = _floating_point_errors(
        "padding", f"key_valid = {key_valid.astype(int).tolist()}: ",
        "a query with no visible key must not compute 0/0 or -inf - (-inf): give its "
        "row weight 0",
        lambda: attend(Q, K, V, key_valid),
        lambda: _backward(impl, "padding", Q, K, V, G, key_valid))
    if not all(np.all(np.isfinite(x)) for x in (O, A, dQ, dK, dV)):
        raise CheckFailed("padding", "NaN or infinity in the output, the probabilities "
                          "or a gradient" + where,
                          "give a query with no visible key a zero row")
    failed = padding_failures(attend, Q, K, V, key_valid)
    if failed:
        raise CheckFailed("padding", "violated: " + ", ".join(failed) + where,
                          "hide columns (keys), key_valid[..., None, :], not rows")
    rng = np.random.default_rng(0)
    K2 = np.where(key_valid[..., None], K, 50.0 * rng.standard_normal(np.shape(K)))
    V2 = np.where(key_valid[..., None], V, 50.0 * rng.standard_normal(np.shape(V)))
    O2, _ = attend(Q, K2, V2, key_valid)
    if not np.array_equal(O2[key_valid], O[key_valid]):
        raise CheckFailed("padding", "real outputs changed when large new content was "
                          "written to the padding" + where,
                          "mask the padded keys before the softmax")
    masked_backward = "use the masked weights (exact zeros) in the backward pass"
    T_q, T_k = A.shape[-2:]
    # (T_q, T_k) & (B, 1, T_k) -> (B, T_q, T_k)
    visible = combine_masks(causal_mask(T_q, T_k), key_padding_mask(key_valid, T_k))
    empty = ~visible.any(axis=-1)  # (B, T): queries that see no key
    if np.any(A[empty] != 0) or np.any(O[empty] != 0):
        raise CheckFailed("padding", "a query that sees no key must get a zero row and "
                          "a zero output" + where,
                          "give such a row weight 0 instead of a softmax over nothing")
    if np.any(dQ[empty] != 0):
        raise CheckFailed("padding", "a query that sees no key gets a non-zero "
                          "gradient" + where, masked_backward)
    if np.any(dK[~key_valid] != 0) or np.any(dV[~key_valid] != 0):
        raise CheckFailed("padding", "padded keys or values get a non-zero gradient"
                          + where, masked_backward)
    if np.any(A[~visible] != 0):
        raise CheckFailed("padding", "a hidden key (future or padded) gets a non-zero "
                          "weight" + where, "mask the scores before the softmax")
    if not np.allclose(A[~empty].sum(axis=-1), 1.0, rtol=0, atol=8 * A.shape[-1] * EPS):
        raise CheckFailed("padding", "a query that sees some key has weights that do "
                          "not sum to one" + where, "normalise over the visible keys")


def assert_padding(impl, seed=3):
    """With ``key_valid``: :func:`assert_padded_case` on left and right padding, with a
    sequence of padding only and queries that see no key; ``key_valid`` broadcasts over
    a head axis; an all-True ``key_valid`` changes nothing."""
    rng = np.random.default_rng(seed)
    T, d, r = 5, 4, 2
    for key_valid in (key_valid_from_lengths([2, 5, 0], T, side="left"),
                      key_valid_from_lengths([3, 1, 5], T, side="right")):
        Q, K, V = _qkv(rng, (3,), (3,), (3,), T, T, d, r)
        assert_padded_case(impl, Q, K, V, rng.standard_normal((3, T, r)), key_valid)
    B, H = 2, 3
    Q, K, V = _qkv(rng, (B, H), (B, H), (B, H), 4, 4, 2, 5)
    key_valid = key_valid_from_lengths([1, 4], 4, side="left")
    O, A = _attend(impl, "padding", Q, K, V, key_valid[:, None, :])
    for h in range(H):
        O_h, A_h = _attend(impl, "padding", Q[:, h], K[:, h], V[:, h], key_valid)
        if not (np.array_equal(A[:, h], A_h) and _close(O[:, h], O_h, 1e-15, 0)):
            raise CheckFailed(
                "padding", f"key_valid of shape (B, 1, T) over a head axis gives head "
                f"{h} other results than key_valid (B, T) on that head alone",
                "let key_valid's batch axes broadcast against the scores' batch axes",
            )
    O_all, A_all = _attend(impl, "padding", Q, K, V, np.ones((B, 1, 4), dtype=bool))
    O_none, A_none = _attend(impl, "padding", Q, K, V)
    if not (np.array_equal(A_all, A_none) and np.array_equal(O_all, O_none)):
        raise CheckFailed("padding", "an all-True key_valid changes the result",
                          "key_valid only hides keys that are marked False")


def assert_prefix(impl, seed=4):
    """The prefix interface (:func:`attncourse.kit.prefix.prefix_report`) of one head
    ``X -> attend(X W_Q, X W_K, X W_V)``, with the input gradient from ``backward``:
    (i) future inputs leave earlier outputs unchanged, (ii) a prefix run reproduces the
    prefix, (iii) the gradient from the future is exactly 0; with and without
    padding."""
    rng = np.random.default_rng(seed)
    B, T, D, d, r = 2, 5, 7, 3, 2
    W_Q, W_K, W_V = (rng.standard_normal((D, w)) for w in (d, d, r))
    X, X_other = rng.standard_normal((B, T, D)), rng.standard_normal((B, T, D))
    for key_valid in (None, key_valid_from_lengths([3, 5], T, side="left")):

        def kv(X):
            return None if key_valid is None else key_valid[:, : X.shape[-2]]

        def qkv(X):
            # (B, T, D) x (D, d) -> (B, T, d), and (D, r) -> (B, T, r) for the values
            return project(X, W_Q, W_K, W_V)

        def forward(X):
            return _attend(impl, "prefix interface", *qkv(X), kv(X))[0]

        def input_gradient(X, dY):
            dQ, dK, dV = _backward(impl, "prefix interface", *qkv(X), dY, kv(X))
            # dQ W_Q^T + dK W_K^T + dV W_V^T, (B, T, D): the three branches summed
            return sum(matmul_backward(X, W, dM)[0]
                       for W, dM in ((W_Q, dQ), (W_K, dK), (W_V, dV)))

        report = prefix_report(forward, X, X_other, input_gradient)
        if not report.passed:
            padded = "" if key_valid is None else " (with padding)"
            raise CheckFailed("prefix interface", "; ".join(report.failures) + padded,
                              "mask before the softmax; backward, use masked weights")


def _extreme_cases():
    """(label, Q, K, V, key_valid): scores near +-1e4, hidden or visible ~900."""
    V = np.array([[1.0, 2.0], [3.0, -4.0], [-5.0, 6.0]])
    big = ("scores near +-1e4 / sqrt(2)",
           np.array([[100.0, 0.0], [-100.0, 0.0], [0.0, 100.0]]),
           np.array([[100.0, 0.0], [0.0, 0.0], [0.0, -100.0]]), V, None)
    # d = 1, so S_ij = q_i k_j: query 0 sees a score 0 while its hidden future keys
    # score 900 and -900; a maximum taken before masking underflows every visible
    # weight to 0
    hidden = ("hidden future keys scoring 900",
              np.array([[30.0], [-30.0], [1.0]]), np.array([[0.0], [30.0], [-30.0]]),
              V, None)
    visible = ("visible scores 870..900",
               np.array([[30.0], [30.0], [30.0]]), np.array([[29.0], [29.5], [30.0]]),
               V, None)
    padded = ("a padded key scoring 900",
              np.array([[[30.0], [30.0], [30.0]]]), np.array([[[30.0], [0.0], [1.0]]]),
              V[None], np.array([[False, True, True]]))
    return [big, hidden, visible, padded]


def assert_extreme_scores(impl):
    """Scores near ``+-1e4``, and scores near 900 on the masked path (a hidden future or
    padded key far above the visible ones; visible scores far above 709) give no
    floating-point error, finite results, the values of :func:`definition` and the
    gradients of the formulas."""
    fix = "subtract the maximum of the visible scores of each row before exp"
    for label, Q, K, V, key_valid in _extreme_cases():
        G = np.ones(Q.shape[:-1] + (V.shape[-1],))
        (O, A), grads = _floating_point_errors(
            "extreme scores", f"{label}: ", fix,
            lambda: _attend(impl, "extreme scores", Q, K, V, key_valid),
            lambda: _backward(impl, "extreme scores", Q, K, V, G, key_valid))
        if not all(np.all(np.isfinite(x)) for x in (O, A, *grads)):
            raise CheckFailed("extreme scores", f"{label}: NaN or infinity", fix)
        O_def, A_def = definition(Q, K, V, key_valid)
        if not (_close(A, A_def) and _close(O, O_def)):
            raise CheckFailed(
                "extreme scores", f"{label}: values differ from the definition "
                f"({_max_diff(A, A_def)})",
                "take the row maximum over the visible scores only (after masking)",
            )
        # the package's backward, from the definition's weights
        wanted = attention_backward(AttentionSaved(Q, K, V, A_def), G)
        for name, g, g_def in zip(("dquery", "dkey", "dvalue"), grads, wanted):
            scale = max(1.0, float(np.max(np.abs(g_def))))
            if not _close(g, g_def, 1e-9, 1e-9 * scale):
                raise CheckFailed(
                    "extreme scores", f"{label}: {name} differs from the formulas "
                    f"({_max_diff(g, g_def)})",
                    "compute the backward pass from the stable weights A",
                )


def _bad_inputs():
    """(label, Q shape, K shape, V shape, key_valid, what the message must name: the
    offending shape and the size it contradicts, named as in
    :data:`attncourse.layers.attention.QKV`)."""
    shapes = (2, 5, 3), (2, 5, 3), (2, 5, 4)
    return [
        ("mismatched d", (5, 3), (5, 2), (5, 4), None, ["(5, 2)", "d=3"]),
        ("mismatched T of key and value", (5, 3), (5, 3), (4, 4), None,
         ["(4, 4)", "T_k=5"]),
        ("1-D query", (3,), (5, 3), (5, 4), None, ["(3,)"]),
        ("1-D value", (5, 3), (5, 3), (4,), None, ["(4,)"]),
        ("batch axes that do not broadcast", (2, 5, 3), (3, 5, 3), (3, 5, 4), None,
         ["do not broadcast", "(2,)", "(3,)"]),
        ("key_valid of the wrong length", *shapes, np.ones((2, 6), dtype=bool),
         ["key_valid", "(2, 6)"]),
        ("key_valid of the wrong batch", *shapes, np.ones((3, 5), dtype=bool),
         ["key_valid", "(3, 5)"]),
        ("key_valid not boolean", *shapes, np.ones((2, 5)), ["key_valid", "float64"]),
    ]


def _rejects(label, fn, args, kwargs, fragments):
    fix = "validate the inputs first and name the offending shapes"
    try:
        fn(*args, **kwargs)
    except ValueError as e:
        missing = [f for f in fragments if f not in str(e)]
        if missing:
            raise CheckFailed("bad input", f"{label}: the ValueError does not name "
                              f"{missing}: {e}", fix) from e
        return
    except Exception as e:  # a bare numpy error or anything else
        raise CheckFailed("bad input", f"{label}: raised {type(e).__name__}: {e}, not "
                          f"a ValueError naming {fragments}", fix) from e
    raise CheckFailed("bad input", f"{label}: accepted without a ValueError", fix)


def assert_bad_input(impl):
    """Bad input (mismatched ``d``, mismatched ``T`` of key and value, 1-D input, batch
    axes that do not broadcast, a bad ``key_valid``; for ``backward`` also ``G`` of the
    wrong shape) raises ``ValueError`` whose message names the offending shapes."""
    for label, q, k, v, key_valid, fragments in _bad_inputs():
        Q, K, V = np.ones(q), np.ones(k), np.ones(v)
        kwargs = {} if key_valid is None else {"key_valid": key_valid}
        _rejects(label, impl.attend, (Q, K, V), kwargs, fragments)
        G = np.ones(q[:-1] + v[-1:])
        _rejects("backward, " + label, impl.backward, (Q, K, V, G), kwargs, fragments)
    Q, K, V = np.ones((5, 3)), np.ones((5, 3)), np.ones((5, 4))
    _rejects("backward, G of the wrong shape", impl.backward,
             (Q, K, V, np.ones((4, 5))), {}, ["(4, 5)"])


def assert_dropout_contract(impl, seed=5):
    """``dropout`` is called exactly once, on the (masked, scaled) probabilities; the
    output is ``dropout(probabilities) @ value``; the returned probabilities are the
    undropped ones."""
    rng = np.random.default_rng(seed)
    Q, K, V = _qkv(rng, (2,), (2,), (2,), 5, 5, 3, 4)
    keep = 0.75
    mask = rng.random((2, 5, 5)) < keep
    calls = []

    def dropout(P):
        calls.append(np.array(P, copy=True))
        return np.where(mask, P / keep, 0.0)

    O, A = _attend(impl, "dropout contract", Q, K, V, dropout=dropout)
    _, A_plain = _attend(impl, "dropout contract", Q, K, V)
    if len(calls) != 1:
        raise CheckFailed("dropout contract", f"dropout was called {len(calls)} times, "
                          "not once", "call dropout(probabilities) once")
    if not _close(calls[0], A_plain):
        raise CheckFailed("dropout contract", "dropout was not applied to the "
                          "probabilities", "apply dropout to the softmax weights")
    if not np.array_equal(A, A_plain):
        raise CheckFailed("dropout contract", "the returned probabilities are not the "
                          "undropped ones", "return the probabilities before dropout")
    if not _close(O, dropout(A_plain) @ V):  # (2, 5, 5) x (2, 5, 4) -> (2, 5, 4)
        raise CheckFailed("dropout contract", "the output is not "
                          "dropout(probabilities) @ value",
                          "multiply the dropped weights by value")


def _offset_cases(seed):
    """(label, Q_full, K, V, key_valid, offset, T_q): the queries ``Q_full[..., offset :
    offset + T_q, :]`` at that offset; unequal sizes, batches, padding."""
    rng = np.random.default_rng(seed)
    return [
        (
            "one query after a prefix (a decode step)",
            *_qkv(rng, (), (), (), 5, 5, 3, 2),
            None,
            4,
            1,
        ),
        (
            "two queries at offset 2 of 5 keys",
            *_qkv(rng, (2,), (2,), (2,), 5, 5, 4, 3),
            None,
            2,
            2,
        ),
        (
            "offset 1, later keys read by no query",
            *_qkv(rng, (), (), (), 6, 6, 2, 3),
            None,
            1,
            3,
        ),
        (
            "batched, left-padded, one query",
            *_qkv(rng, (3,), (3,), (3,), 4, 4, 3, 2),
            key_valid_from_lengths([1, 4, 2], 4, side="left"),
            3,
            1,
        ),
        (
            "broadcast batch axes",
            *_qkv(rng, (2, 1), (3,), (1, 3), 5, 5, 3, 2),
            None,
            3,
            2,
        ),
    ]


def _refuses_offsets(impl):
    """The contract of an implementation that declares no offsets:
    NotImplementedError."""
    Q, K, V = np.ones((2, 3)), np.ones((3, 3)), np.ones((3, 4))
    fix = (
        "raise NotImplementedError when query_offset != 0, or implement it and "
        "declare offsets=True"
    )
    calls = [
        ("attend", lambda: impl.attend(Q, K, V, query_offset=1)),
        ("backward", lambda: impl.backward(Q, K, V, np.ones((2, 4)), query_offset=1)),
    ]
    for name, call in calls:
        try:
            call()
        except NotImplementedError:
            continue
        except Exception as e:  # the wrong contract
            raise CheckFailed(
                "query offset",
                f"{name} with query_offset=1 raised "
                f"{type(e).__name__}, not NotImplementedError (it declares "
                "no offsets)",
                fix,
            ) from e
        raise CheckFailed(
            "query offset",
            f"{name} with query_offset=1 returned a "
            "result, although it declares no offsets",
            fix,
        )


def assert_query_offset(impl, seed=6, steps=STEPS, tolerance=TOLERANCE):
    """The query offset of Chapter 10: query ``i`` sits at position ``offset + i`` and
    reads the keys ``0 .. offset + i``.

    For an implementation that declares ``offsets=True``: outputs and probabilities
    equal rows ``offset .. offset + T_q - 1`` of :func:`definition` on the whole
    sequence (one query after a prefix, several queries, keys that no query reads,
    padding, broadcast batch axes); ``backward`` agrees with central differences at the
    offset; a negative offset and one with ``offset + T_q > T_k`` raise ``ValueError``
    naming ``query_offset``, forward and backward. An implementation that declares
    ``offsets=False`` must raise ``NotImplementedError`` for a non-zero offset."""
    if not impl.offsets:
        return _refuses_offsets(impl)
    rng = np.random.default_rng(seed + 1000)
    for label, Q_full, K, V, key_valid, offset, T_q in _offset_cases(seed):
        Q = Q_full[..., offset : offset + T_q, :]
        where = f"attend with query_offset={offset} ({label}): "
        O, A = _attend(impl, "query offset", Q, K, V, key_valid, query_offset=offset)
        O_def, A_def = definition(Q_full, K, V, key_valid)
        O_def, A_def = (
            O_def[..., offset : offset + T_q, :],
            A_def[..., offset : offset + T_q, :],
        )
        if not _close(A, A_def):
            raise CheckFailed(
                "query offset",
                where + "the probabilities differ from rows "
                f"{offset}..{offset + T_q - 1} of the whole sequence's "
                f"({_max_diff(A, A_def)})",
                "query i sits at position query_offset + i: hide the keys j > "
                "query_offset + i",
            )
        if not _close(O, O_def):
            raise CheckFailed(
                "query offset",
                where + "the output differs from the whole "
                f"sequence's ({_max_diff(O, O_def)})",
                "output = probabilities @ value",
            )
        G = rng.standard_normal(O.shape)
        kwargs = {"query_offset": offset}
        if key_valid is not None:
            kwargs["key_valid"] = key_valid
        grads = _run("query offset", impl.backward, Q, K, V, G, **kwargs)

        def J(Q, K, V):
            O, _ = _attend(
                impl, "query offset", Q, K, V, key_valid, query_offset=offset
            )
            return float(np.sum(O * G))

        report = gradcheck(
            J,
            {"Q": Q, "K": K, "V": V},
            dict(zip("QKV", (np.asarray(g) for g in grads))),
            steps=steps,
            tolerance=tolerance,
        )
        if not report.passed:
            raise CheckFailed(
                "query offset",
                f"backward with query_offset={offset} ({label}) disagrees "
                f"with central differences (max |error| {report.worst:.1e})",
                "use the same offset mask in the backward pass",
            )
    _rejects_offsets(impl)


def _rejects_offsets(impl):
    Q, K, V = np.ones((2, 3)), np.ones((4, 3)), np.ones((4, 5))
    G = np.ones((2, 5))
    for offset, why in ((-1, "a negative offset"), (3, "an offset past the last key")):
        for name, fn, args in (
            ("attend", impl.attend, (Q, K, V)),
            ("backward", impl.backward, (Q, K, V, G)),
        ):
            try:
                fn(*args, query_offset=offset)
            except ValueError as e:
                if "query_offset" in str(e):
                    continue
                raise CheckFailed(
                    "query offset",
                    f"{name}: the ValueError for {why} does not name query_offset: {e}",
                    "say which argument is at fault",
                ) from e
            except Exception as e:
                raise CheckFailed(
                    "query offset",
                    f"{name} with query_offset={offset} "
                    f"({why}) raised {type(e).__name__}: {e}",
                    "raise ValueError naming query_offset",
                ) from e
            else:
                raise CheckFailed(
                    "query offset",
                    f"{name} accepted query_offset="
                    f"{offset} ({why}) for 2 queries and 4 keys",
                    "require 0 <= query_offset and query_offset + T_q <= T_k",
                )


PROPERTIES = {
    "values": assert_values,
    "gradients": assert_gradients,
    "causality": assert_causality,
    "padding": assert_padding,
    "prefix interface": assert_prefix,
    "extreme scores": assert_extreme_scores,
    "bad input": assert_bad_input,
    "dropout contract": assert_dropout_contract,
    "query offset": assert_query_offset,
}
"""Property name -> ``check(implementation)``: returns None or raises CheckFailed."""


def conformance_failures(impl, properties=None):
    """Return ``{property: message}`` for each property of ``impl`` that fails.

    An empty dict means every property holds.

    ``properties`` (optional) names the properties to run, default all of
    :data:`PROPERTIES`.
    """
    failed = {}
    for name in PROPERTIES if properties is None else properties:
        try:
            PROPERTIES[name](impl)
        except CheckFailed as e:
            failed[name] = str(e)
    return failed


def assert_conforms(impl, properties=None):
    """Run the suite on ``impl``; return the names of the properties checked, or raise
    :class:`CheckFailed` naming every property that failed."""
    names = list(PROPERTIES if properties is None else properties)
    failed = conformance_failures(impl, names)
    if failed:
        raise CheckFailed(f"conformance of {impl.name}", "; ".join(failed.values()))
    return names


# --- the failure listers of Chapter 4 -------------------------------------------------


def causal_failures(attend, Q, K, V):
    """Return the names of the causal properties ``attend(Q, K, V) -> (O, A)`` violates.

    ``[]`` means all three hold: future keys get weight exactly 0, every row sums to one
    (within ``T`` machine epsilons), every position gives itself a positive weight.

    >>> from attncourse.layers.attention import attention_forward
    >>> rng = np.random.default_rng(0)
    >>> Q, K = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
    >>> V = rng.normal(size=(4, 2))
    >>> causal_failures(causal_attention, Q, K, V)
    []
    >>> def all_visible(Q, K, V):
    ...     O, saved = attention_forward(Q, K, V)
    ...     return O, saved.A
    >>> causal_failures(all_visible, Q, K, V)
    ['future keys get weight exactly 0']
    """
    _, A = attend(Q, K, V)
    A = np.asarray(A)
    T = np.shape(Q)[-2]
    failed = []
    if not np.all(A[..., ~causal_mask(T, T)] == 0.0):
        failed.append("future keys get weight exactly 0")
    if not np.allclose(A.sum(axis=-1), 1.0, rtol=0, atol=T * EPS):
        failed.append("every row sums to one")
    if not np.all(np.diagonal(A, axis1=-2, axis2=-1) > 0.0):
        failed.append("every position reads itself")
    return failed


def padding_failures(attend, Q, K, V, key_valid):
    """Return the names of the padding properties that
    ``attend(Q, K, V, key_valid=key_valid) -> (O, A)`` violates.

    ``key_valid`` is a boolean ``(B, T)`` array, True at real tokens. ``[]`` means both
    hold: padded keys get weight exactly 0, and the outputs at real positions are
    exactly unchanged when the keys and values at padded positions change.

    >>> rng = np.random.default_rng(0)
    >>> Q, K = rng.normal(size=(2, 4, 3)), rng.normal(size=(2, 4, 3))
    >>> V = rng.normal(size=(2, 4, 2))
    >>> key_valid = key_valid_from_lengths([2, 4], 4, side="left")
    >>> padding_failures(causal_attention, Q, K, V, key_valid)
    []
    >>> ignore_padding = lambda Q, K, V, key_valid: causal_attention(Q, K, V)
    >>> padding_failures(ignore_padding, Q, K, V, key_valid)
    ['padded keys get weight exactly 0', 'real outputs ignore the padding']
    """
    key_valid = np.asarray(key_valid)
    O, A = attend(Q, K, V, key_valid=key_valid)
    O, A = np.asarray(O), np.asarray(A)
    failed = []
    padded_keys = np.broadcast_to(~key_valid[..., None, :], A.shape)
    if not np.all(A[padded_keys] == 0.0):
        failed.append("padded keys get weight exactly 0")
    # new content at the padding only
    K2 = np.where(key_valid[..., None], K, np.asarray(K) + 1.0)
    V2 = np.where(key_valid[..., None], V, np.asarray(V) + 1.0)
    O2, _ = attend(Q, K2, V2, key_valid=key_valid)
    if not np.array_equal(np.asarray(O2)[key_valid], O[key_valid]):
        failed.append("real outputs ignore the padding")
    return failed


# --- the faster implementations, as the suite takes them ------------------------------

FAST = Implementation(
    "fast dense", fast_causal_attention, fast_causal_attention_backward
)
"""The fast dense pair of :mod:`attncourse.fast`."""


def tiled_implementation(block_q, block_k=None):
    """Return the tiled pair with these tile sizes as a conformance-suite
    :class:`~attncourse.kit.conformance.Implementation` (``block_k`` defaults to
    ``block_q``)."""
    block_k = block_q if block_k is None else block_k
    require_sizes(block_q=block_q, block_k=block_k)

    def attend(query, key, value, query_offset=0, dropout=None, *, key_valid=None):
        return tiled_causal_attention(
            query,
            key,
            value,
            query_offset,
            dropout,
            key_valid=key_valid,
            block_q=block_q,
            block_k=block_k,
        )

    def backward(query, key, value, G, query_offset=0, *, key_valid=None):
        return tiled_causal_attention_backward(
            query,
            key,
            value,
            G,
            query_offset,
            key_valid=key_valid,
            block_q=block_q,
            block_k=block_k,
        )

    attend.__name__ = f"tiled_causal_attention_{block_q}x{block_k}"
    backward.__name__ = f"tiled_causal_attention_backward_{block_q}x{block_k}"
    return Implementation(f"tiled {block_q}x{block_k}", attend, backward)


# --- the cache's attention pattern (Chapter 10), as the suite takes it ----------------


def _steps(Q, K, V, query_offset, key_valid):
    """Yield ``(i, p, query_i, key_valid_i)``: query ``i`` reads the keys ``:p``."""
    for i in range(Q.shape[-2]):
        p = query_offset + i + 1  # the keys so far, its own included
        kv = None if key_valid is None else np.asarray(key_valid)[..., :p]
        yield i, p, Q[..., i: i + 1, :], kv


def _cached_inputs(query, key, value, query_offset, key_valid):
    """``Q, K, V`` as :func:`attncourse.causal_attention` validates them, ``key_valid``
    against all the keys, as the reference does."""
    Q, K, V = _validate_causal(query, key, value, query_offset)
    causal_visible(Q, K, V, query_offset, key_valid)  # raises on a bad key_valid
    return Q, K, V


def incremental_attention(query, key, value, query_offset=0, dropout=None, *,
                          key_valid=None):
    """Causal attention computed as decoding computes it: one query at a time, query
    ``i`` against the keys ``0 .. query_offset + i`` (the cache so far), with
    ``query_offset = query_offset + i``. Returns ``(output, probabilities)`` with the
    probabilities of the keys not yet cached set to 0. ``dropout`` (training only;
    decoding never drops) is applied once, to the assembled probabilities.

    >>> Q, K, V = np.ones((2, 1)), np.ones((3, 1)), np.array([[0.0], [3.0], [6.0]])
    >>> incremental_attention(Q, K, V, query_offset=1)[0]  # positions 1 and 2
    array([[1.5],
           [3. ]])
    """
    Q, K, V = _cached_inputs(query, key, value, query_offset, key_valid)
    batch = _batch_shape(Q, K, V)
    T_q, T_k = Q.shape[-2], K.shape[-2]
    O = np.zeros(batch + (T_q, V.shape[-1]))
    A = np.zeros(batch + (T_q, T_k))
    for i, p, q, kv in _steps(Q, K, V, query_offset, key_valid):
        O_i, A_i = causal_attention(q, K[..., :p, :], V[..., :p, :], p - 1,
                                    key_valid=kv)
        O[..., i: i + 1, :], A[..., i: i + 1, :p] = O_i, A_i
    if dropout is not None:
        O = dropout(A) @ V  # (..., T_q, T_k) x (..., T_k, r) -> (..., T_q, r)
    return O, A


def incremental_attention_backward(query, key, value, G, query_offset=0, *,
                                   key_valid=None):
    """The backward pass of :func:`incremental_attention` for ``G = dJ/d output``:
    each step's gradients (:func:`attncourse.causal_attention_backward`), the keys' and
    values' added over the steps that read them. The gradients have the dtype the
    reference's would have."""
    Q, K, V = _cached_inputs(query, key, value, query_offset, key_valid)
    G = shaped("G(..., T_q, r)", G)
    want = _batch_shape(Q, K, V) + (Q.shape[-2], V.shape[-1])
    if G.shape != want:
        raise ValueError(f"G must have the shape of the output, {want}, "
                         f"got {G.shape}")
    dtype = np.result_type(Q, K, V, G)
    dQ, dK, dV = (np.zeros(x.shape, dtype) for x in (Q, K, V))
    for i, p, q, kv in _steps(Q, K, V, query_offset, key_valid):
        dq, dk, dv = causal_attention_backward(q, K[..., :p, :], V[..., :p, :],
                                               G[..., i: i + 1, :], p - 1,
                                               key_valid=kv)
        dQ[..., i: i + 1, :] = dq
        dK[..., :p, :] += dk
        dV[..., :p, :] += dv
    return dQ, dK, dV


CACHED = Implementation("cached", incremental_attention, incremental_attention_backward,
                        offsets=True)
"""The cache's attention pattern of Chapter 10 (:func:`incremental_attention`): one
query at a time, each against the keys so far."""
