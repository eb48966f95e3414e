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
``P = exp(S - lse)`` and uses ``rowsum(dA * A) = rowsum(G * O)``, an ``O(T r)``
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

from ._validate import as_float_like, require_sizes, require_that, shaped
from .fast import SEQUENTIAL_BELOW, default_workers, run_parallel
from .layers.attention import QKV, _unbroadcast, key_padding_mask

__all__ = [
    "SoftmaxState",
    "empty_state",
    "tile_state",
    "merge_states",
    "finish_state",
    "Tile",
    "causal_tiles",
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
    S, V = shaped("S(..., n, k) V(..., k, r)", S, V)
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
        require_that(np.shape(x) == np.shape(y), "the two states must describe the "
                     "same rows: {} has shapes {} and {}", name, np.shape(x),
                     np.shape(y))


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


def causal_tiles(T_q, T_k, block_q, block_k, causal=True):
    """Return the tiles a pass visits, row block by row block, keys in order.

    With ``causal=True`` query ``i`` reads keys ``j <= i``: a tile whose first key comes
    after its last query (``j0 > i1 - 1``) is skipped, a tile that crosses the diagonal
    is ``masked``. Without, every tile is visited unmasked.

    >>> [(t.i0, t.j0, t.masked) for t in causal_tiles(4, 4, 2, 2)]
    [(0, 0, True), (2, 0, False), (2, 2, True)]
    """
    require_sizes(block_q=block_q, block_k=block_k)
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
        require_sizes(workers=workers)
        return workers
    batch = np.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    size = math.prod(batch) * Q.shape[-2] * K.shape[-2]
    return 1 if size < SEQUENTIAL_BELOW else default_workers()


def _require_inputs(Q, K, V, key_valid, block_q, block_k):
    """Return ``Q, K, V`` (float) and ``key_valid`` as a ``(..., 1, T_k)`` mask (or
    None), or raise ``ValueError`` naming the argument at fault."""
    require_sizes(block_q=block_q, block_k=block_k)
    Q, K, V = shaped(QKV, Q, K, V)
    batch = np.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    kv = None if key_valid is None else key_padding_mask(key_valid, K.shape[-2], batch)
    return Q, K, V, kv


def tiled_attention_forward(Q, K, V, *, causal=False, key_valid=None,
                            block_q=DEFAULT_BLOCK, block_k=DEFAULT_BLOCK, workers=None):
    """Return ``O, saved``: attention by tiles, the ``T_q x T_k`` weights never stored.

    ``Q (..., T_q, d)``, ``K (..., T_k, d)``, ``V (..., T_k, r)``, batch axes broadcast;
    ``causal`` hides keys ``j > i`` (and skips the tiles above the diagonal);
    ``key_valid`` (optional, boolean ``(..., T_k)``) hides padded keys. Each block of
    queries starts from the empty state and merges the state of each of its tiles,
    ``(m, l, o) <- merge((m, l, o), tile_state(S_ij, V_j))`` with
    ``S_ij = Q_i K_j^T / sqrt(d)``; then ``O_i = o / l`` and ``lse_i = m + log l``.
    ``saved`` is a :class:`TiledSaved` for :func:`tiled_attention_backward`.
    ``workers`` threads (default: the machine's cores, one for a small pass) share the
    blocks of queries; the backward pass shares the blocks of keys, each thread adding
    into its own ``dQ`` (summed in a fixed order, so the result does not depend on the
    scheduling).
    """
    Q, K, V, kv = _require_inputs(Q, K, V, key_valid, block_q, block_k)
    batch = np.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    (T_q, d), (T_k, r) = Q.shape[-2:], V.shape[-2:]
    dtype = np.result_type(Q, K, V)
    scale = dtype.type(1 / math.sqrt(d))
    O = np.zeros(batch + (T_q, r), dtype)
    lse = np.full(batch + (T_q,), -np.inf, dtype)
    visits = causal_tiles(T_q, T_k, block_q, block_k, bool(causal))

    def row_block(i0):  # queries i0 .. i1-1 read their tiles of keys in order
        i1 = min(i0 + block_q, T_q)
        Qs = Q[..., i0:i1, :] * scale  # (..., bq, d): the T x d operand scaled
        state = empty_state(batch + (i1 - i0,), r, dtype)
        for t in (t for t in visits if t.i0 == i0):
            S = Qs @ np.swapaxes(K[..., t.j0 : t.j1, :], -1, -2)  # (bq, d) x (d, bk)
            tile = _tile_state(S, V[..., t.j0 : t.j1, :], _tile_visible(t, kv))
            state = merge_states(state, tile)
        O[..., i0:i1, :], lse[..., i0:i1] = finish_state(state)

    run_parallel(row_block, range(0, T_q, block_q), _workers(workers, Q, K, V))
    return O, TiledSaved(Q, K, V, O, lse, kv, bool(causal), block_q, block_k, workers)


def tiled_attention_backward(saved, G, *, workers=None):
    """Return ``dQ, dK, dV`` for the upstream gradient ``G = dJ/dO``, one tile at a
    time.

    Each tile's weights are recomputed from the saved per-row log-sum-exp,
    ``P = exp(S - lse)``; then ``dV_j += P^T G_i``, ``dP = G_i V_j^T`` (the tile of
    ``dA``), ``dS = P * (dP - delta)`` with ``delta = rowsum(G * O)``, the ``O(T r)``
    form of ``rowsum(dA * A)``, ``dQ_i += dS K_j / sqrt(d)`` and
    ``dK_j += dS^T Q_i / sqrt(d)``. Batch axes that were broadcast are summed back.
    """
    Q, K, V, O, lse, kv, causal, block_q, block_k = saved[:9]
    G = as_float_like("G", G, O.shape, "the output O")
    workers = _workers(saved.workers if workers is None else workers, Q, K, V)
    batch, dtype = O.shape[:-2], O.dtype
    scale = dtype.type(1 / math.sqrt(Q.shape[-1]))
    delta = np.einsum("...ij,...ij->...i", G, O)  # rowsum(dA * A) = rowsum(G * O)
    shift = _finite_or_zero(lse)  # a row that sees no key: every P entry is hidden
    dK = np.zeros(batch + K.shape[-2:], dtype)
    dV = np.zeros(batch + V.shape[-2:], dtype)
    visits = causal_tiles(Q.shape[-2], K.shape[-2], block_q, block_k, causal)
    key_blocks = sorted({t.j0 for t in visits})
    groups = [set(key_blocks[w::workers]) for w in range(workers)]  # a fixed split
    groups = [g for g in groups if g]
    dQ_parts = [np.zeros(batch + Q.shape[-2:], dtype) for _ in groups]

    def key_group(w):  # the tiles of the key blocks of group w; its own part of dQ
        for t in (t for t in visits if t.j0 in groups[w]):
            Qs = Q[..., t.i0 : t.i1, :] * scale  # (..., bq, d)
            K_j, V_j = K[..., t.j0 : t.j1, :], V[..., t.j0 : t.j1, :]
            G_i = G[..., t.i0 : t.i1, :]  # (..., bq, r)
            S = Qs @ np.swapaxes(K_j, -1, -2)  # (..., bq, d) x (..., d, bk)
            S = _hide(S, _tile_visible(t, kv))
            S = _subtract(S, shift[..., t.i0 : t.i1, None])  # in place when it can
            P = np.exp(S, out=S)  # (..., bq, bk): the weights, recomputed
            dV[..., t.j0:t.j1, :] += np.swapaxes(P, -1, -2) @ G_i  # (bk, bq) x (bq, r)
            dP = G_i @ np.swapaxes(V_j, -1, -2)  # (..., bq, r) x (..., r, bk)
            dS = np.multiply(P, np.subtract(dP, delta[..., t.i0 : t.i1, None], out=dP),
                             out=dP)  # P * (dP - delta), in the memory of dP
            dQ_parts[w][..., t.i0 : t.i1, :] += dS @ K_j  # (bq, bk) x (bk, d)
            dK[..., t.j0:t.j1, :] += np.swapaxes(dS, -1, -2) @ Qs  # (bk, bq) x (bq, d)

    run_parallel(key_group, range(len(groups)), workers)
    dQ = dQ_parts[0] if dQ_parts else np.zeros(batch + Q.shape[-2:], dtype)
    for part in dQ_parts[1:]:  # summed in a fixed order: deterministic
        dQ += part
    dQ *= scale
    return (_unbroadcast(dQ, Q.shape), _unbroadcast(dK, K.shape),
            _unbroadcast(dV, V.shape))


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
    G,
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
    return tiled_attention_backward(saved, G)
