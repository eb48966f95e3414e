"""Scaled dot-product attention for one head: forward, backward, masks and the causal
variant.

Shapes (leading batch dimensions broadcast): ``Q (..., T_q, d)``, ``K (..., T_k, d)``,
``V (..., T_k, r)``, ``S = Q K^T / sqrt(d)`` and ``A = softmax(S)`` are
``(..., T_q, T_k)``, ``O = A V`` is ``(..., T_q, r)``.

A mask is a boolean array ``visible`` that is True where query ``i`` may read key ``j``
(the convention of :func:`attncourse.softmax`). The causal mask hides later keys. A
batch of sequences of different lengths is padded to a common length ``T``;
``key_valid (..., T)`` is True at real tokens. Padding is a property of **keys**: no
query may read a padded key. The query at a padded position still gets a row; if that
row has no visible key at all, :func:`attncourse.softmax` gives it all-zero weights, so
it reads nothing.
"""

import math

import numpy as np

from .._validate import as_float_array, require_sizes
from ..softmax import softmax, softmax_backward

__all__ = [
    "validate_qkv",
    "validate_query_offset",
    "attention_scores",
    "attention_forward",
    "attention_backward",
    "backward_from_weights",
    "causal_mask",
    "key_valid_from_lengths",
    "key_padding_mask",
    "combine_masks",
    "causal_visible",
    "causal_attention",
    "causal_attention_backward",
]


def _batch_shape(**arrays):
    """Broadcast the leading (batch) dimensions of the named arrays, naming them on
    failure."""
    try:
        return np.broadcast_shapes(*(a.shape[:-2] for a in arrays.values()))
    except ValueError:
        listed = ", ".join(f"{n} {a.shape}" for n, a in arrays.items())
        raise ValueError(
            f"leading batch dimensions do not broadcast: {listed}"
        ) from None


def validate_qkv(Q, K, V):
    """Return ``Q, K, V`` as float arrays, or raise ``ValueError`` naming the shapes at
    fault.

    >>> import numpy as np
    >>> validate_qkv(np.ones((3, 2)), np.ones((4, 5)), np.ones((4, 1)))
    Traceback (most recent call last):
    ...
    ValueError: Q and K must share the key width d: Q has shape (3, 2) (d=2),
    K has shape (4, 5) (d=5)
    """
    Q, K, V = (as_float_array(n, x) for n, x in (("Q", Q), ("K", K), ("V", V)))
    for name, x in (("Q", Q), ("K", K), ("V", V)):
        if x.ndim < 2:
            raise ValueError(
                f"{name} must be at least 2-D (positions, features), got shape "
                f"{x.shape}"
            )
    if Q.shape[-1] != K.shape[-1]:
        raise ValueError(
            f"Q and K must share the key width d: Q has shape {Q.shape} "
            f"(d={Q.shape[-1]}), K has shape {K.shape} (d={K.shape[-1]})"
        )
    if K.shape[-2] != V.shape[-2]:
        raise ValueError(
            f"K and V must have one row per key position: K has shape {K.shape} "
            f"({K.shape[-2]} keys), V has shape {V.shape} ({V.shape[-2]} values)"
        )
    _batch_shape(Q=Q, K=K, V=V)
    return Q, K, V


def _unbroadcast(grad, shape):
    """Sum ``grad`` over the dimensions that broadcasting added to an input of
    ``shape``."""
    while grad.ndim > len(shape):
        grad = grad.sum(axis=0)
    for axis, n in enumerate(shape):
        if n == 1 and grad.shape[axis] != 1:
            grad = grad.sum(axis=axis, keepdims=True)
    return grad


def attention_scores(Q, K):
    """Return ``S = Q K^T / sqrt(d)``."""
    d = Q.shape[-1]
    # (..., T_q, d) x (..., d, T_k) -> (..., T_q, T_k)
    return (Q @ np.swapaxes(K, -1, -2)) / math.sqrt(d)


def attention_forward(Q, K, V, visible=None):
    """Return ``O, A``: the output ``A V`` and the weights
    ``A = softmax(Q K^T / sqrt(d))``.

    ``visible`` (optional, boolean, broadcastable to ``(..., T_q, T_k)``) marks the keys
    each query may read; see :func:`attncourse.softmax` for rows with nothing visible.

    >>> import numpy as np
    >>> O, A = attention_forward(np.zeros((2, 3)), np.ones((4, 3)),
    ...                          np.arange(8.0).reshape(4, 2))
    >>> A
    array([[0.25, 0.25, 0.25, 0.25],
           [0.25, 0.25, 0.25, 0.25]])
    >>> O
    array([[3., 4.],
           [3., 4.]])
    """
    Q, K, V = validate_qkv(Q, K, V)
    S = attention_scores(Q, K)  # (..., T_q, T_k)
    A = softmax(S, visible)  # (..., T_q, T_k)
    O = A @ V  # (..., T_q, T_k) x (..., T_k, r) -> (..., T_q, r)
    return O, A


def attention_backward(Q, K, V, G, visible=None):
    """Return ``dQ, dK, dV`` for the upstream gradient ``G = dJ/dO`` (the shape of
    ``O``).

    The forward pass is recomputed. Each gradient has the shape of its input; batch
    dimensions that were broadcast are summed back.
    """
    Q, K, V = validate_qkv(Q, K, V)
    G = as_float_array("G", G)
    O, A = attention_forward(Q, K, V, visible)
    if G.shape != O.shape:
        raise ValueError(f"G must have the shape of O = A V, {O.shape}, got {G.shape}")
    dQ, dK, dV = backward_from_weights(Q, K, V, A, G)
    return (
        _unbroadcast(dQ, Q.shape),
        _unbroadcast(dK, K.shape),
        _unbroadcast(dV, V.shape),
    )


def backward_from_weights(Q, K, V, A, G):
    """Return ``dQ, dK, dV`` from the saved weights ``A`` (no checks, no
    un-broadcasting).

    The formulas of Chapter 3: ``dV = A^T G``, ``dA = G V^T``,
    ``dS = softmax_backward(A, dA)``, ``dQ = dS K / sqrt(d)``,
    ``dK = dS^T Q / sqrt(d)``. Masked entries of ``A`` are exact zeros, so they pass no
    gradient.
    """
    d = Q.shape[-1]
    dV = np.swapaxes(A, -1, -2) @ G  # (..., T_k, T_q) x (..., T_q, r) -> (..., T_k, r)
    dA = G @ np.swapaxes(V, -1, -2)  # (..., T_q, r) x (..., r, T_k) -> (..., T_q, T_k)
    A = np.broadcast_to(A, dA.shape)  # a batch held by V alone reaches dA, not A
    dS = softmax_backward(A, dA)  # (..., T_q, T_k)
    dQ = dS @ K / math.sqrt(d)  # (..., T_q, T_k) x (..., T_k, d) -> (..., T_q, d)
    # (..., T_k, T_q) x (..., T_q, d) -> (..., T_k, d)
    dK = np.swapaxes(dS, -1, -2) @ Q / math.sqrt(d)
    return dQ, dK, dV


def causal_mask(T_q, T_k, query_offset=0):
    """Return the ``(T_q, T_k)`` boolean matrix that is True where query i may read key
    j.

    Query ``i`` sits at position ``query_offset + i`` and may read keys
    ``j <= query_offset + i``.

    >>> causal_mask(3, 3).astype(int)
    array([[1, 0, 0],
           [1, 1, 0],
           [1, 1, 1]])
    """
    require_sizes(allow_zero=True, T_q=T_q, T_k=T_k, query_offset=query_offset)
    query_position = query_offset + np.arange(T_q)[:, None]
    key_position = np.arange(T_k)[None, :]
    return key_position <= query_position


def causal_attention(
    query, key, value, query_offset=0, dropout=None, *, key_valid=None
):
    """Causal scaled dot-product attention: return ``(output, probabilities)``.

    Scores are ``query key^T / sqrt(d)``; keys after a query's own position get weight
    exactly 0. ``dropout`` (optional callable) is applied to the probabilities used for
    the output; the returned probabilities are the undropped ones. ``query_offset``
    (Chapter 10, the key/value cache) says where the queries sit: query ``i`` is at
    position ``query_offset + i`` and reads the keys ``0 .. query_offset + i``. Decoding
    with a cache passes one new query with ``query_offset = t`` against the ``t + 1``
    keys so far; the result equals row ``t`` of the whole sequence's attention. An
    offset below 0, or one that puts a query past the last key
    (``query_offset + T_q > T_k``), raises ``ValueError``
    (:func:`validate_query_offset`). ``key_valid`` (optional, boolean ``(..., T_k)``,
    Chapter 4) marks the real keys; padded keys get weight exactly 0 too, and a query
    with no visible key reads nothing.

    >>> import numpy as np
    >>> out, p = causal_attention(np.zeros((2, 1)), np.zeros((2, 1)),
    ...                           np.array([[2.0], [4.0]]))
    >>> p
    array([[1. , 0. ],
           [0.5, 0.5]])
    >>> out
    array([[2.],
           [3.]])
    >>> causal_attention(np.zeros((1, 1)), np.zeros((2, 1)), np.array([[2.0], [4.0]]),
    ...                  query_offset=1)[1]  # the second query alone: row 1 above
    array([[0.5, 0.5]])
    """
    Q, K, V = validate_qkv(query, key, value)
    validate_query_offset(query_offset, Q, K)
    visible = causal_visible(Q, K, V, query_offset, key_valid)  # (..., T_q, T_k)
    probabilities = softmax(attention_scores(Q, K), visible)  # (..., T_q, T_k)
    weights = probabilities if dropout is None else dropout(probabilities)
    output = weights @ V  # (..., T_q, T_k) x (..., T_k, r) -> (..., T_q, r)
    return output, probabilities


def causal_attention_backward(query, key, value, dO, query_offset=0, *, key_valid=None):
    """Return ``dquery, dkey, dvalue`` of :func:`causal_attention` (no dropout) for
    ``dO = dJ/d output``.

    The forward pass is recomputed; every implementation of the ``causal_attention``
    signature is held to these gradients by the conformance suite
    (:mod:`attncourse.kit.conformance`).

    >>> import numpy as np
    >>> dq, dk, dv = causal_attention_backward(np.zeros((2, 1)), np.zeros((2, 1)),
    ...                                        np.ones((2, 1)), np.ones((2, 1)))
    >>> dv.ravel()  # key 0 is read fully by query 0 and half by query 1
    array([1.5, 0.5])
    """
    Q, K, V = validate_qkv(query, key, value)
    validate_query_offset(query_offset, Q, K)
    return attention_backward(
        Q, K, V, dO, causal_visible(Q, K, V, query_offset, key_valid)
    )


def validate_query_offset(query_offset, Q, K):
    """Raise ``ValueError`` unless ``query_offset`` is an integer with
    ``0 <= query_offset`` and ``query_offset + T_q <= T_k``.

    Query ``i`` sits at position ``query_offset + i`` and must find its own key there:
    an offset that puts the last query past the last key is inconsistent with the keys.

    >>> import numpy as np
    >>> validate_query_offset(3, np.ones((2, 4)), np.ones((5, 4)))
    >>> validate_query_offset(4, np.ones((2, 4)), np.ones((5, 4)))
    Traceback (most recent call last):
    ...
    ValueError: query_offset=4 puts the 2 queries at positions 4..5, but there are only
    5 keys (positions 0..4): query has shape (2, 4), key has shape (5, 4);
    query_offset + T_q must be <= T_k
    """
    if isinstance(query_offset, (bool, np.bool_)) or not isinstance(
        query_offset, (int, np.integer)
    ):
        raise ValueError(f"query_offset must be an integer >= 0, got {query_offset!r}")
    if query_offset < 0:
        raise ValueError(f"query_offset must be an integer >= 0, got {query_offset}")
    T_q, T_k = Q.shape[-2], K.shape[-2]
    if query_offset + T_q > T_k:
        raise ValueError(
            f"query_offset={query_offset} puts the {T_q} queries at positions "
            f"{query_offset}..{query_offset + T_q - 1}, but there are only {T_k} keys "
            f"(positions 0..{T_k - 1}): query has shape {Q.shape}, key has shape "
            f"{K.shape}; query_offset + T_q must be <= T_k"
        )


def causal_visible(Q, K, V, query_offset=0, key_valid=None):
    """Return the keys each query may read: the causal mask, and with ``key_valid`` the
    real keys only."""
    visible = causal_mask(Q.shape[-2], K.shape[-2], query_offset)  # (T_q, T_k)
    if key_valid is not None:
        batch = _batch_shape(Q=Q, K=K, V=V)
        # (..., T_q, T_k)
        visible = visible & key_padding_mask(key_valid, K.shape[-2], batch)
    return visible


# --- masks ----------------------------------------------------------------------------


def key_valid_from_lengths(lengths, T, side="right"):
    """Return the ``(B, T)`` boolean array that is True at the real tokens of each
    sequence.

    ``lengths[b]`` real tokens sit at the end of the row for ``side="left"`` (padding
    first) and at the start for ``side="right"`` (padding last).

    >>> key_valid_from_lengths([3, 1], 4).astype(int)
    array([[1, 1, 1, 0],
           [1, 0, 0, 0]])
    >>> key_valid_from_lengths([3, 1], 4, side="left").astype(int)
    array([[0, 1, 1, 1],
           [0, 0, 0, 1]])
    """
    lengths = np.asarray(lengths)
    if lengths.ndim != 1 or lengths.dtype.kind not in "iu":
        raise ValueError(
            f"lengths must be a 1-D array of integers, got shape {lengths.shape} and "
            f"dtype {lengths.dtype}"
        )
    if np.any(lengths < 0) or np.any(lengths > T):
        raise ValueError(f"every length must lie in [0, T={T}], got {lengths.tolist()}")
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right', got {side!r}")
    position = np.arange(T)[None, :]  # (1, T)
    if side == "right":
        return position < lengths[:, None]  # (B, T)
    return position >= T - lengths[:, None]  # (B, T)


def key_padding_mask(key_valid, T_k, batch_shape=None):
    """Return ``key_valid`` as a ``(..., 1, T_k)`` mask: every query may read exactly
    the real keys.

    The new axis is the query axis, so the mask broadcasts against ``(..., T_q, T_k)``
    scores: it hides **columns** (keys), never rows (queries). If ``batch_shape`` (the
    leading dimensions of the scores) is given, ``key_valid``'s leading dimensions must
    broadcast to it.

    >>> key_padding_mask(np.array([False, True, True]), 3).astype(int)
    array([[0, 1, 1]])
    >>> key_padding_mask(np.array([1, 1, 0]), 3)
    Traceback (most recent call last):
    ...
    ValueError: key_valid must be a boolean array, got dtype int64
    """
    key_valid = np.asarray(key_valid)
    if key_valid.dtype != np.bool_:
        raise ValueError(
            f"key_valid must be a boolean array, got dtype {key_valid.dtype}"
        )
    if key_valid.ndim < 1 or key_valid.shape[-1] != T_k:
        raise ValueError(
            f"key_valid must have shape (..., T_k) with T_k={T_k} keys, got shape "
            f"{key_valid.shape}"
        )
    if batch_shape is not None:
        try:
            fits = np.broadcast_shapes(
                key_valid.shape[:-1], tuple(batch_shape)
            ) == tuple(batch_shape)
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(
                f"key_valid has shape {key_valid.shape}; its leading dimensions must "
                f"broadcast to the batch shape {tuple(batch_shape)}"
            )
    return key_valid[..., None, :]  # (..., 1, T_k)


def combine_masks(*masks):
    """Return the entries visible under **every** mask (logical and, with broadcasting).

    >>> import numpy as np
    >>> causal = np.tril(np.ones((3, 3), dtype=bool))
    >>> padding = key_padding_mask(np.array([False, True, True]), 3)
    >>> combine_masks(causal, padding).astype(int)
    array([[0, 0, 0],
           [0, 1, 0],
           [0, 1, 1]])
    """
    if not masks:
        raise ValueError("combine_masks needs at least one mask")
    arrays = [np.asarray(m) for m in masks]
    for i, m in enumerate(arrays):
        if m.dtype != np.bool_:
            raise ValueError(f"mask {i} must be boolean, got dtype {m.dtype}")
    try:
        shape = np.broadcast_shapes(*(m.shape for m in arrays))
    except ValueError:
        raise ValueError(
            f"masks do not broadcast: shapes {[m.shape for m in arrays]}"
        ) from None
    out = np.ones(shape, dtype=bool)
    for m in arrays:
        out = out & m
    return out
