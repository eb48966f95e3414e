"""One attention head with its projections: ``Q = X W_Q``, ``K = X W_K``, ``V = X W_V``,
as a layer pair.

All positions are visible (Chapter 3; Chapter 4 adds the causal mask and many heads).
The input ``X (..., T, D)`` feeds three branches, so its gradient is the **sum**
``dX = dQ W_Q^T + dK W_K^T + dV W_V^T``.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> params = {"W_Q": rng.normal(size=(7, 3)), "W_K": rng.normal(size=(7, 3)),
...           "W_V": rng.normal(size=(7, 4))}
>>> O, saved = head_forward(params, rng.normal(size=(5, 7)))
>>> O.shape, saved["A"].shape
((5, 4), (5, 5))
>>> dparams, dX = head_backward(params, saved, np.ones((5, 4)))
>>> sorted(dparams), dX.shape
(['W_K', 'W_Q', 'W_V'], (5, 7))
"""

from .._validate import as_float_like, as_params, shaped
from .attention import AttentionSaved, attention_backward, attention_forward
from .linear import matmul_backward

__all__ = [
    "PARAMETER_NAMES",
    "PROJECTIONS",
    "project",
    "head_forward",
    "head_backward",
]

PARAMETER_NAMES = ("W_Q", "W_K", "W_V")
# the shapes of the input and the projections, for :func:`attncourse._validate.shaped`
PROJECTIONS = "X(..., T, D) W_Q(D, d) W_K(D, d) W_V(D, r)"


def _as_inputs(params, X):
    """Return ``X, W_Q, W_K, W_V`` as float arrays, or raise ``ValueError`` naming the
    parameter missing or the shapes at fault."""
    return shaped(PROJECTIONS, X, *as_params("head", params, PARAMETER_NAMES))


def project(X, W_Q, W_K, W_V):
    """Return ``Q, K, V = X W_Q, X W_K, X W_V``."""
    X, W_Q, W_K, W_V = shaped(PROJECTIONS, X, W_Q, W_K, W_V)
    Q = X @ W_Q  # (..., T, D) x (D, d) -> (..., T, d)
    K = X @ W_K  # (..., T, D) x (D, d) -> (..., T, d)
    V = X @ W_V  # (..., T, D) x (D, r) -> (..., T, r)
    return Q, K, V


def head_forward(params, X):
    """Return ``O, saved``: the head's output ``A V`` and what the backward pass needs
    (``X, Q, K, V, A``)."""
    X, W_Q, W_K, W_V = _as_inputs(params, X)
    Q, K, V = project(X, W_Q, W_K, W_V)  # (..., T, d), (..., T, d), (..., T, r)
    O, attention = attention_forward(Q, K, V)  # (..., T, r); Q, K, V, A (..., T, T)
    return O, {"X": X, **attention._asdict()}  # X: already a float array (shaped)


def head_backward(params, saved, G):
    """Return ``dparams, dX`` for the upstream gradient ``G = dJ/dO``:
    ``dW_Q = X^T dQ``, ``dW_K = X^T dK``, ``dW_V = X^T dV`` and
    ``dX = dQ W_Q^T + dK W_K^T + dV W_V^T``, the sum of the three branches."""
    X, W_Q, W_K, W_V = _as_inputs(params, saved["X"])
    Q, K, V, A = (saved[n] for n in ("Q", "K", "V", "A"))
    G = as_float_like("G", G, Q.shape[:-1] + V.shape[-1:], "O = A V")
    dQ, dK, dV = attention_backward(AttentionSaved(Q, K, V, A), G)
    dX_Q, dW_Q = matmul_backward(X, W_Q, dQ)  # dQ W_Q^T (..., T, D), X^T dQ (D, d)
    dX_K, dW_K = matmul_backward(X, W_K, dK)  # dK W_K^T (..., T, D), X^T dK (D, d)
    dX_V, dW_V = matmul_backward(X, W_V, dV)  # dV W_V^T (..., T, D), X^T dV (D, r)
    # three branches summed
    return {"W_Q": dW_Q, "W_K": dW_K, "W_V": dW_V}, dX_Q + dX_K + dX_V
