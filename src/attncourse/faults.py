"""Planted mistakes: wrong versions of the attention functions, for fault controls.

Each function has the signature of the correct function it imitates and differs from it
by one plausible mistake. A check is trusted only after it has been seen to reject the
mistakes it exists to catch; :data:`FAULTS` lists which check that is.

========================================  =====================================  ==========================
fault                                     imitates                               caught by
========================================  =====================================  ==========================
``attention_scores_missing_transpose``    ``attention_scores``                   the transpose check
``attention_forward_missing_transpose``   ``attention_forward``                  the transpose check; shapes
``attention_backward_missing_transpose``  ``attention_backward``                 Example 1 values; gradcheck
``softmax_columnwise``                    ``softmax``                            rows sum to one
``attention_forward_columnwise``          ``attention_forward``                  rows sum to one
``softmax_backward_numerator_only``       ``softmax_backward``                   rows of dS sum to zero
``attention_backward_numerator_only``     ``attention_backward``                 gradcheck on Q, K
``attention_forward_unscaled``            ``attention_forward``                  Example 1 values
``attention_backward_unscaled``           ``attention_backward``                 gradcheck on Q, K
``head_backward_last_branch``             ``head_backward``                      gradcheck on X
``softmax_without_max_subtraction``       ``softmax``                            extreme scores stay finite
========================================  =====================================  ==========================

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
    """FAULT: :func:`attncourse.attention_forward` with the scores ``Q K / sqrt(d)``."""
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
    """FAULT: ``dK = dS Q / sqrt(d)`` instead of ``dS^T Q / sqrt(d)`` (runs whenever ``T_q == T_k``)."""
    Q, K, V, dV, dS = _backward_pieces(Q, K, V, G)
    d = Q.shape[-1]
    dQ = dS @ K / math.sqrt(d)  # (..., T_q, T_k) x (..., T_k, d) -> (..., T_q, d)
    dK = dS @ Q / math.sqrt(d)  # the fault: dS should be transposed
    return dQ, dK, dV


# --- 2. normalising over the wrong axis ------------------------------------------------

def softmax_columnwise(S, visible=None):
    """FAULT: normalise each column (over queries) instead of each row (over keys).

    ``visible`` is accepted for the signature and ignored.
    """
    S = as_float_array("S", S)
    E = np.exp(S - np.max(S, axis=-2, keepdims=True))
    return E / np.sum(E, axis=-2, keepdims=True)  # the fault: axis -2 instead of -1


def attention_forward_columnwise(Q, K, V):
    """FAULT: :func:`attncourse.attention_forward` with column-wise normalisation."""
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
    """FAULT: :func:`attncourse.attention_backward` with the numerator-only softmax backward."""
    Q, K, V, dV, dS = _backward_pieces(Q, K, V, G, softmax_backward_numerator_only)
    d = Q.shape[-1]
    dQ = dS @ K / math.sqrt(d)  # (..., T_q, T_k) x (..., T_k, d) -> (..., T_q, d)
    dK = np.swapaxes(dS, -1, -2) @ Q / math.sqrt(d)  # (..., T_k, T_q) x (..., T_q, d) -> (..., T_k, d)
    return dQ, dK, dV


# --- 4. dropping the 1/sqrt(d) -----------------------------------------------------------

def attention_forward_unscaled(Q, K, V):
    """FAULT: :func:`attncourse.attention_forward` with ``S = Q K^T`` (no ``1/sqrt(d)``)."""
    Q, K, V = check_qkv(Q, K, V)
    S = Q @ np.swapaxes(K, -1, -2)  # (..., T_q, d) x (..., d, T_k) -> (..., T_q, T_k); the fault: no 1/sqrt(d)
    A = softmax(S)
    O = A @ V  # (..., T_q, T_k) x (..., T_k, r) -> (..., T_q, r)
    return O, A


def attention_backward_unscaled(Q, K, V, G):
    """FAULT: :func:`attncourse.attention_backward` without the ``1/sqrt(d)`` in ``dQ`` and ``dK``."""
    Q, K, V, dV, dS = _backward_pieces(Q, K, V, G)
    dQ = dS @ K  # (..., T_q, T_k) x (..., T_k, d) -> (..., T_q, d); the fault: no 1/sqrt(d)
    dK = np.swapaxes(dS, -1, -2) @ Q  # (..., T_k, T_q) x (..., T_q, d) -> (..., T_k, d); same fault
    return dQ, dK, dV


# --- 5. keeping only the last branch into X ----------------------------------------------

def head_backward_last_branch(X, W_Q, W_K, W_V, G):
    """FAULT: :func:`attncourse.head_backward` whose ``dX`` keeps only the value branch.

    Each branch overwrites the previous one instead of adding to it. ``dW_Q, dW_K, dW_V``
    are still correct, so only a check that perturbs ``X`` can see the mistake.
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
        "attention_forward_unscaled, attention_backward_unscaled",
        "Example 1 values (forward); gradcheck on Q, K (backward)",
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
