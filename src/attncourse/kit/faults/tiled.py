"""Planted mistakes in :mod:`attncourse.tiled`, with their registry.

A merge that forgets to rescale the old output, a merge that computes
``-inf - (-inf)``, causal tiles skipped one block too early, and a backward pass that
uses the last row's log-sum-exp for every row: each function has the signature of the
function it imitates. :data:`FAULTS` says which of :data:`CHECKS` catch each one and
which are blind to it; :data:`CORRECT` holds the package functions every check must
pass.
"""

import functools
import math

import numpy as np

from ..._validate import as_float_like, require_sizes
from ...fast import run_parallel
from ...layers.attention import _unbroadcast, causal_mask
from ...tiled import (DEFAULT_BLOCK, SoftmaxState, Tile, TiledSaved, TiledWeights,
                      _finite_or_zero, _hide, _no_offset, _require_inputs,
                      _require_same_rows, _subtract, _tile_state, _tile_visible,
                      _workers, causal_tiles, empty_state, finish_state,
                      merge_states, tile_state, tiled_attention_forward,
                      tiled_causal_attention, tiled_causal_attention_backward)
from .. import conformance as cf
from ..failed import CheckFailed
from ._registry import Check, Fault, require_close

__all__ = [
    "FAULTS",
    "CHECKS",
    "CORRECT",
    "BUILDING_BLOCKS",
    "merge_states_without_rescale",
    "merge_states_unguarded",
    "causal_tiles_one_block_early",
    "tiled_causal_attention_without_rescale",
    "tiled_causal_attention_one_block_early",
    "tiled_causal_attention_backward_final_lse",
]

# Each fault is a copy of a function of attncourse.tiled with one line wrong, marked
# "the fault"; the tiled passes with the causal_attention signature are that
# signature (the lines of tiled_causal_attention or tiled_causal_attention_backward)
# around a wrong copy of the forward or the backward pass.


def merge_states_without_rescale(a, b):
    """FAULT: the old output ``o_a`` is added as it is, not rescaled by
    ``exp(m_a - m)`` (the normaliser is rescaled correctly).

    Right whenever the new tile does not raise the maximum, so a test whose largest
    score comes first passes it.
    """
    a, b = SoftmaxState(*a), SoftmaxState(*b)
    _require_same_rows(a, b)
    m = np.maximum(a.m, b.m)  # (..., n)
    shift = _finite_or_zero(m)
    alpha, beta = np.exp(a.m - shift), np.exp(b.m - shift)  # (..., n), 0 for -inf
    return SoftmaxState(
        m, alpha * a.l + beta * b.l, a.o + beta[..., None] * b.o  # the fault: a.o
    )


def merge_states_unguarded(a, b):
    """FAULT: ``exp(m_a - m)`` with no guard: two rows that have seen no key compute
    ``-inf - (-inf) = NaN``. Right on every row that has seen a key."""
    a, b = SoftmaxState(*a), SoftmaxState(*b)
    _require_same_rows(a, b)
    m = np.maximum(a.m, b.m)  # (..., n)
    shift = m  # the fault: -inf where a row has seen no key, not 0
    alpha, beta = np.exp(a.m - shift), np.exp(b.m - shift)  # (..., n), NaN for -inf
    return SoftmaxState(
        m, alpha * a.l + beta * b.l, alpha[..., None] * a.o + beta[..., None] * b.o
    )


def causal_tiles_one_block_early(T_q, T_k, block_q, block_k, causal=True):
    """FAULT: a tile is skipped when its first key is not before its first query
    (``j0 >= i0``), one block too early: the diagonal tiles are never visited."""
    require_sizes(block_q=block_q, block_k=block_k)
    tiles = []
    for i0 in range(0, T_q, block_q):
        i1 = min(i0 + block_q, T_q)
        for j0 in range(0, T_k, block_k):
            j1 = min(j0 + block_k, T_k)
            if causal and j0 >= i0:  # the fault: not j0 > i1 - 1
                continue
            tiles.append(Tile(i0, i1, j0, j1, bool(causal and j1 - 1 > i0)))
    return tiles


def _forward_without_rescale(Q, K, V, *, causal=False, key_valid=None,
                             block_q=DEFAULT_BLOCK, block_k=DEFAULT_BLOCK,
                             workers=None):
    """:func:`attncourse.tiled.tiled_attention_forward` merging with
    :func:`merge_states_without_rescale`."""
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
            state = merge_states_without_rescale(state, tile)  # the fault
        O[..., i0:i1, :], lse[..., i0:i1] = finish_state(state)

    run_parallel(row_block, range(0, T_q, block_q), _workers(workers, Q, K, V))
    return O, TiledSaved(Q, K, V, O, lse, kv, bool(causal), block_q, block_k, workers)


def _forward_one_block_early(Q, K, V, *, causal=False, key_valid=None,
                             block_q=DEFAULT_BLOCK, block_k=DEFAULT_BLOCK,
                             workers=None):
    """:func:`attncourse.tiled.tiled_attention_forward` over
    :func:`causal_tiles_one_block_early`."""
    Q, K, V, kv = _require_inputs(Q, K, V, key_valid, block_q, block_k)
    batch = np.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    (T_q, d), (T_k, r) = Q.shape[-2:], V.shape[-2:]
    dtype = np.result_type(Q, K, V)
    scale = dtype.type(1 / math.sqrt(d))
    O = np.zeros(batch + (T_q, r), dtype)
    lse = np.full(batch + (T_q,), -np.inf, dtype)
    # the fault: the tiles of causal_tiles_one_block_early
    visits = causal_tiles_one_block_early(T_q, T_k, block_q, block_k, bool(causal))

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


def _as_causal_attention(forward, query, key, value, query_offset, dropout, key_valid,
                         block_q, block_k):
    """The lines of :func:`attncourse.tiled.tiled_causal_attention` around
    ``forward``."""
    _no_offset(query_offset)
    O, saved = forward(query, key, value, causal=True, key_valid=key_valid,
                       block_q=block_q, block_k=block_k)
    weights = TiledWeights(saved)
    if dropout is None:
        return O, weights
    A = np.asarray(weights)  # (..., T_q, T_k)
    return dropout(A) @ saved.V, A  # (..., T_q, T_k) x (..., T_k, r) -> (..., T_q, r)


def tiled_causal_attention_without_rescale(query, key, value, query_offset=0,
                                           dropout=None, *, key_valid=None,
                                           block_q=DEFAULT_BLOCK,
                                           block_k=DEFAULT_BLOCK):
    """FAULT: the tiled forward pass with :func:`merge_states_without_rescale`.

    The normaliser and the log-sum-exp stay right, so the weights it returns are
    right: only the output is wrong.
    """
    return _as_causal_attention(_forward_without_rescale, query, key, value,
                                query_offset, dropout, key_valid, block_q, block_k)


def tiled_causal_attention_one_block_early(query, key, value, query_offset=0,
                                           dropout=None, *, key_valid=None,
                                           block_q=DEFAULT_BLOCK,
                                           block_k=DEFAULT_BLOCK):
    """FAULT: the tiled forward pass over :func:`causal_tiles_one_block_early`."""
    return _as_causal_attention(_forward_one_block_early, query, key, value,
                                query_offset, dropout, key_valid, block_q, block_k)


def _backward_final_lse(saved, G, *, workers=None):
    """:func:`attncourse.tiled.tiled_attention_backward` shifting every row by the
    last row's log-sum-exp."""
    Q, K, V, O, lse, kv, causal, block_q, block_k = saved[:9]
    G = as_float_like("G", G, O.shape, "the output O")
    workers = _workers(saved.workers if workers is None else workers, Q, K, V)
    batch, dtype = O.shape[:-2], O.dtype
    scale = dtype.type(1 / math.sqrt(Q.shape[-1]))
    delta = np.einsum("...ij,...ij->...i", G, O)  # rowsum(dA * A) = rowsum(G * O)
    # the fault: every row shifted by the last row's lse, not its own
    shift = np.broadcast_to(_finite_or_zero(lse[..., -1:]), lse.shape)
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
            dV[..., t.j0 : t.j1, :] += (
                np.swapaxes(P, -1, -2) @ G_i
            )  # (bk, bq) x (bq, r)
            dP = G_i @ np.swapaxes(V_j, -1, -2)  # (..., bq, r) x (..., r, bk)
            dS = np.multiply(P, np.subtract(dP, delta[..., t.i0 : t.i1, None], out=dP),
                             out=dP)  # P * (dP - delta), in the memory of dP
            dQ_parts[w][..., t.i0 : t.i1, :] += dS @ K_j  # (bq, bk) x (bk, d)
            dK[..., t.j0 : t.j1, :] += (
                np.swapaxes(dS, -1, -2) @ Qs
            )  # (bk, bq) x (bq, d)

    run_parallel(key_group, range(len(groups)), workers)
    dQ = dQ_parts[0] if dQ_parts else np.zeros(batch + Q.shape[-2:], dtype)
    for part in dQ_parts[1:]:  # summed in a fixed order: deterministic
        dQ += part
    dQ *= scale
    return (
        _unbroadcast(dQ, Q.shape),
        _unbroadcast(dK, K.shape),
        _unbroadcast(dV, V.shape),
    )


def tiled_causal_attention_backward_final_lse(query, key, value, G, query_offset=0, *,
                                              key_valid=None, block_q=DEFAULT_BLOCK,
                                              block_k=DEFAULT_BLOCK):
    """FAULT: the backward pass recomputes every row's weights with the last row's
    log-sum-exp, ``exp(S_ij - lse_last)``, instead of its own ``lse_i``."""
    _no_offset(query_offset)
    _, saved = tiled_attention_forward(query, key, value, causal=True,
                                       key_valid=key_valid, block_q=block_q,
                                       block_k=block_k)
    return _backward_final_lse(saved, G)


# --- the registry ---------------------------------------------------------------------

BLOCKS = {"block_q": 2, "block_k": 2}  # several tiles on the suite's small sizes


def _states(seed=0):
    """A row of 7 scores split 3 + 4 whose second part holds the larger maximum."""
    rng = np.random.default_rng(seed)
    S = rng.normal(size=(4, 7))  # 4 rows, 7 keys
    S[:, 3:] += 3.0  # the second tile raises the maximum
    V = rng.normal(size=(7, 2))
    return tile_state(S, V), tile_state(S[:, :3], V[:3]), tile_state(S[:, 3:], V[3:])


def _merged_halves(merge):
    """merge(first 3 keys, last 4 keys) equals the state of the 7 keys, both orders."""
    whole, left, right = _states()
    for label, merged in (("left, right", merge(left, right)),
                          ("right, left", merge(right, left))):
        merged = SoftmaxState(*merged)
        for name in ("m", "l", "o"):
            require_close("merged halves equal the whole", f"{name} of merge({label})",
                          getattr(merged, name), getattr(whole, name), 1e-14, 1e-14)


def _empty_is_neutral(merge):
    """Merging with the empty state changes nothing, and two empty states stay empty
    (finite: ``l = 0``, ``o = 0``)."""
    whole, _, _ = _states(1)
    empty = empty_state(whole.m.shape, whole.o.shape[-1])
    with np.errstate(invalid="ignore"):
        cases = [("merge(empty, s)", merge(empty, whole), whole),
                 ("merge(s, empty)", merge(whole, empty), whole),
                 ("merge(empty, empty)", merge(empty, empty), empty)]
    for label, merged, wanted in cases:
        merged = SoftmaxState(*merged)
        for name in ("l", "o"):
            require_close("the empty state is neutral", f"{name} of {label}",
                          getattr(merged, name), getattr(wanted, name), 0.0, 0.0)


def _every_visible_key_visited(tiles_fn):
    """The tiles cover exactly the visible (query, key) pairs, each once, with a mask
    wherever a tile holds a hidden pair: sizes that do and do not divide, T_q < T_k."""
    for T_q, T_k, bq, bk in ((6, 6, 2, 2), (5, 5, 2, 3), (3, 5, 2, 2), (4, 4, 1, 1)):
        count = np.zeros((T_q, T_k), dtype=int)
        for t in tiles_fn(T_q, T_k, bq, bk):
            count[t.i0:t.i1, t.j0:t.j1] += 1
            full = causal_mask(T_q, T_k)[t.i0:t.i1, t.j0:t.j1].all()
            if not (t.masked or full):
                raise CheckFailed("every visible key is visited", f"T_q={T_q} T_k={T_k}"
                                  f" tiles {bq}x{bk}: tile {tuple(t)} holds hidden "
                                  "pairs but is not masked")
        visible = causal_mask(T_q, T_k)
        if np.any(count[visible] != 1):
            i, j = np.argwhere(visible & (count != 1))[0]
            raise CheckFailed("every visible key is visited", f"T_q={T_q} T_k={T_k} "
                              f"tiles {bq}x{bk}: query {i} reads key {j} "
                              f"{count[i, j]} times, not once",
                              "skip a tile only when its first key comes after its "
                              "last query, j0 > i1 - 1")


def _forward_property(prop):
    def run(attend):
        cf.PROPERTIES[prop](cf.Implementation(
            "tiled 2x2", functools.partial(attend, **BLOCKS),
            functools.partial(tiled_causal_attention_backward, **BLOCKS)))

    run.__doc__ = f"The conformance suite's {prop!r} on the forward pass (tiles 2x2)."
    return run


def _backward_property(prop):
    def run(backward):
        cf.PROPERTIES[prop](cf.Implementation(
            "tiled 2x2", functools.partial(tiled_causal_attention, **BLOCKS),
            functools.partial(backward, **BLOCKS)))

    run.__doc__ = f"The conformance suite's {prop!r} on the backward pass (tiles 2x2)."
    return run


CHECKS = {c.name: c for c in (
    Check("merged halves equal the whole", "merge_states", _merged_halves),
    Check("the empty state is neutral", "merge_states", _empty_is_neutral),
    Check("every visible key is visited", "causal_tiles", _every_visible_key_visited),
    Check("conformance: values", "tiled_causal_attention", _forward_property("values")),
    Check("conformance: causality", "tiled_causal_attention",
          _forward_property("causality")),
    Check("conformance: gradients", "tiled_causal_attention_backward",
          _backward_property("gradients")),
)}
"""Check name -> :class:`~attncourse.kit.faults.Check`."""

FAULTS = (
    Fault("merge_no_rescale",
          "the old output is added without the factor exp(m_a - m)",
          merge_states_without_rescale, "merge_states",
          caught_by=("merged halves equal the whole",),
          blind=("the empty state is neutral",)),
    Fault("merge_unguarded", "exp(m_a - m) with m = -inf: NaN for empty rows",
          merge_states_unguarded, "merge_states",
          caught_by=("the empty state is neutral",),
          blind=("merged halves equal the whole",)),
    Fault("tiles_one_block_early", "skips the diagonal tiles (j0 >= i0)",
          causal_tiles_one_block_early, "causal_tiles",
          caught_by=("every visible key is visited",)),
    Fault("tiled_no_rescale",
          "the forward pass with the merge that forgets to rescale",
          tiled_causal_attention_without_rescale, "tiled_causal_attention",
          caught_by=("conformance: values",), blind=("conformance: causality",)),
    Fault("tiled_one_block_early",
          "the forward pass that skips the diagonal tiles",
          tiled_causal_attention_one_block_early, "tiled_causal_attention",
          caught_by=("conformance: values", "conformance: causality")),
    Fault("tiled_backward_final_lse",
          "every row's weights recomputed with the last row's log-sum-exp",
          tiled_causal_attention_backward_final_lse, "tiled_causal_attention_backward",
          caught_by=("conformance: gradients",)),
)
"""The planted mistakes: the checks that catch each one, and those blind to it."""

CORRECT = {
    "merge_states": merge_states,
    "causal_tiles": causal_tiles,
    "tiled_causal_attention": tiled_causal_attention,
    "tiled_causal_attention_backward": tiled_causal_attention_backward,
}
"""Role -> the package function: every check must pass it."""

BUILDING_BLOCKS = {}
"""Public functions that are not faults themselves -> the fault they are part of."""
