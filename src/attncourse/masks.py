"""Which keys a query may read: key padding, combined with the causal mask.

A mask here is a boolean array ``visible`` that is True where query ``i`` may read key ``j``
(the convention of :func:`attncourse.softmax`). A batch of sequences of different lengths is
padded to a common length ``T``; ``key_valid (..., T)`` is True at real tokens and False at
padding. Padding is a property of **keys**: a padded position has nothing to offer, so no
query may read it. The query at a padded position still gets a row; if that row has no
visible key at all, :func:`attncourse.softmax` gives it all-zero weights, so it reads nothing.

This module depends on numpy only; :func:`attncourse.causal_attention` uses it.
"""

import numpy as np

__all__ = ["key_valid_from_lengths", "key_padding_mask", "combine_masks", "check_attention_mask"]


def key_valid_from_lengths(lengths, T, side="right"):
    """Return the ``(B, T)`` boolean array that is True at the real tokens of each sequence.

    ``lengths[b]`` real tokens sit at the end of the row for ``side="left"`` (padding first)
    and at the start for ``side="right"`` (padding last).

    >>> key_valid_from_lengths([3, 1], 4).astype(int)
    array([[1, 1, 1, 0],
           [1, 0, 0, 0]])
    >>> key_valid_from_lengths([3, 1], 4, side="left").astype(int)
    array([[0, 1, 1, 1],
           [0, 0, 0, 1]])
    """
    lengths = np.asarray(lengths)
    if lengths.ndim != 1 or lengths.dtype.kind not in "iu":
        raise ValueError(f"lengths must be a 1-D array of integers, got shape {lengths.shape} and dtype {lengths.dtype}")
    if np.any(lengths < 0) or np.any(lengths > T):
        raise ValueError(f"every length must lie in [0, T={T}], got {lengths.tolist()}")
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right', got {side!r}")
    position = np.arange(T)[None, :]  # (1, T)
    if side == "right":
        return position < lengths[:, None]  # (B, T)
    return position >= T - lengths[:, None]  # (B, T)


def key_padding_mask(key_valid, T_k, batch_shape=None):
    """Return ``key_valid`` as a ``(..., 1, T_k)`` mask: every query may read exactly the real keys.

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
        raise ValueError(f"key_valid must be a boolean array, got dtype {key_valid.dtype}")
    if key_valid.ndim < 1 or key_valid.shape[-1] != T_k:
        raise ValueError(f"key_valid must have shape (..., T_k) with T_k={T_k} keys, got shape {key_valid.shape}")
    if batch_shape is not None:
        try:
            fits = np.broadcast_shapes(key_valid.shape[:-1], tuple(batch_shape)) == tuple(batch_shape)
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(
                f"key_valid has shape {key_valid.shape}; its leading dimensions must broadcast to the batch shape {tuple(batch_shape)}"
            )
    return key_valid[..., None, :]  # (..., 1, T_k)


def combine_masks(*masks):
    """Return the entries visible under **every** mask (logical and, with broadcasting).

    >>> import numpy as np
    >>> causal = np.tril(np.ones((3, 3), dtype=bool))
    >>> combine_masks(causal, key_padding_mask(np.array([False, True, True]), 3)).astype(int)
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
        raise ValueError(f"masks do not broadcast: shapes {[m.shape for m in arrays]}") from None
    out = np.ones(shape, dtype=bool)
    for m in arrays:
        out = out & m
    return out


def _expected_mask(T, key_valid):
    """The reference answer: key j visible to query i iff j <= i and key j is real."""
    i = np.arange(T)[:, None]
    j = np.arange(T)[None, :]
    return (j <= i) & key_valid[..., None, :]


def check_attention_mask(mask_fn, seed=0):
    """Check a learner's ``mask_fn(T, key_valid) -> visible``; raise ``AssertionError`` naming the failed property.

    ``key_valid`` is ``(B, T)``; the answer must be a boolean ``(B, T, T)`` array with key
    ``j`` visible to query ``i`` exactly when ``j <= i`` and key ``j`` is a real token.
    The properties are tried in order on several batches (left and right padding, a row
    with nothing visible), and the first one that fails is named.

    >>> def mine(T, key_valid):
    ...     causal = np.tril(np.ones((T, T), dtype=bool))
    ...     return causal & key_valid[:, None, :]
    >>> check_attention_mask(mine)
    'check_attention_mask: all 5 properties hold'
    >>> check_attention_mask(lambda T, kv: np.tril(np.ones((T, T), dtype=bool)) & kv[:, :, None])
    Traceback (most recent call last):
    ...
    AssertionError: padded keys are hidden from every query: query 2 of sequence 0 may read padded key 0
    """
    rng = np.random.default_rng(seed)
    cases = [key_valid_from_lengths([3, 5, 0], 5, side="left"), key_valid_from_lengths([2, 6], 6, side="right")]
    cases.append(rng.random((3, 7)) < 0.6)
    for key_valid in cases:
        B, T = key_valid.shape
        visible = np.asarray(mask_fn(T, key_valid.copy()))
        want = _expected_mask(T, key_valid)
        if visible.shape != (B, T, T) or visible.dtype != np.bool_:
            raise AssertionError(
                f"shape and type: expected a boolean array of shape {(B, T, T)}, got {visible.dtype} {visible.shape}"
            )
        i, j = np.arange(T)[:, None], np.arange(T)[None, :]
        future = np.argwhere(visible & (j > i))
        if future.size:
            b, q, k = future[0]
            raise AssertionError(f"no query reads a future key: query {q} of sequence {b} may read key {k}")
        padded = np.argwhere(visible & ~key_valid[:, None, :])
        if padded.size:
            b, q, k = padded[0]
            raise AssertionError(f"padded keys are hidden from every query: query {q} of sequence {b} may read padded key {k}")
        self_hidden = np.argwhere(key_valid & ~np.diagonal(visible, axis1=-2, axis2=-1))
        if self_hidden.size:
            b, q = self_hidden[0]
            raise AssertionError(f"a real query reads its own key: query {q} of sequence {b} may not read key {q}")
        missing = np.argwhere(want & ~visible)
        if missing.size:
            b, q, k = missing[0]
            raise AssertionError(f"real past keys stay visible: query {q} of sequence {b} may not read real key {k}")
    return "check_attention_mask: all 5 properties hold"
