"""Planted mistakes in :mod:`attncourse.kvcache`, with their registry.

Five mistakes a careful reader could make when writing a cache: the new token's position
row not offset (it gets row 0), the keys appended but the values not kept, the query
offset one short, the causal mask ignoring the offset, one cache shared by the sequences
of a batch. Each is a ``(prefill, decode_step)`` pair with one member planted. The
checks are the equality of
:func:`attncourse.kit.kvcache.assert_decoding_equals_recompute` on the trained models
of Chapter 7 (retrained from their recipes, float64): one decode step after prompts of
several lengths, decoding to the end of the window, and a padded batch. :data:`FAULTS`
says which of :data:`CHECKS` catch each one and which are blind to it; :data:`CORRECT`
holds the package pair every check must pass.

Each check runs ``check.run(pair, models=None)``; ``models`` maps a recipe name to
``(params, config)`` (float64), by default the models trained from the recipes (once per
process). A chapter that has trained them already passes its own.
"""

import functools

import numpy as np

from ...kvcache import BlockCache, KVCache, _check_step, _kept, decode_step, prefill
from ...layers.attention import key_valid_from_lengths
from ...layers.block import block_forward
from ...layers.embedding import embedding_forward
from ...layers.layernorm import layernorm_forward
from ...layers.linear import linear_forward
from ...layers.positions import positions_forward
from ...model import _unembedding
from ...train import as_dtype
from ..trained import corpus_split, held_out_recall, trained_model
from ..kvcache import assert_decoding_equals_recompute
from ._registry import Check, Fault

__all__ = [
    "FAULTS",
    "CHECKS",
    "CORRECT",
    "BUILDING_BLOCKS",
    "decode_step_position_not_offset",
    "decode_step_values_not_kept",
    "decode_step_offset_off_by_one",
    "decode_step_mask_ignores_offset",
    "prefill_shared_cache",
]

# Each decode_step fault is a copy of attncourse.kvcache.decode_step with one line
# wrong, marked "the fault".


def decode_step_position_not_offset(params, cache, ids, *, config):
    """FAULT: the new token gets the position row 0 instead of row ``t``.

    ``positions_forward`` adds ``P[:T]`` to a sequence of ``T`` tokens; called on the
    one new token it adds ``P[0]``, as if every token started the text.
    """
    ids = _check_step(params, cache, ids, config)
    t = cache.position
    X, _ = embedding_forward(params["embed"], ids[..., None])  # (..., 1, D)
    X, _ = positions_forward(params["pos"], X)  # + P[0]: the fault
    key_valid = cache.key_valid
    if key_valid is not None:  # the new token is real
        key_valid = np.concatenate([key_valid, np.ones(ids.shape + (1,), bool)], -1)
    blocks = []
    for block, past in zip(params["blocks"], cache.blocks):
        X, saved = block_forward(block, X, heads=config.heads, key_valid=key_valid,
                                 eps=config.eps, approximate=config.approximate_gelu,
                                 past=past, query_offset=t)  # (..., 1, D)
        blocks.append(_kept(saved))  # the t + 1 keys and values so far
    H, _ = layernorm_forward(params["ln_f"], X, eps=config.eps)
    Z, _ = linear_forward(_unembedding(params, config.tied), H)  # (..., 1, n_vocab)
    return Z[..., 0, :], KVCache(tuple(blocks), t + 1, key_valid)


def decode_step_values_not_kept(params, cache, ids, *, config):
    """FAULT: the new key is appended to the cache, the new value is not.

    The step itself attends correctly (the block reads its own keys and values); the
    next step finds ``t + 1`` keys but ``t`` values, and ``decode_step`` refuses the
    cache.
    """
    ids = _check_step(params, cache, ids, config)
    t = cache.position
    X, _ = embedding_forward(params["embed"], ids[..., None])  # (..., 1, D)
    X, _ = positions_forward({"P": np.asarray(params["pos"]["P"])[t:]}, X)  # + P[t]
    key_valid = cache.key_valid
    if key_valid is not None:  # the new token is real
        key_valid = np.concatenate([key_valid, np.ones(ids.shape + (1,), bool)], -1)
    blocks = []
    for block, past in zip(params["blocks"], cache.blocks):
        X, saved = block_forward(block, X, heads=config.heads, key_valid=key_valid,
                                 eps=config.eps, approximate=config.approximate_gelu,
                                 past=past, query_offset=t)  # (..., 1, D)
        blocks.append(BlockCache(_kept(saved).keys, past.values))  # the fault
    H, _ = layernorm_forward(params["ln_f"], X, eps=config.eps)
    Z, _ = linear_forward(_unembedding(params, config.tied), H)  # (..., 1, n_vocab)
    return Z[..., 0, :], KVCache(tuple(blocks), t + 1, key_valid)


def decode_step_offset_off_by_one(params, cache, ids, *, config):
    """FAULT: ``query_offset = t - 1``: the new query reads keys ``0 .. t - 1``, never
    its own key (a valid offset for ``t + 1`` keys, so nothing complains)."""
    ids = _check_step(params, cache, ids, config)
    t = cache.position
    X, _ = embedding_forward(params["embed"], ids[..., None])  # (..., 1, D)
    X, _ = positions_forward({"P": np.asarray(params["pos"]["P"])[t:]}, X)  # + P[t]
    key_valid = cache.key_valid
    if key_valid is not None:  # the new token is real
        key_valid = np.concatenate([key_valid, np.ones(ids.shape + (1,), bool)], -1)
    blocks = []
    for block, past in zip(params["blocks"], cache.blocks):
        X, saved = block_forward(block, X, heads=config.heads, key_valid=key_valid,
                                 eps=config.eps, approximate=config.approximate_gelu,
                                 past=past, query_offset=t - 1)  # the fault
        blocks.append(_kept(saved))  # the t + 1 keys and values so far
    H, _ = layernorm_forward(params["ln_f"], X, eps=config.eps)
    Z, _ = linear_forward(_unembedding(params, config.tied), H)  # (..., 1, n_vocab)
    return Z[..., 0, :], KVCache(tuple(blocks), t + 1, key_valid)


def decode_step_mask_ignores_offset(params, cache, ids, *, config):
    """FAULT: the causal mask placed as if the new query sat at position 0: it reads
    key 0 only (``query_offset`` left at its default)."""
    ids = _check_step(params, cache, ids, config)
    t = cache.position
    X, _ = embedding_forward(params["embed"], ids[..., None])  # (..., 1, D)
    X, _ = positions_forward({"P": np.asarray(params["pos"]["P"])[t:]}, X)  # + P[t]
    key_valid = cache.key_valid
    if key_valid is not None:  # the new token is real
        key_valid = np.concatenate([key_valid, np.ones(ids.shape + (1,), bool)], -1)
    blocks = []
    for block, past in zip(params["blocks"], cache.blocks):
        X, saved = block_forward(block, X, heads=config.heads, key_valid=key_valid,
                                 eps=config.eps, approximate=config.approximate_gelu,
                                 past=past)  # the fault: no query_offset
        blocks.append(_kept(saved))  # the t + 1 keys and values so far
    H, _ = layernorm_forward(params["ln_f"], X, eps=config.eps)
    Z, _ = linear_forward(_unembedding(params, config.tied), H)  # (..., 1, n_vocab)
    return Z[..., 0, :], KVCache(tuple(blocks), t + 1, key_valid)


def prefill_shared_cache(params, ids, *, config, key_valid=None):
    """FAULT: one cache for the whole batch: every sequence's keys and values are
    written to the same buffer, so the last sequence's overwrite the others'.

    The logits of the prompt are right (they come from the forward pass); every decode
    step then reads the last sequence's past. A single sequence is unaffected.
    """
    logits, cache = prefill(params, ids, config=config, key_valid=key_valid)
    blocks = []
    for block in cache.blocks:
        K, V = block.keys, block.values  # (..., H, t, d)
        if K.ndim > 3:  # a batch: the last sequence's keys and values for every one
            K = np.broadcast_to(K[-1:], K.shape).copy()
            V = np.broadcast_to(V[-1:], V.shape).copy()
        blocks.append(BlockCache(K, V))
    return logits, KVCache(tuple(blocks), cache.position, cache.key_valid)


# --- the registry ---------------------------------------------------------------------

RECIPES = ("recall", "chars")


@functools.cache
def _trained_models():
    """The trained models of Chapter 7, from their recipes (trained_model), cast to
    float64."""
    models = {}
    for name in RECIPES:
        params, config, _ = trained_model(name)
        models[name] = (as_dtype(params, np.float64), config)
    return models


def _sequences(name, config):
    """Three token sequences of the window's length: held-out recall questions, or
    held-out windows of the course corpus."""
    if name == "recall":
        return held_out_recall(3, seed=2024)[0]  # (3, T_max)
    _, _, held_out = corpus_split()
    T = config.T_max
    return np.asarray(held_out[: 3 * T]).reshape(3, T)


def _cases(models):
    models = _trained_models() if models is None else models
    for name in RECIPES:
        params, config = models[name]
        yield params, config, _sequences(name, config)


def _one_step(pair, models=None):
    """Prompts of 1, 3 and T_max - 1 tokens, one sequence each, then one decode step."""
    for params, config, ids in _cases(models):
        for p in (1, 3, config.T_max - 1):
            assert_decoding_equals_recompute(*pair, params, ids[0], p, config=config,
                                             steps=1)


def _to_the_end(pair, models=None):
    """Prompts of 1 and T_max // 2 tokens, one sequence each, decoded to T_max."""
    for params, config, ids in _cases(models):
        for b, p in enumerate((1, config.T_max // 2)):
            assert_decoding_equals_recompute(*pair, params, ids[b], p, config=config)


def _padded_batch(pair, models=None):
    """Three sequences whose prompts hold 4, 1 and 2 real tokens, left-padded to 4,
    decoded together to T_max."""
    for params, config, ids in _cases(models):
        key_valid = np.ones(ids.shape, dtype=bool)
        key_valid[:, :4] = key_valid_from_lengths([4, 1, 2], 4, side="left")
        assert_decoding_equals_recompute(*pair, params, ids, 4, config=config,
                                         key_valid=key_valid)


CHECKS = {c.name: c for c in (
    Check("one decode step", "cache pair", _one_step),
    Check("decoding to T_max", "cache pair", _to_the_end),
    Check("padded batch to T_max", "cache pair", _padded_batch),
)}
"""Check name -> :class:`~attncourse.kit.faults.Check`."""

ALL = tuple(CHECKS)

FAULTS = (
    Fault("decode_step_position_not_offset",
          "the new token gets the position row 0, not row t",
          (prefill, decode_step_position_not_offset), "cache pair", caught_by=ALL),
    Fault("decode_step_values_not_kept",
          "the new key is kept in the cache, the new value is not",
          (prefill, decode_step_values_not_kept), "cache pair",
          caught_by=("decoding to T_max", "padded batch to T_max"),
          blind=("one decode step",)),
    Fault("decode_step_offset_off_by_one",
          "query_offset = t - 1: the new query never reads its own key",
          (prefill, decode_step_offset_off_by_one), "cache pair", caught_by=ALL),
    Fault("decode_step_mask_ignores_offset",
          "query_offset = 0: the new query reads key 0 only",
          (prefill, decode_step_mask_ignores_offset), "cache pair", caught_by=ALL),
    Fault("prefill_shared_cache",
          "one cache for the batch: every sequence reads the last one's past",
          (prefill_shared_cache, decode_step), "cache pair",
          caught_by=("padded batch to T_max",),
          blind=("one decode step", "decoding to T_max")),
)
"""The planted mistakes: the checks that catch each one, and those blind to it."""

CORRECT = {"cache pair": (prefill, decode_step)}
"""Role -> the package pair: every check must pass it."""

BUILDING_BLOCKS = {}
"""Public functions that are not faults themselves -> the fault they are part of."""
