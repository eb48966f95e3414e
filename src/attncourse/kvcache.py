"""The key/value cache of Chapter 10: generate without recomputing the prefix.

Causal attention lets the token at position ``t`` read only positions ``0 .. t``, so the
keys and values of the earlier positions never change once computed. A **cache** keeps
them, block by block; each new token then costs one position's work::

    logits, cache = prefill(params, prompt, config=config)  # the whole prompt, once
    logits, cache = decode_step(params, cache, token, config=config)  # one token

The cache is plain data (:class:`KVCache`): per block the keys ``(..., H, t, d)`` and
values ``(..., H, t, r)`` of the ``t`` positions so far, the position ``t`` of the next
token, and for padded batches which keys are real. It holds ``2 L t D`` numbers per
sequence (``D = H d = H r``).

:func:`prefill` **is** the model's forward pass
(:func:`attncourse.model.model_forward`); it keeps the keys and values the blocks
computed. :func:`decode_step` runs the same layers on one new position: the embedding,
the position row ``t`` (the positions are offset too), and every block's own
:func:`~attncourse.layers.block.block_forward` (LayerNorm, the projections, attention of
the one query at ``query_offset = t`` over the cached keys and its own, ``t + 1`` in
all, the output projection, the MLP and the two residuals), then the final norm and the
logits. Its logits equal the last row of the full forward pass on the whole prefix
(float64, within ``1e-12``:
:func:`attncourse.kit.kvcache.assert_decoding_equals_recompute`).

The cache's attention pattern (one query at a time against the keys so far) joins the
attention conformance suite as :data:`attncourse.kit.conformance.CACHED`.

>>> from attncourse.model import ModelConfig, init_model
>>> config = ModelConfig(n_vocab=7, T_max=6, D=4, heads=2, layers=2)
>>> params = init_model(config)
>>> logits, cache = prefill(params, np.array([1, 2, 3]), config=config)
>>> cache.position, cache.blocks[0].keys.shape, cache_numbers(cache)
(3, (2, 3, 2), 48)
>>> logits, cache = decode_step(params, cache, np.array(4), config=config)
>>> logits.shape, cache.position
((7,), 4)
"""

from typing import NamedTuple

import numpy as np

from ._validate import as_ids, require_that
from .layers.block import block_forward
from .layers.embedding import embedding_forward
from .layers.layernorm import layernorm_forward
from .layers.linear import linear_forward
from .layers.positions import positions_forward
from .model import _require_model, _unembedding, model_forward
from .sample import _require_generation, sample

__all__ = [
    "BlockCache",
    "KVCache",
    "prefill",
    "decode_step",
    "cache_numbers",
    "cache_nbytes",
    "generate_cached",
]


class BlockCache(NamedTuple):
    """One block's keys ``(..., H, t, d)`` and values ``(..., H, t, r)`` so far."""

    keys: np.ndarray
    values: np.ndarray


class KVCache(NamedTuple):
    """The cache: a :class:`BlockCache` per block, the position of the next token, and
    ``key_valid (..., t)`` (True at real tokens) or ``None`` when nothing is padded."""

    blocks: tuple
    position: int
    key_valid: object = None


def cache_numbers(cache):
    """The number of numbers the cache holds: ``2 L t D`` per sequence."""
    return int(sum(b.keys.size + b.values.size for b in cache.blocks))


def cache_nbytes(cache):
    """The bytes of the cache's key and value arrays (``nbytes``, summed)."""
    return int(sum(b.keys.nbytes + b.values.nbytes for b in cache.blocks))


def _kept(saved):
    """The keys and values a block computed, from its forward pass's ``saved``."""
    attn = saved["attn"]  # keys (..., H, t, d), values (..., H, t, r)
    return BlockCache(np.ascontiguousarray(attn["K"]), np.ascontiguousarray(attn["V"]))


def prefill(params, ids, *, config, key_valid=None):
    """Run the model on the prompt ``ids (..., t)``; return
    ``logits (..., t, n_vocab), cache``.

    The logits are :func:`attncourse.model.model_forward`'s; the cache holds each
    block's keys and values and ``position = t``. ``key_valid`` (boolean, the shape of
    ``ids``) marks the real tokens of a padded batch (pad on the left, so that every
    sequence's next token goes to the same position).
    """
    logits, saved = model_forward(params, ids, config=config, key_valid=key_valid)
    kv = None if key_valid is None else np.array(key_valid, dtype=bool)
    blocks = tuple(_kept(s) for s in saved["blocks"])
    return logits, KVCache(blocks, int(np.shape(ids)[-1]), kv)


def _check_step(params, cache, ids, config):
    """Return ``ids`` as int64 of the cache's batch shape, or raise ``ValueError``."""
    _require_model(params, config)
    cached = isinstance(cache, KVCache)
    require_that(cached and len(cache.blocks) == config.layers, "cache must be a "
                 "KVCache with one BlockCache per block (config.layers={}), got {}",
                 config.layers,
                 f"{len(cache.blocks)} blocks" if cached else type(cache).__name__)
    t, H, d = cache.position, config.heads, config.d
    for i, block in enumerate(cache.blocks):
        for name, M in (("keys", block.keys), ("values", block.values)):
            require_that(np.shape(M)[-3:] == (H, t, d), "block {}'s cached {} must "
                         "have shape (..., heads, position, d) = (..., {}, {}, {}), "
                         "got {}", i, name, H, t, d, np.shape(M))
    kv = cache.key_valid
    require_that(kv is None or np.shape(kv)[-1:] == (t,), "cache.key_valid must have "
                 "shape (..., position) = (..., {}), got {}", t, np.shape(kv))
    ids, batch = as_ids(ids, config.n_vocab), cache.blocks[0].keys.shape[:-3]
    require_that(ids.shape == batch, "decode_step takes one token per sequence: ids "
                 "must have the cache's batch shape {}, got shape {}", batch, ids.shape)
    require_that(t < config.T_max, "the cache is full: position {} has no row in the "
                 "position table (config.T_max={})", t, config.T_max)
    return ids


def decode_step(params, cache, ids, *, config):
    """Feed one token per sequence, ``ids`` of the cache's batch shape; return
    ``logits (..., n_vocab), cache`` with the cache one position longer.

    The layers of :func:`attncourse.model.model_forward` on the one new position: the
    token sits at position ``t = cache.position``, so it gets the position row ``t``,
    and every block (:func:`attncourse.layers.block.block_forward`) reads the block's
    cached keys and values (``past``) with its query at ``query_offset = t``. The
    block's new keys and values, ``t + 1`` of each, are the new cache. The logits equal
    the last row of ``model_forward`` on the whole prefix. A full cache
    (``t = config.T_max``) raises ``ValueError``.
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
        blocks.append(_kept(saved))  # the t + 1 keys and values so far
    H, _ = layernorm_forward(params["ln_f"], X, eps=config.eps)
    Z, _ = linear_forward(_unembedding(params, config.tied), H)  # (..., 1, n_vocab)
    return Z[..., 0, :], KVCache(tuple(blocks), t + 1, key_valid)


def generate_cached(params, prompt, n_new, *, config, rng, temperature=1.0,
                    top_k=None, top_p=None):
    """:func:`attncourse.sample.generate` with the cache: the same arguments, the same
    draws, the same tokens (for the same seed), without recomputing the prefix.

    While the text fits the window (``config.T_max`` positions) each step is one
    :func:`decode_step`. Past the window, ``generate`` runs the model on the last
    ``T_max`` tokens, whose positions start again at 0: every cached key was computed
    at another position, so the cache cannot serve and each such step is a
    :func:`prefill` of the window (the same computation as ``generate``'s).
    """
    ids = _require_generation(prompt, n_new, config, rng, temperature, top_k, top_p)
    logits, cache = prefill(params, ids[..., -config.T_max:], config=config)
    logits = logits[..., -1, :]
    for step in range(n_new):
        new = sample(logits, rng, temperature=temperature, top_k=top_k, top_p=top_p)
        ids = np.concatenate([ids, new[..., None]], axis=-1)
        if step == n_new - 1:
            break
        if cache.position < config.T_max:
            logits, cache = decode_step(params, cache, new, config=config)
        else:  # past the window: the positions restart, so recompute the window
            logits, cache = prefill(params, ids[..., -config.T_max:], config=config)
            logits = logits[..., -1, :]
    return ids

