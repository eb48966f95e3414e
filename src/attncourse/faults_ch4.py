"""Planted mistakes for Chapter 4: each one must be caught by a check of the chapter.

Every function here is deliberately **wrong**. They mirror the correct functions of
:mod:`attncourse.attention`, :mod:`attncourse.multihead` and :mod:`attncourse.positions`:

- :func:`causal_mask_geq`, :func:`causal_attention_geq`: the future test written ``>=``
  instead of ``>``, which also hides the diagonal (a position cannot read itself);
- :func:`causal_attention_mask_after_softmax`: the mask applied to the weights after the
  softmax, so the rows no longer sum to one and the future still sets the denominator;
- :func:`naive_masked_softmax`, :func:`naive_masked_attention_forward`,
  :func:`naive_masked_attention_backward`: hidden scores set to ``-inf`` and an ordinary
  softmax; a row with nothing visible becomes ``NaN`` in both passes;
- :func:`split_heads_no_transpose`, :func:`merge_heads_no_transpose`,
  :func:`merge_heads_reversed`, :func:`split_heads_reversed` and the multi-head layers built
  from them: a reshape without the transpose (mixing positions and features), or heads
  concatenated in the wrong order;
- :func:`positions_after_attention`: position rows added to the output of attention instead
  of to its input;
- :func:`causal_attention_query_padding`: padding hides the padded **queries** (rows) instead
  of the padded **keys** (columns);
- :func:`positions_backward_overwrite`: ``dP`` overwritten by each sequence instead of summed.
"""

import numpy as np

from .attention import _backward_given_weights, attention_scores, causal_mask, check_qkv
from .masks import combine_masks
from .multihead import _backward, _forward, merge_heads, multihead_forward, split_heads
from .softmax import softmax

__all__ = [
    "causal_mask_geq",
    "causal_attention_geq",
    "causal_attention_mask_after_softmax",
    "naive_masked_softmax",
    "naive_masked_attention_forward",
    "naive_masked_attention_backward",
    "split_heads_no_transpose",
    "merge_heads_no_transpose",
    "split_heads_reversed",
    "merge_heads_reversed",
    "multihead_forward_no_transpose",
    "multihead_backward_no_transpose",
    "multihead_forward_reversed",
    "multihead_backward_reversed",
    "positions_after_attention",
    "causal_attention_query_padding",
    "positions_backward_overwrite",
]


def causal_mask_geq(T_q, T_k):
    """WRONG: hides key ``j`` when ``j >= i`` (the diagonal too), not only when ``j > i``.

    >>> causal_mask_geq(3, 3).astype(int)
    array([[0, 0, 0],
           [1, 0, 0],
           [1, 1, 0]])
    """
    future_or_self = np.arange(T_k)[None, :] >= np.arange(T_q)[:, None]
    return ~future_or_self


def causal_attention_geq(Q, K, V):
    """WRONG: causal attention with the ``>=`` mask. Returns ``(O, A)``."""
    Q, K, V = check_qkv(Q, K, V)
    A = softmax(attention_scores(Q, K), causal_mask_geq(Q.shape[-2], K.shape[-2]))  # (..., T_q, T_k)
    return A @ V, A  # (..., T_q, T_k) x (..., T_k, r) -> (..., T_q, r)


def causal_attention_mask_after_softmax(Q, K, V):
    """WRONG: softmax over all keys, then the future weights set to zero. Returns ``(O, A)``."""
    Q, K, V = check_qkv(Q, K, V)
    A = softmax(attention_scores(Q, K)) * causal_mask(Q.shape[-2], K.shape[-2])  # (..., T_q, T_k)
    return A @ V, A  # (..., T_q, T_k) x (..., T_k, r) -> (..., T_q, r)


def naive_masked_softmax(S, visible):
    """WRONG for rows with nothing visible: fill hidden scores with ``-inf``, then an ordinary softmax.

    Such a row has maximum ``-inf``; ``-inf - (-inf)`` is ``NaN``.

    >>> import numpy as np
    >>> visible = np.array([[True, False], [False, False]])  # row 1 has nothing visible
    >>> with np.errstate(invalid="ignore"):
    ...     naive_masked_softmax(np.zeros((2, 2)), visible)
    array([[ 1.,  0.],
           [nan, nan]])
    """
    S = np.where(visible, S, -np.inf)
    shifted = S - np.max(S, axis=-1, keepdims=True)
    E = np.exp(shifted)
    return E / np.sum(E, axis=-1, keepdims=True)


def naive_masked_attention_forward(Q, K, V, visible):
    """WRONG for rows with nothing visible: attention with :func:`naive_masked_softmax`. Returns ``(O, A)``."""
    Q, K, V = check_qkv(Q, K, V)
    A = naive_masked_softmax(attention_scores(Q, K), visible)  # (..., T_q, T_k)
    return A @ V, A  # (..., T_q, T_k) x (..., T_k, r) -> (..., T_q, r)


def naive_masked_attention_backward(Q, K, V, G, visible):
    """WRONG for rows with nothing visible: the backward pass through :func:`naive_masked_softmax`.

    The formulas of :func:`attncourse.attention_backward`, applied to the naive weights: a
    NaN row of ``A`` makes every row of ``dV = A^T G`` NaN, and a NaN row of ``dS`` every row
    of ``dK``. Wherever no row is empty the result equals :func:`attncourse.attention_backward`.
    """
    _, A = naive_masked_attention_forward(Q, K, V, visible)
    return _backward_given_weights(Q, K, V, A, G)


def split_heads_no_transpose(Y, heads):
    """WRONG: reshape ``(..., T, H w)`` straight to ``(..., H, T, w)``, which mixes positions and features."""
    *lead, T, width = Y.shape
    return Y.reshape(*lead, heads, T, width // heads)


def merge_heads_no_transpose(O):
    """WRONG: reshape ``(..., H, T, w)`` straight to ``(..., T, H w)`` (the inverse of the wrong split)."""
    *lead, H, T, w = O.shape
    return O.reshape(*lead, T, H * w)


def merge_heads_reversed(O):
    """WRONG: concatenate the heads in reverse order, head ``H-1`` first."""
    return merge_heads(np.flip(O, axis=-3))


def split_heads_reversed(Y, heads):
    """WRONG: the split that undoes :func:`merge_heads_reversed` (the last block goes to head 0)."""
    return np.flip(split_heads(Y, heads), axis=-3)


def multihead_forward_no_transpose(params, X, heads, key_valid=None):
    """WRONG: multi-head forward with :func:`split_heads_no_transpose` / :func:`merge_heads_no_transpose`."""
    return _forward(params, X, heads, key_valid, split_heads_no_transpose, merge_heads_no_transpose)


def multihead_backward_no_transpose(params, cache, dY):
    """The exact backward of :func:`multihead_forward_no_transpose` (consistent with the wrong forward)."""
    return _backward(params, cache, dY, split_heads_no_transpose, merge_heads_no_transpose)


def multihead_forward_reversed(params, X, heads, key_valid=None):
    """WRONG: multi-head forward that concatenates the heads in reverse order."""
    return _forward(params, X, heads, key_valid, split_heads, merge_heads_reversed)


def multihead_backward_reversed(params, cache, dY):
    """WRONG for the correct forward: ``dC`` is split into heads in reverse order.

    It is also the exact backward of :func:`multihead_forward_reversed`: paired with that
    wrong forward it is consistent, so only a check of the forward values can catch the pair.
    """
    return _backward(params, cache, dY, split_heads_reversed, merge_heads)


def positions_after_attention(attention_params, position_params, X, heads):
    """WRONG: ``multihead(X) + P[:T]``: attention never sees where a token is."""
    Y, _ = multihead_forward(attention_params, X, heads)
    P = position_params["P"]
    return Y + P[: X.shape[-2]]  # (..., T, D) + (T, D)


def causal_attention_query_padding(Q, K, V, key_valid):
    """WRONG: the padding mask hides rows of padded queries instead of columns of padded keys. Returns ``(O, A)``."""
    Q, K, V = check_qkv(Q, K, V)
    T_q, T_k = Q.shape[-2], K.shape[-2]
    rows = np.asarray(key_valid)[..., :, None]  # (..., T, 1): the query axis, which is the mistake
    A = softmax(attention_scores(Q, K), combine_masks(causal_mask(T_q, T_k), rows))  # (..., T_q, T_k)
    return A @ V, A  # (..., T_q, T_k) x (..., T_k, r) -> (..., T_q, r)


def positions_backward_overwrite(params, cache, dY):
    """WRONG: each sequence **overwrites** ``dP[:T]`` instead of adding to it; the last one wins."""
    T = cache["T"]
    dP = np.zeros_like(np.asarray(params["P"], dtype=np.float64))
    for dY_b in np.asarray(dY).reshape(-1, T, dP.shape[1]):
        dP[:T] = dY_b
    return {"P": dP}, np.array(dY, dtype=np.float64)
