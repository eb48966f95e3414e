"""Property checks of attention arrays that raise :class:`CheckFailed` naming the
property that failed.

Forward checks of attention weights and outputs, the transpose check and the zero row
sums of ``dS``. Every check here is fault-controlled in ``tests/test_faults.py``: each
is shown to reject the planted mistakes it exists to catch.

>>> import numpy as np
>>> assert_rows_sum_to_one(np.array([[0.75, 0.25], [0.25, 0.75]]))
>>> assert_rows_sum_to_one(np.array([[0.75, 0.25], [0.75, 0.75]]))
Traceback (most recent call last):
...
attncourse.kit.failed.CheckFailed: rows summing to one: row (1,) of A sums to 1.5
"""

import math

import numpy as np

from .._validate import as_float_array
from .examples import transpose_pair
from .failed import CheckFailed

__all__ = [
    "assert_rows_sum_to_one",
    "assert_convex_hull",
    "assert_rows_sum_to_zero",
    "assert_transposed_scores",
]

EPS = np.finfo(np.float64).eps


def _as_array(name, x, min_ndim=1):
    x = as_float_array(name, x)
    if x.ndim < min_ndim:
        raise ValueError(f"{name} must be at least {min_ndim}-D, got shape {x.shape}")
    return x


def assert_rows_sum_to_one(A, atol=None):
    """Raise :class:`CheckFailed` unless every row of ``A`` is finite, non-negative and
    sums to one.

    Rows run along the last axis. The default tolerance is ``4 n eps`` for rows of
    length ``n``.

    >>> import numpy as np
    >>> assert_rows_sum_to_one(np.array([[1.2, -0.2]]))
    Traceback (most recent call last):
    ...
    attncourse.kit.failed.CheckFailed: rows summing to one: A holds a negative
    weight -0.2 at (0, 1)
    """
    A = _as_array("A", A)
    n = A.shape[-1]
    atol = 4 * max(n, 1) * EPS if atol is None else atol
    if not np.all(np.isfinite(A)):
        idx = tuple(int(i) for i in np.argwhere(~np.isfinite(A))[0])
        raise CheckFailed(
            "rows summing to one", f"A holds a non-finite weight {A[idx]} at {idx}"
        )
    if np.any(A < 0):
        idx = tuple(int(i) for i in np.argwhere(A < 0)[0])
        raise CheckFailed(
            "rows summing to one", f"A holds a negative weight {A[idx]:.3g} at {idx}"
        )
    error = np.abs(A.sum(axis=-1) - 1.0)
    if error.size and error.max() > atol:
        idx = tuple(int(i) for i in np.unravel_index(np.argmax(error), error.shape))
        raise CheckFailed(
            "rows summing to one", f"row {idx} of A sums to {A.sum(axis=-1)[idx]:.6g}"
        )


def assert_convex_hull(O, V, atol=None):
    """Raise :class:`CheckFailed` unless each column of ``O`` lies within the range of
    that column of ``V``.

    Every row of ``O = A V`` is a convex combination of the rows of ``V`` when the rows
    of ``A`` are non-negative and sum to one, so ``min_j V_jl <= O_il <= max_j V_jl``.

    >>> import numpy as np
    >>> V = np.array([[2.0, 0.0], [0.0, 4.0]])
    >>> assert_convex_hull(np.array([[1.5, 1.0], [0.5, 3.0]]), V)
    >>> assert_convex_hull(np.array([[1.5, 1.0], [0.5, 5.0]]), V)
    Traceback (most recent call last):
    ...
    attncourse.kit.failed.CheckFailed: convex-hull bound: O[1, 1] = 5 lies outside
    [0, 4], the range of column 1 of V
    """
    O = _as_array("O", O, 2)
    V = _as_array("V", V, 2)
    if O.shape[-1] != V.shape[-1]:
        raise ValueError(
            f"O and V must have the same width r, got O {O.shape} and V {V.shape}"
        )
    lo = V.min(axis=-2, keepdims=True)  # (..., 1, r)
    hi = V.max(axis=-2, keepdims=True)
    scale = max(float(np.max(np.abs(V), initial=0.0)), 1.0)
    atol = 4 * V.shape[-2] * EPS * scale if atol is None else atol
    outside = (O < lo - atol) | (O > hi + atol)
    if np.any(outside):
        idx = tuple(int(i) for i in np.argwhere(outside)[0])
        col = idx[-1]
        batch = idx[:-2]
        lo_c, hi_c = (
            np.broadcast_to(lo, O.shape)[idx],
            np.broadcast_to(hi, O.shape)[idx],
        )
        where = ", ".join(str(i) for i in idx)
        of_batch = f" (batch {batch})" if batch else ""
        raise CheckFailed(
            "convex-hull bound",
            f"O[{where}] = {O[idx]:.6g} lies outside [{lo_c:.6g}, {hi_c:.6g}], "
            f"the range of column {col} of V{of_batch}",
        )


def assert_rows_sum_to_zero(dS, atol=None):
    """Raise :class:`CheckFailed` unless every row of ``dS`` sums to zero.

    The softmax ignores a shift of a whole row of scores, so the gradient of any
    objective with respect to that row sums to zero. The default tolerance is
    ``64 n eps max(1, max|dS|)`` for rows of length ``n``.

    >>> import numpy as np
    >>> assert_rows_sum_to_zero(np.array([[0.375, -0.375]]))
    >>> assert_rows_sum_to_zero(np.array([[1.5, 0.0]]))
    Traceback (most recent call last):
    ...
    attncourse.kit.failed.CheckFailed: rows of dS summing to zero: row (0,) sums
    to 1.5
    """
    dS = _as_array("dS", dS)
    n = dS.shape[-1]
    scale = max(float(np.max(np.abs(dS), initial=0.0)), 1.0)
    atol = 64 * max(n, 1) * EPS * scale if atol is None else atol
    sums = dS.sum(axis=-1)
    if not np.all(np.isfinite(sums)):
        raise CheckFailed("rows of dS summing to zero", "dS holds NaN or infinity")
    if sums.size and np.abs(sums).max() > atol:
        idx = tuple(
            int(i) for i in np.unravel_index(np.argmax(np.abs(sums)), sums.shape)
        )
        raise CheckFailed(
            "rows of dS summing to zero", f"row {idx} sums to {sums[idx]:.6g}"
        )


def assert_transposed_scores(scores):
    """Raise :class:`CheckFailed` unless ``scores(Q, K)`` is ``Q K^T / sqrt(d)`` on the
    asymmetric pair.

    ``Q`` has rows ``[1,2],[0,1]`` and ``K`` rows ``[1,0],[2,1]``, so
    ``Q K^T = [[1,4],[0,1]]`` while the missing-transpose product ``Q K`` is
    ``[[5,2],[2,1]]``.

    >>> from attncourse.layers.attention import attention_scores
    >>> assert_transposed_scores(attention_scores)
    """
    Q, K = transpose_pair()
    expected = np.array([[1.0, 4.0], [0.0, 1.0]]) / math.sqrt(2.0)
    got = np.asarray(scores(Q, K), dtype=np.float64)
    if got.shape != expected.shape or not np.allclose(
        got, expected, rtol=1e-12, atol=1e-12
    ):
        hint = ""
        if got.shape == expected.shape and np.allclose(
            got, (Q @ K) / math.sqrt(2.0), rtol=1e-12, atol=1e-12
        ):
            hint = "; this is Q K / sqrt(d): the transpose of K is missing"
        raise CheckFailed(
            "transpose",
            f"scores(Q, K) * sqrt(2) gave {np.round(got * math.sqrt(2.0), 6).tolist()} "
            f"for the asymmetric pair, expected Q K^T = [[1.0, 4.0], [0.0, 1.0]]{hint}",
        )
