"""One attention head with its projections: ``Q = X W_Q``, ``K = X W_K``, ``V = X W_V``.

The input ``X (..., T, D)`` feeds three branches, so its gradient is the **sum**
``dX = dQ W_Q^T + dK W_K^T + dV W_V^T``.
"""

from typing import NamedTuple

import numpy as np

from ._validate import as_float_array
from .attention import attention_backward, attention_forward

__all__ = ["project", "projection_backward", "head_forward", "head_backward", "HeadGradients"]


class HeadGradients(NamedTuple):
    """Gradients of one head with respect to its input and its three weight matrices."""

    dX: np.ndarray
    dW_Q: np.ndarray
    dW_K: np.ndarray
    dW_V: np.ndarray


def _check_projections(X, W_Q, W_K, W_V):
    X = as_float_array("X", X)
    W_Q, W_K, W_V = (as_float_array(n, W) for n, W in (("W_Q", W_Q), ("W_K", W_K), ("W_V", W_V)))
    if X.ndim < 2:
        raise ValueError(f"X must be at least 2-D (positions, features), got shape {X.shape}")
    for name, W in (("W_Q", W_Q), ("W_K", W_K), ("W_V", W_V)):
        if W.ndim != 2:
            raise ValueError(f"{name} must be 2-D (D, width), got shape {W.shape}")
        if W.shape[0] != X.shape[-1]:
            raise ValueError(
                f"{name} must have one row per input feature: X has shape {X.shape} "
                f"(D={X.shape[-1]}), {name} has shape {W.shape}"
            )
    if W_Q.shape[1] != W_K.shape[1]:
        raise ValueError(f"W_Q and W_K must share the key width d: W_Q {W_Q.shape}, W_K {W_K.shape}")
    return X, W_Q, W_K, W_V


def project(X, W_Q, W_K, W_V):
    """Return ``Q, K, V = X W_Q, X W_K, X W_V``."""
    X, W_Q, W_K, W_V = _check_projections(X, W_Q, W_K, W_V)
    Q = X @ W_Q  # (..., T, D) x (D, d) -> (..., T, d)
    K = X @ W_K  # (..., T, D) x (D, d) -> (..., T, d)
    V = X @ W_V  # (..., T, D) x (D, r) -> (..., T, r)
    return Q, K, V


def projection_backward(X, W, dY):
    """For ``Y = X W`` return ``(dX, dW) = (dY W^T, X^T dY)``, with ``dW`` summed over batches."""
    dX = dY @ W.T  # (..., n) x (n, D) -> (..., D)
    dW = X.reshape(-1, W.shape[0]).T @ dY.reshape(-1, W.shape[1])  # every row of every batch: (D, N) x (N, n) -> (D, n)
    return dX, dW


def head_forward(X, W_Q, W_K, W_V):
    """Return ``O, A`` of one head applied to ``X``."""
    return attention_forward(*project(X, W_Q, W_K, W_V))


def head_backward(X, W_Q, W_K, W_V, G):
    """Return :class:`HeadGradients` for the upstream gradient ``G = dJ/dO``."""
    X, W_Q, W_K, W_V = _check_projections(X, W_Q, W_K, W_V)
    Q, K, V = project(X, W_Q, W_K, W_V)
    dQ, dK, dV = attention_backward(Q, K, V, G)
    dX_Q, dW_Q = projection_backward(X, W_Q, dQ)
    dX_K, dW_K = projection_backward(X, W_K, dK)
    dX_V, dW_V = projection_backward(X, W_V, dV)
    return HeadGradients(dX=dX_Q + dX_K + dX_V, dW_Q=dW_Q, dW_K=dW_K, dW_V=dW_V)  # three branches summed
