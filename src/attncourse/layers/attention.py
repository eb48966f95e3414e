"""Scaled dot-product attention for one head: forward, backward, masks and the causal
variant.

Shapes (leading batch dimensions broadcast): ``Q (..., T_q, d)``, ``K (..., T_k, d)``,
``V (..., T_k, r)``, ``S = Q K^T / sqrt(d)`` and ``A = softmax(S)`` are
``(..., T_q, T_k)``, ``O = A V`` is ``(..., T_q, r)``.

The reference is a layer pair without parameters: ``O, saved = attention_forward(Q, K,
V, visible)`` saves :class:`AttentionSaved` ``(Q, K, V, A)``, and
``dQ, dK, dV = attention_backward(saved, G)`` reads it, for ``G = dJ/dO``.
:func:`causal_attention` and :func:`causal_attention_backward` (the signature of the
conformance suite) are that pair under :func:`causal_visible`.

A mask is a boolean array ``visible`` that is True where query ``i`` may read key ``j``
(the convention of :func:`attncourse.softmax`). The causal mask hides later keys. A
batch of sequences of different lengths is padded to a common length ``T``;
``key_valid (..., T)`` is True at real tokens. Padding is a property of **keys**: no
query may read a padded key. The query at a padded position still gets a row; if that
row has no visible key at all, :func:`attncourse.softmax` gives it all-zero weights, so
it reads nothing.
"""

import math
from typing import NamedTuple

import numpy as np

from .._validate import (as_float_like, is_int, require_broadcast, require_sizes,
                         require_that, shaped)
from ..softmax import softmax, softmax_backward

__all__ = [
    "QKV",
    "AttentionSaved",
    "attention_scores",
    "attention_forward",
    "attention_backward",
    "causal_mask",
    "key_valid_from_lengths",
    "key_padding_mask",
    "combine_masks",
    "causal_visible",
    "causal_attention",
    "causal_attention_backward",
]

QKV = "Q(..., T_q, d) K(..., T_k, d) V(..., T_k, r)"
"""The shape spec of ``Q, K, V`` (:func:`attncourse._validate.shaped`)."""


class AttentionSaved(NamedTuple):
    """What :func:`attention_backward` needs: the inputs and the weights ``A``
    ``(..., T_q, T_k)`` (hidden entries exactly 0)."""

    Q: np.ndarray
    K: np.ndarray
    V: np.ndarray
    A: np.ndarray


def _batch_shape(*arrays):
    """The broadcast leading (batch) dimensions of arrays already validated together."""
    return np.broadcast_shapes(*(a.shape[:-2] for a in arrays))


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
    """Return ``O, saved``: the output ``O = A V`` with
    ``A = softmax(Q K^T / sqrt(d))``, and the :class:`AttentionSaved` ``(Q, K, V, A)``
    that :func:`attention_backward` reads (``saved.A`` are the weights).

    ``visible`` (optional, boolean, broadcastable to ``(..., T_q, T_k)``) marks the keys
    each query may read; see :func:`attncourse.softmax` for rows with nothing visible.

    >>> import numpy as np
    >>> O, saved = attention_forward(np.zeros((2, 3)), np.ones((4, 3)),
    ...                              np.arange(8.0).reshape(4, 2))
    >>> saved.A
    array([[0.25, 0.25, 0.25, 0.25],
           [0.25, 0.25, 0.25, 0.25]])
    >>> O
    array([[3., 4.],
           [3., 4.]])
    """
    Q, K, V = shaped(QKV, Q, K, V)
    S = attention_scores(Q, K)  # (..., T_q, T_k)
    A = softmax(S, visible)  # (..., T_q, T_k)
    O = A @ V  # (..., T_q, T_k) x (..., T_k, r) -> (..., T_q, r)
    return O, AttentionSaved(Q, K, V, A)


def _as_upstream(G, saved):
    """``G`` as a float array of the shape of ``O = A V``, or ``ValueError``."""
    O_shape = _batch_shape(saved.A, saved.V) + (saved.A.shape[-2], saved.V.shape[-1])
    return as_float_like("G", shaped("G(..., T_q, r)", G), O_shape, "O = A V")


def attention_backward(saved, G):
    """Return ``dQ, dK, dV`` for the upstream gradient ``G = dJ/dO`` (the shape of
    ``O``), from the ``saved`` of :func:`attention_forward`.

    The formulas of Chapter 3: ``dV = A^T G``, ``dA = G V^T``,
    ``dS = softmax_backward(A, dA)``, ``dQ = dS K / sqrt(d)``,
    ``dK = dS^T Q / sqrt(d)``. Hidden entries of ``A`` are exact zeros, so they pass no
    gradient. Each gradient has the shape of its input; batch dimensions that were
    broadcast are summed back.

    >>> import numpy as np
    >>> O, saved = attention_forward(np.zeros((2, 1)), np.zeros((2, 1)),
    ...                              np.ones((2, 1)))
    >>> attention_backward(saved, np.ones((2, 1)))[2].ravel()  # dV = A^T G
    array([1., 1.])
    """
    G = _as_upstream(G, saved)
    Q, K, V, A = saved
    d = Q.shape[-1]
    dV = np.swapaxes(A, -1, -2) @ G  # (..., T_k, T_q) x (..., T_q, r) -> (..., T_k, r)
    dA = G @ np.swapaxes(V, -1, -2)  # (..., T_q, r) x (..., r, T_k) -> (..., T_q, T_k)
    A = np.broadcast_to(A, dA.shape)  # a batch held by V alone reaches dA, not A
    dS = softmax_backward(A, dA)  # (..., T_q, T_k)
    dQ = dS @ K / math.sqrt(d)  # (..., T_q, T_k) x (..., T_k, d) -> (..., T_q, d)
    # (..., T_k, T_q) x (..., T_q, d) -> (..., T_k, d)
    dK = np.swapaxes(dS, -1, -2) @ Q / math.sqrt(d)
    return tuple(_unbroadcast(g, x.shape) for g, x in ((dQ, Q), (dK, K), (dV, V)))


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


def _validate_causal(query, key, value, query_offset):
    """Return ``Q, K, V`` (:data:`QKV`), or raise ``ValueError`` unless
    ``query_offset`` is an integer with ``0 <= query_offset`` and
    ``query_offset + T_q <= T_k``.

    Query ``i`` sits at position ``query_offset + i`` and must find its own key there:
    an offset that puts the last query past the last key is inconsistent with the keys.

    >>> import numpy as np
    >>> _ = _validate_causal(np.ones((2, 4)), np.ones((5, 4)), np.ones((5, 1)), 3)
    >>> _validate_causal(np.ones((2, 4)), np.ones((5, 4)), np.ones((5, 1)), 4)
    Traceback (most recent call last):
    ...
    ValueError: query_offset=4 puts the 2 queries at positions 4..5, but there are only
    5 keys (positions 0..4): query has shape (2, 4), key has shape (5, 4);
    query_offset + T_q must be <= T_k
    """
    Q, K, V = shaped(QKV, query, key, value)
    require_that(is_int(query_offset) and query_offset >= 0, "query_offset must be an "
                 "integer >= 0, got {}", query_offset)
    t, T_q, T_k = query_offset, Q.shape[-2], K.shape[-2]
    require_that(t + T_q <= T_k, "query_offset={} puts the {} queries at positions "
                 "{}..{}, but there are only {} keys (positions 0..{}): query has "
                 "shape {}, key has shape {}; query_offset + T_q must be <= T_k", t,
                 T_q, t, t + T_q - 1, T_k, T_k - 1, Q.shape, K.shape)
    return Q, K, V


def causal_attention(
    query, key, value, query_offset=0, dropout=None, *, key_valid=None
):
    """Causal scaled dot-product attention: return ``(output, probabilities)``.

    :func:`attention_forward` under :func:`causal_visible`: scores are
    ``query key^T / sqrt(d)``; keys after a query's own position get weight exactly 0.
    ``dropout`` (optional callable) is applied to the probabilities used for the output;
    the returned probabilities are the undropped ones. ``query_offset`` (Chapter 10,
    the key/value cache) says where the queries sit: query ``i`` is at position
    ``query_offset + i`` and reads the keys ``0 .. query_offset + i``. Decoding with a
    cache passes one new query with ``query_offset = t`` against the ``t + 1`` keys so
    far; the result equals row ``t`` of the whole sequence's attention. An offset below
    0, or one that puts a query past the last key (``query_offset + T_q > T_k``),
    raises ``ValueError``. ``key_valid`` (optional, boolean ``(..., T_k)``, Chapter 4)
    marks the real keys; padded keys get weight exactly 0 too, and a query with no
    visible key reads nothing.

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
    Q, K, V = _validate_causal(query, key, value, query_offset)
    visible = causal_visible(Q, K, V, query_offset, key_valid)  # (..., T_q, T_k)
    O, saved = attention_forward(Q, K, V, visible)
    # (..., T_q, T_k) x (..., T_k, r) -> (..., T_q, r)
    return (O if dropout is None else dropout(saved.A) @ V), saved.A


def causal_attention_backward(query, key, value, G, query_offset=0, *, key_valid=None):
    """Return ``dquery, dkey, dvalue`` of :func:`causal_attention` (no dropout) for
    ``G = dJ/d output``: one forward pass (:func:`attention_forward` under
    :func:`causal_visible`), then :func:`attention_backward`.

    The signature of the attention conformance suite
    (:mod:`attncourse.kit.conformance`), which holds every implementation to these
    gradients.

    >>> import numpy as np
    >>> dq, dk, dv = causal_attention_backward(np.zeros((2, 1)), np.zeros((2, 1)),
    ...                                        np.ones((2, 1)), np.ones((2, 1)))
    >>> dv.ravel()  # key 0 is read fully by query 0 and half by query 1
    array([1.5, 0.5])
    """
    Q, K, V = _validate_causal(query, key, value, query_offset)
    visible = causal_visible(Q, K, V, query_offset, key_valid)  # (..., T_q, T_k)
    _, saved = attention_forward(Q, K, V, visible)
    return attention_backward(saved, G)


def causal_visible(Q, K, V, query_offset=0, key_valid=None):
    """Return the keys each query may read, ``(..., T_q, T_k)``: the causal mask at
    ``query_offset``, and with ``key_valid`` the real keys only."""
    visible = causal_mask(Q.shape[-2], K.shape[-2], query_offset)  # (T_q, T_k)
    if key_valid is None:
        return visible
    # (T_q, T_k) & (..., 1, T_k) -> (..., T_q, T_k)
    batch = _batch_shape(Q, K, V)
    return visible & key_padding_mask(key_valid, K.shape[-2], batch)


# --- masks ----------------------------------------------------------------------------


def _require_lengths(lengths, T, side):
    """Return ``lengths`` as an array of integers in ``[0, T]``, or ``ValueError``."""
    lengths = np.asarray(lengths)
    require_that(lengths.ndim == 1 and lengths.dtype.kind in "iu", "lengths must be a "
                 "1-D array of integers, got shape {} and dtype {}", lengths.shape,
                 lengths.dtype)
    require_that(np.all((0 <= lengths) & (lengths <= T)), "every length must lie in "
                 "[0, T={}], got {}", T, lengths.tolist())
    require_that(side in ("left", "right"), "side must be 'left' or 'right', got {!r}",
                 side)
    return lengths


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
    lengths = _require_lengths(lengths, T, side)
    position = np.arange(T)[None, :]  # (1, T)
    if side == "right":
        return position < lengths[:, None]  # (B, T)
    return position >= T - lengths[:, None]  # (B, T)


def _require_key_valid(key_valid, T_k, batch_shape):
    """Return ``key_valid`` as a boolean array ``(..., T_k)`` whose leading dimensions
    broadcast to ``batch_shape`` (if given), or raise ``ValueError``."""
    key_valid = np.asarray(key_valid)
    require_that(key_valid.dtype == np.bool_, "key_valid must be a boolean array, got "
                 "dtype {}", key_valid.dtype)
    require_that(key_valid.shape[-1:] == (T_k,), "key_valid must have shape (..., T_k) "
                 "with T_k={} keys, got shape {}", T_k, key_valid.shape)
    lead = key_valid.shape[:-1]
    batch = lead if batch_shape is None else tuple(batch_shape)
    fits = len(lead) <= len(batch) and all(n in (1, b) for n, b in zip(lead[::-1],
                                                                        batch[::-1]))
    require_that(fits, "key_valid has shape {}; its leading dimensions must broadcast "
                 "to the batch shape {}", key_valid.shape, batch)
    return key_valid


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
    key_valid = _require_key_valid(key_valid, T_k, batch_shape)
    return key_valid[..., None, :]  # (..., 1, T_k)


def _require_masks(masks):
    """Return the boolean ``masks`` as arrays and their broadcast shape, or raise
    ``ValueError``."""
    require_that(masks, "combine_masks needs at least one mask")
    arrays = [np.asarray(m) for m in masks]
    for i, m in enumerate(arrays):
        require_that(m.dtype == np.bool_, "mask {} must be boolean, got dtype {}", i,
                     m.dtype)
    shapes = [m.shape for m in arrays]
    return arrays, require_broadcast(shapes, "masks do not broadcast: shapes {}",
                                     shapes)


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
    arrays, shape = _require_masks(masks)
    out = np.ones(shape, dtype=bool)
    for m in arrays:
        out = out & m  # visible where every mask so far says visible
    return out
