"""Tiled attention: the online softmax, and a forward and backward that never store T x
T.

A row of attention reads its keys tile by tile. What it keeps of the tiles it has read
is the **state** ``(m, l, o)`` of :class:`SoftmaxState`: the running maximum ``m`` of
the visible scores, the running normaliser ``l = sum_j exp(s_j - m)`` and the
unnormalised output ``o = sum_j exp(s_j - m) v_j``. Two states of the same row merge
exactly (:func:`merge_states`: rescale both to the larger maximum and add), in any
order, and the state of the whole row gives ``O = o / l`` and the log-sum-exp
``lse = m + log l`` (:func:`finish_state`). Chapter 9 derives this with sympy.

:func:`tiled_attention_forward` walks the tiles of :func:`causal_tiles` (query blocks of
``block_q`` rows, key blocks of ``block_k`` columns; with ``causal=True`` the tiles
entirely above the diagonal are skipped) and saves only ``O`` and ``lse``;
:func:`tiled_attention_backward` recomputes each tile's weights
``P = exp(S - lse)`` and uses ``rowsum(dA * A) = rowsum(dO * O)``, an ``O(T r)``
reduction. Neither allocates a ``T_q x T_k`` array: memory grows as ``T (d + r)`` plus
one tile. Masks follow Chapter 4: hidden keys get weight exactly 0, and a query with no
visible key (all its keys padded) reads nothing.

:func:`tiled_causal_attention` and :func:`tiled_causal_attention_backward` have the
``causal_attention`` signature and pass the attention conformance suite
(:mod:`attncourse.kit.conformance`). The probabilities they return are a
:class:`TiledWeights`: computed from ``lse``, block of rows by block of rows, only when
converted to an array (``np.asarray``). With ``dropout`` they are formed in full, since
the dropout mask is as large as they are.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> Q, K, V = rng.normal(size=(5, 3)), rng.normal(size=(5, 3)), rng.normal(size=(5, 2))
>>> O, saved = tiled_attention_forward(Q, K, V, causal=True, block_q=2, block_k=3)
>>> from attncourse.layers.attention import causal_attention
>>> bool(np.allclose(O, causal_attention(Q, K, V)[0], rtol=1e-13, atol=1e-15))
True
"""

import math
from typing import NamedTuple

import numpy as np

from .layers.attention import _batch_shape, _unbroadcast, key_padding_mask, validate_qkv
from ._validate import as_float_array
from .fast import SEQUENTIAL_BELOW, default_workers, run_parallel

__all__ = [
    "SoftmaxState",
    "empty_state",
    "tile_state",
    "merge_states",
    "finish_state",
    "Tile",
    "causal_tiles",
    "require_blocks",
    "TiledSaved",
    "TiledWeights",
    "tiled_attention_forward",
    "tiled_attention_backward",
    "tiled_causal_attention",
    "tiled_causal_attention_backward",
]

DEFAULT_BLOCK = 256


# --- the online softmax ---------------------------------------------------------------

class SoftmaxState(NamedTuple):
    """The state of a partial row: what the keys read so far leave behind.

    ``m (..., n)`` the maximum of the visible scores read (``-inf``: none yet);
    ``l (..., n)`` the normaliser ``sum_j exp(s_j - m)``; ``o (..., n, r)`` the
    unnormalised output ``sum_j exp(s_j - m) v_j``.
    """

    m: np.ndarray
    l: np.ndarray  # noqa: E741 (the symbol of the derivation)
    o: np.ndarray


def _finite_or_zero(m):
    """``m`` where it is finite, else 0: a shift that never computes
    ``-inf - (-inf)``."""
    return np.where(np.isfinite(m), m, 0.0).astype(m.dtype, copy=False)


def empty_state(shape, r, dtype=np.float64):
    """Return the state of rows that have read no key: ``m = -inf``, ``l = 0``,
    ``o = 0``.

    ``shape`` is the shape of ``m`` (batch axes and the ``n`` rows), ``r`` the width of
    the values. It is neutral: merging it with any state gives that state.

    >>> empty_state((2,), 3).m
    array([-inf, -inf])
    """
    shape = tuple(shape)
    return SoftmaxState(np.full(shape, -np.inf, dtype), np.zeros(shape, dtype),
                        np.zeros(shape + (r,), dtype))


def tile_state(S, V, visible=None):
    """Return the :class:`SoftmaxState` of rows that read one tile of keys.

    ``S (..., n, k)`` are the scores of ``n`` queries against ``k`` keys,
    ``V (..., k, r)`` the values of those keys, ``visible`` (optional, boolean,
    broadcastable to ``S``) marks the keys each query may read. A row that sees no key
    of the tile gets the empty state.

    >>> import numpy as np
    >>> state = tile_state(np.array([[0.0, np.log(3.0)]]), np.array([[4.0], [8.0]]))
    >>> state.m, state.l, state.o
    (array([1.09861229]), array([1.33333333]), array([[9.33333333]]))
    """
    S = as_float_array("S", S)
    V = as_float_array("V", V)
    if S.ndim < 2 or V.ndim < 2 or S.shape[-1] != V.shape[-2]:
        raise ValueError(
            f"S (..., n, k) and V (..., k, r) must share the k keys: S has "
            f"shape {S.shape}, V has shape {V.shape}"
        )
    return _tile_state(S.copy(), V, visible)


def _hide(S, visible):
    """``S`` with ``-inf`` where ``visible`` is False (in place when the shapes
    allow)."""
    if visible is None:
        return S
    if np.broadcast_shapes(S.shape, visible.shape) != S.shape:
        return np.where(visible, S, -np.inf)
    np.copyto(S, -np.inf, where=~visible)
    return S


def _subtract(S, shift):
    """``S - shift``, in place when ``S`` already has the shape of the result (it lacks
    batch axes that only ``V`` had)."""
    if np.broadcast_shapes(S.shape, shift.shape) != S.shape:
        return S - shift
    S -= shift
    return S


def _tile_state(S, V, visible):
    """:func:`tile_state`, overwriting ``S`` (a fresh tile of scores)."""
    S = _hide(S, visible)  # hidden keys never enter
    m = S.max(axis=-1)  # (..., n); -inf for a row that sees no key
    S -= _finite_or_zero(m)[..., None]  # (..., n, k), every entry <= 0 or -inf
    P = np.exp(S, out=S)
    V1 = np.ones(V.shape[:-1] + (V.shape[-1] + 1,), P.dtype)  # [V | 1]
    V1[..., :-1] = V
    o_l = P @ V1  # (..., n, k) x (..., k, r + 1): the sum of P comes with o
    m = np.broadcast_to(m, o_l.shape[:-1])  # batch axes that only V had
    return SoftmaxState(m, o_l[..., -1], o_l[..., :-1])


def _require_same_rows(a, b):
    for name, x, y in (("m", a.m, b.m), ("l", a.l, b.l), ("o", a.o, b.o)):
        if np.shape(x) != np.shape(y):
            raise ValueError(
                f"the two states must describe the same rows: {name} has "
                f"shapes {np.shape(x)} and {np.shape(y)}"
            )


def merge_states(a, b):
    """Return the state of the rows that read the keys of ``a`` and those of ``b``.

    Both are rescaled to the larger maximum ``m = max(m_a, m_b)``:
    ``l = e^(m_a - m) l_a + e^(m_b - m) l_b`` and likewise ``o``. Exact (in exact
    arithmetic), symmetric, associative; the empty state is neutral.

    >>> import numpy as np
    >>> S, V = np.array([[0.0, 1.0, -2.0]]), np.array([[1.0], [2.0], [3.0]])
    >>> whole = tile_state(S, V)
    >>> merged = merge_states(tile_state(S[:, :1], V[:1]), tile_state(S[:, 1:], V[1:]))
    >>> bool(np.allclose(merged.o, whole.o) and np.allclose(merged.l, whole.l))
    True
    """
    a, b = SoftmaxState(*a), SoftmaxState(*b)
    _require_same_rows(a, b)
    m = np.maximum(a.m, b.m)  # (..., n)
    shift = _finite_or_zero(m)
    alpha, beta = np.exp(a.m - shift), np.exp(b.m - shift)  # (..., n), 0 for -inf
    return SoftmaxState(
        m, alpha * a.l + beta * b.l, alpha[..., None] * a.o + beta[..., None] * b.o
    )


def finish_state(state):
    """Return ``O = o / l`` and ``lse = m + log l`` of finished rows.

    A row that saw no key (``l = 0``) gets ``O = 0`` and ``lse = -inf``: it reads
    nothing, without computing ``0 / 0``.

    >>> import numpy as np
    >>> state = SoftmaxState(np.array([0.0, -np.inf]), np.array([2.0, 0.0]),
    ...                      np.array([[4.0], [0.0]]))
    >>> O, lse = finish_state(state)
    >>> O.ravel(), lse
    (array([2., 0.]), array([0.69314718,       -inf]))
    """
    m, l, o = SoftmaxState(*state)
    seen = l > 0  # (..., n)
    O = np.divide(o, l[..., None], out=np.zeros_like(o), where=seen[..., None])
    lse = np.where(seen, m + np.log(np.where(seen, l, 1.0)), -np.inf).astype(m.dtype)
    return O, lse


# --- the tiles ------------------------------------------------------------------------


class Tile(NamedTuple):
    """Queries ``i0 .. i1-1`` against keys ``j0 .. j1-1``; ``masked``: the tile crosses
    the diagonal, so some of its keys come after some of its queries."""

    i0: int
    i1: int
    j0: int
    j1: int
    masked: bool


def require_blocks(block_q, block_k):
    """Raise ``ValueError`` naming a tile size that is not a positive integer.

    >>> require_blocks(4, 0)
    Traceback (most recent call last):
    ...
    ValueError: block_k must be a positive integer, got 0
    """
    for name, n in (("block_q", block_q), ("block_k", block_k)):
        if (
            isinstance(n, (bool, np.bool_))
            or not isinstance(n, (int, np.integer))
            or n < 1
        ):
            raise ValueError(f"{name} must be a positive integer, got {n!r}")


def causal_tiles(T_q, T_k, block_q, block_k, causal=True):
    """Return the tiles a pass visits, row block by row block, keys in order.

    With ``causal=True`` query ``i`` reads keys ``j <= i``: a tile whose first key comes
    after its last query (``j0 > i1 - 1``) is skipped, a tile that crosses the diagonal
    is ``masked``. Without, every tile is visited unmasked.

    >>> [(t.i0, t.j0, t.masked) for t in causal_tiles(4, 4, 2, 2)]
    [(0, 0, True), (2, 0, False), (2, 2, True)]
    """
    require_blocks(block_q, block_k)
    tiles = []
    for i0 in range(0, T_q, block_q):
        i1 = min(i0 + block_q, T_q)
        for j0 in range(0, T_k, block_k):
            j1 = min(j0 + block_k, T_k)
            if causal and j0 > i1 - 1:  # every key after every query of the tile
                continue
            tiles.append(Tile(i0, i1, j0, j1, bool(causal and j1 - 1 > i0)))
    return tiles


def _tile_visible(tile, kv):
    """The boolean mask of a tile (None when every key is visible)."""
    visible = None
    if tile.masked:
        visible = (
            np.arange(tile.j0, tile.j1)[None, :] <= np.arange(tile.i0, tile.i1)[:, None]
        )  # (bq, bk)
    if kv is not None:
        part = kv[..., tile.j0 : tile.j1]  # (..., 1, bk)
        visible = part if visible is None else visible & part
    return visible


# --- forward and backward -------------------------------------------------------------


class TiledSaved(NamedTuple):
    """What the backward pass needs: inputs, output, per-row log-sum-exp, the
    settings."""

    Q: np.ndarray
    K: np.ndarray
    V: np.ndarray
    O: np.ndarray  # (..., T_q, r)
    lse: np.ndarray  # (..., T_q); -inf for a query that sees no key
    kv: object  # key_valid as a (..., 1, T_k) mask, or None
    causal: bool
    block_q: int
    block_k: int
    workers: object = None  # threads; None: the default


def _workers(workers, Q, K, V):
    """The default: one thread for a small pass, else the machine's cores."""
    if workers is not None:
        return workers
    batch = _batch_shape(Q=Q, K=K, V=V)
    size = math.prod(batch) * Q.shape[-2] * K.shape[-2]
    return 1 if size < SEQUENTIAL_BELOW else default_workers()


def _prepare(Q, K, V, key_valid, block_q, block_k):
    require_blocks(block_q, block_k)
    Q, K, V = validate_qkv(Q, K, V)
    batch = _batch_shape(Q=Q, K=K, V=V)
    kv = None if key_valid is None else key_padding_mask(key_valid, K.shape[-2], batch)
    return Q, K, V, batch, kv


def _forward(
    Q,
    K,
    V,
    kv,
    causal,
    block_q,
    block_k,
    merge=merge_states,
    tiles=causal_tiles,
    workers=None,
):
    """``O, lse`` by the online softmax over the tiles; ``merge`` and ``tiles`` are the
    two pieces a planted fault replaces."""
    batch = _batch_shape(Q=Q, K=K, V=V)
    (T_q, d), (T_k, r) = Q.shape[-2:], V.shape[-2:]
    dtype = np.result_type(Q, K, V)
    scale = dtype.type(1 / math.sqrt(d))
    O = np.zeros(batch + (T_q, r), dtype)
    lse = np.full(batch + (T_q,), -np.inf, dtype)
    visits = tiles(T_q, T_k, block_q, block_k, causal)

    def row_block(i0):
        i1 = min(i0 + block_q, T_q)
        Qs = Q[..., i0:i1, :] * scale  # (..., bq, d): the T x d operand scaled
        state = empty_state(batch + (i1 - i0,), r, dtype)
        for tile in (t for t in visits if t.i0 == i0):
            S = Qs @ np.swapaxes(K[..., tile.j0 : tile.j1, :], -1, -2)  # (..., bq, bk)
            state = merge(
                state,
                _tile_state(S, V[..., tile.j0 : tile.j1, :], _tile_visible(tile, kv)),
            )
        O[..., i0:i1, :], lse[..., i0:i1] = finish_state(state)

    run_parallel(row_block, range(0, T_q, block_q), _workers(workers, Q, K, V))
    return O, lse


def tiled_attention_forward(
    Q,
    K,
    V,
    *,
    causal=False,
    key_valid=None,
    block_q=DEFAULT_BLOCK,
    block_k=DEFAULT_BLOCK,
    workers=None,
):
    """Return ``O, saved``: attention by tiles, the ``T_q x T_k`` weights never stored.

    ``Q (..., T_q, d)``, ``K (..., T_k, d)``, ``V (..., T_k, r)``, batch axes broadcast;
    ``causal`` hides keys ``j > i`` (and skips the tiles above the diagonal);
    ``key_valid`` (optional, boolean ``(..., T_k)``) hides padded keys. ``saved`` is a
    :class:`TiledSaved` for :func:`tiled_attention_backward`. ``workers`` threads
    (default: the machine's cores, one for a small pass) share the blocks of queries;
    the backward pass shares the blocks of keys, each thread adding into its own ``dQ``
    (summed in a fixed order, so the result does not depend on the scheduling).
    """
    Q, K, V, _, kv = _prepare(Q, K, V, key_valid, block_q, block_k)
    O, lse = _forward(Q, K, V, kv, bool(causal), block_q, block_k, workers=workers)
    return O, TiledSaved(Q, K, V, O, lse, kv, bool(causal), block_q, block_k, workers)


def tiled_attention_backward(saved, dO, *, workers=None):
    """Return ``dQ, dK, dV`` for ``dO = dJ/dO``, one tile at a time.

    Each tile's weights are recomputed from the saved per-row log-sum-exp,
    ``P = exp(S - lse)``; ``dS = P (dP - delta)`` with ``delta = rowsum(dO * O)``, the
    ``O(T r)`` form of ``rowsum(dA * A)``. Batch axes that were broadcast are summed
    back.
    """
    Q, K, V, O, lse, kv, causal, block_q, block_k = saved[:9]
    workers = saved.workers if workers is None else workers
    dO = as_float_array("dO", dO)
    if dO.shape != O.shape:
        raise ValueError(
            f"dO must have the shape of the output, {O.shape}, got {dO.shape}"
        )
    batch = O.shape[:-2]
    dtype = O.dtype
    d = Q.shape[-1]
    scale = dtype.type(1 / math.sqrt(d))
    delta = np.einsum("...ij,...ij->...i", dO, O)  # rowsum(dA * A) = rowsum(dO * O)
    shift = _finite_or_zero(lse)  # a row that sees no key: every P entry is hidden
    dK = np.zeros(batch + K.shape[-2:], dtype)
    dV = np.zeros(batch + V.shape[-2:], dtype)
    visits = causal_tiles(Q.shape[-2], K.shape[-2], block_q, block_k, causal)
    key_blocks = sorted({t.j0 for t in visits})
    workers = _workers(workers, Q, K, V)
    groups = [key_blocks[w::workers] for w in range(workers)]  # fixed: deterministic
    dQ_parts = [np.zeros(batch + Q.shape[-2:], dtype) for g in groups if g]

    def key_group(item):
        dQ, blocks = item  # each group its own dQ, summed in a fixed order below
        for t in (t for t in visits if t.j0 in blocks):
            Qs = Q[..., t.i0 : t.i1, :] * scale  # (..., bq, d)
            K_j, V_j = K[..., t.j0 : t.j1, :], V[..., t.j0 : t.j1, :]
            dO_i = dO[..., t.i0 : t.i1, :]
            S = Qs @ np.swapaxes(K_j, -1, -2)  # (..., bq, d) x (..., d, bk)
            visible = _tile_visible(t, kv)
            S = _hide(S, visible)
            S = _subtract(S, shift[..., t.i0 : t.i1, None])  # in place when it can
            P = np.exp(S, out=S)  # (..., bq, bk): the weights, recomputed
            dV[..., t.j0 : t.j1, :] += (
                np.swapaxes(P, -1, -2) @ dO_i
            )  # (bk, bq) x (bq, r)
            dS = dO_i @ np.swapaxes(V_j, -1, -2)  # (..., bq, r) x (..., r, bk): dP
            dS -= delta[..., t.i0 : t.i1, None]
            dS *= P  # (..., bq, bk)
            dQ[..., t.i0 : t.i1, :] += dS @ K_j  # (..., bq, bk) x (..., bk, d)
            dK[..., t.j0 : t.j1, :] += (
                np.swapaxes(dS, -1, -2) @ Qs
            )  # (bk, bq) x (bq, d)

    run_parallel(key_group, list(zip(dQ_parts, [set(g) for g in groups if g])), workers)
    dQ = dQ_parts[0] if dQ_parts else np.zeros(batch + Q.shape[-2:], dtype)
    for part in dQ_parts[1:]:
        dQ += part
    dQ *= scale
    return (
        _unbroadcast(dQ, Q.shape),
        _unbroadcast(dK, K.shape),
        _unbroadcast(dV, V.shape),
    )


# --- the causal_attention signature ---------------------------------------------------


class TiledWeights:
    """The weights of a tiled pass, formed only when converted to an array.

    ``np.asarray(weights)`` computes ``exp(S - lse)`` block of rows by block of rows;
    :meth:`rows` gives one block. Holding a ``TiledWeights`` costs no ``T x T`` memory.
    """

    def __init__(self, saved):
        self.saved = saved
        self.shape = saved.O.shape[:-1] + (saved.K.shape[-2],)
        self.dtype = saved.O.dtype
        self.ndim = len(self.shape)

    def __repr__(self):
        return f"TiledWeights(shape={self.shape}, dtype={self.dtype})"

    def rows(self, i0, i1):
        """The weights of queries ``i0 .. i1-1``, ``(..., i1 - i0, T_k)``."""
        Q, K, _, _, lse, kv, causal = self.saved[:7]
        T_k = K.shape[-2]
        scale = self.dtype.type(1 / math.sqrt(Q.shape[-1]))
        S = (Q[..., i0:i1, :] * scale) @ np.swapaxes(K, -1, -2)  # (..., n, T_k)
        visible = _tile_visible(Tile(i0, i1, 0, T_k, causal), kv)
        if visible is not None:
            S = np.where(visible, S, -np.inf)
        S = _subtract(S, _finite_or_zero(lse)[..., i0:i1, None])
        return np.broadcast_to(np.exp(S, out=S), self.shape[:-2] + S.shape[-2:])

    def __array__(self, dtype=None, copy=None):
        T_q, block = self.shape[-2], self.saved.block_q
        out = np.empty(self.shape, self.dtype)
        for i0 in range(0, T_q, block):
            out[..., i0 : i0 + block, :] = self.rows(i0, min(i0 + block, T_q))
        return out if dtype is None else out.astype(dtype)


def _no_offset(query_offset):
    if query_offset != 0:
        raise NotImplementedError(
            "query_offset != 0 needs the key/value cache of Chapter 10"
        )


def tiled_causal_attention(
    query,
    key,
    value,
    query_offset=0,
    dropout=None,
    *,
    key_valid=None,
    block_q=DEFAULT_BLOCK,
    block_k=DEFAULT_BLOCK,
):
    """Causal attention by tiles, with the ``causal_attention`` signature.

    Returns ``(output, probabilities)``; the probabilities are a :class:`TiledWeights`
    (formed on conversion). ``dropout`` (a callable on the probabilities) needs them
    whole: with it, they are formed and the output is
    ``dropout(probabilities) @ value``.
    """
    _no_offset(query_offset)
    O, saved = tiled_attention_forward(
        query,
        key,
        value,
        causal=True,
        key_valid=key_valid,
        block_q=block_q,
        block_k=block_k,
    )
    weights = TiledWeights(saved)
    if dropout is None:
        return O, weights
    A = np.asarray(weights)  # (..., T_q, T_k)
    return dropout(A) @ saved.V, A  # (..., T_q, T_k) x (..., T_k, r) -> (..., T_q, r)


def tiled_causal_attention_backward(
    query,
    key,
    value,
    dO,
    query_offset=0,
    *,
    key_valid=None,
    block_q=DEFAULT_BLOCK,
    block_k=DEFAULT_BLOCK,
):
    """``dquery, dkey, dvalue`` of :func:`tiled_causal_attention` (no dropout): the
    forward pass recomputed by tiles, then :func:`tiled_attention_backward`."""
    _no_offset(query_offset)
    _, saved = tiled_attention_forward(
        query,
        key,
        value,
        causal=True,
        key_valid=key_valid,
        block_q=block_q,
        block_k=block_k,
    )
    return tiled_attention_backward(saved, dO)
