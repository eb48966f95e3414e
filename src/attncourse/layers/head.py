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

from .._validate import as_float_array, require_params
from .attention import attention_forward, backward_from_weights
from .linear import matmul_backward

__all__ = [
    "PARAMETER_NAMES",
    "validate_projections",
    "project",
    "head_forward",
    "head_backward",
]

PARAMETER_NAMES = ("W_Q", "W_K", "W_V")


def validate_projections(X, W_Q, W_K, W_V):
    """Return ``X, W_Q, W_K, W_V`` as float arrays, or raise ``ValueError`` naming the
    shapes at fault."""
    X = as_float_array("X", X, min_ndim=2)
    W_Q, W_K, W_V = (
        as_float_array(n, W, ndim=2)
        for n, W in (("W_Q", W_Q), ("W_K", W_K), ("W_V", W_V))
    )
    for name, W in (("W_Q", W_Q), ("W_K", W_K), ("W_V", W_V)):
        if W.shape[0] != X.shape[-1]:
            raise ValueError(
                f"{name} must have one row per input feature: X has shape {X.shape} "
                f"(D={X.shape[-1]}), {name} has shape {W.shape}"
            )
    if W_Q.shape[1] != W_K.shape[1]:
        raise ValueError(
            f"W_Q and W_K must share the key width d: W_Q {W_Q.shape}, W_K {W_K.shape}"
        )
    return X, W_Q, W_K, W_V


def project(X, W_Q, W_K, W_V):
    """Return ``Q, K, V = X W_Q, X W_K, X W_V``."""
    X, W_Q, W_K, W_V = validate_projections(X, W_Q, W_K, W_V)
    Q = X @ W_Q  # (..., T, D) x (D, d) -> (..., T, d)
    K = X @ W_K  # (..., T, D) x (D, d) -> (..., T, d)
    V = X @ W_V  # (..., T, D) x (D, r) -> (..., T, r)
    return Q, K, V


def head_forward(params, X):
    """Return ``O, saved``: the head's output ``A V`` and what the backward pass needs
    (``X, Q, K, V, A``)."""
    require_params("head", params, PARAMETER_NAMES)
    Q, K, V = project(X, *(params[n] for n in PARAMETER_NAMES))
    O, A = attention_forward(Q, K, V)  # (..., T, r), (..., T, T)
    return O, {"X": as_float_array("X", X), "Q": Q, "K": K, "V": V, "A": A}


def head_backward(params, saved, G):
    """Return ``dparams, dX`` for the upstream gradient ``G = dJ/dO``; ``dX`` sums the
    three branches."""
    require_params("head", params, PARAMETER_NAMES)
    X, Q, K, V, A = (saved[n] for n in ("X", "Q", "K", "V", "A"))
    X, W_Q, W_K, W_V = validate_projections(X, *(params[n] for n in PARAMETER_NAMES))
    G = as_float_array("G", G)
    if G.shape != Q.shape[:-1] + (V.shape[-1],):
        raise ValueError(
            f"G must have the shape of O = A V, {Q.shape[:-1] + (V.shape[-1],)}, got "
            f"{G.shape}"
        )
    dQ, dK, dV = backward_from_weights(Q, K, V, A, G)
    dX_Q, dW_Q = matmul_backward(X, W_Q, dQ)
    dX_K, dW_K = matmul_backward(X, W_K, dK)
    dX_V, dW_V = matmul_backward(X, W_V, dV)
    # three branches summed
    return {"W_Q": dW_Q, "W_K": dW_K, "W_V": dW_V}, dX_Q + dX_K + dX_V
