"""Checkers of attention exercises: causal attention and attention forward and backward
from scratch (Chapter 3), mask (4), query offset (10)."""

import math

import numpy as np

from ...layers.attention import (attention_backward, attention_forward,
                                 causal_attention, causal_mask, combine_masks,
                                 key_padding_mask, key_valid_from_lengths)
from ...softmax import softmax, softmax_backward
from ..failed import CheckFailed
from ..properties import assert_rows_sum_to_one
from ..gradients import TOLERANCE, gradcheck
from ._base import _array, _call, _sign_flipped, reports_unfinished

__all__ = [
    "check_causal_attention",
    "ATTENTION_BACKWARD_PROPERTIES",
    "check_attention_backward",
    "check_attention_mask",
    "QUERY_OFFSET_PROPERTIES",
    "check_query_offset",
]


# --- Chapter 3: causal attention ------------------------------------------------------

def _pure_call(fn, prop, names, *args, **kwargs):
    """``_call(fn, prop, ...)`` on copies of the arrays ``args`` (named ``names``);
    raise CheckFailed "inputs unchanged" when ``fn`` wrote into one of them."""
    given = [np.array(a, copy=True) for a in args]
    result = _call(fn, prop, *given, **kwargs)
    for name, copy, original in zip(names, given, args):
        if not np.array_equal(copy, original):
            raise CheckFailed(
                "inputs unchanged",
                f"fn changed the {name} it was given (shape {np.shape(original)})",
                f"work on new arrays: never write into {', '.join(names)} "
                "(no +=, *= or slice assignment on them)",
            )
    return result


_QKV = ("query", "key", "value")


def _split(result, property):
    if not (isinstance(result, tuple) and len(result) == 2):
        raise CheckFailed(
            property,
            f"must return a pair (output, probabilities), got {type(result).__name__}",
            "return output, probabilities",
        )
    return _array(result[0], property), _array(result[1], property)


def _reference_probabilities(query, key, scale=True, query_offset=0):
    """The package's probabilities (:func:`attncourse.causal_attention`), the queries
    at ``query_offset``; with ``scale=False`` those of the scores ``query key^T``
    without ``1/sqrt(d)`` (the likely mistake), as the package gives them for the query
    times ``sqrt(d)``."""
    c = 1.0 if scale else math.sqrt(query.shape[-1])
    value = np.zeros(key.shape[:-1] + (1,))  # the probabilities do not depend on it
    return causal_attention(query * c, key, value, query_offset)[1]


def _rows_sum_to_one(P):
    """The rows of ``P`` sum to one; a row with no visible key is named as such."""
    rows = P.reshape(-1, P.shape[-1])
    for flat, row in enumerate(rows):
        if np.all(np.isnan(row)) or (np.all(np.isfinite(row)) and np.all(row == 0)):
            i = flat % P.shape[-2]
            seen = "NaN" if np.isnan(row).all() else "all zero"
            raise CheckFailed(
                "rows summing to one",
                f"query {i} sees no key: its row of probabilities is {seen} (a softmax "
                "over no visible key)",
                f"query {i} must see the keys 0..{i}, itself included: hide only the "
                "keys j > i",
            )
    try:
        assert_rows_sum_to_one(P, atol=1e-12)
    except CheckFailed as e:
        raise CheckFailed(
            e.property,
            e.detail,
            "normalise over the last axis (the keys), after masking the scores",
        ) from None


def _large_scores_stay_causal(fn, rng, T, d, value):
    """Causality where every score is near -7e4: a finite fill above the scores
    (``-1e4``, say) gives the hidden keys nearly all the weight; a boolean mask (or a
    fill below every score) gives them exactly 0."""
    ones = np.ones((T, d))
    query = 200.0 * ones + 0.003 * rng.standard_normal((T, d))
    key = -200.0 * ones + 0.003 * rng.standard_normal((T, d))
    S = query @ key.T / math.sqrt(d)  # (T, d) x (d, T) -> (T, T), all near -6.9e4
    _, P = _split(_pure_call(fn, "causality", _QKV, query, key, value), "causality")
    leaked = ~causal_mask(T, T) & ~(P == 0)  # NaN leaks too
    if np.any(leaked):
        i, j = (int(x) for x in np.argwhere(leaked)[0])
        raise CheckFailed(
            "causality",
            f"with every score near {S.mean():.3g} (queries near 200 (1, 1, 1), keys "
            f"near -200 (1, 1, 1)), query {i} gives weight {P[i, j]:.3g} to the "
            f"later key {j}: a finite fill such as -1e4 lies above these scores, so "
            "the hidden keys take the weight",
            "hide the keys j > i with a boolean visible mask, "
            "softmax(S, causal_mask(T, T)): it leaves them out of the sum whatever "
            "the scores (a finite fill would have to lie below every score)",
        )


@reports_unfinished
def check_causal_attention(fn, seed=0):
    """Check a learner's
    ``causal_attention(query, key, value, query_offset=0, dropout=None)``.

    Properties, in order: **shape** (a pair ``(output, probabilities)`` of shapes
    ``(..., T, r)`` and ``(..., T, T)``, also with a batch dimension); **inputs
    unchanged** (nothing written into ``query``, ``key``, ``value``); **rows summing to
    one** (and no query without a visible key); **causality** (weight exactly 0 on later
    keys, also when every score is near ``-7e4``, where a finite fill such as ``-1e4``
    leaks; and earlier outputs unchanged when later keys and values change); **scaling**
    (probabilities equal the softmax of ``query key^T / sqrt(d)`` over the visible keys;
    output equals ``probabilities @ value``); **dropout contract** (``dropout`` is
    called once on the probabilities, the output uses the dropped weights, the returned
    probabilities are the undropped ones); **offset** (a non-zero ``query_offset``
    either raises ``NotImplementedError``, as the Chapter 3 exercise asks, or does what
    Chapter 10 defines: the queries sit at positions ``query_offset + i`` and the result
    equals those rows of the whole sequence's; :func:`check_query_offset` checks it
    fully).

    Raises :class:`CheckFailed` whose message starts with the name of the first failed
    property (**inputs unchanged** too, though the list returned leaves it out, as
    Chapter 3 states the list); reports a stub still raising ``NotImplementedError``
    as unfinished (:func:`reports_unfinished`). Returns the list of properties checked.

    >>> from attncourse.layers.attention import causal_attention
    >>> check_causal_attention(causal_attention)
    ['shape', 'rows summing to one', 'causality', 'scaling', 'dropout contract',
     'offset']
    """
    rng = np.random.default_rng(seed)
    # unequal sizes, so a swapped or transposed result has the wrong shape
    T, d, r, B = 5, 3, 4, 2
    query, key = rng.standard_normal((T, d)), rng.standard_normal((T, d))
    value = rng.standard_normal((T, r))
    bq, bk, bv = (
        rng.standard_normal((B, T, d)),
        rng.standard_normal((B, T, d)),
        rng.standard_normal((B, T, r)),
    )

    # shape
    output, probabilities = _split(
        _pure_call(fn, "shape", _QKV, query, key, value), "shape"
    )
    if output.shape != (T, r) or probabilities.shape != (T, T):
        raise CheckFailed(
            "shape",
            f"for query {query.shape}, key {key.shape}, value {value.shape} expected "
            f"output {(T, r)} and probabilities {(T, T)}, got {output.shape} and "
            f"{probabilities.shape}",
            "return (probabilities @ value, probabilities), in that order",
        )
    b_out, b_prob = _split(_pure_call(fn, "shape", _QKV, bq, bk, bv), "shape")
    if b_out.shape != (B, T, r) or b_prob.shape != (B, T, T):
        raise CheckFailed(
            "shape",
            f"with a batch dimension, query {bq.shape}, key {bk.shape}, value "
            f"{bv.shape}, expected "
            f"output {(B, T, r)} and probabilities {(B, T, T)}, got {b_out.shape} and "
            f"{b_prob.shape}",
            "transpose only the last two axes of key (np.swapaxes(key, -1, -2), not "
            "key.T)",
        )

    # rows summing to one
    for P in (probabilities, b_prob):
        _rows_sum_to_one(P)

    # causality
    future = ~causal_mask(T, T)  # True where key j is later than query i
    for P in (probabilities, b_prob):
        leaked = future & (P != 0)
        if np.any(leaked):
            idx = tuple(int(i) for i in np.argwhere(leaked)[0])
            raise CheckFailed(
                "causality",
                f"query {idx[-2]} gives weight {P[idx]:.3g} to the later key "
                f"{idx[-1]}; future keys must get weight exactly 0",
                "hide the keys j > i with a boolean visible mask, "
                "softmax(S, causal_mask(T, T)), which leaves them out of the sum (a "
                "fill of -100 still leaks a weight of about e^-100)",
            )
    t = 2  # change every key and value after position t
    key2, value2 = key.copy(), value.copy()
    key2[t + 1 :] = rng.standard_normal(key2[t + 1 :].shape)
    value2[t + 1 :] = rng.standard_normal(value2[t + 1 :].shape)
    output2, _ = _split(
        _pure_call(fn, "causality", _QKV, query, key2, value2), "causality"
    )
    if not np.allclose(output2[: t + 1], output[: t + 1], rtol=1e-12, atol=1e-12):
        raise CheckFailed(
            "causality",
            f"outputs at positions 0..{t} changed when only keys and values after "
            f"position {t} changed",
            "mask the future before the softmax, so it cannot enter the denominator",
        )
    _large_scores_stay_causal(fn, rng, T, d, value)

    # scaling (and the scores themselves)
    for (q, k, v), out, P in (
        ((query, key, value), output, probabilities),
        ((bq, bk, bv), b_out, b_prob),
    ):
        expected = _reference_probabilities(q, k)
        if not np.allclose(P, expected, rtol=1e-10, atol=1e-12):
            if np.allclose(
                P, _reference_probabilities(q, k, scale=False), rtol=1e-10, atol=1e-12
            ):
                raise CheckFailed(
                    "scaling",
                    "the probabilities are the softmax of query key^T without the "
                    "1/sqrt(d) factor",
                    "divide the scores by sqrt(d), d = query.shape[-1]",
                )
            raise CheckFailed(
                "scaling",
                "the probabilities differ from the softmax of query key^T / sqrt(d) "
                "over the "
                f"visible keys (max difference {np.max(np.abs(P - expected)):.3g})",
                "scores = query @ swapaxes(key, -1, -2) / sqrt(d), d = query.shape[-1]",
            )
        # (..., T, T) x (..., T, r) -> (..., T, r)
        if not np.allclose(out, expected @ v, rtol=1e-10, atol=1e-12):
            raise CheckFailed(
                "scaling",
                "without dropout the output must equal probabilities @ value",
                "output = probabilities @ value",
            )

    # dropout contract
    keep = 0.75
    mask = rng.random((T, T)) < keep
    calls = []

    def dropout(P):
        calls.append(np.array(P, copy=True))
        return np.where(mask, P / keep, 0.0)

    d_out, d_prob = _split(
        _pure_call(fn, "dropout contract", _QKV, query, key, value, dropout=dropout),
        "dropout contract",
    )
    expected = _reference_probabilities(query, key)
    if len(calls) != 1:
        raise CheckFailed(
            "dropout contract",
            f"dropout must be called exactly once, it was called {len(calls)} times",
            "call dropout(probabilities) once and keep its result",
        )
    if not np.allclose(calls[0], expected, rtol=1e-10, atol=1e-12):
        raise CheckFailed(
            "dropout contract",
            "dropout must be applied to the (masked, scaled) probabilities",
            "apply dropout after the softmax",
        )
    if not np.allclose(d_prob, expected, rtol=1e-10, atol=1e-12):
        raise CheckFailed(
            "dropout contract",
            "the returned probabilities must be the undropped ones",
            "return the probabilities from before dropout",
        )
    # (T, T) x (T, r) -> (T, r)
    if not np.allclose(d_out, dropout(expected) @ value, rtol=1e-10, atol=1e-12):
        raise CheckFailed(
            "dropout contract",
            "the output must be dropout(probabilities) @ value",
            "multiply the dropped weights, not the probabilities, by value",
        )

    # offset: NotImplementedError (Chapter 3) or the meaning of Chapter 10
    fix = (
        "raise NotImplementedError when query_offset != 0 (Chapter 3), or let query i "
        "sit at position query_offset + i (Chapter 10)"
    )
    try:
        result = fn(query[2:], key, value, query_offset=2)
    except NotImplementedError:
        result = None
    except Exception as e:  # any other exception is the wrong contract
        raise CheckFailed(
            "offset",
            f"query_offset=2 with 3 queries and 5 keys raised {type(e).__name__}: {e}; "
            "it must raise NotImplementedError or return the last 3 rows of the whole "
            "sequence's",
            fix,
        ) from e
    if result is not None:
        o_out, o_prob = _split(result, "offset")
        if not (
            o_prob.shape == (T - 2, T)
            and np.allclose(o_prob, probabilities[2:], rtol=1e-10, atol=1e-12)
            and np.allclose(o_out, output[2:], rtol=1e-10, atol=1e-12)
        ):
            raise CheckFailed(
                "offset",
                "query_offset=2 with 3 queries and 5 keys returned a result that is "
                "not "
                "the last 3 rows of the whole sequence's (queries at positions 2, 3, "
                "4)",
                fix,
            )
    return [  # "inputs unchanged" is checked with every call, named when it fails
        "shape",
        "rows summing to one",
        "causality",
        "scaling",
        "dropout contract",
        "offset",
    ]


# --- Chapter 3: attention forward and backward, from scratch -------------------------

ATTENTION_BACKWARD_PROPERTIES = (
    "returns O, dQ, dK, dV",
    "inputs unchanged",
    "O",
    "dV",
    "dQ",
    "dK",
)


def _attention_case(seed):
    """``Q, K, V, G`` of unequal sizes (T, d, r) = (5, 3, 4), mild scores, dense G."""
    rng = np.random.default_rng(seed)
    T, d, r = 5, 3, 4
    Q, K = (rng.standard_normal((T, d)) / 1.5 for _ in range(2))
    return Q, K, rng.standard_normal((T, r)), rng.standard_normal((T, r))


def _attention_wrong_versions(Q, K, V, G):
    """The tempting wrong versions of each result, with the fix each one calls for."""
    root_d = math.sqrt(Q.shape[-1])
    S = Q @ K.T / root_d  # (T, d) x (d, T) -> (T, T)
    A = softmax(S)
    A_unscaled = softmax(Q @ K.T)  # (T, d) x (d, T) -> (T, T)
    dA = G @ V.T  # (T, r) x (r, T) -> (T, T)
    dS = softmax_backward(A, dA)
    dS_numerator = A * dA  # the numerator path only
    sqrt_fix = "divide the scores by sqrt(d): S = Q K^T / sqrt(d), d = Q.shape[-1]"
    numerator_fix = ("the softmax backward keeps the numerator path only: subtract "
                     "each row's mean of dA under A, dS = A * (dA - sum(A * dA, "
                     "axis=-1, keepdims=True))")
    return {
        "O": [(A_unscaled @ V, sqrt_fix),  # (T, T) x (T, r) -> (T, r)
              (softmax(S.T).T @ V, "normalise each query's row: softmax over the "
                                   "last axis, the keys (not over the queries)"),
              (S @ V, "read the values with the weights A = softmax(S), not "
                      "with the scores S")],
        "dV": [(A @ G, "transpose A: dV = A^T G, key j collects G from every query i "
                       "that read it")],
        "dQ": [(dS @ K, "divide by sqrt(d): dQ = dS K / sqrt(d)"),
               (dS_numerator @ K / root_d, numerator_fix),
               (dS.T @ K / root_d, "dQ = dS K / sqrt(d): query i sums over its keys j "
                                   "(no transpose of dS)")],
        "dK": [(dS.T @ Q, "divide by sqrt(d): dK = dS^T Q / sqrt(d)"),
               (dS @ Q / root_d, "transpose dS: dK = dS^T Q / sqrt(d), key j sums "
                                 "over the queries i that read it"),
               (dS_numerator.T @ Q / root_d, numerator_fix)],
    }


def _attention_fix(name, got, wrong, default):
    """The fix of the first wrong version ``got`` matches, else ``default``."""
    for candidate, fix in wrong[name]:
        if candidate.shape == got.shape and np.allclose(got, candidate, rtol=1e-6,
                                                        atol=1e-9):
            return fix
    return default


@reports_unfinished
def check_attention_backward(fn, seed=0):
    """Check a learner's ``fn(Q, K, V, G) -> (O, dQ, dK, dV)``, one attention head
    written from scratch.

    ``O = softmax(Q K^T / sqrt(d)) V`` (every key visible) and ``dQ, dK, dV`` are the
    gradients of ``J = sum(G * O)``. Properties, in order: **returns O, dQ, dK, dV**
    (four arrays of the shapes of ``O``, ``Q``, ``K``, ``V``); **inputs unchanged**
    (nothing written into ``Q``, ``K``, ``V``, ``G``); **O** (equal to the
    package's :func:`~attncourse.layers.attention.attention_forward`); then **dV**,
    **dQ**, **dK**, each compared with central differences of ``J`` over every
    coordinate (steps and tolerance of :mod:`~attncourse.kit.gradients`). The first
    that fails is named, with the likely fix: a missing transpose, a missing
    ``1/sqrt(d)``, a softmax backward without its denominator path, a sign. Sizes are
    unequal (``T=5, d=3, r=4``) and ``G`` is dense. Returns the properties checked.

    >>> from attncourse.layers.attention import attention_backward, attention_forward
    >>> def mine(Q, K, V, G):
    ...     O, saved = attention_forward(Q, K, V)
    ...     return (O, *attention_backward(saved, G))
    >>> check_attention_backward(mine)[-1]
    'dK'
    """
    Q, K, V, G = _attention_case(seed)
    prop = "returns O, dQ, dK, dV"
    result = _pure_call(fn, prop, ("Q", "K", "V", "G"), Q, K, V, G)
    if not (isinstance(result, tuple) and len(result) == 4):
        got = f"{len(result)} values" if isinstance(result, tuple) else (
            type(result).__name__)
        raise CheckFailed(prop, f"expected a tuple (O, dQ, dK, dV), got {got}",
                          "return O, dQ, dK, dV")
    O, dQ, dK, dV = (_array(x, prop, dtype=np.float64) for x in result)
    O_ref, saved = attention_forward(Q, K, V)
    for name, got, want in (("O", O, O_ref), ("dQ", dQ, Q), ("dK", dK, K),
                            ("dV", dV, V)):
        if got.shape != want.shape:
            raise CheckFailed(
                prop,
                f"{name} has shape {got.shape}, expected {want.shape} (Q {Q.shape}, "
                f"K {K.shape}, V {V.shape}, G {G.shape})",
                f"{name} has the shape of " + ("O = A V" if name == "O" else name[1:]),
            )
    wrong = _attention_wrong_versions(Q, K, V, G)
    if not np.allclose(O, O_ref, rtol=1e-10, atol=1e-12):
        raise CheckFailed(
            "O",
            "O differs from softmax(Q K^T / sqrt(d)) V by up to "
            f"{np.max(np.abs(O - O_ref)):.1e}",
            _attention_fix("O", O, wrong, "S = Q K^T / sqrt(d), A = softmax(S) row by "
                                          "row, O = A V"),
        )

    def J(Q, K, V):
        return float(np.sum(G * attention_forward(Q, K, V)[0]))

    inputs = {"Q": Q, "K": K, "V": V}
    reference = dict(zip(("dQ", "dK", "dV"), attention_backward(saved, G)))
    defaults = {
        "dV": "dV = A^T G",
        "dQ": "dA = G V^T, dS = A * (dA - sum(A * dA, axis=-1, keepdims=True)), "
              "dQ = dS K / sqrt(d)",
        "dK": "dK = dS^T Q / sqrt(d), with dS as for dQ",
    }
    for name, got in (("dV", dV), ("dQ", dQ), ("dK", dK)):
        report = gradcheck(J, inputs, {name[1:]: got})
        if not report.passed:
            fix = _attention_fix(name, got, wrong, defaults[name])
            if _sign_flipped(got, reference[name]):
                fix = f"{name} has the wrong sign: J grows along +{name}"
            raise CheckFailed(
                name,
                f"{name} differs from central differences of J = sum(G * O) by up to "
                f"{report.worst:.1e} (tolerance {TOLERANCE:.0e})",
                fix,
            )
    return ATTENTION_BACKWARD_PROPERTIES


# --- Chapter 4: the attention mask ----------------------------------------------------

def _expected_mask(T, key_valid):
    """The reference answer, the package's masks combined: key j visible to query i iff
    j <= i and key j is real."""
    return combine_masks(causal_mask(T, T), key_padding_mask(key_valid, T))


def _mask_cases(seed):
    """The batches the mask checker tries, in order: left padding with an empty
    sequence, right padding, and an irregular pattern (not padding at one end)."""
    rng = np.random.default_rng(seed)
    return [
        key_valid_from_lengths([3, 5, 0], 5, side="left"),
        key_valid_from_lengths([2, 6], 6, side="right"),
        rng.random((3, 7)) < 0.6,
    ]


@reports_unfinished
def check_attention_mask(mask_fn, seed=0):
    """Check a learner's ``mask_fn(T, key_valid) -> visible``; raise
    :class:`CheckFailed` naming the failed property.

    ``key_valid`` is ``(B, T)``; the answer must be a boolean ``(B, T, T)`` array with
    key ``j`` visible to query ``i`` exactly when ``j <= i`` and key ``j`` is a real
    token. The properties are tried in order on several batches (left and right padding,
    a row with nothing visible, an irregular pattern), and the first one that fails is
    named, with the ``key_valid`` batch it failed on. ``key_valid`` must be left
    unchanged ("inputs unchanged", checked before the five properties).

    >>> def mine(T, key_valid):
    ...     causal = np.tril(np.ones((T, T), dtype=bool))
    ...     return causal & key_valid[:, None, :]
    >>> check_attention_mask(mine)
    'check_attention_mask: all 5 properties hold'
    >>> def rows_hidden(T, kv):
    ...     return np.tril(np.ones((T, T), dtype=bool)) & kv[:, :, None]
    >>> check_attention_mask(rows_hidden)
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    attncourse.kit.failed.CheckFailed: padded keys are hidden from every query:
    query 2 of sequence 0 may read padded key 0
    (key_valid = [[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]]) (likely fix: ...)
    """
    for key_valid in _mask_cases(seed):
        B, T = key_valid.shape
        batch = f" (key_valid = {key_valid.astype(int).tolist()})"
        given = key_valid.copy()
        visible = _array(_call(mask_fn, "shape and type", T, given), "shape and type")
        if not np.array_equal(given, key_valid):
            raise CheckFailed(
                "inputs unchanged",
                "mask_fn changed the key_valid it was given" + batch,
                "build the mask from new arrays: never write into key_valid",
            )
        want = _expected_mask(T, key_valid)
        if visible.shape != (B, T, T) or visible.dtype != np.bool_:
            raise CheckFailed(
                "shape and type",
                f"expected a boolean array of shape {(B, T, T)}, got {visible.dtype} "
                f"{visible.shape}" + batch,
                "return one boolean (T, T) mask per sequence: shape (B, T, T)",
            )
        future = np.argwhere(visible & ~causal_mask(T, T))  # key j > query i
        if future.size:
            b, q, k = future[0]
            raise CheckFailed(
                "no query reads a future key",
                f"query {q} of sequence {b} may read key {k}" + batch,
                "combine with the causal mask: key j <= query i",
            )
        padded = np.argwhere(visible & ~key_valid[:, None, :])
        if padded.size:
            b, q, k = padded[0]
            raise CheckFailed(
                "padded keys are hidden from every query",
                f"query {q} of sequence {b} may read padded key {k}" + batch,
                "hide columns (keys): key_valid[:, None, :], "
                "not rows key_valid[:, :, None]",
            )
        self_hidden = np.argwhere(key_valid & ~np.diagonal(visible, axis1=-2, axis2=-1))
        if self_hidden.size:
            b, q = self_hidden[0]
            raise CheckFailed(
                "a real query reads its own key",
                f"query {q} of sequence {b} may not read key {q}" + batch,
                "the causal part is j <= i (the diagonal included), not j < i",
            )
        missing = np.argwhere(want & ~visible)
        if missing.size:
            b, q, k = missing[0]
            raise CheckFailed(
                "real past keys stay visible",
                f"query {q} of sequence {b} may not read real key {k}" + batch,
                "hide only future keys and padded keys, nothing else",
            )
    return "check_attention_mask: all 5 properties hold"


# --- Chapter 10: the query offset -----------------------------------------------------

QUERY_OFFSET_PROPERTIES = (
    "inputs unchanged",
    "causality with offset",
    "offset alignment",
    "equality with recompute",
    "bad offsets raise ValueError",
)


def _offset_probabilities(Q, K, shift):
    """The package's probabilities with query ``i`` reading keys ``0 .. shift + i``."""
    return _reference_probabilities(Q, K, query_offset=shift)


def _offset_fix(Q, K, P, offset):
    """The likely fix for probabilities ``P`` that are not rows ``offset ..``."""
    close = lambda shift: np.allclose(
        P, _offset_probabilities(Q, K, shift), rtol=1e-10, atol=1e-12
    )
    if close(0):
        return (
            "the offset was ignored: query i sits at position query_offset + i and "
            "reads the keys 0 .. query_offset + i, not 0 .. i"
        )
    if offset > 0 and close(offset - 1):
        return (
            "one key short: query i reads its own key too, keys 0 .. query_offset "
            "+ i (j <= query_offset + i, not j < query_offset + i)"
        )
    return (
        "query i sits at position query_offset + i: scores of the keys j > "
        "query_offset + i are hidden before the softmax, the others are "
        "query key^T / sqrt(d)"
    )


def _offset_call(fn, prop, query, key, value, offset):
    out, P = _split(
        _pure_call(fn, prop, _QKV, query, key, value, query_offset=offset), prop
    )
    want = (query.shape[:-1] + value.shape[-1:], query.shape[:-1] + key.shape[-2:-1])
    if (out.shape, P.shape) != want:
        raise CheckFailed(
            prop,
            f"query_offset={offset} with query {query.shape}, key {key.shape}, "
            f"value {value.shape}: expected output {want[0]} and probabilities "
            f"{want[1]}, got {out.shape} and {P.shape}",
            "the probabilities keep one column per key, all T_k of them (the hidden "
            "ones are 0)",
        )
    return out, P


@reports_unfinished
def check_query_offset(fn, seed=0):
    """Check a learner's ``causal_attention(query, key, value, query_offset=0,
    dropout=None)`` with the query offset of Chapter 10.

    Query ``i`` sits at position ``query_offset + i`` and reads the keys ``0 ..
    query_offset + i``. Properties, in order: **inputs unchanged** (nothing written
    into ``query``, ``key``, ``value``); **causality with offset** (no weight on a
    key after the query's position, exactly 0, and the outputs unchanged when the keys
    and values after the last query's position change); **offset alignment** (the
    probabilities and outputs equal rows ``query_offset .. query_offset + T_q - 1`` of
    the whole sequence's causal attention, also with keys that no query reads; shapes
    ``(T_q, r)`` and ``(T_q, T_k)``); **equality with
    recompute** (decoding as the cache does, one query at a time with ``query_offset =
    t`` against the ``t + 1`` keys so far, on a batch of heads ``(2, 3, T, d)``, gives
    every row of the whole sequence's attention); **bad offsets raise ValueError** (a
    negative offset, and one that puts the last query past the last key,
    ``query_offset + T_q > T_k``). Sizes are unequal (``T_k = 7, d = 3, r = 4``).

    Raises :class:`CheckFailed` naming the first failed property and the likely fix;
    a stub still raising ``NotImplementedError`` (also Chapter 3's answer, which
    refuses offsets) is reported as unfinished. Returns the properties checked.

    >>> from attncourse.layers.attention import causal_attention
    >>> check_query_offset(causal_attention)[-1]
    'bad offsets raise ValueError'
    """
    rng = np.random.default_rng(seed)
    T, d, r = 7, 3, 4
    Q_all, K, V = (rng.standard_normal((T, w)) for w in (d, d, r))
    cases = [
        (Q_all, K, V, 2, 3),  # keys 5 and 6 are read by no query
        (Q_all, K, V, 4, 3),  # the last three positions
        (Q_all, K, V, 6, 1),  # one query after a prefix: a decode step
        (Q_all, K, V, 1, 1),
    ]  # one query, five keys after it
    results = [
        _offset_call(fn, "offset alignment", Qs[..., o : o + n, :], Ks, Vs, o)
        for Qs, Ks, Vs, o, n in cases
    ]

    prop = "causality with offset"
    for (Qs, Ks, Vs, o, n), (_, P) in zip(cases, results):
        leaked = ~causal_mask(n, Ks.shape[-2], o) & (P != 0)
        if np.any(leaked):
            i, j = (int(x) for x in np.argwhere(leaked)[0][-2:])
            raise CheckFailed(
                prop,
                f"with query_offset={o}, query {i} (position {o + i}) gives "
                f"weight {P[..., i, j].ravel()[0]:.3g} to the later key {j}; keys "
                "after a query's position must get weight exactly 0",
                "hide the keys j > query_offset + i with a boolean visible mask, "
                "softmax(S, causal_mask(T_q, T_k, query_offset)); a mask one key too "
                "wide, or placed by T_k - T_q instead of query_offset, leaks",
            )
    Qs, Ks, Vs, o, n = cases[0]
    K2, V2 = Ks.copy(), Vs.copy()
    K2[o + n :], V2[o + n :] = (rng.standard_normal(M[o + n :].shape) for M in (Ks, Vs))
    out2, _ = _offset_call(fn, prop, Qs[o : o + n], K2, V2, o)
    if not np.allclose(out2, results[0][0], rtol=1e-12, atol=1e-12):
        raise CheckFailed(
            prop,
            f"with query_offset={o} and {n} queries, the outputs changed when "
            f"only the keys and values after position {o + n - 1} changed",
            "mask the later keys before the softmax, so that they cannot enter its "
            "denominator",
        )

    prop = "offset alignment"
    for (Qs, Ks, Vs, o, n), (out, P) in zip(cases, results):
        whole_out, whole_P = causal_attention(Qs, Ks, Vs)
        rows = f"rows {o}..{o + n - 1}" if n > 1 else f"row {o}"
        where = (
            f"query_offset={o}, {n} queries of shape {Qs[..., o : o + n, :].shape} "
            f"and {Ks.shape[-2]} keys"
        )
        if not np.allclose(P, whole_P[..., o : o + n, :], rtol=1e-10, atol=1e-12):
            raise CheckFailed(
                prop,
                f"{where}: the probabilities are not {rows} of the whole sequence's",
                _offset_fix(Qs[..., o : o + n, :], Ks, P, o),
            )
        if not np.allclose(out, whole_out[..., o : o + n, :], rtol=1e-10, atol=1e-12):
            raise CheckFailed(
                prop,
                f"{where}: the output is not {rows} of the whole sequence's",
                "output = probabilities @ value",
            )

    prop = "equality with recompute"
    Qh, Kh, Vh = (rng.standard_normal((2, 3, T - 1, w)) for w in (d, d, r))
    whole_out, whole_P = causal_attention(Qh, Kh, Vh)
    for t in range(T - 1):
        q, k, v = Qh[..., t : t + 1, :], Kh[..., : t + 1, :], Vh[..., : t + 1, :]
        out, P = _offset_call(fn, prop, q, k, v, t)
        if not (
            np.allclose(P, whole_P[..., t : t + 1, : t + 1], rtol=1e-10, atol=1e-12)
            and np.allclose(out, whole_out[..., t : t + 1, :], rtol=1e-10, atol=1e-12)
        ):
            raise CheckFailed(
                prop,
                f"decoding position {t} (query of shape {q.shape}, query_offset"
                f"={t}, the {t + 1} keys so far) does not give row {t} of the whole "
                "sequence's attention",
                "query i at position query_offset + i reads every key up to its own; "
                "transpose only the last two axes of key (np.swapaxes(key, -1, -2))",
            )

    prop = "bad offsets raise ValueError"
    Qs = Q_all[:3]
    for offset, why in (
        (-1, "a negative offset"),
        (
            T - 2,
            f"an offset that puts the last of 3 queries at "
            f"position {T}, past the last key ({T - 1})",
        ),
    ):
        try:
            fn(Qs.copy(), K.copy(), V.copy(), query_offset=offset)
        except ValueError:
            continue
        except Exception as e:  # NotImplementedError included: the wrong exception
            raise CheckFailed(
                prop,
                f"query_offset={offset}, {why}, raised {type(e).__name__}, not "
                "ValueError",
                "check 0 <= query_offset and query_offset + T_q <= T_k "
                "first and raise ValueError",
            ) from e
        raise CheckFailed(
            prop,
            f"query_offset={offset} ({why}) with 3 queries and {T} keys raised "
            "no ValueError",
            "raise ValueError unless 0 <= query_offset and query_offset + T_q <= T_k",
        )
    return QUERY_OFFSET_PROPERTIES
