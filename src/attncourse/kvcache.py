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
the position row ``t`` (the positions are offset too), and in every block LayerNorm, the
projections, attention of the one query at ``query_offset = t`` over the ``t + 1`` keys,
the output projection, the MLP and the two residuals, then the final norm and the
logits. Its logits equal the last row of the full forward pass on the whole prefix
(float64, within ``1e-12``:
:func:`attncourse.kit.kvcache.assert_decoding_equals_recompute`).

:func:`incremental_attention` is the cache's attention pattern as a function of the
``causal_attention`` signature (one query at a time against the keys so far); it joins
the attention conformance suite.

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

from ._validate import require_sizes
from .layers.attention import (_batch_shape, causal_attention,
                               causal_attention_backward, causal_visible, validate_qkv,
                               validate_query_offset)
from .layers.embedding import embedding_forward
from .layers.head import project
from .layers.layernorm import layernorm_forward
from .layers.linear import linear_forward
from .layers.mlp import mlp_forward
from .layers.multihead import merge_heads, split_heads
from .layers.positions import positions_forward
from .model import ModelConfig, _check_params, _unembedding, model_forward
from .sample import _require_rng, _require_settings, sample
from .text import validate_ids

__all__ = [
    "BlockCache",
    "KVCache",
    "prefill",
    "decode_step",
    "cache_numbers",
    "cache_nbytes",
    "generate_cached",
    "incremental_attention",
    "incremental_attention_backward",
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


def _require_config(config):
    if not isinstance(config, ModelConfig):
        raise ValueError(f"config must be a ModelConfig, got {type(config).__name__}")


def _harvest(saved):
    """The keys and values each block computed, from the forward pass's ``saved``."""
    return tuple(BlockCache(np.ascontiguousarray(s["attn"]["K"]),
                            np.ascontiguousarray(s["attn"]["V"]))
                 for s in saved["blocks"])


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
    return logits, KVCache(_harvest(saved), int(np.shape(ids)[-1]), kv)


def _offset_positions(params, X, position):
    """Add the position row ``position`` to ``X (..., 1, D)``: positions_forward on the
    table from that row on."""
    return positions_forward({"P": np.asarray(params["P"])[position:]}, X)[0]


def _attend_cached(Q, keys, values, position, key_valid):
    """The new query at position ``position`` reads the keys ``0 .. position``."""
    return causal_attention(Q, keys, values, query_offset=position, key_valid=key_valid)


def _store(past, keys, values):
    """The cache of a block after this step: the keys and values so far."""
    return BlockCache(keys, values)


def _block_step(params, X, past, position, key_valid, config, attend, store):
    """One block on the new position ``X (..., 1, D)``: the layers of block_forward,
    with attention reading the cached keys and values."""
    N1, _ = layernorm_forward(params["ln1"], X, eps=config.eps)  # (..., 1, D)
    attn = params["attn"]
    # (..., 1, D) x (D, H d) -> (..., 1, H d); V: (..., 1, H r)
    Q, K, V = project(N1, attn["W_Q"], attn["W_K"], attn["W_V"])
    Q, K, V = (split_heads(M, config.heads) for M in (Q, K, V))  # (..., H, 1, w)
    keys = np.concatenate([past.keys, K], axis=-2)  # (..., H, t + 1, d)
    values = np.concatenate([past.values, V], axis=-2)  # (..., H, t + 1, r)
    head_valid = None if key_valid is None else key_valid[..., None, :]  # (..., 1, t+1)
    O, _ = attend(Q, keys, values, position, head_valid)  # (..., H, 1, r)
    H = X + merge_heads(O) @ np.asarray(attn["W_O"])  # (..., 1, H r) x (H r, D)
    N2, _ = layernorm_forward(params["ln2"], H, eps=config.eps)
    M, _ = mlp_forward(params["mlp"], N2, approximate=config.approximate_gelu)
    return H + M, store(past, keys, values)


def _check_step(params, cache, ids, config):
    """Return ``ids`` as int64 of the cache's batch shape, or raise ``ValueError``."""
    _require_config(config)
    _check_params(params, config)
    if not isinstance(cache, KVCache) or len(cache.blocks) != config.layers:
        got = (f"{len(cache.blocks)} blocks" if isinstance(cache, KVCache)
               else type(cache).__name__)
        raise ValueError(f"cache must be a KVCache with one BlockCache per block "
                         f"(config.layers={config.layers}), got {got}")
    t, width = cache.position, (config.heads, config.d)
    for i, block in enumerate(cache.blocks):
        for name, M in (("keys", block.keys), ("values", block.values)):
            shape = np.shape(M)
            if len(shape) < 3 or shape[-3:] != (width[0], t, width[1]):
                raise ValueError(
                    f"block {i}'s cached {name} must have shape (..., heads, position, "
                    f"d) = (..., {width[0]}, {t}, {width[1]}), got {shape}")
    kv = cache.key_valid
    if kv is not None and np.shape(kv)[-1:] != (t,):
        raise ValueError(f"cache.key_valid must have shape (..., position) = "
                         f"(..., {t}), got {np.shape(kv)}")
    ids = validate_ids(ids, config.n_vocab)
    batch = cache.blocks[0].keys.shape[:-3]
    if ids.shape != batch:
        raise ValueError(f"decode_step takes one token per sequence: ids must have the "
                         f"cache's batch shape {batch}, got shape {ids.shape}")
    if cache.position >= config.T_max:
        raise ValueError(f"the cache is full: position {cache.position} has no row in "
                         f"the position table (config.T_max={config.T_max})")
    return ids


def _decode(params, cache, ids, config, *, positions=_offset_positions,
            attend=_attend_cached, store=_store):
    """:func:`decode_step` with three steps as arguments (the faults swap them)."""
    ids = _check_step(params, cache, ids, config)
    t = cache.position
    X, _ = embedding_forward(params["embed"], ids[..., None])  # (..., 1, D)
    X = positions(params["pos"], X, t)  # + P[t]
    key_valid = cache.key_valid
    if key_valid is not None:  # the new token is real
        key_valid = np.concatenate([key_valid, np.ones(ids.shape + (1,), bool)], -1)
    blocks = []
    for block, past in zip(params["blocks"], cache.blocks):
        X, past = _block_step(block, X, past, t, key_valid, config, attend, store)
        blocks.append(past)
    H, _ = layernorm_forward(params["ln_f"], X, eps=config.eps)
    Z, _ = linear_forward(_unembedding(params, config.tied), H)  # (..., 1, n_vocab)
    return Z[..., 0, :], KVCache(tuple(blocks), t + 1, key_valid)


def decode_step(params, cache, ids, *, config):
    """Feed one token per sequence, ``ids`` of the cache's batch shape; return
    ``logits (..., n_vocab), cache`` with the cache one position longer.

    The token sits at position ``t = cache.position``: it gets the position row ``t``,
    and in every block its query reads the ``t + 1`` keys with ``query_offset = t``.
    The logits equal the last row of ``model_forward`` on the whole prefix. A full
    cache (``t = config.T_max``) raises ``ValueError``.
    """
    return _decode(params, cache, ids, config)


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
    _require_config(config)
    _require_rng(rng)
    _require_settings(temperature, top_k, top_p)
    require_sizes(allow_zero=True, n_new=n_new)
    ids = np.asarray(prompt)
    if ids.ndim not in (1, 2) or ids.shape[-1] == 0:
        raise ValueError(f"prompt must be token ids of shape (t,) or (batch, t) with "
                         f"t >= 1, got shape {ids.shape}")
    ids = validate_ids(ids, config.n_vocab, name="prompt")
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


# --- the cache's attention pattern, for the conformance suite ------------------------


def _steps(Q, K, V, query_offset, key_valid):
    """Yield ``(i, p, query_i, key_valid_i)``: query ``i`` reads the keys ``:p``."""
    for i in range(Q.shape[-2]):
        p = query_offset + i + 1  # the keys so far, its own included
        kv = None if key_valid is None else np.asarray(key_valid)[..., :p]
        yield i, p, Q[..., i: i + 1, :], kv


def _validate(query, key, value, query_offset, key_valid):
    Q, K, V = validate_qkv(query, key, value)
    validate_query_offset(query_offset, Q, K)
    if key_valid is not None:  # validated against all the keys, as the reference does
        causal_visible(Q, K, V, query_offset, key_valid)
    return Q, K, V


def incremental_attention(query, key, value, query_offset=0, dropout=None, *,
                          key_valid=None):
    """Causal attention computed as decoding computes it: one query at a time, query
    ``i`` against the keys ``0 .. query_offset + i`` (the cache so far), with
    ``query_offset = query_offset + i``. Returns ``(output, probabilities)`` with the
    probabilities of the keys not yet cached set to 0. ``dropout`` (training only;
    decoding never drops) is applied once, to the assembled probabilities.

    >>> Q, K, V = np.ones((2, 1)), np.ones((3, 1)), np.array([[0.0], [3.0], [6.0]])
    >>> incremental_attention(Q, K, V, query_offset=1)[0]  # positions 1 and 2
    array([[1.5],
           [3. ]])
    """
    Q, K, V = _validate(query, key, value, query_offset, key_valid)
    batch = _batch_shape(Q=Q, K=K, V=V)
    T_q, T_k = Q.shape[-2], K.shape[-2]
    O = np.zeros(batch + (T_q, V.shape[-1]))
    A = np.zeros(batch + (T_q, T_k))
    for i, p, q, kv in _steps(Q, K, V, query_offset, key_valid):
        O_i, A_i = causal_attention(q, K[..., :p, :], V[..., :p, :], p - 1,
                                    key_valid=kv)
        O[..., i: i + 1, :], A[..., i: i + 1, :p] = O_i, A_i
    if dropout is not None:
        O = dropout(A) @ V  # (..., T_q, T_k) x (..., T_k, r) -> (..., T_q, r)
    return O, A


def incremental_attention_backward(query, key, value, dO, query_offset=0, *,
                                   key_valid=None):
    """The backward pass of :func:`incremental_attention`: each step's gradients, the
    keys' and values' added over the steps that read them."""
    Q, K, V = _validate(query, key, value, query_offset, key_valid)
    dO = np.asarray(dO, dtype=np.float64)
    want = _batch_shape(Q=Q, K=K, V=V) + (Q.shape[-2], V.shape[-1])
    if dO.shape != want:
        raise ValueError(f"dO must have the shape of the output, {want}, "
                         f"got {dO.shape}")
    dQ, dK, dV = np.zeros(Q.shape), np.zeros(K.shape), np.zeros(V.shape)
    for i, p, q, kv in _steps(Q, K, V, query_offset, key_valid):
        dq, dk, dv = causal_attention_backward(q, K[..., :p, :], V[..., :p, :],
                                               dO[..., i: i + 1, :], p - 1,
                                               key_valid=kv)
        dQ[..., i: i + 1, :] = dq
        dK[..., :p, :] += dk
        dV[..., :p, :] += dv
    return dQ, dK, dV
