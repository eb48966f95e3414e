"""Scaled dot-product attention for one head: forward, backward and the causal variant.

Shapes (leading batch dimensions broadcast):
``Q (..., T_q, d)``, ``K (..., T_k, d)``, ``V (..., T_k, r)``,
``S = Q K^T / sqrt(d)`` and ``A = softmax(S)`` are ``(..., T_q, T_k)``, ``O = A V`` is ``(..., T_q, r)``.
"""

import math

import numpy as np

from ._validate import as_float_array
from .masks import key_padding_mask
from .softmax import softmax, softmax_backward

__all__ = [
    "check_qkv",
    "attention_scores",
    "attention_forward",
    "attention_backward",
    "causal_mask",
    "causal_attention",
]


def _batch_shape(**arrays):
    """Broadcast the leading (batch) dimensions of the named arrays, naming them on failure."""
    try:
        return np.broadcast_shapes(*(a.shape[:-2] for a in arrays.values()))
    except ValueError:
        listed = ", ".join(f"{n} {a.shape}" for n, a in arrays.items())
        raise ValueError(f"leading batch dimensions do not broadcast: {listed}") from None


def check_qkv(Q, K, V):
    """Return ``Q, K, V`` as float arrays, or raise ``ValueError`` naming the shapes at fault.

    >>> import numpy as np
    >>> check_qkv(np.ones((3, 2)), np.ones((4, 5)), np.ones((4, 1)))
    Traceback (most recent call last):
    ...
    ValueError: Q and K must share the key width d: Q has shape (3, 2) (d=2), K has shape (4, 5) (d=5)
    """
    Q, K, V = (as_float_array(n, x) for n, x in (("Q", Q), ("K", K), ("V", V)))
    for name, x in (("Q", Q), ("K", K), ("V", V)):
        if x.ndim < 2:
            raise ValueError(f"{name} must be at least 2-D (positions, features), got shape {x.shape}")
    if Q.shape[-1] != K.shape[-1]:
        raise ValueError(
            f"Q and K must share the key width d: Q has shape {Q.shape} (d={Q.shape[-1]}), "
            f"K has shape {K.shape} (d={K.shape[-1]})"
        )
    if K.shape[-2] != V.shape[-2]:
        raise ValueError(
            f"K and V must have one row per key position: K has shape {K.shape} "
            f"({K.shape[-2]} keys), V has shape {V.shape} ({V.shape[-2]} values)"
        )
    _batch_shape(Q=Q, K=K, V=V)
    return Q, K, V


def _unbroadcast(grad, shape):
    """Sum ``grad`` over the dimensions that broadcasting added to an input of ``shape``."""
    while grad.ndim > len(shape):
        grad = grad.sum(axis=0)
    for axis, n in enumerate(shape):
        if n == 1 and grad.shape[axis] != 1:
            grad = grad.sum(axis=axis, keepdims=True)
    return grad


def attention_scores(Q, K):
    """Return ``S = Q K^T / sqrt(d)``."""
    d = Q.shape[-1]
    return (Q @ np.swapaxes(K, -1, -2)) / math.sqrt(d)  # (..., T_q, d) x (..., d, T_k) -> (..., T_q, T_k)


def attention_forward(Q, K, V, visible=None):
    """Return ``O, A``: the output ``A V`` and the weights ``A = softmax(Q K^T / sqrt(d))``.

    ``visible`` (optional, boolean, broadcastable to ``(..., T_q, T_k)``) marks the keys
    each query may read; see :func:`attncourse.softmax` for rows with nothing visible.

    >>> import numpy as np
    >>> O, A = attention_forward(np.zeros((2, 3)), np.ones((4, 3)), np.arange(8.0).reshape(4, 2))
    >>> A
    array([[0.25, 0.25, 0.25, 0.25],
           [0.25, 0.25, 0.25, 0.25]])
    >>> O
    array([[3., 4.],
           [3., 4.]])
    """
    Q, K, V = check_qkv(Q, K, V)
    S = attention_scores(Q, K)  # (..., T_q, T_k)
    A = softmax(S, visible)  # (..., T_q, T_k)
    O = A @ V  # (..., T_q, T_k) x (..., T_k, r) -> (..., T_q, r)
    return O, A


def attention_backward(Q, K, V, G, visible=None):
    """Return ``dQ, dK, dV`` for the upstream gradient ``G = dJ/dO`` (the shape of ``O``).

    The forward pass is recomputed. Each gradient has the shape of its input; batch
    dimensions that were broadcast are summed back.
    """
    Q, K, V = check_qkv(Q, K, V)
    G = as_float_array("G", G)
    O, A = attention_forward(Q, K, V, visible)
    if G.shape != O.shape:
        raise ValueError(f"G must have the shape of O = A V, {O.shape}, got {G.shape}")
    dQ, dK, dV = _backward_given_weights(Q, K, V, A, G)
    return _unbroadcast(dQ, Q.shape), _unbroadcast(dK, K.shape), _unbroadcast(dV, V.shape)


def _backward_given_weights(Q, K, V, A, G):
    """The backward formulas from the weights ``A`` on (no checks, no un-broadcasting)."""
    d = Q.shape[-1]
    dV = np.swapaxes(A, -1, -2) @ G  # (..., T_k, T_q) x (..., T_q, r) -> (..., T_k, r)
    dA = G @ np.swapaxes(V, -1, -2)  # (..., T_q, r) x (..., r, T_k) -> (..., T_q, T_k)
    dS = softmax_backward(A, dA)  # (..., T_q, T_k)
    dQ = dS @ K / math.sqrt(d)  # (..., T_q, T_k) x (..., T_k, d) -> (..., T_q, d)
    dK = np.swapaxes(dS, -1, -2) @ Q / math.sqrt(d)  # (..., T_k, T_q) x (..., T_q, d) -> (..., T_k, d)
    return dQ, dK, dV


def causal_mask(T_q, T_k, query_offset=0):
    """Return the ``(T_q, T_k)`` boolean matrix that is True where query i may read key j.

    Query ``i`` sits at position ``query_offset + i`` and may read keys ``j <= query_offset + i``.

    >>> causal_mask(3, 3).astype(int)
    array([[1, 0, 0],
           [1, 1, 0],
           [1, 1, 1]])
    """
    if T_q < 0 or T_k < 0 or query_offset < 0:
        raise ValueError(f"sizes and offset must be non-negative, got T_q={T_q}, T_k={T_k}, query_offset={query_offset}")
    query_position = query_offset + np.arange(T_q)[:, None]
    key_position = np.arange(T_k)[None, :]
    return key_position <= query_position


def causal_attention(query, key, value, query_offset=0, dropout=None, *, key_valid=None):
    """Causal scaled dot-product attention: return ``(output, probabilities)``.

    Scores are ``query key^T / sqrt(d)``; keys after a query's own position get weight
    exactly 0. ``dropout`` (optional callable) is applied to the probabilities used for
    the output; the returned probabilities are the undropped ones. A non-zero
    ``query_offset`` (the key/value cache of Chapter 10) is not implemented yet.
    ``key_valid`` (optional, boolean ``(..., T_k)``, Chapter 4) marks the real keys;
    padded keys get weight exactly 0 too, and a query with no visible key reads nothing.

    >>> import numpy as np
    >>> out, p = causal_attention(np.zeros((2, 1)), np.zeros((2, 1)), np.array([[2.0], [4.0]]))
    >>> p
    array([[1. , 0. ],
           [0.5, 0.5]])
    >>> out
    array([[2.],
           [3.]])
    """
    if query_offset != 0:
        raise NotImplementedError("query_offset != 0 needs the key/value cache of Chapter 10")
    Q, K, V = check_qkv(query, key, value)
    visible = causal_mask(Q.shape[-2], K.shape[-2], query_offset)  # (T_q, T_k)
    if key_valid is not None:
        batch = _batch_shape(Q=Q, K=K, V=V)
        visible = visible & key_padding_mask(key_valid, K.shape[-2], batch)  # (..., T_q, T_k)
    probabilities = softmax(attention_scores(Q, K), visible)  # (..., T_q, T_k)
    weights = probabilities if dropout is None else dropout(probabilities)
    output = weights @ V  # (..., T_q, T_k) x (..., T_k, r) -> (..., T_q, r)
    return output, probabilities
