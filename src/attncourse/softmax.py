"""Row-wise softmax along the last axis, and its backward pass.

The softmax of a row ``s`` is ``a_j = exp(s_j) / sum_k exp(s_k)``. Its Jacobian is
``diag(a) - a a^T`` (Chapter 2 derives it; Chapter 3 uses it), so for an upstream
gradient ``dA`` the backward pass is ``dS = A * (dA - sum_k A_k dA_k)``.

A backward pass never builds the ``n x n`` Jacobian; :func:`softmax_jacobian` builds it
densely only to make the vector-Jacobian product visible (Chapter 2) and to check a
learner's Jacobian: ``diag(p)`` is the numerator path and ``-p p^T`` the denominator
path.
"""

import numpy as np

from ._validate import as_float_array, as_float_like, require_that, shaped

__all__ = ["softmax", "softmax_backward", "logsumexp", "softmax_jacobian"]

# ``visible`` (boolean) broadcasts against the scores ``S``: a mask with batch axes the
# scores lack batches the result (every sequence of a batch may hide other keys).
_SCORES = "S(...) visible(...)"


def logsumexp(S, visible=None):
    """Return ``log sum_k exp(S_k)`` over the last axis, computed without overflow as
    ``m + log sum_k exp(S_k - m)`` with ``m`` the row maximum.

    Entries where ``visible`` is False take no part. A row with no visible entry
    has no defined value; it gets ``-inf``.

    >>> import numpy as np
    >>> float(logsumexp(np.array([1000.0, 1000.0])) - 1000.0)  # doctest: +ELLIPSIS
    0.693147...
    """
    S, _ = shaped(_SCORES, S, visible)
    if visible is not None:
        S = np.where(np.asarray(visible, dtype=bool), S, -np.inf)  # hidden: exp(S) = 0
    m = np.max(S, axis=-1, keepdims=True, initial=-np.inf)  # -inf: no entry
    m_safe = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(S - m_safe), axis=-1)) + m_safe[..., 0]
    return out


def softmax(S, visible=None):
    """Softmax of each row of ``S`` (the last axis), ``A_ij = exp(S_ij - m_i) / sum_k
    exp(S_ik - m_i)`` with ``m_i`` the row maximum (the shift changes nothing but the
    overflow).

    ``visible`` (optional, boolean, broadcastable to ``S``) marks the entries that take
    part; hidden entries get weight exactly 0. A row with no visible entry gets all
    weights 0: it reads nothing, its output is the zero vector and its gradient is zero.

    >>> import numpy as np
    >>> softmax(np.array([[0.0, np.log(3.0)]])).round(6)
    array([[0.25, 0.75]])
    >>> softmax(np.array([[1e4, -1e4]]))
    array([[1., 0.]])
    """
    S, _ = shaped(_SCORES, S, visible)
    if visible is None:
        # largest entry of each row is 0
        shifted = S - np.max(S, axis=-1, keepdims=True, initial=-np.inf)
        E = np.exp(shifted)
        return E / np.sum(E, axis=-1, keepdims=True)
    visible = np.asarray(visible, dtype=bool)
    masked = np.where(visible, S, -np.inf)  # broadcast to the shape of the weights
    m = np.max(masked, axis=-1, keepdims=True, initial=-np.inf)
    m = np.where(m == -np.inf, 0.0, m)  # fully hidden row: any finite shift will do
    # (a NaN maximum stays: a NaN score makes its row's weights NaN, as unmasked)
    E = np.where(visible, np.exp(np.where(visible, S - m, 0.0)), 0.0)
    Z = np.sum(E, axis=-1, keepdims=True)
    return E / np.where(Z > 0, Z, 1.0)


def softmax_backward(A, dA):
    """Return ``dS`` given the softmax output ``A`` and the upstream gradient ``dA``.

    ``dS_ij = A_ij (dA_ij - sum_k A_ik dA_ik)``: the numerator path minus the
    denominator path. Each row of ``dS`` sums to zero (for a row that sums to one).

    >>> import numpy as np
    >>> A = np.array([[0.75, 0.25]]); dA = np.array([[2.0, 0.0]])
    >>> softmax_backward(A, dA)
    array([[ 0.375, -0.375]])
    """
    A = as_float_array("A", A)
    dA = as_float_like("dA", dA, A.shape, "A")
    row_mean = np.sum(A * dA, axis=-1, keepdims=True)  # E_A[dA] for each row
    return A * (dA - row_mean)


def softmax_jacobian(z):
    """Return ``J[..., j, k] = dp_j/dz_k = p_j (delta_jk - p_k)`` for ``p = softmax(z)``
    over the last axis.

    ``z`` has shape ``(..., n)``; the result has shape ``(..., n, n)``.

    >>> softmax_jacobian(np.zeros((2, 3))).shape
    (2, 3, 3)
    """
    z = as_float_array("z", z)
    require_that(z.shape[-1:] not in ((), (0,)), "z must have a non-empty last axis, "
                 "got shape {}", z.shape)
    p = softmax(z)
    numerator_path = p[..., :, None] * np.eye(z.shape[-1])  # diag(p)
    # -p p^T: (..., n, 1) x (..., 1, n) -> (..., n, n)
    denominator_path = -p[..., :, None] * p[..., None, :]
    return numerator_path + denominator_path
