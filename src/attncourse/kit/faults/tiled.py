"""Planted mistakes in :mod:`attncourse.tiled`, with their registry.

A merge that forgets to rescale the old output, a merge that computes
``-inf - (-inf)``, causal tiles skipped one block too early, and a backward pass that
uses the last row's log-sum-exp for every row: each function has the signature of the
function it imitates. :data:`FAULTS` says which of :data:`CHECKS` catch each one and
which are blind to it; :data:`CORRECT` holds the package functions every check must
pass.
"""

import functools

import numpy as np

from ...layers.attention import causal_mask
from ...tiled import (DEFAULT_BLOCK, SoftmaxState, TiledSaved, TiledWeights, _forward,
                     _no_offset, _prepare, causal_tiles, empty_state, merge_states,
                     require_blocks,
                     tile_state, tiled_attention_backward, tiled_attention_forward,
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


def merge_states_without_rescale(a, b):
    """FAULT: the old output ``o_a`` is added as it is, not rescaled by
    ``exp(m_a - m)`` (the normaliser is rescaled correctly).

    Right whenever the new tile does not raise the maximum, so a test whose largest
    score comes first passes it.
    """
    a, b = SoftmaxState(*a), SoftmaxState(*b)
    m = np.maximum(a.m, b.m)
    shift = np.where(np.isfinite(m), m, 0.0)
    alpha, beta = np.exp(a.m - shift), np.exp(b.m - shift)
    return SoftmaxState(m, alpha * a.l + beta * b.l,
                        a.o + beta[..., None] * b.o)  # the fault: a.o not rescaled


def merge_states_unguarded(a, b):
    """FAULT: ``exp(m_a - m)`` with no guard: two rows that have seen no key compute
    ``-inf - (-inf) = NaN``. Right on every row that has seen a key."""
    a, b = SoftmaxState(*a), SoftmaxState(*b)
    m = np.maximum(a.m, b.m)
    alpha, beta = np.exp(a.m - m), np.exp(b.m - m)  # the fault: NaN when m = -inf
    return SoftmaxState(m, alpha * a.l + beta * b.l,
                        alpha[..., None] * a.o + beta[..., None] * b.o)


def causal_tiles_one_block_early(T_q, T_k, block_q, block_k, causal=True):
    """FAULT: a tile is skipped when its first key is not before its first query
    (``j0 >= i0``), one block too early: the diagonal tiles are never visited."""
    require_blocks(block_q, block_k)
    return [t for t in causal_tiles(T_q, T_k, block_q, block_k, causal)
            if not (causal and t.j0 >= t.i0)]


def _faulty_attend(query, key, value, query_offset, dropout, key_valid, block_q,
                   block_k, **pieces):
    _no_offset(query_offset)
    Q, K, V, _, kv = _prepare(query, key, value, key_valid, block_q, block_k)
    O, lse = _forward(Q, K, V, kv, True, block_q, block_k, **pieces)
    A = TiledWeights(TiledSaved(Q, K, V, O, lse, kv, True, block_q, block_k))
    return (O, A) if dropout is None else (dropout(np.asarray(A)) @ V, np.asarray(A))


def tiled_causal_attention_without_rescale(query, key, value, query_offset=0,
                                           dropout=None, *, key_valid=None,
                                           block_q=DEFAULT_BLOCK,
                                           block_k=DEFAULT_BLOCK):
    """FAULT: the tiled forward pass with :func:`merge_states_without_rescale`.

    The normaliser and the log-sum-exp stay right, so the weights it returns are
    right: only the output is wrong.
    """
    return _faulty_attend(query, key, value, query_offset, dropout, key_valid, block_q,
                          block_k, merge=merge_states_without_rescale)


def tiled_causal_attention_one_block_early(query, key, value, query_offset=0,
                                           dropout=None, *, key_valid=None,
                                           block_q=DEFAULT_BLOCK,
                                           block_k=DEFAULT_BLOCK):
    """FAULT: the tiled forward pass over :func:`causal_tiles_one_block_early`."""
    return _faulty_attend(query, key, value, query_offset, dropout, key_valid, block_q,
                          block_k, tiles=causal_tiles_one_block_early)


def tiled_causal_attention_backward_final_lse(query, key, value, dO, query_offset=0, *,
                                              key_valid=None, block_q=DEFAULT_BLOCK,
                                              block_k=DEFAULT_BLOCK):
    """FAULT: the backward pass recomputes every row's weights with the last row's
    log-sum-exp, ``exp(S_ij - lse_last)``, instead of its own ``lse_i``."""
    _no_offset(query_offset)
    _, saved = tiled_attention_forward(query, key, value, causal=True,
                                       key_valid=key_valid, block_q=block_q,
                                       block_k=block_k)
    final = np.broadcast_to(saved.lse[..., -1:], saved.lse.shape)  # the fault
    return tiled_attention_backward(saved._replace(lse=final), dO)


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
