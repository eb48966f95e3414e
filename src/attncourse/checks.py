"""Checks that raise ``AssertionError`` naming the property that failed.

Forward checks of attention weights and outputs, the transpose check, the zero row sums
of ``dS``, and :func:`check_causal_attention`, the checker a learner calls on their own
``causal_attention``. Every check here is fault-controlled in ``tests/test_checks.py``:
each is shown to reject the planted mistakes it exists to catch.

>>> import numpy as np
>>> check_rows_sum_to_one(np.array([[0.75, 0.25], [0.25, 0.75]]))
>>> check_rows_sum_to_one(np.array([[0.75, 0.25], [0.75, 0.75]]))
Traceback (most recent call last):
...
AssertionError: rows summing to one: row (1,) of A sums to 1.5
"""

import math

import numpy as np

from ._validate import as_float_array
from .attention import attention_scores, causal_mask
from .examples import transpose_pair
from .softmax import softmax

__all__ = [
    "check_rows_sum_to_one",
    "check_convex_hull",
    "check_rows_sum_to_zero",
    "check_transpose",
    "check_causal_attention",
]

EPS = np.finfo(np.float64).eps


def _as_array(name, x, min_ndim=1):
    x = as_float_array(name, x)
    if x.ndim < min_ndim:
        raise ValueError(f"{name} must be at least {min_ndim}-D, got shape {x.shape}")
    return x


def check_rows_sum_to_one(A, atol=None):
    """Raise ``AssertionError`` unless every row of ``A`` is finite, non-negative and sums to one.

    Rows run along the last axis. The default tolerance is ``4 n eps`` for rows of length ``n``.

    >>> import numpy as np
    >>> check_rows_sum_to_one(np.array([[1.2, -0.2]]))
    Traceback (most recent call last):
    ...
    AssertionError: rows summing to one: A holds a negative weight -0.2 at (0, 1)
    """
    A = _as_array("A", A)
    n = A.shape[-1]
    atol = 4 * max(n, 1) * EPS if atol is None else atol
    if not np.all(np.isfinite(A)):
        idx = tuple(int(i) for i in np.argwhere(~np.isfinite(A))[0])
        raise AssertionError(f"rows summing to one: A holds a non-finite weight {A[idx]} at {idx}")
    if np.any(A < 0):
        idx = tuple(int(i) for i in np.argwhere(A < 0)[0])
        raise AssertionError(f"rows summing to one: A holds a negative weight {A[idx]:.3g} at {idx}")
    error = np.abs(A.sum(axis=-1) - 1.0)
    if error.size and error.max() > atol:
        idx = tuple(int(i) for i in np.unravel_index(np.argmax(error), error.shape))
        raise AssertionError(f"rows summing to one: row {idx} of A sums to {A.sum(axis=-1)[idx]:.6g}")


def check_convex_hull(O, V, atol=None):
    """Raise ``AssertionError`` unless each column of ``O`` lies within the range of that column of ``V``.

    Every row of ``O = A V`` is a convex combination of the rows of ``V`` when the rows of
    ``A`` are non-negative and sum to one, so ``min_j V_jl <= O_il <= max_j V_jl``.

    >>> import numpy as np
    >>> V = np.array([[2.0, 0.0], [0.0, 4.0]])
    >>> check_convex_hull(np.array([[1.5, 1.0], [0.5, 3.0]]), V)
    >>> check_convex_hull(np.array([[1.5, 1.0], [0.5, 5.0]]), V)
    Traceback (most recent call last):
    ...
    AssertionError: convex-hull bound: O[1, 1] = 5 lies outside [0, 4], the range of column 1 of V
    """
    O = _as_array("O", O, 2)
    V = _as_array("V", V, 2)
    if O.shape[-1] != V.shape[-1]:
        raise ValueError(f"O and V must have the same width r, got O {O.shape} and V {V.shape}")
    lo = V.min(axis=-2, keepdims=True)  # (..., 1, r)
    hi = V.max(axis=-2, keepdims=True)
    scale = max(float(np.max(np.abs(V), initial=0.0)), 1.0)
    atol = 4 * V.shape[-2] * EPS * scale if atol is None else atol
    outside = (O < lo - atol) | (O > hi + atol)
    if np.any(outside):
        idx = tuple(int(i) for i in np.argwhere(outside)[0])
        col = idx[-1]
        batch = idx[:-2]
        lo_c, hi_c = np.broadcast_to(lo, O.shape)[idx], np.broadcast_to(hi, O.shape)[idx]
        where = ", ".join(str(i) for i in idx)
        of_batch = f" (batch {batch})" if batch else ""
        raise AssertionError(
            f"convex-hull bound: O[{where}] = {O[idx]:.6g} lies outside [{lo_c:.6g}, {hi_c:.6g}], "
            f"the range of column {col} of V{of_batch}"
        )


def check_rows_sum_to_zero(dS, atol=None):
    """Raise ``AssertionError`` unless every row of ``dS`` sums to zero.

    The softmax ignores a shift of a whole row of scores, so the gradient of any objective
    with respect to that row sums to zero. The default tolerance is
    ``64 n eps max(1, max|dS|)`` for rows of length ``n``.

    >>> import numpy as np
    >>> check_rows_sum_to_zero(np.array([[0.375, -0.375]]))
    >>> check_rows_sum_to_zero(np.array([[1.5, 0.0]]))
    Traceback (most recent call last):
    ...
    AssertionError: rows of dS summing to zero: row (0,) sums to 1.5
    """
    dS = _as_array("dS", dS)
    n = dS.shape[-1]
    scale = max(float(np.max(np.abs(dS), initial=0.0)), 1.0)
    atol = 64 * max(n, 1) * EPS * scale if atol is None else atol
    sums = dS.sum(axis=-1)
    if not np.all(np.isfinite(sums)):
        raise AssertionError("rows of dS summing to zero: dS holds NaN or infinity")
    if sums.size and np.abs(sums).max() > atol:
        idx = tuple(int(i) for i in np.unravel_index(np.argmax(np.abs(sums)), sums.shape))
        raise AssertionError(f"rows of dS summing to zero: row {idx} sums to {sums[idx]:.6g}")


def check_transpose(scores):
    """Raise ``AssertionError`` unless ``scores(Q, K)`` is ``Q K^T / sqrt(d)`` on the asymmetric pair.

    ``Q`` has rows ``[1,2],[0,1]`` and ``K`` rows ``[1,0],[2,1]``, so ``Q K^T = [[1,4],[0,1]]``
    while the missing-transpose product ``Q K`` is ``[[5,2],[2,1]]``.

    >>> from attncourse.attention import attention_scores
    >>> check_transpose(attention_scores)
    """
    Q, K = transpose_pair()
    expected = np.array([[1.0, 4.0], [0.0, 1.0]]) / math.sqrt(2.0)
    got = np.asarray(scores(Q, K), dtype=np.float64)
    if got.shape != expected.shape or not np.allclose(got, expected, rtol=1e-12, atol=1e-12):
        hint = ""
        if got.shape == expected.shape and np.allclose(got, (Q @ K) / math.sqrt(2.0), rtol=1e-12, atol=1e-12):
            hint = "; this is Q K / sqrt(d): the transpose of K is missing"
        raise AssertionError(
            f"transpose: scores(Q, K) * sqrt(2) gave {np.round(got * math.sqrt(2.0), 6).tolist()} "
            f"for the asymmetric pair, expected Q K^T = [[1.0, 4.0], [0.0, 1.0]]{hint}"
        )


# --- the checker of the causal_attention exercise -------------------------------------------

def _call(fn, stage, *args, **kwargs):
    """Call the learner's ``fn``; turn any failure except NotImplementedError into a named AssertionError."""
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise
    except Exception as e:  # the learner's code may fail in any way; report which property it was testing
        shapes = ", ".join(str(np.shape(a)) for a in args)
        raise AssertionError(f"{stage}: calling it on inputs of shapes {shapes} raised {type(e).__name__}: {e}") from e


def _split(result, stage):
    if not (isinstance(result, tuple) and len(result) == 2):
        raise AssertionError(f"{stage}: must return a pair (output, probabilities), got {type(result).__name__}")
    return np.asarray(result[0]), np.asarray(result[1])


def _reference_probabilities(query, key, scale=True):
    S = attention_scores(query, key)  # (..., T, T), already divided by sqrt(d)
    if not scale:
        S = S * math.sqrt(query.shape[-1])
    return softmax(S, causal_mask(query.shape[-2], key.shape[-2]))


def check_causal_attention(fn, seed=0):
    """Check a learner's ``causal_attention(query, key, value, query_offset=0, dropout=None)``.

    Properties, in order: **shape** (a pair ``(output, probabilities)`` of shapes
    ``(..., T, r)`` and ``(..., T, T)``, also with a batch dimension); **rows summing to
    one**; **causality** (weight exactly 0 on later keys, and earlier outputs unchanged
    when later keys and values change); **scaling** (probabilities equal the softmax of
    ``query key^T / sqrt(d)`` over the visible keys; output equals ``probabilities @ value``);
    **dropout contract** (``dropout`` is called once on the probabilities, the output uses
    the dropped weights, the returned probabilities are the undropped ones); **offset**
    (``query_offset != 0`` raises ``NotImplementedError`` until Chapter 10).

    Raises ``AssertionError`` whose message starts with the name of the first failed
    property; re-raises ``NotImplementedError`` if the function is still a stub. Returns
    the list of properties checked.

    >>> from attncourse.attention import causal_attention
    >>> check_causal_attention(causal_attention)
    ['shape', 'rows summing to one', 'causality', 'scaling', 'dropout contract', 'offset']
    """
    rng = np.random.default_rng(seed)
    T, d, r, B = 5, 3, 4, 2  # unequal sizes, so a swapped or transposed result has the wrong shape
    query, key = rng.standard_normal((T, d)), rng.standard_normal((T, d))
    value = rng.standard_normal((T, r))
    bq, bk, bv = rng.standard_normal((B, T, d)), rng.standard_normal((B, T, d)), rng.standard_normal((B, T, r))

    # shape
    output, probabilities = _split(_call(fn, "shape", query, key, value), "shape")
    if output.shape != (T, r) or probabilities.shape != (T, T):
        raise AssertionError(
            f"shape: for query {query.shape}, key {key.shape}, value {value.shape} expected output "
            f"{(T, r)} and probabilities {(T, T)}, got {output.shape} and {probabilities.shape}"
        )
    b_out, b_prob = _split(_call(fn, "shape", bq, bk, bv), "shape")
    if b_out.shape != (B, T, r) or b_prob.shape != (B, T, T):
        raise AssertionError(
            f"shape: with a batch dimension, query {bq.shape}, key {bk.shape}, value {bv.shape}, expected "
            f"output {(B, T, r)} and probabilities {(B, T, T)}, got {b_out.shape} and {b_prob.shape}"
        )

    # rows summing to one
    for P in (probabilities, b_prob):
        check_rows_sum_to_one(P, atol=1e-12)

    # causality
    future = ~causal_mask(T, T)  # True where key j is later than query i
    for P in (probabilities, b_prob):
        leaked = future & (P != 0)
        if np.any(leaked):
            idx = tuple(int(i) for i in np.argwhere(leaked)[0])
            raise AssertionError(
                f"causality: query {idx[-2]} gives weight {P[idx]:.3g} to the later key {idx[-1]}; "
                "future keys must get weight exactly 0"
            )
    t = 2  # change every key and value after position t
    key2, value2 = key.copy(), value.copy()
    key2[t + 1:] = rng.standard_normal(key2[t + 1:].shape)
    value2[t + 1:] = rng.standard_normal(value2[t + 1:].shape)
    output2, _ = _split(_call(fn, "causality", query, key2, value2), "causality")
    if not np.allclose(output2[: t + 1], output[: t + 1], rtol=1e-12, atol=1e-12):
        raise AssertionError(
            f"causality: outputs at positions 0..{t} changed when only keys and values after position {t} changed"
        )

    # scaling (and the scores themselves)
    for (q, k, v), out, P in (((query, key, value), output, probabilities), ((bq, bk, bv), b_out, b_prob)):
        expected = _reference_probabilities(q, k)
        if not np.allclose(P, expected, rtol=1e-10, atol=1e-12):
            if np.allclose(P, _reference_probabilities(q, k, scale=False), rtol=1e-10, atol=1e-12):
                raise AssertionError("scaling: the probabilities are the softmax of query key^T without the 1/sqrt(d) factor")
            raise AssertionError(
                "scaling: the probabilities differ from the softmax of query key^T / sqrt(d) over the visible keys "
                f"(max difference {np.max(np.abs(P - expected)):.3g})"
            )
        if not np.allclose(out, expected @ v, rtol=1e-10, atol=1e-12):  # (..., T, T) x (..., T, r) -> (..., T, r)
            raise AssertionError("scaling: without dropout the output must equal probabilities @ value")

    # dropout contract
    keep = 0.75
    mask = rng.random((T, T)) < keep
    calls = []

    def dropout(P):
        calls.append(np.array(P, copy=True))
        return np.where(mask, P / keep, 0.0)

    d_out, d_prob = _split(_call(fn, "dropout contract", query, key, value, dropout=dropout), "dropout contract")
    expected = _reference_probabilities(query, key)
    if len(calls) != 1:
        raise AssertionError(f"dropout contract: dropout must be called exactly once, it was called {len(calls)} times")
    if not np.allclose(calls[0], expected, rtol=1e-10, atol=1e-12):
        raise AssertionError("dropout contract: dropout must be applied to the (masked, scaled) probabilities")
    if not np.allclose(d_prob, expected, rtol=1e-10, atol=1e-12):
        raise AssertionError("dropout contract: the returned probabilities must be the undropped ones")
    if not np.allclose(d_out, dropout(expected) @ value, rtol=1e-10, atol=1e-12):  # (T, T) x (T, r) -> (T, r)
        raise AssertionError("dropout contract: the output must be dropout(probabilities) @ value")

    # offset
    try:
        fn(query, key, value, query_offset=1)
    except NotImplementedError:
        pass
    except Exception as e:  # any other exception is the wrong contract
        raise AssertionError(
            f"offset: query_offset=1 must raise NotImplementedError (Chapter 10 adds the cache), "
            f"it raised {type(e).__name__}: {e}"
        ) from e
    else:
        raise AssertionError(
            "offset: query_offset=1 must raise NotImplementedError (Chapter 10 adds the cache), it returned a result"
        )
    return ["shape", "rows summing to one", "causality", "scaling", "dropout contract", "offset"]
