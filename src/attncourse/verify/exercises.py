"""The learner checkers: call one on your own function and it names the first property
that fails.

Each ``check_<exercise>(fn)`` runs the learner's ``fn`` on seeded, non-square inputs and
either returns the names of the properties it checked or raises
:class:`~attncourse.verify.failed.CheckFailed` naming the property that failed, what was
seen, and the likely fix. Every failure is raised explicitly (no bare ``assert``), so
the checkers hold under ``python -O``. Any exception other than ``NotImplementedError``
raised by ``fn`` becomes a :class:`CheckFailed` naming the property being checked. The
prefix ``check_`` is reserved for these checkers.

An unfinished exercise is not a wrong one. Each exercise cell defines a stub whose body
is ``raise NotImplementedError("your code here")`` and passes it to its checker. Every
checker is wrapped by :func:`reports_unfinished`: when the learner's function raises
``NotImplementedError``, the checker prints one line, ::

    Exercise not done yet: my_top_k raises NotImplementedError — write it, then run
    this cell again

(on one line) and returns ``None`` instead of raising, so "Run All" goes on past every
unfinished exercise, while a wrong answer still raises :class:`CheckFailed`.
"""

import dataclasses
import functools
import math

import numpy as np

from ..cost import model_parameter_count
from ..layers.attention import attention_scores, causal_mask, key_valid_from_lengths
from ..layers.embedding import one_hot
from ..layers.layernorm import layernorm_forward
from ..model import ModelConfig
from ..softmax import softmax, softmax_jacobian
from .failed import CheckFailed
from .gradients import TOLERANCE, numerical_gradient, numerical_jacobian
from .properties import assert_rows_sum_to_one

__all__ = [
    "CheckFailed",
    "UNFINISHED",
    "reports_unfinished",
    "check_one_hot",
    "check_embedding_backward",
    "check_softmax_jacobian",
    "check_cross_entropy",
    "check_causal_attention",
    "check_attention_mask",
    "check_layernorm_backward",
    "check_block_residual",
    "check_parameter_count",
    "check_tied_gradient",
    "check_top_k",
    "check_top_p",
    "check_adamw_step",
    "check_clip_by_global_norm",
]


def _call(fn, property, *args, **kwargs):
    """Call the learner's ``fn``; turn any failure but NotImplementedError into
    CheckFailed."""
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise
    except Exception as e:  # the learner's code may fail in any way: name the property
        shapes = ", ".join(str(np.shape(a)) for a in args)
        raise CheckFailed(
            property,
            f"calling it on inputs of shapes {shapes} raised {type(e).__name__}: {e}",
            "make the function run on these inputs (the traceback above shows where it "
            "failed)",
        ) from e


UNFINISHED = (
    "Exercise not done yet: {name} raises NotImplementedError — write it, "
    "then run this cell again"
)


def reports_unfinished(checker):
    """Wrap a learner checker: a stub raising ``NotImplementedError`` is reported, not
    raised.

    The wrapped checker prints :data:`UNFINISHED` (naming the function that raised) and
    returns ``None``; every other outcome, a :class:`CheckFailed` included, is
    unchanged.
    """

    @functools.wraps(checker)
    def wrapper(*args, **kwargs):
        try:
            return checker(*args, **kwargs)
        except NotImplementedError as e:
            tb = e.__traceback__
            while tb.tb_next is not None:  # the innermost frame: the stub itself
                tb = tb.tb_next
            print(UNFINISHED.format(name=tb.tb_frame.f_code.co_name))
            return None

    wrapper.reports_unfinished = True
    return wrapper


def _array(value, property, dtype=None):
    """Return the learner's result as an array, or raise CheckFailed if it is not
    one."""
    try:
        return np.asarray(value, dtype=dtype)
    except (TypeError, ValueError) as e:
        raise CheckFailed(
            property,
            f"the result is not an array of numbers ({e})",
            "return a numpy array",
        ) from e


def _sign_flipped(actual, desired):
    """True when ``actual`` is ``-desired`` (and not zero): a gradient off by a sign."""
    return bool(np.any(desired != 0)) and np.allclose(
        actual, -desired, rtol=1e-6, atol=1e-9
    )


# --- Chapter 1 ------------------------------------------------------------------------

ONE_HOT_PROPERTIES = (
    "shape",
    "entries are 0 or 1",
    "one 1 per vector",
    "the 1 sits at the id",
    "rejects ids out of range",
)


@reports_unfinished
def check_one_hot(fn):
    """Check a learner's ``fn(ids, n_vocab)``; raise :class:`CheckFailed` naming the
    first property that fails.

    Ids outside ``0 .. n_vocab - 1`` must raise ``ValueError``: a too large id, and a
    negative one, which numpy indexing would silently read from the end of the
    vocabulary. Returns the names of the properties checked.

    >>> check_one_hot(one_hot)
    ('shape', 'entries are 0 or 1', 'one 1 per vector', 'the 1 sits at the id',
     'rejects ids out of range')
    >>> def upper_bound_only(ids, n_vocab):
    ...     if np.any(np.asarray(ids) >= n_vocab):
    ...         raise ValueError("id too large")
    ...     return np.eye(n_vocab)[ids]
    >>> check_one_hot(upper_bound_only)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    attncourse.verify.failed.CheckFailed: rejects ids out of range: id -1 with
    n_vocab=6 raised no ValueError; ...
    """
    ids = np.array([[3, 0, 3], [1, 4, 2]])
    n_vocab = 6
    out = _array(_call(fn, "shape", ids.copy(), n_vocab), "shape")
    if out.shape != (2, 3, 6):
        raise CheckFailed(
            "shape",
            f"expected ids.shape + (n_vocab,) = (2, 3, 6), got {out.shape}",
            "add a last axis of length n_vocab to the shape of ids",
        )
    if not np.isin(out, (0.0, 1.0)).all():
        raise CheckFailed(
            "entries are 0 or 1",
            "found other values",
            "write 1.0 at the id and 0.0 everywhere else",
        )
    if not (out.sum(axis=-1) == 1).all():
        raise CheckFailed(
            "one 1 per vector",
            "some vector does not sum to 1",
            "put exactly one 1 in each vector, in the column of its id",
        )
    if not (out.argmax(axis=-1) == ids).all():
        raise CheckFailed(
            "the 1 sits at the id",
            "some 1 is in the wrong column",
            "vector i has its 1 in column ids[i]",
        )
    for bad, why in (
        (n_vocab, "is past the last token"),
        (-1, "would silently pick the last token through numpy's negative indexing"),
    ):
        try:
            fn(np.array([0, bad]), n_vocab)
        except ValueError:
            continue
        except NotImplementedError:
            raise
        except Exception as e:  # the wrong exception: an IndexError, say
            raise CheckFailed(
                "rejects ids out of range",
                f"id {bad} with n_vocab={n_vocab} raised {type(e).__name__}, not "
                "ValueError",
                "check 0 <= id < n_vocab first and raise ValueError",
            ) from e
        raise CheckFailed(
            "rejects ids out of range",
            f"id {bad} with n_vocab={n_vocab} raised no ValueError; it {why}",
            "raise ValueError unless 0 <= id < n_vocab for every id (negative ids "
            "included)",
        )
    return ONE_HOT_PROPERTIES


@reports_unfinished
def check_embedding_backward(fn):
    """Check a learner's ``fn(dX, ids, n_vocab) -> dE``; raise :class:`CheckFailed`
    naming the failed property.

    Returns the names of the properties checked.

    >>> def scatter_add(dX, ids, n_vocab):
    ...     dE = np.zeros((n_vocab, dX.shape[-1]))
    ...     np.add.at(dE, ids, dX)  # row ids[i] += dX[i], repeats included
    ...     return dE
    >>> check_embedding_backward(scatter_add)[-1]
    'batched ids: equals onehot(ids)^T dX'
    """
    rng = np.random.default_rng(12)
    n_vocab, D = 7, 3
    # token 4 occurs three times; tokens 0, 2, 3, 5 never
    ids = np.array([4, 1, 4, 6, 4])
    dX = rng.normal(size=(5, D))
    dE = _array(_call(fn, "shape", dX.copy(), ids.copy(), n_vocab), "shape")
    if dE.shape != (n_vocab, D):
        raise CheckFailed(
            "shape",
            f"expected (n_vocab, D) = {(n_vocab, D)}, got {dE.shape}",
            "dE has one row per token of the vocabulary and the width of dX",
        )
    unused = [0, 2, 3, 5]
    if not np.all(dE[unused] == 0):
        raise CheckFailed(
            "unused tokens get zero rows",
            f"rows {unused} should be exactly 0",
            "start from np.zeros((n_vocab, D)) and add only at the ids",
        )
    want = one_hot(ids, n_vocab).T @ dX  # (n_vocab, 5) x (5, D) -> (n_vocab, D)
    if _sign_flipped(dE, want):
        raise CheckFailed(
            "a token seen once gets its gradient row",
            "dE is the negative of onehot(ids)^T dX: off by a sign",
            "add dX to the rows, do not subtract it",
        )
    if not np.allclose(dE[1], dX[1], rtol=1e-12, atol=1e-12):
        raise CheckFailed(
            "a token seen once gets its gradient row",
            "row 1 should equal dX[1]",
            "row ids[i] of dE receives dX[i]",
        )
    if not np.allclose(dE[4], dX[0] + dX[2] + dX[4], rtol=1e-12, atol=1e-12):
        raise CheckFailed(
            "repeated tokens add their gradients",
            "row 4 should be dX[0] + dX[2] + dX[4]",
            "overwriting (dE[ids] = dX) or dE[ids] += dX keeps only one occurrence: "
            "use np.add.at(dE, ids, dX) or onehot(ids)^T dX",
        )
    ids2 = np.array([[2, 0], [2, 2], [5, 0]])
    dX2 = rng.normal(size=(3, 2, D))
    dE2 = _array(
        _call(
            fn, "batched ids: equals onehot(ids)^T dX", dX2.copy(), ids2.copy(), n_vocab
        ),
        "batched ids: equals onehot(ids)^T dX",
    )
    # (n_vocab, 6) x (6, D)
    want2 = one_hot(ids2, n_vocab).reshape(-1, n_vocab).T @ dX2.reshape(-1, D)
    if dE2.shape != want2.shape or not np.allclose(dE2, want2, rtol=1e-12, atol=1e-12):
        raise CheckFailed(
            "batched ids: equals onehot(ids)^T dX",
            f"for ids of shape {ids2.shape} the result should sum over all 6 positions",
            "flatten ids to (N,) and dX to (N, D) before adding",
        )
    return (
        "shape",
        "unused tokens get zero rows",
        "a token seen once gets its gradient row",
        "repeated tokens add their gradients",
        "batched ids: equals onehot(ids)^T dX",
    )


# --- Chapter 2 ------------------------------------------------------------------------


@reports_unfinished
def check_softmax_jacobian(fn):
    """Check a learner's ``fn(z) -> J`` for a 1-D ``z``; raise :class:`CheckFailed`
    naming the failed property.

    Returns the names of the properties checked.

    >>> check_softmax_jacobian(softmax_jacobian)[0]
    'shape (n, n)'
    """
    z = np.array([0.3, -1.2, 2.0, 0.5, -0.4])
    J = _array(_call(fn, "shape (n, n)", z.copy()), "shape (n, n)", np.float64)
    if J.shape != (5, 5):
        raise CheckFailed(
            "shape (n, n)",
            f"expected (5, 5) for z of shape (5,), got {J.shape}",
            "J[j, k] = dp_j/dz_k has one row and one column per logit",
        )
    if not np.allclose(J, J.T, rtol=0, atol=1e-14):
        raise CheckFailed(
            "symmetric",
            "J should equal its transpose",
            "J = diag(p) - p p^T, which is symmetric",
        )
    if not np.allclose(J.sum(axis=1), 0, rtol=0, atol=1e-14):
        raise CheckFailed(
            "rows sum to zero",
            "softmax ignores adding a constant to every logit, so every row of J sums "
            "to 0 (a numerator-only Jacobian diag(p) fails this)",
            "add the denominator path -p p^T to diag(p)",
        )
    numeric = numerical_jacobian(softmax, z, 1e-5)
    error = float(np.max(np.abs(J - numeric)))
    if error >= TOLERANCE:
        if _sign_flipped(J, numeric):
            raise CheckFailed(
                "matches central differences of softmax",
                f"J is the negative of the Jacobian (max |error| = {error:.1e}): "
                "off by a sign",
                "J = diag(p) - p p^T, not p p^T - diag(p)",
            )
        raise CheckFailed(
            "matches central differences of softmax",
            f"max |error| = {error:.1e} >= {TOLERANCE:.0e}",
            "J[j, k] = p_j (delta_jk - p_k)",
        )
    z_big = np.array([1000.0, -1000.0, 0.0])
    with np.errstate(all="ignore"):
        J_big = _array(
            _call(fn, "finite for extreme logits", z_big.copy()),
            "finite for extreme logits",
            np.float64,
        )
    if not np.all(np.isfinite(J_big)):
        raise CheckFailed(
            "finite for extreme logits",
            "z = [1000, -1000, 0] gave NaN or inf",
            "compute p with the maximum logit subtracted first",
        )
    if not np.allclose(J_big, 0, rtol=0, atol=1e-300):
        raise CheckFailed(
            "finite for extreme logits",
            "for a saturated softmax (p one-hot) every entry should be 0",
            "compute p with the maximum logit subtracted first",
        )
    return (
        "shape (n, n)",
        "symmetric",
        "rows sum to zero",
        "matches central differences of softmax",
        "finite for extreme logits",
    )


@reports_unfinished
def check_cross_entropy(fn):
    """Check a learner's ``fn(Z, y) -> (loss, dZ)`` (mean over the batch); raise
    :class:`CheckFailed` naming the failed property.

    Returns the names of the properties checked.

    >>> from attncourse.loss import cross_entropy_backward, cross_entropy_forward
    >>> def mine(Z, y):
    ...     loss, saved = cross_entropy_forward({}, Z, targets=y)
    ...     return loss, cross_entropy_backward({}, saved, 1.0)[1]
    >>> check_cross_entropy(mine)[-1]
    'gradient matches central differences of the loss'
    """
    rng = np.random.default_rng(21)
    B, n_vocab = 4, 6
    Z = rng.normal(size=(B, n_vocab))
    y = np.array([5, 0, 3, 0])

    def run(property, Z, y):
        result = _call(fn, property, Z.copy(), y.copy())
        if not (isinstance(result, tuple) and len(result) == 2):
            raise CheckFailed(
                property,
                f"fn must return a pair (loss, dZ), got {type(result).__name__}",
                "return loss, dZ",
            )
        return result

    loss, dZ = run("loss is a scalar", Z, y)
    if np.ndim(loss) != 0:
        raise CheckFailed(
            "loss is a scalar",
            f"got an array of shape {np.shape(loss)}",
            "average the per-example losses into one number",
        )
    want = float(np.mean(-np.log(np.exp(Z[np.arange(B), y]) / np.exp(Z).sum(axis=1))))
    if not abs(float(loss) - want) < 1e-12:
        raise CheckFailed(
            "loss is the mean of -log p_y",
            f"expected {want:.12f}, got {float(loss):.12f}",
            "loss = mean over the batch of -log softmax(Z)[b, y_b]",
        )
    loss2, _ = run(
        "mean over the batch", np.concatenate([Z, Z]), np.concatenate([y, y])
    )
    if not abs(float(loss2) - want) < 1e-12:
        raise CheckFailed(
            "mean over the batch",
            "repeating the batch twice must leave the loss unchanged (a sum would "
            "double it)",
            "divide by the batch size B",
        )
    Z_big = np.array([[1000.0, -1000.0, 0.0], [1000.0, -1000.0, 0.0]])
    with np.errstate(all="ignore"):
        loss_big, dZ_big = run("finite for extreme logits", Z_big, np.array([0, 1]))
        finite = bool(np.isfinite(loss_big)) and bool(np.all(np.isfinite(dZ_big)))
    log_sum_exp = (
        "use log-sum-exp: log p_y = z_y - logsumexp(z), logsumexp(z) = m + log sum "
        "exp(z - m) with m the row maximum; subtracting the maximum alone still takes "
        "log(0) = -inf once p_y underflows to 0"
    )
    if not finite:
        raise CheckFailed(
            "finite for extreme logits",
            "Z = [1000, -1000, 0] gave NaN or inf (the loss overflows)",
            log_sum_exp,
        )
    if not abs(float(loss_big) - 1000.0) < 1e-9:
        raise CheckFailed(
            "finite for extreme logits",
            f"the losses 0 and 2000 should average to 1000, got {float(loss_big)}",
            log_sum_exp,
        )
    dZ = _array(dZ, "gradient has the shape of Z", np.float64)
    if dZ.shape != Z.shape:
        raise CheckFailed(
            "gradient has the shape of Z",
            f"expected {Z.shape}, got {dZ.shape}",
            "dZ has one row per example and one column per token",
        )
    if not np.allclose(dZ.sum(axis=-1), 0, rtol=0, atol=1e-15):
        raise CheckFailed(
            "gradient rows sum to zero",
            f"row sums are {np.round(dZ.sum(axis=-1), 6).tolist()}",
            "dZ = (softmax(Z) - onehot(y)) / B: subtract the one-hot of the target",
        )
    numeric = numerical_gradient(lambda Z: float(fn(Z, y)[0]), Z, 1e-5)
    err = float(np.max(np.abs(dZ - numeric)))
    if err >= TOLERANCE:
        if _sign_flipped(dZ, numeric):
            detail, fix = (
                "dZ is the negative of the gradient: off by a sign",
                "dZ = (p - onehot(y)) / B",
            )
        elif np.allclose(dZ, B * numeric, rtol=1e-6, atol=1e-9):
            detail, fix = (
                f"dZ is B = {B} times the gradient of the mean",
                "divide dZ by the batch size B",
            )
        else:
            detail, fix = "", "check the sign and the 1/B of the mean"
        raise CheckFailed(
            "gradient matches central differences of the loss",
            f"max |error| = {err:.1e} >= {TOLERANCE:.0e}"
            + (f"; {detail}" if detail else ""),
            fix,
        )
    return (
        "loss is a scalar",
        "loss is the mean of -log p_y",
        "mean over the batch",
        "finite for extreme logits",
        "gradient has the shape of Z",
        "gradient rows sum to zero",
        "gradient matches central differences of the loss",
    )


# --- Chapter 3 ------------------------------------------------------------------------


def _split(result, property):
    if not (isinstance(result, tuple) and len(result) == 2):
        raise CheckFailed(
            property,
            f"must return a pair (output, probabilities), got {type(result).__name__}",
            "return output, probabilities",
        )
    return _array(result[0], property), _array(result[1], property)


def _reference_probabilities(query, key, scale=True):
    S = attention_scores(query, key)  # (..., T, T), already divided by sqrt(d)
    if not scale:
        S = S * math.sqrt(query.shape[-1])
    return softmax(S, causal_mask(query.shape[-2], key.shape[-2]))


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


@reports_unfinished
def check_causal_attention(fn, seed=0):
    """Check a learner's
    ``causal_attention(query, key, value, query_offset=0, dropout=None)``.

    Properties, in order: **shape** (a pair ``(output, probabilities)`` of shapes
    ``(..., T, r)`` and ``(..., T, T)``, also with a batch dimension); **rows summing to
    one** (and no query without a visible key); **causality** (weight exactly 0 on later
    keys, and earlier outputs unchanged when later keys and values change); **scaling**
    (probabilities equal the softmax of ``query key^T / sqrt(d)`` over the visible keys;
    output equals ``probabilities @ value``); **dropout contract** (``dropout`` is
    called once on the probabilities, the output uses the dropped weights, the returned
    probabilities are the undropped ones); **offset** (a non-zero ``query_offset``
    either raises ``NotImplementedError``, as the Chapter 3 exercise asks, or does what
    Chapter 10 defines: the queries sit at positions ``query_offset + i`` and the result
    equals those rows of the whole sequence's; :func:`check_query_offset` checks it
    fully).

    Raises :class:`CheckFailed` whose message starts with the name of the first failed
    property; reports a stub still raising ``NotImplementedError`` as unfinished
    (:func:`reports_unfinished`). Returns the list of properties checked.

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
    output, probabilities = _split(_call(fn, "shape", query, key, value), "shape")
    if output.shape != (T, r) or probabilities.shape != (T, T):
        raise CheckFailed(
            "shape",
            f"for query {query.shape}, key {key.shape}, value {value.shape} expected "
            f"output {(T, r)} and probabilities {(T, T)}, got {output.shape} and "
            f"{probabilities.shape}",
            "return (probabilities @ value, probabilities), in that order",
        )
    b_out, b_prob = _split(_call(fn, "shape", bq, bk, bv), "shape")
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
                "set the scores of keys j > i to -inf before the softmax (a finite "
                "-100 still leaks)",
            )
    t = 2  # change every key and value after position t
    key2, value2 = key.copy(), value.copy()
    key2[t + 1 :] = rng.standard_normal(key2[t + 1 :].shape)
    value2[t + 1 :] = rng.standard_normal(value2[t + 1 :].shape)
    output2, _ = _split(_call(fn, "causality", query, key2, value2), "causality")
    if not np.allclose(output2[: t + 1], output[: t + 1], rtol=1e-12, atol=1e-12):
        raise CheckFailed(
            "causality",
            f"outputs at positions 0..{t} changed when only keys and values after "
            f"position {t} changed",
            "mask the future before the softmax, so it cannot enter the denominator",
        )

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
        _call(fn, "dropout contract", query, key, value, dropout=dropout),
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
    return [
        "shape",
        "rows summing to one",
        "causality",
        "scaling",
        "dropout contract",
        "offset",
    ]


# --- Chapter 4 ------------------------------------------------------------------------


def _expected_mask(T, key_valid):
    """The reference answer: key j visible to query i iff j <= i and key j is real."""
    i = np.arange(T)[:, None]
    j = np.arange(T)[None, :]
    return (j <= i) & key_valid[..., None, :]


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
    named, with the ``key_valid`` batch it failed on.

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
    attncourse.verify.failed.CheckFailed: padded keys are hidden from every query:
    query 2 of sequence 0 may read padded key 0
    (key_valid = [[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]]) (likely fix: ...)
    """
    for key_valid in _mask_cases(seed):
        B, T = key_valid.shape
        batch = f" (key_valid = {key_valid.astype(int).tolist()})"
        visible = _array(
            _call(mask_fn, "shape and type", T, key_valid.copy()), "shape and type"
        )
        want = _expected_mask(T, key_valid)
        if visible.shape != (B, T, T) or visible.dtype != np.bool_:
            raise CheckFailed(
                "shape and type",
                f"expected a boolean array of shape {(B, T, T)}, got {visible.dtype} "
                f"{visible.shape}" + batch,
                "return one boolean (T, T) mask per sequence: shape (B, T, T)",
            )
        i, j = np.arange(T)[:, None], np.arange(T)[None, :]
        future = np.argwhere(visible & (j > i))
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


# --- Chapter 5 ------------------------------------------------------------------------


def _layernorm_case(rng, eps):
    """A LayerNorm input ``X (2, 3, 5)`` (rows of unequal scales) and its forward."""
    X = rng.normal(size=(2, 3, 5)) * rng.uniform(0.5, 2.0, size=(2, 3, 1)) + 0.7
    gamma = rng.uniform(0.5, 1.5, size=5) * rng.choice([-1.0, 1.0], size=5)
    params = {"gamma": gamma, "beta": rng.normal(size=5)}
    _, saved = layernorm_forward(params, X, eps=eps)
    return params, X, saved


@reports_unfinished
def check_layernorm_backward(fn, seed=0):
    """Check a learner's LayerNorm backward ``fn(dY, x_hat, inv_std, gamma) -> dX``.

    ``x_hat (..., D)`` and ``inv_std (..., 1)`` are what the forward pass saved,
    ``gamma (D,)`` the gain. Properties, in order: **shape** (``dX`` has the shape of
    ``dY``, also with batch axes); **rows of dX sum to zero** (the mean path: shifting a
    row leaves ``y`` unchanged); **dX orthogonal to x_hat** (the variance path: with
    ``eps = 0`` scaling a row leaves ``y`` unchanged), both to rounding error, with
    ``eps = 0``; **matches central differences of LayerNorm** (``eps = 1e-5``, every
    coordinate of ``X``, tolerance ``1e-7``).

    Raises :class:`CheckFailed` naming the first failed property; reports a stub
    (``NotImplementedError``) as unfinished. Returns the properties checked.

    >>> def compact(dY, x_hat, inv_std, gamma):
    ...     g = dY * gamma
    ...     mean_g = g.mean(axis=-1, keepdims=True)
    ...     mean_gx = (g * x_hat).mean(axis=-1, keepdims=True)
    ...     return (g - mean_g - x_hat * mean_gx) * inv_std
    >>> check_layernorm_backward(compact)[-1]
    'matches central differences of LayerNorm'
    >>> def no_mean(dY, x_hat, inv_std, gamma):
    ...     g = dY * gamma
    ...     return (g - x_hat * (g * x_hat).mean(axis=-1, keepdims=True)) * inv_std
    >>> check_layernorm_backward(no_mean)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    attncourse.verify.failed.CheckFailed: rows of dX sum to zero: ...
    """
    rng = np.random.default_rng(seed)
    params, X, saved = _layernorm_case(rng, eps=0.0)
    dY = rng.normal(size=X.shape)
    args = (
        dY.copy(),
        saved["x_hat"].copy(),
        saved["inv_std"].copy(),
        params["gamma"].copy(),
    )
    dX = _array(_call(fn, "shape", *args), "shape", np.float64)
    if dX.shape != dY.shape:
        raise CheckFailed(
            "shape",
            f"expected the shape of dY, {dY.shape}, got {dX.shape}",
            "dX has the shape of X and dY; means run over the last axis",
        )
    scale = 1e-12 * (1.0 + float(np.max(np.abs(dX))))  # rounding of a sum of D terms
    sums = dX.sum(axis=-1)
    if not np.all(np.abs(sums) <= scale):
        raise CheckFailed(
            "rows of dX sum to zero",
            f"the largest row sum is {float(np.max(np.abs(sums))):.2e}",
            "subtract the row mean of g = dY * gamma: the mean path",
        )
    along = np.sum(dX * saved["x_hat"], axis=-1)
    if not np.all(np.abs(along) <= scale):
        raise CheckFailed(
            "dX orthogonal to x_hat",
            f"with eps = 0, the largest x_hat . dX over a row is "
            f"{float(np.max(np.abs(along))):.2e}",
            "subtract x_hat * mean(g * x_hat): the variance path",
        )
    params, X, saved = _layernorm_case(rng, eps=1e-5)
    dY = rng.normal(size=X.shape)
    args = (
        dY.copy(),
        saved["x_hat"].copy(),
        saved["inv_std"].copy(),
        params["gamma"].copy(),
    )
    dX = _array(
        _call(fn, "matches central differences of LayerNorm", *args),
        "matches central differences of LayerNorm",
        np.float64,
    )

    def J(X):
        return float(np.sum(layernorm_forward(params, X, eps=1e-5)[0] * dY))

    numeric = numerical_gradient(J, X, 1e-5)
    err = float(np.max(np.abs(dX - numeric))) if dX.shape == X.shape else math.inf
    if not err < TOLERANCE:
        raise CheckFailed(
            "matches central differences of LayerNorm",
            f"eps = 1e-5: max |error| = {err:.1e} >= {TOLERANCE:.0e}",
            "g = dY * gamma (the gain first); multiply by inv_std last",
        )
    return (
        "shape",
        "rows of dX sum to zero",
        "dX orthogonal to x_hat",
        "matches central differences of LayerNorm",
    )


@reports_unfinished
def check_block_residual(fn, seed=0):
    """Check a learner's ``fn(dY, d_sublayer) -> dX``, the backward of ``y = x + f(x)``.

    ``d_sublayer`` is ``f``'s backward pass applied to ``dY`` (the sublayer path); the
    identity path carries ``dY`` to ``x`` unchanged, so ``dX = dY + d_sublayer``, each
    path added once. Properties, in order: **shape**; **the identity path is added**
    (``fn(dY, 0)`` is not zero); **the identity path is added once**
    (``fn(dY, 0) = dY``); **the sublayer path is added** (``fn(0, d) = d``); **matches
    central differences of y = x + f(x)** (``f(x) = tanh(x W)``, every coordinate of
    ``x``, tolerance ``1e-7``).

    Raises :class:`CheckFailed` naming the first failed property; reports a stub
    (``NotImplementedError``) as unfinished. Returns the properties checked.

    >>> check_block_residual(lambda dY, d_sublayer: dY + d_sublayer)[-1]
    'matches central differences of y = x + f(x)'
    >>> check_block_residual(lambda dY, d_sublayer: d_sublayer)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    attncourse.verify.failed.CheckFailed: the identity path is added: ...
    """
    rng = np.random.default_rng(seed)
    T, D = 4, 3
    x, W, dY = rng.normal(size=(T, D)), rng.normal(size=(D, D)), rng.normal(size=(T, D))
    F = np.tanh(x @ W)  # (T, D) x (D, D) -> (T, D)
    d_sublayer = ((1.0 - F * F) * dY) @ W.T  # (T, D) x (D, D) -> (T, D)
    dX = _array(_call(fn, "shape", dY.copy(), d_sublayer.copy()), "shape", np.float64)
    if dX.shape != (T, D):
        raise CheckFailed(
            "shape",
            f"expected the shape of x, {(T, D)}, got {dX.shape}",
            "dX = dY + d_sublayer, elementwise",
        )
    zeros = np.zeros((T, D))
    identity = _array(
        _call(fn, "the identity path is added", dY.copy(), zeros.copy()),
        "the identity path is added",
        np.float64,
    )
    if identity.shape == (T, D) and np.allclose(identity, 0.0, rtol=0, atol=1e-15):
        raise CheckFailed(
            "the identity path is added",
            "fn(dY, 0) is zero: only the sublayer path reaches x",
            "add dY: the identity path of y = x + f(x) carries it as is",
        )
    once = identity.shape == (T, D) and np.allclose(
        identity, dY, rtol=1e-12, atol=1e-15
    )
    if not once:
        twice = identity.shape == (T, D) and np.allclose(identity, 2 * dY, rtol=1e-12)
        detail = (
            "fn(dY, 0) is 2 dY: the identity path is counted twice"
            if twice
            else ("fn(dY, 0) differs from dY")
        )
        raise CheckFailed(
            "the identity path is added once",
            detail,
            "add dY exactly once: dX = dY + d_sublayer",
        )
    sub = _call(fn, "the sublayer path is added", zeros.copy(), d_sublayer.copy())
    sub = _array(sub, "the sublayer path is added", np.float64)
    kept = sub.shape == (T, D) and np.allclose(sub, d_sublayer, rtol=1e-12, atol=1e-15)
    if not kept:
        raise CheckFailed(
            "the sublayer path is added",
            "fn(0, d_sublayer) differs from d_sublayer",
            "add d_sublayer, the gradient through f: dY + d_sublayer",
        )

    def J(x):
        return float(np.sum((x + np.tanh(x @ W)) * dY))  # (T, D) x (D, D) -> (T, D)

    numeric = numerical_gradient(J, x, 1e-5)
    err = float(np.max(np.abs(dX - numeric)))
    if not err < TOLERANCE:
        raise CheckFailed(
            "matches central differences of y = x + f(x)",
            f"max |error| = {err:.1e} >= {TOLERANCE:.0e}",
            "sum the two paths and nothing else: dX = dY + d_sublayer",
        )
    return (
        "shape",
        "the identity path is added",
        "the identity path is added once",
        "the sublayer path is added",
        "matches central differences of y = x + f(x)",
    )


# --- Chapter 6 ------------------------------------------------------------------------

PARAMETER_COUNT_PROPERTIES = (
    "a whole number",
    "the position table",
    "the token table and the unembedding",
    "tied: one table",
    "independent of the number of heads",
    "one block",
    "the MLP width",
    "the total",
)


@reports_unfinished
def check_parameter_count(fn):
    """Check a learner's ``fn(config) -> int``, the number of parameters of a model.

    ``config`` is an :class:`attncourse.model.ModelConfig`. The checker changes one size
    at a time and compares what the count grows by with what that size adds: ``D`` per
    position, a table row per token (two untied, one tied), nothing per head (``H d =
    D``), one block per layer, ``2 D^2 + D`` per unit of ``ratio`` in each block, and
    then the total. Returns the names of the properties checked.

    >>> check_parameter_count(model_parameter_count)[-1]
    'the total'
    >>> def no_positions(config):
    ...     return model_parameter_count(config) - config.T_max * config.D
    >>> check_parameter_count(no_positions)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    attncourse.verify.failed.CheckFailed: the position table: ... by 0, not D = 6 ...
    """
    base = ModelConfig(n_vocab=11, T_max=9, D=6, heads=3, layers=3, ratio=4)
    D, L, F = base.D, base.layers, base.ratio * base.D

    def count(property, config):
        value = _call(fn, property, config)
        whole = isinstance(value, (int, np.integer))
        if isinstance(value, (bool, np.bool_)) or not whole:
            raise CheckFailed(
                "a whole number",
                f"fn returned {value!r} ({type(value).__name__})",
                "return an int: every size is a whole number (no "
                "division, no float factors)",
            )
        return int(value)

    def grows(property, change):
        changed = dataclasses.replace(base, **change)
        return count(property, changed) - count(property, base)

    count("a whole number", base)
    step = grows("the position table", {"T_max": base.T_max + 1})
    if step != D:
        raise CheckFailed(
            "the position table",
            f"one more position (T_max 9 -> 10) grew by {step}, not D = {D}",
            "add the learned positions P, a (T_max, D) table",
        )
    step = grows("the token table and the unembedding", {"n_vocab": base.n_vocab + 1})
    if step != 2 * D:
        fix = (
            "add the unembedding U (D, n_vocab) of an untied model"
            if step == D
            else "count E (n_vocab, D) and, untied, U (D, n_vocab)"
        )
        raise CheckFailed(
            "the token table and the unembedding",
            f"untied, one more token grew by {step}, not 2 D = {2 * D}",
            fix,
        )
    tied = dataclasses.replace(base, tied=True)
    more = dataclasses.replace(tied, n_vocab=base.n_vocab + 1)
    step = count("tied: one table", more) - count("tied: one table", tied)
    if step != D:
        fix = (
            "count E once: tied, the unembedding is E^T, not a table of its own"
            if step == 2 * D
            else "tied, E (n_vocab, D) is the only table of tokens"
        )
        raise CheckFailed(
            "tied: one table", f"tied, one more token grew by {step}, not D = {D}", fix
        )
    for heads in (1, 2, 6):
        step = grows("independent of the number of heads", {"heads": heads})
        if step != 0:
            raise CheckFailed(
                "independent of the number of heads",
                f"heads 3 -> {heads} changed the count by {step}",
                "W_Q, W_K, W_V are (D, H d) and W_O (H r, D) with H d = H r = D: "
                "count D x D for each, whatever the number of heads",
            )
    block = 4 * D * D + (2 * F * D + F + D) + 4 * D
    step = grows("one block", {"layers": L + 1})
    if step != block:
        missing = {
            F + D: "the MLP biases (F = ratio D for up, D for down)",
            4 * D: "the two LayerNorms of each block (gamma and beta: 2 D each)",
            2 * D: "one of the two LayerNorms of each block (2 D)",
            D * D: "one of the four attention projections (W_O?)",
        }
        if block - step in missing:
            fix = "add " + missing[block - step]
        else:
            fix = "attention 4 D^2, MLP 2 F D + F + D, LayerNorms 4 D"
        raise CheckFailed(
            "one block",
            f"one more block (layers 3 -> 4) grew by {step}, not {block}",
            fix,
        )
    step = grows("the MLP width", {"ratio": base.ratio + 1})
    if step != L * (2 * D * D + D):
        raise CheckFailed(
            "the MLP width",
            f"ratio 4 -> 5 grew by {step}, not L (2 D^2 + D) = {L * (2 * D * D + D)}",
            "the MLP is D -> F -> D with F = ratio D: use config.ratio",
        )
    want, got = model_parameter_count(base), count("the total", base)
    if got != want:
        if want - got == 2 * D:
            fix = "add the final LayerNorm (gamma and beta, 2 D)"
        else:
            fix = (
                "count the embeddings, positions, L blocks, the final LayerNorm "
                "and the unembedding"
            )
        raise CheckFailed("the total", f"expected {want} parameters, got {got}", fix)
    return PARAMETER_COUNT_PROPERTIES


# --- Chapter 6: the tied table --------------------------------------------------------

TIED_GRADIENT_PROPERTIES = (
    "returns (loss, grads)",
    "the tied loss",
    "the nesting of params",
    "every gradient but E",
    "the tied table: both uses, added",
)


def _tied_case():
    """A small tied model (non-square tables), moved off its initial point, and its
    data."""
    from ..model import init_model
    from ..params import flatten_params, unflatten_params

    config = ModelConfig(n_vocab=7, T_max=6, D=4, heads=2, layers=1, ratio=3, tied=True)
    start = init_model(config, seed=9, std=0.5)
    rng = np.random.default_rng(6)
    params = unflatten_params(
        {
            path: W + 0.1 * rng.normal(size=W.shape)
            for path, W in flatten_params(start).items()
        },
        start,
    )
    ids = np.random.default_rng(6).integers(0, config.n_vocab, size=(2, 4))
    return config, params, ids[:, :-1], ids[:, 1:]


@reports_unfinished
def check_tied_gradient(fn):
    """Check a learner's ``fn(params, ids, targets, *, config) -> (loss, grads)`` for a
    tied model.

    ``config`` is a tied :class:`attncourse.model.ModelConfig` and ``grads`` must nest
    like ``params`` (no ``unembed``). The checker compares the loss with the package's
    tied loss, then every gradient with central differences of that loss on every
    coordinate (:func:`~attncourse.verify.gradients.gradcheck`); a wrong ``embed.E`` is
    diagnosed as the lookup's gradient alone or the unembedding's alone. Returns the
    names of the properties checked.
    """
    from ..loss import cross_entropy
    from ..model import model_forward, model_loss
    from ..params import flatten_params, unflatten_params
    from .gradients import gradcheck

    config, params, ids, targets = _tied_case()
    prop = "returns (loss, grads)"
    result = _call(fn, prop, params, ids, targets, config=config)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise CheckFailed(
            prop,
            f"fn must return a pair (loss, grads), got {type(result).__name__}",
            "return loss, grads as model_loss does",
        )
    loss, grads = result
    reference, _ = model_loss(params, ids, targets, config=config)
    loss = _array(loss, "the tied loss", dtype=np.float64)
    if loss.shape != () or not math.isclose(float(loss), reference, rel_tol=1e-12):
        raise CheckFailed(
            "the tied loss",
            f"got {loss!r}, the tied model's loss is {reference!r}",
            "run model_loss on the untied configuration "
            "with unembed W = E^T, shape (D, n_vocab): its loss is the tied loss",
        )
    prop = "the nesting of params"
    flat = flatten_params(params)
    try:
        flat_grads = {
            name: _array(g, prop, dtype=np.float64)
            for name, g in flatten_params(grads).items()
        }
    except (TypeError, ValueError, AttributeError) as e:
        raise CheckFailed(
            prop,
            f"grads could not be read as nested arrays ({e})",
            "return grads nested like params",
        ) from e
    if set(flat_grads) != set(flat):
        extra, missing = (
            sorted(set(flat_grads) - set(flat)),
            sorted(set(flat) - set(flat_grads)),
        )
        raise CheckFailed(
            prop,
            f"extra {extra}, missing {missing}",
            "fold the unembedding's gradient into embed.E and drop unembed; "
            "keep every other gradient",
        )
    for name, g in flat_grads.items():
        if g.shape != flat[name].shape:
            raise CheckFailed(
                prop,
                f"{name} has shape {g.shape}, the parameter {flat[name].shape}",
                "transpose dU back to E's shape",
            )

    def J(**arrays):  # the tied loss
        logits, _ = model_forward(unflatten_params(arrays, params), ids, config=config)
        return cross_entropy(logits, targets)

    report = gradcheck(J, flat, flat_grads)
    worst = {}
    for (name, _), error in report.errors.items():
        worst[name] = max(worst.get(name, 0.0), error)
    failing = sorted(name for name, error in worst.items() if not error < TOLERANCE)
    others = [name for name in failing if name != "embed.E"]
    if others:
        raise CheckFailed(
            "every gradient but E",
            f"{others} differ from central "
            f"differences (worst error {max(worst[n] for n in others):.1e})",
            "take these gradients from the untied model_loss unchanged",
        )
    if failing:
        untied = dataclasses.replace(config, tied=False)
        as_untied = dict(params, unembed={"W": params["embed"]["E"].T})
        _, parts = model_loss(as_untied, ids, targets, config=untied)
        lookup, unembedding = parts["embed"]["E"], parts["unembed"]["W"].T
        dE = flat_grads["embed.E"]
        if np.allclose(dE, lookup, rtol=1e-6, atol=1e-9):
            fix = "add the unembedding's gradient: dE = dE_lookup + dU^T"
        elif np.allclose(dE, unembedding, rtol=1e-6, atol=1e-9):
            fix = "add the lookup's gradient: dE = dE_lookup + dU^T"
        else:
            fix = "E is used twice: dE = dE_lookup + dU^T, the two gradients added"
        raise CheckFailed(
            "the tied table: both uses, added",
            f"embed.E differs from central differences by up to {worst['embed.E']:.1e}",
            fix,
        )
    return TIED_GRADIENT_PROPERTIES


# --- Chapter 8: top-k sampling --------------------------------------------------------

TOP_K_PROPERTIES = (
    "returns probabilities",
    "input untouched",
    "keeps exactly k",
    "the k most probable",
    "renormalised",
    "in proportion to the softmax",
    "ties: the lowest token id",
)


def _top_k_result(fn, logits, k):
    """Call ``fn(logits, k)`` on a copy; check the shape and that the copy is kept."""
    given = logits.copy()
    P = _array(
        _call(fn, "returns probabilities", given, k),
        "returns probabilities",
        dtype=np.float64,
    )
    if P.shape != logits.shape or not np.all(np.isfinite(P)):
        raise CheckFailed(
            "returns probabilities",
            f"for logits of shape {logits.shape} and k={k} it "
            f"returned shape {P.shape}"
            + ("" if P.shape != logits.shape else " with NaN or inf"),
            "return one probability per token, along the last axis",
        )
    if not np.array_equal(given, logits):
        raise CheckFailed(
            "input untouched",
            f"fn changed the logits it was given (k={k})",
            "work on a copy (np.where, or logits.copy())",
        )
    return P


@reports_unfinished
def check_top_k(fn):
    """Check a learner's ``fn(logits, k) -> P``: softmax, keep the top k, renormalise.

    ``logits`` is ``(rows, n_vocab)``; ``P`` must have its shape: in each row exactly
    ``min(k, n_vocab)`` tokens kept, the ``k`` with the largest logits (ties at the
    ``k``-th place: the lowest token ids), their softmax probabilities renormalised to
    sum to one, the other tokens 0, and the logits left unchanged. Compared with
    :func:`attncourse.sample.probabilities` ``(logits, top_k=k)`` within ``1e-12``.
    Returns the names of the properties checked.

    >>> from attncourse.sample import probabilities
    >>> check_top_k(lambda logits, k: probabilities(logits, top_k=k))[:3]
    ('returns probabilities', 'input untouched', 'keeps exactly k')
    >>> check_top_k(lambda logits, k: np.zeros_like(logits))
    Traceback (most recent call last):
    ...
    attncourse.verify.failed.CheckFailed: keeps exactly k: k=1: row 0 keeps 0 tokens \
(likely fix: zero all but the k largest logits' tokens, keep exactly k)
    """
    from ..sample import probabilities

    n_vocab = 7
    logits = 2.0 * np.random.default_rng(8).normal(size=(3, n_vocab))  # distinct values
    for k in (1, 3, 6, n_vocab, 10):
        P = _top_k_result(fn, logits, k)
        expected = probabilities(logits, top_k=k)
        kept = P != 0
        counts = kept.sum(axis=-1)
        want = min(k, n_vocab)
        if np.any(counts != want):
            row = int(np.argmax(counts != want))
            raise CheckFailed(
                "keeps exactly k",
                f"k={k}: row {row} keeps {counts[row]} tokens",
                "zero all but the k largest logits' tokens, keep exactly k",
            )
        if np.any(kept != (expected > 0)):
            row = int(np.argmax(np.any(kept != (expected > 0), axis=-1)))
            raise CheckFailed(
                "the k most probable",
                f"k={k}: row {row} keeps tokens "
                f"{np.flatnonzero(kept[row]).tolist()}, the largest "
                f"logits are at {np.flatnonzero(expected[row]).tolist()}",
                "rank by the logits, largest first (np.argsort(-z))",
            )
        sums = P.sum(axis=-1)
        if not np.allclose(sums, 1.0, rtol=0, atol=1e-12):
            raise CheckFailed(
                "renormalised",
                f"k={k}: rows sum to {sums.round(6)}",
                "divide the kept probabilities by their sum",
            )
        if not np.allclose(P, expected, rtol=1e-12, atol=1e-12):
            raise CheckFailed(
                "in proportion to the softmax",
                f"k={k}: the kept probabilities differ by up to "
                f"{np.abs(P - expected).max():.2e}",
                "take the softmax of the logits, then zero and renormalise (or softmax "
                "over the kept logits only)",
            )
    tied = np.array([[1.0, 3.0, 2.0, 3.0, 2.0, 2.0, 0.5]])
    P = _top_k_result(fn, tied, 3)
    kept = np.flatnonzero(P[0]).tolist()
    if kept != [1, 2, 3] or not np.allclose(
        P, probabilities(tied, top_k=3), rtol=1e-12, atol=1e-12
    ):
        raise CheckFailed(
            "ties: the lowest token id",
            f"logits {tied[0].tolist()} with k=3 keep tokens {kept}, "
            f"expected [1, 2, 3]: 3.0 twice, then the lowest id of "
            f"the tied 2.0s",
            "rank with a stable sort, "
            "np.argsort(-z, kind='stable'), and keep exactly the first k",
        )
    return TOP_K_PROPERTIES


# --- Chapter 7: one AdamW step --------------------------------------------------------

ADAMW_STEP_PROPERTIES = (
    "purity",
    "returns (params, state)",
    "moment update",
    "bias correction",
    "decoupled weight decay",
    "which parameters decay",
)


def _adamw_case(seed):
    """Parameters ``{"W": (3, 4), "b": (4,)}`` and three gradients of mixed scales.

    Each gradient coordinate is ``N(0, 1)`` times ``10^u``, ``u`` uniform in [-2, 2]:
    Adam's division by ``sqrt(v_hat)`` shows only when the scales differ.
    """
    rng = np.random.default_rng(seed)
    params = {"W": rng.normal(size=(3, 4)), "b": rng.normal(size=4)}
    grads = [
        {
            name: rng.normal(size=p.shape) * 10.0 ** rng.uniform(-2, 2, size=p.shape)
            for name, p in params.items()
        }
        for _ in range(3)
    ]
    return params, grads


def _adamw_reference(
    params,
    grads,
    state,
    lr,
    betas,
    eps,
    weight_decay,
    *,
    correct_m=True,
    correct_v=True,
):
    """AdamW on a flat dict, float64; the bias correction of ``m``, ``v`` optional."""
    (b1, b2), t = betas, state["step"] + 1
    new, m, v = {}, {}, {}
    for name, p in params.items():
        g = grads[name]
        m[name] = b1 * state["m"][name] + (1 - b1) * g
        v[name] = b2 * state["v"][name] + (1 - b2) * g * g
        m_hat = m[name] / (1 - b1**t) if correct_m else m[name]
        v_hat = v[name] / (1 - b2**t) if correct_v else v[name]
        update = m_hat / (np.sqrt(v_hat) + eps)
        if p.ndim >= 2:
            update = update + weight_decay * p
        new[name] = p - lr * update
    return new, {"step": t, "m": m, "v": v}


def _copied(tree):
    """A deep copy of a flat dict of arrays, or of an AdamW state of flat dicts."""
    if isinstance(tree, dict):
        return {k: _copied(v) for k, v in tree.items()}
    return np.array(tree, copy=True) if isinstance(tree, np.ndarray) else tree


def _same_tree(a, b):
    """True if two nested dicts of arrays and ints hold identical values."""
    if isinstance(a, dict) or isinstance(b, dict):
        return (
            isinstance(a, dict)
            and isinstance(b, dict)
            and set(a) == set(b)
            and all(_same_tree(a[k], b[k]) for k in a)
        )
    return np.array_equal(a, b)


def _adamw_call(fn, property, params, grads, state, **hyper):
    """Call the learner's AdamW step on copies; check it returns (params, state)."""
    try:
        result = fn(_copied(params), _copied(grads), _copied(state), **hyper)
    except NotImplementedError:
        raise
    except Exception as e:  # the learner's code may fail in any way: name the property
        raise CheckFailed(
            property,
            f"fn(params, grads, state, lr=..., betas=..., "
            f"eps=..., weight_decay=...) raised {type(e).__name__}: {e}",
            "make the function run on these inputs (see the traceback above)",
        ) from e
    prop, fix = (
        "returns (params, state)",
        (
            "return new_params (a dict like params) and new_state, a dict with 'step' "
            "and the moments 'm' and 'v', each a dict like params"
        ),
    )
    if not (isinstance(result, tuple) and len(result) == 2):
        raise CheckFailed(prop, f"fn returned {type(result).__name__}, not a pair", fix)
    new, new_state = result
    ok = isinstance(new, dict) and set(new) == set(params)
    ok = ok and isinstance(new_state, dict) and {"step", "m", "v"} <= set(new_state)
    ok = ok and all(
        isinstance(new_state[k], dict) and set(new_state[k]) == set(params)
        for k in ("m", "v")
    )
    if not ok:
        raise CheckFailed(
            prop, "the result does not have the keys of (params, state)", fix
        )
    arrays = {}
    for where, tree in (
        ("params", new),
        ("state['m']", new_state["m"]),
        ("state['v']", new_state["v"]),
    ):
        arrays[where] = {name: _array(tree[name], prop, np.float64) for name in params}
        for name, value in arrays[where].items():
            if value.shape != params[name].shape:
                raise CheckFailed(
                    prop,
                    f"{where}[{name!r}] has shape {value.shape}, "
                    f"params[{name!r}] {params[name].shape}",
                    fix,
                )
    return arrays["params"], {
        "step": new_state["step"],
        "m": arrays["state['m']"],
        "v": arrays["state['v']"],
    }


def _close(a, b):
    """Equal to the rounding of a few operations in float64, entry by entry."""
    return all(np.allclose(a[k], b[k], rtol=1e-10, atol=1e-13) for k in a)


def _largest_gap(a, b):
    return max(float(np.max(np.abs(a[k] - b[k]))) for k in a)


@reports_unfinished
def check_adamw_step(fn, seed=0):
    """Check a learner's ``fn(params, grads, state, *, lr, betas, eps, weight_decay)``.

    ``fn`` has the signature of :func:`attncourse.optim.adamw_step` (``decay`` is never
    passed: the default rule applies). It is called on a flat dict, ``params = {"W": W,
    "b": b}`` (``W`` a (3, 4) weight matrix, ``b`` a (4,) bias), ``grads`` of the same
    keys and shapes, and ``state = {"step": 0, "m": zeros like params, "v": zeros like
    params}``; it must return ``(new_params, new_state)`` in the same format,
    ``new_state`` fed back to the next call. Properties, in order: **purity** (the
    inputs are not modified); **returns (params, state)**; **moment update** (``m``,
    ``v`` are the running averages of ``g``, ``g^2``; the step counts up); **bias
    correction** (two steps without decay equal ``p - lr m_hat / (sqrt(v_hat) + eps)``);
    **decoupled weight decay** (with ``weight_decay > 0`` the matrix moves by ``lr wd
    W`` more, and ``m``, ``v`` do not change); **which parameters decay** (the 1-D bias
    does not). Values are compared with a float64 reference within ``rtol = 1e-10``.

    Raises :class:`CheckFailed` naming the first failed property; reports a stub
    (``NotImplementedError``) as unfinished. Returns the properties checked.

    >>> from attncourse.optim import adamw_step
    >>> check_adamw_step(adamw_step)[-1]
    'which parameters decay'
    >>> def no_correction(params, grads, state, *, lr, betas, eps, weight_decay):
    ...     (b1, b2), new, m, v = betas, {}, {}, {}
    ...     for k, p in params.items():
    ...         m[k] = b1 * state["m"][k] + (1 - b1) * grads[k]
    ...         v[k] = b2 * state["v"][k] + (1 - b2) * grads[k] ** 2
    ...         new[k] = p - lr * (m[k] / (np.sqrt(v[k]) + eps)
    ...                            + (weight_decay * p if p.ndim >= 2 else 0))
    ...     return new, {"step": state["step"] + 1, "m": m, "v": v}
    >>> check_adamw_step(no_correction)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    attncourse.verify.failed.CheckFailed: bias correction: ...
    """
    params, (g1, g2, g3) = _adamw_case(seed)
    hyper = {"lr": 0.1, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0}
    zeros = {name: np.zeros_like(p) for name, p in params.items()}
    state0 = {"step": 0, "m": zeros, "v": _copied(zeros)}
    inputs = (params, g1, state0)
    snapshot = tuple(_copied(x) for x in inputs)
    try:
        result = fn(*inputs, **hyper)
    except NotImplementedError:
        raise
    except Exception:
        result = None  # reported by the call below, on copies
    changed = [
        name
        for name, a, b in zip(("params", "grads", "state"), inputs, snapshot)
        if not _same_tree(a, b)
    ]
    if changed:
        raise CheckFailed(
            "purity",
            f"fn modified its input {' and '.join(changed)}",
            "compute new arrays (p - lr * update, b1 * m + ...) instead "
            "of updating in place (-=, *=, +=, out=)",
        )
    del result
    p1, s1 = _adamw_call(fn, "returns (params, state)", *inputs, **hyper)
    r1, t1 = _adamw_reference(params, g1, state0, **hyper)
    prop = "moment update"
    if s1["step"] != 1:
        raise CheckFailed(
            prop,
            f"after the first step state['step'] is {s1['step']!r}, not 1",
            "return state['step'] + 1: the bias correction needs t",
        )
    p2, s2 = _adamw_call(fn, prop, p1, g2, s1, **hyper)
    r2, t2 = _adamw_reference(r1, g2, t1, **hyper)
    for name, (b, which) in {"m": (0.9, "g"), "v": (0.999, "g^2")}.items():
        for got, want, t in ((s1, t1, 1), (s2, t2, 2)):
            if not _close(got[name], want[name]):
                raise CheckFailed(
                    prop,
                    f"after step {t}, {name} differs from the "
                    f"running average by up to "
                    f"{_largest_gap(got[name], want[name]):.2e}",
                    f"{name} = {b} {name} + (1 - {b}) {which}, starting "
                    f"from zero; store it without the bias correction",
                )
    if s2["step"] != 2:
        raise CheckFailed(
            prop,
            f"after two steps state['step'] is {s2['step']!r}",
            "return state['step'] + 1",
        )
    prop = "bias correction"
    for got, start, state, g, t in ((p1, params, state0, g1, 1), (p2, r1, t1, g2, 2)):
        want, _ = _adamw_reference(start, g, state, **hyper)
        if _close(got, want):
            continue
        for correct_m, correct_v, missing in (
            (False, False, "m and v"),
            (False, True, "m"),
            (True, False, "v"),
        ):
            wrong, _ = _adamw_reference(
                start, g, state, **hyper, correct_m=correct_m, correct_v=correct_v
            )
            if _close(got, wrong):
                raise CheckFailed(
                    prop,
                    f"step {t} uses {missing} without the bias correction",
                    "m_hat = m / (1 - b1^t), v_hat = v "
                    "/ (1 - b2^t) with t = state['step'] + 1",
                )
        raise CheckFailed(
            prop,
            f"step {t} (no decay) differs from p - lr m_hat / "
            f"(sqrt(v_hat) + eps) by up to {_largest_gap(got, want):.2e}",
            "p - lr * m_hat / (np.sqrt(v_hat) + eps), with m_hat = m / "
            "(1 - b1**t), v_hat = v / (1 - b2**t), t = state['step'] + 1",
        )
    decayed = dict(hyper, weight_decay=0.5)
    p3, s3 = _adamw_call(fn, "decoupled weight decay", p2, g3, s2, **decayed)
    r3, t3 = _adamw_reference(r2, g3, t2, **hyper)  # no decay
    prop = "decoupled weight decay"
    if not (_close(s3["m"], t3["m"]) and _close(s3["v"], t3["v"])):
        raise CheckFailed(
            prop,
            "with weight_decay > 0, m or v change: the decay went "
            "into the gradient (L2 regularisation)",
            "keep g as it is; add weight_decay * p to the update, after m_hat / (sqrt("
            "v_hat) + eps)",
        )
    shift = {"W": p3["W"] - r3["W"]}
    want = {"W": -0.1 * 0.5 * r2["W"]}
    if not _close(shift, want):
        raise CheckFailed(
            prop,
            f"weight_decay = 0.5 moves W by a term that differs "
            f"from -lr wd W by up to {_largest_gap(shift, want):.2e}",
            "p - lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * p)",
        )
    if not _close({"b": p3["b"]}, {"b": r3["b"]}):
        raise CheckFailed(
            "which parameters decay",
            "the bias b (1-D) is decayed",
            "decay only arrays with ndim >= 2 (matrices); gains and "
            "biases are left alone",
        )
    return ADAMW_STEP_PROPERTIES


# --- Chapter 7: clipping by the global norm -------------------------------------------

CLIP_BY_GLOBAL_NORM_PROPERTIES = (
    "returns (grads, norm)",
    "the norm",
    "one factor for all arrays",
    "clipped norm equals max_norm",
    "small gradients unchanged",
    "input untouched",
    "zero gradient",
)


def _clip_case(seed):
    """Nested float64 gradients: a dict holding a list of dicts; unequal shapes."""
    rng = np.random.default_rng(seed)

    def g(*shape):
        return rng.normal(size=shape) * 10.0 ** rng.uniform(-1, 1)

    return {
        "embed": g(5, 3),
        "blocks": [{"W": g(3, 4), "b": g(4)}, {"W": g(4, 2), "b": g(2)}],
        "gain": g(6),
    }


def _nested_copy(tree):
    """A copy of a nesting of dicts and lists of arrays, every array copied."""
    if isinstance(tree, dict):
        return {k: _nested_copy(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_nested_copy(v) for v in tree)
    return np.array(tree, copy=True)


def _same_nesting(a, b):
    """True if two nestings hold the same arrays at the same paths, value for value."""
    from ..params import flatten_params

    fa, fb = flatten_params(a), flatten_params(b)
    return set(fa) == set(fb) and all(np.array_equal(fa[k], fb[k]) for k in fa)


def _sum_of_squares(flat):
    return sum(float(np.sum(np.square(a))) for a in flat.values())


def _clip_call(fn, property, grads, max_norm):
    """Call ``fn(grads, max_norm)`` on a copy; return (flat clipped, norm, kept)."""
    from ..params import flatten_params

    given = _nested_copy(grads)
    try:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            result = fn(given, max_norm)
    except NotImplementedError:
        raise
    except Exception as e:  # the learner's code may fail in any way: name the property
        raise CheckFailed(
            property,
            f"fn(grads, max_norm={max_norm:.4g}) raised {type(e).__name__}: {e}",
            "make the function run on these inputs (see the traceback above)",
        ) from e
    fix = (
        "return (clipped, norm): clipped nested like grads (the same keys, list "
        "lengths and array shapes), norm one number"
    )
    if not (isinstance(result, tuple) and len(result) == 2):
        raise CheckFailed(
            property, f"fn returned {type(result).__name__}, not a pair", fix
        )
    clipped, norm = result
    want = flatten_params(grads)
    try:
        got = flatten_params(clipped)
    except ValueError as e:
        raise CheckFailed(
            property, f"clipped is not nested like grads ({e})", fix
        ) from e
    if set(got) != set(want):
        raise CheckFailed(
            property,
            f"clipped ({type(clipped).__name__}) lacks "
            f"{sorted(set(want) - set(got))} and has extra "
            f"{sorted(set(got) - set(want))}",
            fix,
        )
    out = {path: _array(got[path], property, np.float64) for path in want}
    for path, value in out.items():
        if value.shape != want[path].shape:
            raise CheckFailed(
                property,
                f"clipped {path!r} has shape {value.shape}, "
                f"grads {path!r} {want[path].shape}",
                fix,
            )
    try:
        if np.ndim(norm) != 0:
            raise TypeError(f"an array of shape {np.shape(norm)}")
        norm = float(norm)
    except (TypeError, ValueError) as e:
        raise CheckFailed(property, f"norm is not one number: {e}", fix) from e
    return out, norm, _same_nesting(given, grads)


def _norm_hint(got, flat, norm, max_norm):
    """A likely cause of a wrong ``norm``, or ''."""
    first = next(iter(flat))
    causes = (
        (
            math.sqrt(_sum_of_squares({first: flat[first]})),
            f"the norm of the first array, {first!r}, only",
        ),
        (norm**2, "the sum of squares, without the square root"),
        (
            sum(math.sqrt(_sum_of_squares({p: a})) for p, a in flat.items()),
            "the sum of the arrays' own norms",
        ),
        (max_norm, "the norm after clipping"),
    )
    for value, cause in causes:
        if math.isclose(got, value, rel_tol=1e-9):
            return f" ({cause})"
    return ""


@reports_unfinished
def check_clip_by_global_norm(fn, seed=0):
    """Check a learner's ``fn(grads, max_norm) -> (clipped, norm)``: one global clip.

    ``fn`` has the signature of :func:`attncourse.optim.clip_by_global_norm`. It is
    called on nested float64 gradients (a dict holding a list of dicts of arrays of
    unequal shapes, seeded by ``seed``) with ``max_norm`` a quarter of their norm,
    then twice their norm, then on all-zero gradients. Properties, in order:
    **returns (grads, norm)** (a pair; ``clipped`` nests like ``grads``, with the same
    shapes); **the norm** (``sqrt`` of the sum of squares over all arrays, before
    clipping); **one factor for all arrays** (``clipped`` is ``c * grads``, one
    ``c > 0``: the direction kept; clipping each array to its own norm fails here);
    **clipped norm equals max_norm** (when the norm exceeds it; within ``1e-6``,
    so an ``eps`` of ``1e-6`` added to the norm passes); **small gradients
    unchanged** (when the norm is below ``max_norm``); **input untouched**;
    **zero gradient** (all zeros give zeros and a norm of 0, no NaN).

    Raises :class:`CheckFailed` naming the first failed property; reports a stub
    (``NotImplementedError``) as unfinished. Returns the properties checked.

    >>> from attncourse.optim import clip_by_global_norm, global_norm
    >>> check_clip_by_global_norm(clip_by_global_norm)[-1]
    'zero gradient'
    >>> from attncourse.params import flatten_params, unflatten_params
    >>> def no_min(grads, max_norm):  # max_norm / norm without min(1, ...)
    ...     norm = global_norm(grads)
    ...     flat = {k: g * (max_norm / norm) for k, g in flatten_params(grads).items()}
    ...     return unflatten_params(flat, grads), norm
    >>> check_clip_by_global_norm(no_min)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    attncourse.verify.failed.CheckFailed: small gradients unchanged: ...
    """
    from ..params import flatten_params

    grads = _clip_case(seed)
    flat = {p: np.asarray(a, np.float64) for p, a in flatten_params(grads).items()}
    norm = math.sqrt(_sum_of_squares(flat))
    results = {}
    for case, max_norm in (("large", norm / 4), ("small", 2 * norm)):
        results[case] = (max_norm,) + _clip_call(
            fn, "returns (grads, norm)", grads, max_norm
        )
    for max_norm, _, got, _ in results.values():
        if not math.isclose(got, norm, rel_tol=1e-9):
            raise CheckFailed(
                "the norm",
                f"with max_norm={max_norm:.4g} fn returned "
                f"norm {got:.6g}, the global norm is {norm:.6g}"
                + _norm_hint(got, flat, norm, max_norm),
                "norm = sqrt(sum of g**2 over every coordinate of every "
                "array), before clipping",
            )
    prop, fix = (
        "one factor for all arrays",
        (
            "compute one scale = min(1, max_norm / norm) from the global norm and "
            "multiply every array by it"
        ),
    )
    peak = max(float(np.max(np.abs(a))) for a in flat.values())
    for max_norm, out, _, _ in results.values():
        if not all(np.all(np.isfinite(a)) for a in out.values()):
            raise CheckFailed(
                prop, f"with max_norm={max_norm:.4g} clipped holds NaN or inf", fix
            )
        c = sum(float(np.sum(out[p] * flat[p])) for p in flat) / norm**2
        gap = max(float(np.max(np.abs(out[p] - c * flat[p]))) for p in flat)
        if c > 0 and gap <= 1e-9 * c * peak:
            continue
        if all(not np.any(a) for a in out.values()):
            detail = "clipped is all zeros: it has no direction"
        elif c <= 0 and gap <= 1e-9 * abs(c) * peak:
            detail = "clipped points against grads (a negative factor)"
        else:
            own = [math.sqrt(_sum_of_squares({p: out[p]})) for p in flat]
            kept = [
                min(math.sqrt(_sum_of_squares({p: a})), max_norm)
                for p, a in flat.items()
            ]
            detail = (
                "the arrays are scaled by different factors, not one multiple of grads"
            )
            if np.allclose(own, kept, rtol=1e-6):
                detail += ": each array was clipped to its own norm"
        raise CheckFailed(prop, f"with max_norm={max_norm:.4g}: {detail}", fix)
    max_norm, out, _, _ = results["large"]
    clipped = math.sqrt(_sum_of_squares(out))
    if not math.isclose(clipped, max_norm, rel_tol=1e-6):
        raise CheckFailed(
            "clipped norm equals max_norm",
            f"grads of norm {norm:.4g} "
            f"with max_norm={max_norm:.4g} come back with norm "
            f"{clipped:.4g}",
            "when norm > max_norm scale every array by max_norm / norm",
        )
    max_norm, out, _, _ = results["small"]
    if not all(np.allclose(out[p], flat[p], rtol=1e-12, atol=0) for p in flat):
        scale = math.sqrt(_sum_of_squares(out)) / norm
        raise CheckFailed(
            "small gradients unchanged",
            f"grads of norm {norm:.4g}, "
            f"below max_norm={max_norm:.4g}, come back scaled by "
            f"{scale:.4g}",
            "scale by min(1, max_norm / norm): 1 when the norm is below max_norm",
        )
    for max_norm, _, _, kept in results.values():
        if not kept:
            raise CheckFailed(
                "input untouched",
                f"with max_norm={max_norm:.4g} fn modified the grads it was given",
                "return new arrays "
                "(g * scale), not g *= scale or np.multiply(..., out=g)",
            )
    prop = "zero gradient"
    zeros = _nested_copy(grads)
    for a in flatten_params(zeros).values():
        a[...] = 0.0
    out, got, _ = _clip_call(fn, prop, zeros, 1.0)
    fix = (
        "a zero gradient has nothing to clip: use the scale 1 when norm is 0 "
        "(max_norm / 0 is inf, 0 / 0 is NaN)"
    )
    if got != 0.0:
        raise CheckFailed(prop, f"all-zero grads give norm {got!r}, not 0.0", fix)
    if not all(np.all(a == 0.0) for a in out.values()):
        bad = "NaN" if any(np.any(np.isnan(a)) for a in out.values()) else "nonzero"
        raise CheckFailed(prop, f"all-zero grads come back with {bad} entries", fix)
    return CLIP_BY_GLOBAL_NORM_PROPERTIES


# --- Chapter 8: top-p (nucleus) sampling ----------------------------------------------

TOP_P_PROPERTIES = (
    "returns probabilities",
    "input untouched",
    "most probable always kept",
    "smallest prefix reaching p",
    "renormalised",
    "in proportion to the softmax",
    "ties: the lowest token id",
)


def _top_p_result(fn, logits, p):
    """Call ``fn(logits, p)`` on a copy; check the shape and that the copy is kept."""
    given = logits.copy()
    P = _array(
        _call(fn, "returns probabilities", given, p),
        "returns probabilities",
        dtype=np.float64,
    )
    if P.shape != logits.shape:
        raise CheckFailed(
            "returns probabilities",
            f"for logits of shape {logits.shape} and p={p} it returned shape {P.shape}",
            "return one probability per token, along the last axis",
        )
    if not np.array_equal(given, logits):
        raise CheckFailed(
            "input untouched",
            f"fn changed the logits it was given (p={p})",
            "work on a copy (np.where, or logits.copy())",
        )
    return P


def _top_p_kept(fn, logits, p):
    """The learner's result for ``(logits, p)``, its first four properties checked."""
    P = _top_p_result(fn, logits, p)
    top = np.argmax(logits, axis=-1)
    at_top = np.take_along_axis(P, top[:, None], axis=-1)[:, 0]
    if not np.all(at_top > 0):  # NaN fails too: nothing kept, then 0 / 0
        row = int(np.argmax(~(at_top > 0)))
        nan = (
            " (the row holds NaN, as when nothing is kept and 0 is divided by 0)"
            if np.any(np.isnan(P[row]))
            else ""
        )
        raise CheckFailed(
            "most probable always kept",
            f"p={p}: row {row} gives its most probable token "
            f"{int(top[row])} probability {at_top[row]:.3g}{nan}",
            "keep the tokens ranked before the one whose running sum "
            "reaches p, and that one too: the first is always kept",
        )
    if not np.all(np.isfinite(P)):
        raise CheckFailed(
            "returns probabilities",
            f"p={p}: the result holds NaN or inf",
            "divide by the sum of the kept probabilities, > 0",
        )
    return P


def _describe_cut(kept, expected, softmax_row, p):
    """Say how the kept set differs from the smallest prefix reaching ``p``."""
    mass, want = float(softmax_row[kept].sum()), int(expected.sum())
    order = np.argsort(-softmax_row, kind="stable")
    prefix = np.zeros_like(kept)
    prefix[order[: kept.sum()]] = True
    if not np.array_equal(kept, prefix):
        return (
            f"keeps tokens {np.flatnonzero(kept).tolist()}, which are not the "
            f"{int(kept.sum())} most probable",
            "rank by probability, largest first (np.argsort(-p, kind='stable'))",
        )
    if kept.sum() < want:
        n = int(kept.sum())
        return (
            f"keeps {n} token{'s' * (n != 1)} whose probabilities sum to "
            f"{mass:.4f} < p: the token that crosses p was dropped, {want} are "
            f"needed",
            "keep the token whose running sum reaches p: n_keep = 1 + "
            "(number of running sums < p)",
        )
    return (
        f"keeps {int(kept.sum())} tokens, but the {want} most probable "
        f"already sum to >= p",
        "stop at the first running sum that reaches p (>= p)",
    )


@reports_unfinished
def check_top_p(fn):
    """Check a learner's ``fn(logits, p) -> P``: softmax, keep the nucleus, renormalise.

    ``logits`` is ``(rows, n_vocab)`` and ``0 < p <= 1``. ``P`` must have its shape: in
    each row, with the softmax probabilities ranked largest first (ties: the lowest
    token id first), the **smallest prefix whose sum reaches p** (``>= p``) is kept,
    so the most probable token is always kept; the kept probabilities are
    renormalised to sum to one, the other tokens are 0, and the logits are left
    unchanged. Compared with :func:`attncourse.sample.probabilities`
    ``(logits, top_p=p)`` within ``1e-12``; one case reaches ``p`` exactly (``0.4 +
    0.3 = 0.7``: two tokens kept) and one has a tie at the cut. Returns the names of
    the properties checked.

    >>> from attncourse.sample import probabilities
    >>> check_top_p(lambda logits, p: probabilities(logits, top_p=p))[-1]
    'ties: the lowest token id'
    >>> check_top_p(lambda logits, p: np.zeros_like(logits))
    Traceback (most recent call last):
    ...
    attncourse.verify.failed.CheckFailed: most probable always kept: p=0.001: row 0 \
gives its most probable token 4 probability 0 (likely fix: keep the tokens ranked \
before the one whose running sum reaches p, and that one too: the first is always kept)
    """
    from ..sample import probabilities

    logits = 2.0 * np.random.default_rng(9).normal(size=(3, 7))  # distinct values
    exact = np.log([[1.0, 2.0, 3.0, 4.0]])  # softmax: [0.1, 0.2, 0.3, 0.4]
    cases = [(logits, p) for p in (0.001, 0.3, 0.5, 0.8, 0.95, 1.0)] + [(exact, 0.7)]
    for z, p in cases:
        P = _top_p_kept(fn, z, p)
        expected = probabilities(z, top_p=p)
        soft = probabilities(z)
        for row in range(z.shape[0]):
            kept = P[row] != 0
            if not np.array_equal(kept, expected[row] > 0):
                detail, fix = _describe_cut(kept, expected[row] > 0, soft[row], p)
                raise CheckFailed(
                    "smallest prefix reaching p", f"p={p}: row {row} {detail}", fix
                )
        sums = P.sum(axis=-1)
        if not np.allclose(sums, 1.0, rtol=0, atol=1e-12):
            raise CheckFailed(
                "renormalised",
                f"p={p}: rows sum to {sums.round(6)}",
                "divide the kept probabilities by their sum",
            )
        if not np.allclose(P, expected, rtol=1e-12, atol=1e-12):
            raise CheckFailed(
                "in proportion to the softmax",
                f"p={p}: the kept probabilities differ by up to "
                f"{np.abs(P - expected).max():.2e}",
                "take the softmax of the logits, then zero the others and renormalise",
            )
    tied = np.log([[2.0, 1.0, 4.0, 2.0, 2.0]])  # softmax: [2, 1, 4, 2, 2] / 11
    P = _top_p_kept(fn, tied, 0.5)
    kept = np.flatnonzero(P[0]).tolist()
    if kept != [0, 2] or not np.allclose(
        P, probabilities(tied, top_p=0.5), rtol=1e-12, atol=1e-12
    ):
        raise CheckFailed(
            "ties: the lowest token id",
            f"probabilities [2, 1, 4, 2, 2] / 11 with p=0.5 keep tokens "
            f"{kept}, expected [0, 2]: 4/11, then the lowest id of the "
            f"tied 2/11s",
            "rank with a stable sort, np.argsort(-p, "
            "kind='stable'), not np.argsort(p)[::-1]",
        )
    return TOP_P_PROPERTIES


# --- Chapter 9: merging two softmax states; the tile loop -----------------------------

MERGE_STATES_PROPERTIES = (
    "returns (m, l, o)",
    "merged halves equal the whole",
    "rescales the old output",
    "order does not matter",
    "empty rows stay empty",
    "no overflow",
)


def _state_of(S, V):
    """The state ``(m, l, o)`` of rows with scores ``S (n, k)`` and values
    ``V (k, r)``."""
    m = S.max(axis=-1)
    P = np.exp(S - m[:, None])
    return m, P.sum(axis=-1), P @ V  # (n, k) x (k, r) -> (n, r)


def _merged(fn, property, a, b):
    try:
        result = fn(a, b)
    except NotImplementedError:
        raise
    except Exception as e:  # the learner's code may fail in any way: name the property
        shapes = ", ".join(str(tuple(np.shape(x) for x in s)) for s in (a, b))
        raise CheckFailed(
            property,
            f"calling it on states of shapes {shapes} raised {type(e).__name__}: {e}",
            "make the function run on these "
            "inputs (the traceback above shows where it failed)",
        ) from e
    if not (isinstance(result, (tuple, list)) and len(result) == 3):
        raise CheckFailed(
            "returns (m, l, o)",
            f"got {type(result).__name__}, not a triple",
            "return m, l, o",
        )
    m, l, o = (_array(x, "returns (m, l, o)", float) for x in result)
    shapes = (a[0].shape, a[1].shape, a[2].shape)
    if (m.shape, l.shape, o.shape) != shapes:
        raise CheckFailed(
            "returns (m, l, o)",
            f"shapes {m.shape}, {l.shape}, {o.shape}, "
            f"expected {shapes[0]}, {shapes[1]}, {shapes[2]}",
            "m and l have one entry per row, o one row per row",
        )
    return m, l, o


def _same_state(property, label, got, want, fix):
    for name, x, y in zip("mlo", got, want):
        if not np.allclose(x, y, rtol=1e-12, atol=1e-14):
            worst = np.max(np.abs(x - y)) if np.all(np.isfinite(x)) else np.nan
            raise CheckFailed(
                property,
                f"{label}: {name} differs from the state of the "
                f"whole row by up to {worst:.2e}",
                fix,
            )


@reports_unfinished
def check_merge_states(fn):
    """Check a learner's ``fn(a, b) -> (m, l, o)`` that merges two softmax states.

    A state ``(m, l, o)`` of ``n`` rows holds the running maximum ``m (n,)``, the
    normaliser ``l = sum_j exp(s_j - m) (n,)`` and the unnormalised output
    ``o = sum_j exp(s_j - m) v_j (n, r)``. The merge must give the state of the keys of
    both parts, rescaled to the larger maximum, in either order, keep rows that have
    seen no key (``m = -inf``, ``l = 0``) empty without NaN, and not overflow for scores
    near 1000. Returns the names of the properties checked.

    >>> from attncourse.tiled import merge_states
    >>> check_merge_states(merge_states)[1]
    'merged halves equal the whole'
    >>> check_merge_states(lambda a, b: a)
    Traceback (most recent call last):
    ...
    attncourse.verify.failed.CheckFailed: merged halves equal the whole: first 3 keys, \
last 4: l differs from the state of the whole row by up to 2.51e-01 (likely fix: \
rescale both parts to m = max(m_a, m_b): l = exp(m_a - m) l_a + exp(m_b - m) l_b, \
and o alike)
    """
    rng = np.random.default_rng(9)
    S, V = rng.normal(size=(4, 7)), rng.normal(size=(7, 3))  # 4 rows, 7 keys, r = 3
    S[:, :3] += 4.0  # first, the first part holds the maximum of every row
    fix = (
        "rescale both parts to m = max(m_a, m_b): l = exp(m_a - m) l_a + "
        "exp(m_b - m) l_b, and o alike"
    )
    whole, a, b = (
        _state_of(S, V),
        _state_of(S[:, :3], V[:3]),
        _state_of(S[:, 3:], V[3:]),
    )
    _same_state(
        "merged halves equal the whole",
        "first 3 keys, last 4",
        _merged(fn, "merged halves equal the whole", a, b),
        whole,
        fix,
    )
    S2 = S.copy()
    S2[:, 3:] += 8.0  # then the second part raises the maximum of every row
    whole, a, b = (
        _state_of(S2, V),
        _state_of(S2[:, :3], V[:3]),
        _state_of(S2[:, 3:], V[3:]),
    )
    _same_state(
        "rescales the old output",
        "the second part holds the larger maximum",
        _merged(fn, "rescales the old output", a, b),
        whole,
        "multiply the old o by exp(m_a - m) too, not only l",
    )
    ab = _merged(fn, "order does not matter", a, b)
    ba = _merged(fn, "order does not matter", b, a)
    _same_state(
        "order does not matter",
        "merge(b, a) against merge(a, b)",
        ba,
        ab,
        "treat both parts alike: no part is special",
    )
    empty = (np.full(4, -np.inf), np.zeros(4), np.zeros((4, 3)))
    with np.errstate(all="ignore"):
        both = _merged(fn, "empty rows stay empty", empty, empty)
        one = _merged(fn, "empty rows stay empty", empty, a)
    if not (
        np.all(both[0] == -np.inf) and np.all(both[1] == 0) and np.all(both[2] == 0)
    ):
        raise CheckFailed(
            "empty rows stay empty",
            f"two states that have seen no key merge to l = {both[1].tolist()}",
            "use the shift m = max(m_a, m_b) only where it is finite (else 0): "
            "-inf - (-inf) is NaN",
        )
    _same_state(
        "empty rows stay empty",
        "merge(empty, a)",
        one,
        a,
        "the empty state (m = -inf, l = 0, o = 0) must change nothing",
    )
    big, c = _state_of(S + 1000.0, V), _state_of(S[:, :3] + 1000.0, V[:3])
    with np.errstate(all="ignore"):
        merged = _merged(fn, "no overflow", c, _state_of(S[:, 3:] + 1000.0, V[3:]))
    if not all(np.all(np.isfinite(x)) for x in merged):
        raise CheckFailed(
            "no overflow",
            "scores near 1000 give a non-finite state",
            "never form exp(m): only exp(m_a - m) <= 1",
        )
    _same_state("no overflow", "scores near 1000", merged, big, fix)
    return MERGE_STATES_PROPERTIES


TILE_LOOP_PROPERTIES = (
    "shape",
    "one tile",
    "tiles that divide T",
    "tiles that do not divide T",
    "tiles of one key",
    "causal",
    "never stores T x T",
)


@reports_unfinished
def check_tile_loop(fn):
    """Check a learner's ``fn(Q, K, V, block) -> O``: causal attention of one head by
    tiles of ``block`` queries and ``block`` keys, ``Q (T, d)``, ``K (T, d)``,
    ``V (T, r)``.

    ``O`` must equal :func:`attncourse.causal_attention`'s output within ``1e-12`` for
    one tile, tiles that do and do not divide ``T``, and tiles of one key; outputs
    must not change when later keys change; and at ``T = 1024`` with ``block = 32`` the
    function must not allocate anything near a ``T x T`` array (``tracemalloc``).
    Returns the names of the properties checked.

    >>> from attncourse.tiled import tiled_attention_forward
    >>> tiled = lambda Q, K, V, block: tiled_attention_forward(
    ...     Q, K, V, causal=True, block_q=block, block_k=block, workers=1)[0]
    >>> check_tile_loop(tiled)[-1]
    'never stores T x T'
    """
    import tracemalloc

    from ..layers.attention import causal_attention

    rng = np.random.default_rng(10)
    T, d, r = 11, 3, 4
    Q, K, V = rng.normal(size=(T, d)), rng.normal(size=(T, d)), rng.normal(size=(T, r))
    want, _ = causal_attention(Q, K, V)
    for property, block in (
        ("one tile", 16),
        ("tiles that divide T", 11),
        ("tiles that do not divide T", 4),
        ("tiles that do not divide T", 3),
        ("tiles of one key", 1),
    ):
        O = _array(_call(fn, property, Q, K, V, block), property, float)
        if O.shape != (T, r):
            raise CheckFailed(
                "shape",
                f"block={block}: O has shape {O.shape}, expected {(T, r)}",
                "one output row per query, r columns",
            )
        if not np.allclose(O, want, rtol=1e-12, atol=1e-12):
            rows = np.flatnonzero(
                ~np.all(np.isclose(O, want, rtol=1e-12, atol=1e-12), axis=1)
            ).tolist()
            raise CheckFailed(
                property,
                f"block={block}: rows {rows} differ from causal attention",
                "visit every tile with j0 <= i1 - 1, mask "
                "keys j > i in the diagonal tiles, merge with rescaling, "
                "divide by l at the end; the last tile may be smaller",
            )
    K2, V2 = K.copy(), V.copy()
    K2[6:], V2[6:] = rng.normal(size=(T - 6, d)), 10 * rng.normal(size=(T - 6, r))
    O2 = _array(_call(fn, "causal", Q, K2, V2, 4), "causal", float)
    O = _array(_call(fn, "causal", Q, K, V, 4), "causal", float)
    if not np.allclose(O2[:6], O[:6], rtol=0, atol=1e-14):
        raise CheckFailed(
            "causal",
            "outputs 0..5 changed when keys 6.. changed",
            "query i reads keys j <= i only",
        )
    big = 1024
    Qb, Kb, Vb = (rng.normal(size=(big, w)) for w in (d, d, r))
    tracemalloc.start()
    try:
        _call(fn, "never stores T x T", Qb, Kb, Vb, 32)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    if peak >= big * big * 8 / 8:
        raise CheckFailed(
            "never stores T x T",
            f"T={big}, block=32: {peak / 2**20:.1f} "
            f"MiB allocated at the peak; one T x T array is "
            f"{big * big * 8 / 2**20:.0f} MiB",
            "form scores one tile (block x block) at a time",
        )
    return TILE_LOOP_PROPERTIES


__all__ += ["check_merge_states", "check_tile_loop"]


# --- Chapter 3: the whole head, backward ----------------------------------------------

HEAD_BACKWARD_PROPERTIES = (
    "returns the seven gradients",
    "dV",
    "dQ",
    "dK",
    "dW_Q",
    "dW_K",
    "dW_V",
    "dX",
)

_HEAD_GRADIENT_SHAPES = {
    "dQ": "T d",
    "dK": "T d",
    "dV": "T r",
    "dW_Q": "D d",
    "dW_K": "D d",
    "dW_V": "D r",
    "dX": "T D",
}


def _head_case(seed):
    """A head with unequal sizes (T, D, d, r) = (5, 7, 3, 4), mild scores and a dense
    G."""
    rng = np.random.default_rng(seed)
    T, D, d, r = 5, 7, 3, 4
    X = rng.standard_normal((T, D))
    W_Q, W_K = (rng.standard_normal((D, d)) / math.sqrt(D) for _ in range(2))
    W_V = rng.standard_normal((D, r)) / math.sqrt(D)
    return X, W_Q, W_K, W_V, rng.standard_normal((T, r))


def _head_reference(X, W_Q, W_K, W_V, G):
    """Every intermediate of the head's backward pass, and some tempting wrong
    versions."""
    from ..softmax import softmax_backward

    Q, K, V = X @ W_Q, X @ W_K, X @ W_V  # (T, D) x (D, d or r)
    A = softmax(attention_scores(Q, K))  # (T, T)
    s = math.sqrt(Q.shape[-1])
    dA = G @ V.T  # (T, r) x (r, T) -> (T, T)
    dS = softmax_backward(A, dA)
    g = {
        "Q": Q,
        "K": K,
        "V": V,
        "A": A,
        "G": G,
        "dS": dS,
        "dV": A.T @ G,
        "dQ": dS @ K / s,
        "dK": dS.T @ Q / s,
    }
    g["dW_Q"], g["dW_K"], g["dW_V"] = X.T @ g["dQ"], X.T @ g["dK"], X.T @ g["dV"]
    g["branches"] = {
        "query": g["dQ"] @ W_Q.T,
        "key": g["dK"] @ W_K.T,
        "value": g["dV"] @ W_V.T,
    }
    return g


def _head_fix(name, got, ref):
    """The likely fix for a wrong gradient ``name``, recognising the classic
    mistakes."""
    close = lambda a, b: a.shape == b.shape and np.allclose(a, b, rtol=1e-6, atol=1e-9)
    s = math.sqrt(ref["Q"].shape[-1])
    if name == "dV":
        if close(got, ref["A"] @ ref["G"]):  # (T, T) x (T, r): A without the transpose
            return ("transpose A: dV = A^T G, key j collects G from every query i that "
                    "read it")
        return "dV = A^T G: key j collects G from every query i that read it"
    if name in ("dQ", "dK"):
        if close(got, ref[name] * s):
            return f"divide by sqrt(d): {name} = " + (
                "dS K / sqrt(d)" if name == "dQ" else "dS^T Q / sqrt(d)"
            )
        if name == "dK" and close(got, ref["dS"] @ ref["Q"] / s):
            return "transpose dS: dK = dS^T Q / sqrt(d) (key j sums over the queries i)"
        return (
            "dS = A * (dA - rowsum(A * dA)) with dA = G V^T (both softmax paths), then "
            + ("dQ = dS K / sqrt(d)" if name == "dQ" else "dK = dS^T Q / sqrt(d)")
        )
    if name.startswith("dW_"):
        for other in ("dQ", "dK", "dV"):
            want = "d" + name[-1]
            if other != want and close(got, ref["dW_" + other[-1]]):
                return f"{name} = X^T {want}, not X^T {other}"
        return f"{name} = X^T d{name[-1]}"
    branches = ref["branches"]
    for label, branch in branches.items():
        if close(got, branch):
            return (
                f"dX keeps only the {label} branch: add all three, "
                "dX = dQ W_Q^T + dK W_K^T + dV W_V^T"
            )
    for label in branches:
        rest = sum(b for other, b in branches.items() if other != label)
        if close(got, rest):
            return f"dX misses the {label} branch: dX = dQ W_Q^T + dK W_K^T + dV W_V^T"
    return "dX = dQ W_Q^T + dK W_K^T + dV W_V^T, the three branches summed"


@reports_unfinished
def check_head_backward(fn, seed=0):
    """Check a learner's ``fn(X, W_Q, W_K, W_V, G) -> grads`` for one attention head.

    ``grads`` is a dict with the seven gradients ``dQ, dK, dV`` (``Q, K, V`` taken as
    independent inputs of ``O = softmax(Q K^T / sqrt(d)) V``), ``dW_Q, dW_K, dW_V`` and
    ``dX`` (through the projections) of ``J = sum(G * O)``. Each is compared with
    central differences of that ``J`` over every coordinate (steps and tolerance of
    :mod:`~attncourse.verify.gradients`), in the order of the backward pass, and the
    first that differs is named, with the likely fix. Sizes are unequal
    (``T=5, D=7, d=3, r=4``) and ``G`` is dense. Returns the names of the properties
    checked.

    >>> from attncourse.layers.head import head_backward, head_forward
    >>> from attncourse.layers.attention import attention_backward
    >>> def grads(X, W_Q, W_K, W_V, G):
    ...     params = {"W_Q": W_Q, "W_K": W_K, "W_V": W_V}
    ...     O, saved = head_forward(params, X)
    ...     dparams, dX = head_backward(params, saved, G)
    ...     dQ, dK, dV = attention_backward(saved["Q"], saved["K"], saved["V"], G)
    ...     return {"dQ": dQ, "dK": dK, "dV": dV, "dX": dX,
    ...             **{"d" + name: g for name, g in dparams.items()}}
    >>> check_head_backward(grads)[-1]
    'dX'
    """
    from ..layers.attention import attention_forward
    from .gradients import gradcheck

    X, W_Q, W_K, W_V, G = _head_case(seed)
    ref = _head_reference(X, W_Q, W_K, W_V, G)
    prop = "returns the seven gradients"
    grads = _call(fn, prop, X.copy(), W_Q.copy(), W_K.copy(), W_V.copy(), G.copy())
    if not isinstance(grads, dict) or set(grads) != set(_HEAD_GRADIENT_SHAPES):
        got = sorted(grads) if isinstance(grads, dict) else type(grads).__name__
        raise CheckFailed(
            prop,
            f"expected a dict with keys {sorted(_HEAD_GRADIENT_SHAPES)}, got {got}",
            "return {'dQ': dQ, 'dK': dK, ..., 'dX': dX}",
        )
    grads = {name: _array(g, prop, dtype=np.float64) for name, g in grads.items()}
    sizes = dict(zip("TDdr", (X.shape[0], X.shape[1], W_Q.shape[1], W_V.shape[1])))
    for name, letters in _HEAD_GRADIENT_SHAPES.items():
        want = tuple(sizes[c] for c in letters.split())
        if grads[name].shape != want:
            raise CheckFailed(
                prop,
                f"{name} has shape {grads[name].shape}, expected {want} "
                f"({letters.replace(' ', ' x ')}, the shape of "
                f"{name[1:]})",
                f"{name} has the shape of {name[1:]}",
            )

    def J_qkv(Q, K, V):
        return float(np.sum(G * attention_forward(Q, K, V)[0]))

    def J_head(X, W_Q, W_K, W_V):
        Q, K, V = X @ W_Q, X @ W_K, X @ W_V  # (T, D) x (D, d or r)
        return J_qkv(Q, K, V)

    qkv = {"Q": ref["Q"], "K": ref["K"], "V": ref["V"]}
    head = {"X": X, "W_Q": W_Q, "W_K": W_K, "W_V": W_V}
    order = [
        ("dV", J_qkv, qkv),
        ("dQ", J_qkv, qkv),
        ("dK", J_qkv, qkv),
        ("dW_Q", J_head, head),
        ("dW_K", J_head, head),
        ("dW_V", J_head, head),
        ("dX", J_head, head),
    ]
    for name, J, inputs in order:
        report = gradcheck(J, inputs, {name[1:]: grads[name]})
        if not report.passed:
            raise CheckFailed(
                name,
                f"{name} differs from central differences of "
                f"J = sum(G * O) by up to {report.worst:.1e} (tolerance "
                f"{TOLERANCE:.0e})",
                _head_fix(name, grads[name], ref),
            )
    return HEAD_BACKWARD_PROPERTIES


# --- Chapter 4: splitting into heads and merging them back ----------------------------

SPLIT_MERGE_PROPERTIES = (
    "split: shape",
    "split: head h takes columns h w .. (h+1) w - 1",
    "merge: shape",
    "merge: head h fills columns h w .. (h+1) w - 1",
)


def _split_by_slices(Y, H):
    """The definition: head h of position t is ``Y[..., t, h w : (h+1) w]``."""
    w = Y.shape[-1] // H
    return np.stack([Y[..., h * w : (h + 1) * w] for h in range(H)], axis=-3)


@reports_unfinished
def check_split_merge(split_fn, merge_fn):
    """Check a learner's ``split_fn(Y, heads)`` and ``merge_fn(O)`` for multi-head
    attention.

    ``split_fn`` turns ``Y (..., T, H w)`` into ``(..., H, T, w)``, head ``h`` taking
    columns ``h w .. (h+1) w - 1`` of every position; ``merge_fn`` is its inverse,
    ``(..., H, T, w) -> (..., T, H w)``. Each is the other's backward pass. Both are
    tried with a batch axis and without one, on unequal sizes (``B=2, T=5, H=3, w=4``),
    and compared with the definition by explicit column slices. Returns the names of the
    properties checked.

    >>> from attncourse.layers.multihead import merge_heads, split_heads
    >>> check_split_merge(split_heads, merge_heads)[0]
    'split: shape'
    """
    rng = np.random.default_rng(4)
    B, T, H, w = 2, 5, 3, 4
    fix_axes = (
        "reshape to (..., T, H, w) first, then swap the axes T and H "
        "(np.swapaxes(x, -3, -2)); one reshape straight to (..., H, T, w) cuts "
        "across positions"
    )
    for Y in (rng.standard_normal((B, T, H * w)), rng.standard_normal((T, H * w))):
        want = _split_by_slices(Y, H)
        got = _array(
            _call(split_fn, "split: shape", Y.copy(), H), "split: shape", float
        )
        if got.shape != want.shape:
            raise CheckFailed(
                "split: shape",
                f"Y {Y.shape} with {H} heads gave {got.shape}, expected {want.shape}",
                fix_axes,
            )
        if not np.array_equal(got, want):
            prop = "split: head h takes columns h w .. (h+1) w - 1"
            if np.array_equal(got, want[..., ::-1, :, :]):
                fix = "head 0 takes the first w columns: keep the heads in order"
            elif np.array_equal(got, Y.reshape(want.shape)):
                fix = fix_axes
            else:
                fix = "head h of position t is Y[..., t, h*w:(h+1)*w]"
            bad = np.argwhere(~np.all(np.isclose(got, want), axis=(-2, -1)))[0][-1]
            raise CheckFailed(
                prop,
                f"Y {Y.shape}: head {int(bad)} differs from "
                f"columns {bad * w}..{(bad + 1) * w - 1}",
                fix,
            )
    for O in (rng.standard_normal((B, H, T, w)), rng.standard_normal((H, T, w))):
        want = np.concatenate([O[..., h, :, :] for h in range(H)], axis=-1)
        got = _array(_call(merge_fn, "merge: shape", O.copy()), "merge: shape", float)
        if got.shape != want.shape:
            raise CheckFailed(
                "merge: shape",
                f"O {O.shape} gave {got.shape}, expected {want.shape}",
                "swap the axes H and T back, then reshape to (..., T, H w)",
            )
        if not np.array_equal(got, want):
            if np.array_equal(got, O.reshape(want.shape)):
                fix = (
                    "swap the axes H and T back first (np.swapaxes(O, -3, -2)), then "
                    "reshape; a reshape alone mixes positions"
                )
            else:
                fix = "head h of position t goes to columns h*w:(h+1)*w of row t"
            raise CheckFailed(
                "merge: head h fills columns h w .. (h+1) w - 1",
                f"O {O.shape}: the merged columns are not the heads in order",
                fix,
            )
    return SPLIT_MERGE_PROPERTIES


# --- Chapter 4: the backward pass of learned positions --------------------------------

POSITIONS_BACKWARD_PROPERTIES = (
    "returns (dP, dX)",
    "shapes",
    "rows 0..T-1: summed over the batch",
    "rows T..T_max-1: zero",
    "dX = dY",
    "any number of batch axes",
)


def _positions_result(fn, prop, dY, T_max):
    result = _call(fn, prop, dY.copy(), T_max)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise CheckFailed(
            "returns (dP, dX)",
            f"got {type(result).__name__}, not a pair",
            "return dP, dX",
        )
    dP, dX = (_array(x, prop, float) for x in result)
    if dP.shape != (T_max, dY.shape[-1]) or dX.shape != dY.shape:
        raise CheckFailed(
            "shapes",
            f"dY {dY.shape}, T_max={T_max}: dP {dP.shape} and dX "
            f"{dX.shape}, expected {(T_max, dY.shape[-1])} and {dY.shape}",
            "dP has the shape of P (T_max, D); dX the shape of dY",
        )
    return dP, dX


@reports_unfinished
def check_positions_backward(fn):
    """Check a learner's ``fn(dY, T_max) -> (dP, dX)`` for ``Y = X + P[:T]``.

    ``dY`` has shape ``(..., T, D)`` with ``T <= T_max``. Row ``t < T`` of ``dP`` is the
    upstream gradient at position ``t`` **summed** over every batch axis, rows
    ``t >= T`` are exactly zero, and ``dX = dY``. Tried on ``(B, T, D) = (3, 4, 5)``
    with ``T_max = 7``, then without a batch axis and with two. Returns the names of the
    properties checked.

    >>> from attncourse.layers.positions import positions_backward, positions_forward
    >>> import numpy as np
    >>> def learner(dY, T_max):
    ...     params = {"P": np.zeros((T_max, dY.shape[-1]))}
    ...     _, saved = positions_forward(params, np.zeros_like(dY))
    ...     dparams, dX = positions_backward(params, saved, dY)
    ...     return dparams["P"], dX
    >>> check_positions_backward(learner)[-1]
    'any number of batch axes'
    """
    rng = np.random.default_rng(7)
    B, T, D, T_max = 3, 4, 5, 7
    dY = rng.standard_normal((B, T, D))
    dP, dX = _positions_result(fn, "returns (dP, dX)", dY, T_max)
    prop = "rows 0..T-1: summed over the batch"
    want = dY.sum(axis=0)
    if not np.allclose(dP[:T], want, rtol=1e-12, atol=1e-12):
        close = lambda a: np.allclose(dP[:T], a, rtol=1e-12, atol=1e-12)
        if close(dY[-1]) or close(dY[0]):
            fix = (
                "each sequence overwrote dP: add every sequence's gradient, "
                "dP[:T] = dY.sum(axis=0)"
            )
        elif close(dY.mean(axis=0)):
            fix = "sum over the batch, do not average: row t is used by every sequence"
        else:
            fix = "dP[t] = sum over the batch of dY[b, t]"
        raise CheckFailed(
            prop,
            f"rows 0..{T - 1} of dP differ from dY summed over the "
            f"batch by up to {np.max(np.abs(dP[:T] - want)):.2e}",
            fix,
        )
    if np.any(dP[T:] != 0):
        raise CheckFailed(
            "rows T..T_max-1: zero",
            f"rows {T}..{T_max - 1} took no part "
            f"(T={T}) but hold {np.abs(dP[T:]).max():.2e}",
            "start from dP = np.zeros((T_max, D)) and fill rows 0..T-1 only",
        )
    if not np.array_equal(dX, dY):
        raise CheckFailed(
            "dX = dY",
            "dX differs from dY",
            "Y = X + P[:T]: the gradient passes to X unchanged, dX = dY",
        )
    prop = "any number of batch axes"
    for shape in ((T, D), (2, 3, T, D)):
        dY2 = rng.standard_normal(shape)
        dP2, _ = _positions_result(fn, prop, dY2, T_max)
        want2 = dY2.reshape(-1, T, D).sum(axis=0)
        if not np.allclose(dP2[:T], want2, rtol=1e-12, atol=1e-12) or np.any(
            dP2[T:] != 0
        ):
            raise CheckFailed(
                prop,
                f"dY of shape {shape}: dP[:T] is not dY summed over its leading axes",
                "sum over every axis but the last two: "
                "dY.reshape(-1, T, D).sum(axis=0)",
            )
    return POSITIONS_BACKWARD_PROPERTIES


__all__ += ["check_head_backward", "check_split_merge", "check_positions_backward"]


# --- Chapter 10: the query offset; the memory of the key/value cache -----------------

QUERY_OFFSET_PROPERTIES = (
    "causality with offset",
    "offset alignment",
    "equality with recompute",
    "bad offsets raise ValueError",
)


def _offset_probabilities(Q, K, shift):
    """Softmax of the scores with query ``i`` reading keys ``0 .. shift + i``."""
    T_q, T_k = Q.shape[-2], K.shape[-2]
    visible = np.arange(T_k)[None, :] <= shift + np.arange(T_q)[:, None]  # (T_q, T_k)
    return softmax(attention_scores(Q, K), visible)


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
    out, P = _split(_call(fn, prop, query, key, value, query_offset=offset), prop)
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
    query_offset + i``. Properties, in order: **causality with offset** (no weight on a
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
    from ..layers.attention import causal_attention

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
                "hide the keys j > query_offset + i (set their scores to -inf before "
                "the softmax); a mask one key too wide, or placed by T_k - T_q "
                "instead of query_offset, leaks",
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


CACHE_MEMORY_PROPERTIES = (
    "a whole number of bytes",
    "proportional to t",
    "keys and values both counted",
    "every block counted",
    "every head counted",
    "a head is D / H wide",
    "bytes per number",
    "equals the nbytes of a real cache",
)


def _real_caches():
    """``(L, H, D, bytes_per_number, t, nbytes per sequence)`` of caches that prefill
    built for two small models, in float64 and float32, from a batch of two."""
    from ..kvcache import cache_nbytes, prefill
    from ..model import init_model
    from ..train import as_dtype

    found = []
    for L, H, D, T_max in ((3, 4, 8, 6), (2, 2, 6, 5)):
        config = ModelConfig(n_vocab=5, T_max=T_max, D=D, heads=H, layers=L, ratio=1)
        for dtype in (np.float64, np.float32):
            params = as_dtype(init_model(config), dtype)
            for t in (1, 4, T_max):
                _, cache = prefill(params, np.zeros((2, t), dtype=int), config=config)
                found.append(
                    (L, H, D, np.dtype(dtype).itemsize, t, cache_nbytes(cache) // 2)
                )
    return found


def _memory_call(fn, L, H, D, t, b):
    got = _call(fn, "a whole number of bytes", L, H, D, t, b)
    whole = (
        isinstance(got, (int, float, np.integer, np.floating))
        and not isinstance(got, (bool, np.bool_))
        and math.isfinite(got)
        and got == int(got)
    )
    if not whole:
        raise CheckFailed(
            "a whole number of bytes",
            f"fn(L={L}, H={H}, D={D}, t={t}, bytes_per_number={b}) returned {got!r}",
            "return an integer: the bytes of one sequence's cache",
        )
    return int(got)


@reports_unfinished
def check_cache_memory(fn):
    """Check a learner's ``fn(L, H, D, t, bytes_per_number) -> int``: the bytes that
    the key/value cache of one sequence holds after ``t`` positions, for a model of
    ``L`` blocks of ``H`` heads and width ``D`` (each head ``d = D / H`` wide), each
    number taking ``bytes_per_number`` bytes (8 for float64, 4 for float32).

    The answer is compared with the ``nbytes`` of real caches that
    :func:`attncourse.kvcache.prefill` built (two models, ``L = 3, H = 4, D = 8`` and
    ``L = 2, H = 2, D = 6``; float64 and float32; ``t = 1``, 4 and the window), per
    sequence of a batch of two. The result must be **a whole number of bytes**. A
    wrong one is named by what it misses: **proportional to t** (doubling ``t``
    doubles the bytes), **keys and values both counted** (half the bytes), **every
    block counted** (``1/L``), **every head counted** (``1/H``: ``d`` where ``D``
    belongs), **a head is D / H wide** (``H`` times too many: every head counted ``D``
    wide), **bytes per number** (numbers, not bytes); otherwise **equals the nbytes of
    a real cache**. Returns the properties checked.

    >>> check_cache_memory(lambda L, H, D, t, b: 2 * L * t * D * b)[-1]
    'equals the nbytes of a real cache'
    """
    for L, H, D, b, t, want in _real_caches():
        got = _memory_call(fn, L, H, D, t, b)
        if got == want:
            continue
        where = (
            f"L={L} blocks, H={H} heads, D={D}, t={t}, {b} bytes per number: "
            f"fn gave {got}, the cache holds {want} bytes per sequence"
        )
        misses = [
            (
                "keys and values both counted",
                2,
                "the cache keeps a key and a value per position: count both",
            ),
            (
                "every block counted",
                L,
                "every block keeps its own keys and values: multiply by L",
            ),
            (
                "every head counted",
                H,
                "the H heads together are D = H d wide: use D, not the head width d",
            ),
            (
                "a head is D / H wide",
                1 / H,
                "each head keeps d = D / H numbers "
                "per key: the H heads together are D wide, not H D",
            ),
            (
                "bytes per number",
                b,
                "multiply the number of numbers by bytes_per_number",
            ),
        ]
        later = _memory_call(fn, L, H, D, 2 * t, b)
        if later != 2 * got:
            raise CheckFailed(
                "proportional to t",
                f"{where}; doubling t to {2 * t} gives {later}, not {2 * got}",
                "every position adds the same bytes: one key and one "
                "value of width D per block",
            )
        for prop, factor, fix in misses:
            if got * factor == want:
                many = (
                    f"{factor} times too few"
                    if factor > 1
                    else f"{round(1 / factor)} times too many"
                )
                raise CheckFailed(prop, f"{where} ({many})", fix)
        raise CheckFailed(
            "equals the nbytes of a real cache",
            where,
            "2 L t D numbers (keys and values, every block, every head) "
            "of bytes_per_number bytes each",
        )
    return CACHE_MEMORY_PROPERTIES


__all__ += ["check_query_offset", "check_cache_memory"]
