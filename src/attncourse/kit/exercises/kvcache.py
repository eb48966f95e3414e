"""Checkers of Chapter 10's exercises on the key/value cache: a decode step, and the
cache's memory."""

import math

import numpy as np

from ...model import ModelConfig, model_forward
from ..failed import CheckFailed
from ..kvcache import DECODE_TOLERANCE as _DECODE_TOLERANCE
from ._base import _array, _call, reports_unfinished

__all__ = [
    "CACHE_MEMORY_PROPERTIES",
    "check_cache_memory",
    "DECODE_STEP_PROPERTIES",
    "check_decode_step",
]


CACHE_MEMORY_PROPERTIES = (
    "a whole number of bytes",
    "proportional to t",
    "keys and values both counted",
    "every block counted",
    "every head counted",
    "a head is D / H wide",
    "bytes per number",
    "equals the nbytes of a real cache",
)


def _real_caches():
    """``(L, H, D, bytes_per_number, t, nbytes per sequence)`` of caches that prefill
    built for two small models, in float64 and float32, from a batch of two."""
    from ...kvcache import cache_nbytes, prefill
    from ...model import init_model
    from ...train import as_dtype

    found = []
    for L, H, D, T_max in ((3, 4, 8, 6), (2, 2, 6, 5)):
        config = ModelConfig(n_vocab=5, T_max=T_max, D=D, heads=H, layers=L, ratio=1)
        for dtype in (np.float64, np.float32):
            params = as_dtype(init_model(config), dtype)
            for t in (1, 4, T_max):
                _, cache = prefill(params, np.zeros((2, t), dtype=int), config=config)
                found.append(
                    (L, H, D, np.dtype(dtype).itemsize, t, cache_nbytes(cache) // 2)
                )
    return found


def _memory_call(fn, L, H, D, t, b):
    got = _call(fn, "a whole number of bytes", L, H, D, t, b)
    call = f"fn(L={L}, H={H}, D={D}, t={t}, bytes_per_number={b})"
    if isinstance(got, (np.ndarray, np.generic)) and np.ndim(got) == 0:
        got = got.item()  # a numpy scalar or 0-d array: its Python value
    if isinstance(got, float) and math.isfinite(got) and got == int(got):
        raise CheckFailed(
            "a whole number of bytes",
            f"{call} returned {got!r}, a float: a count of bytes is an int",
            "compute with integers: D // H, not D / H (or return int(...))",
        )
    if not isinstance(got, int) or isinstance(got, bool):
        raise CheckFailed(
            "a whole number of bytes",
            f"{call} returned {got!r}",
            "return an integer: the bytes of one sequence's cache",
        )
    return got


@reports_unfinished
def check_cache_memory(fn):
    """Check a learner's ``fn(L, H, D, t, bytes_per_number) -> int``: the bytes that
    the key/value cache of one sequence holds after ``t`` positions, for a model of
    ``L`` blocks of ``H`` heads and width ``D`` (each head ``d = D / H`` wide), each
    number taking ``bytes_per_number`` bytes (8 for float64, 4 for float32).

    The answer is compared with the ``nbytes`` of real caches that
    :func:`attncourse.kvcache.prefill` built (two models, ``L = 3, H = 4, D = 8`` and
    ``L = 2, H = 2, D = 6``; float64 and float32; ``t = 1``, 4 and the window), per
    sequence of a batch of two. The result must be **a whole number of bytes**, an
    ``int`` (a float such as ``384.0`` is named). A
    wrong one is named by what it misses: **proportional to t** (doubling ``t``
    doubles the bytes), **keys and values both counted** (half the bytes), **every
    block counted** (``1/L``), **every head counted** (``1/H``: ``d`` where ``D``
    belongs), **a head is D / H wide** (``H`` times too many: every head counted ``D``
    wide), **bytes per number** (numbers, not bytes); otherwise **equals the nbytes of
    a real cache**. Returns the properties checked.

    >>> check_cache_memory(lambda L, H, D, t, b: 2 * L * t * D * b)[-1]
    'equals the nbytes of a real cache'
    """
    for L, H, D, b, t, want in _real_caches():
        got = _memory_call(fn, L, H, D, t, b)
        if got == want:
            continue
        where = (
            f"L={L} blocks, H={H} heads, D={D}, t={t}, {b} bytes per number: "
            f"fn gave {got}, the cache holds {want} bytes per sequence"
        )
        misses = [
            (
                "keys and values both counted",
                2,
                "the cache keeps a key and a value per position: count both",
            ),
            (
                "every block counted",
                L,
                "every block keeps its own keys and values: multiply by L",
            ),
            (
                "every head counted",
                H,
                "the H heads together are D = H d wide: use D, not the head width d",
            ),
            (
                "a head is D / H wide",
                1 / H,
                "each head keeps d = D / H numbers "
                "per key: the H heads together are D wide, not H D",
            ),
            (
                "bytes per number",
                b,
                "multiply the number of numbers by bytes_per_number",
            ),
        ]
        later = _memory_call(fn, L, H, D, 2 * t, b)
        if later != 2 * got:
            raise CheckFailed(
                "proportional to t",
                f"{where}; doubling t to {2 * t} gives {later}, not {2 * got}",
                "every position adds the same bytes: one key and one "
                "value of width D per block",
            )
        for prop, factor, fix in misses:
            if got * factor == want:
                many = (
                    f"{factor} times too few"
                    if factor > 1
                    else f"{round(1 / factor)} times too many"
                )
                raise CheckFailed(prop, f"{where} ({many})", fix)
        raise CheckFailed(
            "equals the nbytes of a real cache",
            where,
            "2 L t D numbers (keys and values, every block, every head) "
            "of bytes_per_number bytes each",
        )
    return CACHE_MEMORY_PROPERTIES


DECODE_STEP_PROPERTIES = (
    "returns (logits, cache)",
    "the given cache left unchanged",
    "inputs unchanged",
    "position advanced by one",
    "keys and values appended once",
    "logits equal recomputation",
    "the cache equals the prefill's",
    "several steps in a row",
    "a batch of sequences",
)


def _decode_model():
    """A small seeded model (float64, non-square: D = 12, 3 heads of 4, 2 blocks) and
    two token sequences of its window."""
    from ...model import init_model

    config = ModelConfig(n_vocab=11, T_max=9, D=12, heads=3, layers=2, ratio=2)
    params = init_model(config, seed=10, std=0.5)  # large weights: mistakes show
    ids = np.random.default_rng(10).integers(0, config.n_vocab, size=(2, config.T_max))
    return params, config, ids


def _step(fn, prop, params, cache, ids, config):
    out = _call(fn, prop, params, cache, ids, config=config)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise CheckFailed(
            "returns (logits, cache)",
            f"fn returned {type(out).__name__}, not a pair",
            "return logits (..., n_vocab) and the new KVCache, in that order",
        )
    logits, new = out
    if not (hasattr(new, "blocks") and hasattr(new, "position")):
        raise CheckFailed(
            "returns (logits, cache)",
            f"the second result is a {type(new).__name__}, not a KVCache",
            "return KVCache(tuple of BlockCache(keys, values), position + 1)",
        )
    return _array(logits, "returns (logits, cache)", np.float64), new


def _arrays(tree, name="params"):
    """``(name, copy)`` of every array of a nested dict or list of parameters."""
    if isinstance(tree, dict):
        return [a for k, v in tree.items() for a in _arrays(v, f"{name}[{k!r}]")]
    if isinstance(tree, (list, tuple)):
        return [a for i, v in enumerate(tree) for a in _arrays(v, f"{name}[{i}]")]
    return [(name, np.array(tree, copy=True))]


def _compare_step(fn, params, config, cache, ids_next, want_logits, want_cache,
                  prop, where):
    """One step of the learner's ``fn``; raise CheckFailed naming what differs."""
    from ..faults.kvcache import (decode_step_mask_ignores_offset,
                                  decode_step_offset_off_by_one,
                                  decode_step_position_not_offset)

    before = [(b.keys.copy(), b.values.copy()) for b in cache.blocks]
    kept = _arrays(params), np.array(ids_next)
    logits, new = _step(fn, prop, params, cache, ids_next, config)
    for (name, x), (_, y) in zip(kept[0], _arrays(params)):
        if not np.array_equal(x, y):
            raise CheckFailed(
                "inputs unchanged",
                f"{where}: fn changed the parameter {name} it was given",
                "read the parameters, never write into them",
            )
    if not np.array_equal(kept[1], ids_next):
        raise CheckFailed(
            "inputs unchanged",
            f"{where}: fn changed the ids it was given",
            "read ids, never write into them",
        )
    for (keys, values), block in zip(before, cache.blocks):
        if not (np.array_equal(block.keys, keys)
                and np.array_equal(block.values, values)):
            raise CheckFailed(
                "the given cache left unchanged",
                f"{where}: the cache passed in was modified in place",
                "build new arrays (block_forward's saved keys and values); "
                "never write into the cache you were given",
            )
    t = cache.position
    if new.position != t + 1:
        raise CheckFailed(
            "position advanced by one",
            f"{where}: the new cache says position {new.position}, not {t + 1}",
            "return KVCache(..., cache.position + 1, ...)",
        )
    if len(new.blocks) != config.layers:
        raise CheckFailed(
            "keys and values appended once",
            f"{where}: the new cache has {len(new.blocks)} blocks, the model "
            f"{config.layers}",
            "keep one BlockCache per block",
        )
    for b, block in enumerate(new.blocks):
        for name in ("keys", "values"):
            rows = np.shape(getattr(block, name))[-2]
            if rows == t + 1:
                continue
            if rows == t:
                detail, fix = "not appended", (
                    "keep block_forward's saved['attn']['K'] and ['V']: the cached "
                    "rows and the new one")
            elif rows > t + 1:
                detail, fix = "appended twice", (
                    "block_forward's saved['attn']['K'] and ['V'] already hold the "
                    "cached rows (past) and the new one: keep them as they are, do "
                    "not concatenate the cache again")
            else:
                detail, fix = "rows lost", "keep every cached row and the new one"
            raise CheckFailed(
                "keys and values appended once",
                f"{where}: block {b}'s {name} have {rows} positions after the step, "
                f"not t + 1 = {t + 1} ({detail})",
                fix,
            )
    if logits.shape != want_logits.shape:
        raise CheckFailed(
            "returns (logits, cache)",
            f"{where}: logits of shape {logits.shape}, expected {want_logits.shape}",
            "return the logits of the new position only: Z[..., 0, :]",
        )
    diff = float(np.max(np.abs(logits - want_logits)))
    if not diff <= _DECODE_TOLERANCE:
        known = (
            ("forgot the query offset: the one query sat at position 0 and read key "
             "0 only", "call block_forward with query_offset = t = cache.position",
             decode_step_mask_ignores_offset),
            ("query_offset one short: the query never read its own key",
             "the new query sits at position t: query_offset = t, not t - 1",
             decode_step_offset_off_by_one),
            ("the position row: the new token got P[0], not P[t]",
             "add the position row of the new token, P[t] with t = cache.position",
             decode_step_position_not_offset),
        )
        seen, fix = "", ("add the position row P[t], and call block_forward with "
                         "past = the block's cached (keys, values) and "
                         "query_offset = t")
        for what, specific, planted in known:
            with np.errstate(all="ignore"):
                other, _ = planted(params, cache, ids_next, config=config)
            if np.allclose(logits, other, rtol=0, atol=1e-9):
                seen, fix = f" ({what})", specific
                break
        raise CheckFailed(
            prop,
            f"{where}: the logits differ from the full forward pass on the prefix "
            f"by {diff:.2e}{seen}",
            fix,
        )
    for b, (got, want) in enumerate(zip(new.blocks, want_cache.blocks)):
        for name in ("keys", "values"):
            g, w = np.asarray(getattr(got, name)), getattr(want, name)
            if g.shape != w.shape or not np.allclose(g, w, rtol=0,
                                                     atol=_DECODE_TOLERANCE):
                raise CheckFailed(
                    "the cache equals the prefill's",
                    f"{where}: block {b}'s {name} differ from those prefill computes "
                    f"on the {t + 1} tokens",
                    "keep the keys and values block_forward computed for this block",
                )
    return new


@reports_unfinished
def check_decode_step(fn):
    """Check a learner's ``fn(params, cache, ids, *, config) -> (logits, cache)``: one
    decode step of the key/value cache, as :func:`attncourse.kvcache.decode_step`.

    On a small seeded model (``D = 12``, 3 heads, 2 blocks, float64) it prefills a
    prompt with :func:`attncourse.kvcache.prefill` and calls ``fn`` for the next token;
    the logits must equal the last row of ``model_forward`` on the whole prefix (within
    ``1e-12``) and the new cache the one ``prefill`` builds on the longer prefix. In
    order: **returns (logits, cache)**, **the given cache left unchanged**, **inputs
    unchanged** (the parameters and ids), **position advanced by one**, **keys and
    values appended once** (not forgotten, not twice), **logits equal
    recomputation** (naming a forgotten query offset, an offset one short or a
    missing position row when the logits are theirs), **the cache equals the
    prefill's**, then **several steps in a row** (decoding to the end of the
    window) and **a batch of sequences** (two, one token each). Returns the
    properties checked.

    >>> from attncourse.kvcache import decode_step
    >>> check_decode_step(decode_step)[-1]
    'a batch of sequences'
    """
    from ...kvcache import prefill

    params, config, ids = _decode_model()
    seq = ids[0]
    p = 3
    _, cache = prefill(params, seq[:p], config=config)
    want_logits, _ = model_forward(params, seq[:p + 1], config=config)
    _, want_cache = prefill(params, seq[:p + 1], config=config)
    cache = _compare_step(fn, params, config, cache, seq[p], want_logits[-1],
                          want_cache, "logits equal recomputation",
                          f"the step after a prompt of {p} tokens")
    for t in range(p + 1, config.T_max):
        want_logits, _ = model_forward(params, seq[:t + 1], config=config)
        _, want_cache = prefill(params, seq[:t + 1], config=config)
        cache = _compare_step(fn, params, config, cache, seq[t], want_logits[-1],
                              want_cache, "several steps in a row",
                              f"the step at position {t} (prompt of {p})")
    _, cache = prefill(params, ids[:, :p], config=config)
    want_logits, _ = model_forward(params, ids[:, :p + 1], config=config)
    _, want_cache = prefill(params, ids[:, :p + 1], config=config)
    _compare_step(fn, params, config, cache, ids[:, p], want_logits[:, -1],
                  want_cache, "a batch of sequences",
                  f"a batch of 2 sequences, the step after {p} tokens")
    return DECODE_STEP_PROPERTIES
