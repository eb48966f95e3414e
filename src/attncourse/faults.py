"""Planted mistakes: wrong versions of the attention functions, for fault controls.

Each function has the signature of the correct function it imitates and differs from it
by one plausible mistake. A check is trusted only after it has been seen to reject the
mistakes it exists to catch; :data:`FAULTS` lists which check that is.

==========================================  ======================  ===========================
fault                                       imitates                caught by
==========================================  ======================  ===========================
``attention_scores_missing_transpose``      ``attention_scores``    the transpose check
``attention_forward_missing_transpose``     ``attention_forward``   the transpose check; shapes
``attention_backward_missing_transpose``    ``attention_backward``  Example 1 values; gradcheck
``softmax_columnwise``                      ``softmax``             rows sum to one
``attention_forward_columnwise``            ``attention_forward``   rows sum to one
``softmax_backward_numerator_only``         ``softmax_backward``    rows of dS sum to zero
``attention_backward_numerator_only``       ``attention_backward``  gradcheck on Q, K
``attention_forward_unscaled``              ``attention_forward``   Example 1 values
``attention_backward_unscaled``             ``attention_backward``  gradcheck on Q, K
``attention_backward_unscaled_throughout``  ``attention_backward``  Example 1 values only
``head_backward_last_branch``               ``head_backward``       gradcheck on X
``softmax_without_max_subtraction``         ``softmax``             extreme scores stay finite
==========================================  ======================  ===========================

>>> import numpy as np
>>> softmax_columnwise(np.array([[0.0, 0.0], [0.0, np.log(3.0)]])).sum(axis=-1).round(6)
array([0.75, 1.25])
"""

import math

import numpy as np

from ._validate import as_float_array
from .attention import attention_backward, attention_forward, attention_scores, check_qkv
from .head import HeadGradients, _check_projections, project, projection_backward
from .softmax import softmax, softmax_backward

__all__ = [
    "FAULTS",
    "attention_scores_missing_transpose",
    "attention_forward_missing_transpose",
    "attention_backward_missing_transpose",
    "softmax_columnwise",
    "attention_forward_columnwise",
    "softmax_backward_numerator_only",
    "attention_backward_numerator_only",
    "attention_forward_unscaled",
    "attention_backward_unscaled",
    "attention_backward_unscaled_throughout",
    "head_backward_last_branch",
    "softmax_without_max_subtraction",
]


# --- 1. missing transpose -------------------------------------------------------------

def attention_scores_missing_transpose(Q, K):
    """FAULT: ``Q K / sqrt(d)`` instead of ``Q K^T / sqrt(d)``.

    It only runs when ``d`` equals the number of keys, and agrees with the correct
    scores whenever ``K`` is symmetric (as in Example 1).

    >>> import numpy as np
    >>> Q = np.array([[1.0, 2.0], [0.0, 1.0]]); K = np.array([[1.0, 0.0], [2.0, 1.0]])
    >>> attention_scores_missing_transpose(Q, K) * np.sqrt(2)
    array([[5., 2.],
           [2., 1.]])
    """
    d = Q.shape[-1]
    return (Q @ K) / math.sqrt(d)  # (..., T_q, d) x (..., T_k, d): runs only if d == T_k -- the fault


def attention_forward_missing_transpose(Q, K, V):
    """FAULT: :func:`attncourse.attention_forward` with the scores ``Q K / sqrt(d)``.

    >>> import numpy as np
    >>> Q = np.zeros((5, 3)); K = np.zeros((5, 3)); V = np.zeros((5, 4))
    >>> attention_forward_missing_transpose(Q, K, V)  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    ...
    ValueError: numpy cannot multiply Q (5, 3) by K (5, 3)
    """
    Q, K, V = check_qkv(Q, K, V)
    S = attention_scores_missing_transpose(Q, K)
    A = softmax(S)
    O = A @ V  # (..., T_q, T_k) x (..., T_k, r) -> (..., T_q, r)
    return O, A


def _backward_pieces(Q, K, V, G, softmax_backward_fn=softmax_backward):
    """Shared correct forward recomputation and ``dV, dS`` for the backward faults."""
    Q, K, V = check_qkv(Q, K, V)
    G = as_float_array("G", G)
    O, A = attention_forward(Q, K, V)
    if G.shape != O.shape:
        raise ValueError(f"G must have the shape of O = A V, {O.shape}, got {G.shape}")
    dV = np.swapaxes(A, -1, -2) @ G  # (..., T_k, T_q) x (..., T_q, r) -> (..., T_k, r)
    dA = G @ np.swapaxes(V, -1, -2)  # (..., T_q, r) x (..., r, T_k) -> (..., T_q, T_k)
    dS = softmax_backward_fn(A, dA)  # (..., T_q, T_k)
    return Q, K, V, dV, dS


def attention_backward_missing_transpose(Q, K, V, G):
    """FAULT: ``dK = dS Q / sqrt(d)`` instead of ``dS^T Q / sqrt(d)`` (runs whenever ``T_q == T_k``).

    On Example 1 it gives ``ln 3 dS`` where the correct ``dK`` is ``ln 3 dS^T``:

    >>> import numpy as np
    >>> a = np.sqrt(2) * np.log(3)
    >>> dK = attention_backward_missing_transpose(a * np.eye(2), np.eye(2), np.diag([2.0, 4.0]), np.diag([1.0, 2.0]))[1]
    >>> (dK / np.log(3)).round(6)
    array([[ 0.375, -0.375],
           [-1.5  ,  1.5  ]])
    """
    Q, K, V, dV, dS = _backward_pieces(Q, K, V, G)
    d = Q.shape[-1]
    dQ = dS @ K / math.sqrt(d)  # (..., T_q, T_k) x (..., T_k, d) -> (..., T_q, d)
    dK = dS @ Q / math.sqrt(d)  # the fault: dS should be transposed
    return dQ, dK, dV


# --- 2. normalising over the wrong axis ------------------------------------------------

def softmax_columnwise(S, visible=None):
    """FAULT: normalise each column (over queries) instead of each row (over keys).

    ``visible`` is accepted for the signature and ignored.

    >>> import numpy as np
    >>> softmax_columnwise(np.zeros((2, 3)))
    array([[0.5, 0.5, 0.5],
           [0.5, 0.5, 0.5]])
    """
    S = as_float_array("S", S)
    E = np.exp(S - np.max(S, axis=-2, keepdims=True))
    return E / np.sum(E, axis=-2, keepdims=True)  # the fault: axis -2 instead of -1


def attention_forward_columnwise(Q, K, V):
    """FAULT: :func:`attncourse.attention_forward` with column-wise normalisation.

    >>> import numpy as np
    >>> A = attention_forward_columnwise(np.zeros((2, 3)), np.zeros((4, 3)), np.ones((4, 1)))[1]
    >>> A.sum(axis=-1)  # rows of 4 keys, each weight 1/2
    array([2., 2.])
    """
    Q, K, V = check_qkv(Q, K, V)
    A = softmax_columnwise(attention_scores(Q, K))  # (..., T_q, T_k)
    O = A @ V  # (..., T_q, T_k) x (..., T_k, r) -> (..., T_q, r)
    return O, A


# --- 3. differentiating only the numerator of the softmax -------------------------------

def softmax_backward_numerator_only(A, dA):
    """FAULT: ``dS = A * dA``, the numerator path alone (the denominator path is dropped).

    >>> import numpy as np
    >>> softmax_backward_numerator_only(np.array([[0.75, 0.25]]), np.array([[2.0, 0.0]]))
    array([[1.5, 0. ]])
    """
    A = as_float_array("A", A)
    dA = as_float_array("dA", dA)
    if A.shape != dA.shape:
        raise ValueError(f"A and dA must have the same shape, got A {A.shape} and dA {dA.shape}")
    return A * dA


def attention_backward_numerator_only(Q, K, V, G):
    """FAULT: :func:`attncourse.attention_backward` with the numerator-only softmax backward.

    With identical keys the correct ``dQ`` is exactly zero; this one is not:

    >>> import numpy as np
    >>> dQ = attention_backward_numerator_only(np.eye(2), np.ones((2, 2)), np.diag([2.0, 4.0]), np.diag([1.0, 2.0]))[0]
    >>> bool(np.abs(dQ).max() > 0.5)
    True
    """
    Q, K, V, dV, dS = _backward_pieces(Q, K, V, G, softmax_backward_numerator_only)
    d = Q.shape[-1]
    dQ = dS @ K / math.sqrt(d)  # (..., T_q, T_k) x (..., T_k, d) -> (..., T_q, d)
    dK = np.swapaxes(dS, -1, -2) @ Q / math.sqrt(d)  # (..., T_k, T_q) x (..., T_q, d) -> (..., T_k, d)
    return dQ, dK, dV


# --- 4. dropping the 1/sqrt(d) -----------------------------------------------------------

def attention_forward_unscaled(Q, K, V):
    """FAULT: :func:`attncourse.attention_forward` with ``S = Q K^T`` (no ``1/sqrt(d)``).

    On Example 1 the scores are ``sqrt(2) ln 3`` instead of ``ln 3``:

    >>> import numpy as np
    >>> a = np.sqrt(2) * np.log(3)
    >>> A = attention_forward_unscaled(a * np.eye(2), np.eye(2), np.diag([2.0, 4.0]))[1]
    >>> bool(A[0, 0] > 0.75)
    True
    """
    Q, K, V = check_qkv(Q, K, V)
    S = Q @ np.swapaxes(K, -1, -2)  # (..., T_q, d) x (..., d, T_k) -> (..., T_q, T_k); the fault: no 1/sqrt(d)
    A = softmax(S)
    O = A @ V  # (..., T_q, T_k) x (..., T_k, r) -> (..., T_q, r)
    return O, A


def attention_backward_unscaled(Q, K, V, G):
    """FAULT: :func:`attncourse.attention_backward` without the ``1/sqrt(d)`` in ``dQ`` and ``dK``.

    The forward pass it differentiates is the correct one, so ``dQ`` and ``dK`` come out
    ``sqrt(d)`` times too large:

    >>> import numpy as np
    >>> from attncourse.attention import attention_backward
    >>> rng = np.random.default_rng(0)
    >>> Q, K, V, G = rng.standard_normal((3, 4)), rng.standard_normal((5, 4)), rng.standard_normal((5, 2)), rng.standard_normal((3, 2))
    >>> np.allclose(attention_backward_unscaled(Q, K, V, G)[0], 2.0 * attention_backward(Q, K, V, G)[0])
    True
    """
    Q, K, V, dV, dS = _backward_pieces(Q, K, V, G)
    dQ = dS @ K  # (..., T_q, T_k) x (..., T_k, d) -> (..., T_q, d); the fault: no 1/sqrt(d)
    dK = np.swapaxes(dS, -1, -2) @ Q  # (..., T_k, T_q) x (..., T_q, d) -> (..., T_k, d); same fault
    return dQ, dK, dV


def attention_backward_unscaled_throughout(Q, K, V, G):
    """FAULT: the exact backward pass of :func:`attention_forward_unscaled`: no ``1/sqrt(d)`` anywhere.

    Forward and backward drop the scale together, so they agree with each other and a
    gradient check of this pair passes; only values computed independently (Example 1)
    expose it.

    >>> import numpy as np
    >>> from attncourse.gradcheck import gradcheck
    >>> rng = np.random.default_rng(0)
    >>> Q, K, V, G = rng.standard_normal((3, 2)), rng.standard_normal((4, 2)), rng.standard_normal((4, 5)), rng.standard_normal((3, 5))
    >>> J = lambda Q, K, V: float(np.sum(attention_forward_unscaled(Q, K, V)[0] * G))
    >>> dQ, dK, dV = attention_backward_unscaled_throughout(Q, K, V, G)
    >>> gradcheck(J, {"Q": Q, "K": K, "V": V}, {"Q": dQ, "K": dK, "V": dV}).passed
    True
    """
    Q, K, V = check_qkv(Q, K, V)
    G = as_float_array("G", G)
    O, A = attention_forward_unscaled(Q, K, V)  # the fault, in the forward pass too
    if G.shape != O.shape:
        raise ValueError(f"G must have the shape of O = A V, {O.shape}, got {G.shape}")
    dV = np.swapaxes(A, -1, -2) @ G  # (..., T_k, T_q) x (..., T_q, r) -> (..., T_k, r)
    dA = G @ np.swapaxes(V, -1, -2)  # (..., T_q, r) x (..., r, T_k) -> (..., T_q, T_k)
    dS = softmax_backward(A, dA)  # (..., T_q, T_k)
    dQ = dS @ K  # (..., T_q, T_k) x (..., T_k, d) -> (..., T_q, d); no 1/sqrt(d)
    dK = np.swapaxes(dS, -1, -2) @ Q  # (..., T_k, T_q) x (..., T_q, d) -> (..., T_k, d); no 1/sqrt(d)
    return dQ, dK, dV


# --- 5. keeping only the last branch into X ----------------------------------------------

def head_backward_last_branch(X, W_Q, W_K, W_V, G):
    """FAULT: :func:`attncourse.head_backward` whose ``dX`` keeps only the value branch.

    Each branch overwrites the previous one instead of adding to it. ``dW_Q, dW_K, dW_V``
    are still correct, so only a check that perturbs ``X`` can see the mistake.

    >>> import numpy as np
    >>> from attncourse.head import head_backward
    >>> rng = np.random.default_rng(0)
    >>> args = (rng.standard_normal((4, 5)), rng.standard_normal((5, 2)), rng.standard_normal((5, 2)),
    ...         rng.standard_normal((5, 3)), rng.standard_normal((4, 3)))
    >>> bad, good = head_backward_last_branch(*args), head_backward(*args)
    >>> np.allclose(bad.dW_Q, good.dW_Q), np.allclose(bad.dX, good.dX)
    (True, False)
    """
    X, W_Q, W_K, W_V = _check_projections(X, W_Q, W_K, W_V)
    Q, K, V = project(X, W_Q, W_K, W_V)
    dQ, dK, dV = attention_backward(Q, K, V, G)
    dX, dW_Q = projection_backward(X, W_Q, dQ)
    dX, dW_K = projection_backward(X, W_K, dK)  # the fault: overwrites the query branch
    dX, dW_V = projection_backward(X, W_V, dV)  # ... and the key branch
    return HeadGradients(dX=dX, dW_Q=dW_Q, dW_K=dW_K, dW_V=dW_V)


# --- a numerical fault: no max subtraction ------------------------------------------------

def softmax_without_max_subtraction(S, visible=None):
    """FAULT: ``exp(S) / sum(exp(S))`` with no shift; overflows for scores near 710 and above.

    ``visible`` is accepted for the signature and ignored. Call it under
    ``np.errstate(over="ignore", invalid="ignore")`` to silence the overflow warnings.

    >>> import numpy as np
    >>> with np.errstate(over="ignore", invalid="ignore"):
    ...     softmax_without_max_subtraction(np.array([[1e4, 0.0]]))
    array([[nan,  0.]])
    """
    S = as_float_array("S", S)
    E = np.exp(S)  # the fault: no max subtraction
    return E / np.sum(E, axis=-1, keepdims=True)


FAULTS = {
    "missing transpose": (
        "attention_scores_missing_transpose, attention_forward_missing_transpose, "
        "attention_backward_missing_transpose",
        "the transpose check (forward); Example 1 values and gradcheck on Q, K, V (backward)",
    ),
    "column-wise normalisation": (
        "softmax_columnwise, attention_forward_columnwise",
        "rows of A are non-negative and sum to one",
    ),
    "numerator-only softmax backward": (
        "softmax_backward_numerator_only, attention_backward_numerator_only",
        "rows of dS sum to zero; gradcheck on Q, K",
    ),
    "dropped 1/sqrt(d)": (
        "attention_forward_unscaled, attention_backward_unscaled, attention_backward_unscaled_throughout",
        "Example 1 values (forward, or both passes together); gradcheck on Q, K (backward alone)",
    ),
    "dX keeps only the last branch": (
        "head_backward_last_branch",
        "gradcheck on X through the projections",
    ),
    "no max subtraction": (
        "softmax_without_max_subtraction",
        "extreme scores give finite weights",
    ),
}
"""Fault name -> (the planted functions, the check that catches them)."""
