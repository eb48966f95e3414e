"""Checker of Chapter 10's exercise on the key/value cache: its memory."""

import math

import numpy as np

from ...model import ModelConfig
from ..failed import CheckFailed
from ._base import _call, reports_unfinished

__all__ = ["CACHE_MEMORY_PROPERTIES", "check_cache_memory"]


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
    whole = (
        isinstance(got, (int, float, np.integer, np.floating))
        and not isinstance(got, (bool, np.bool_))
        and math.isfinite(got)
        and got == int(got)
    )
    if not whole:
        raise CheckFailed(
            "a whole number of bytes",
            f"fn(L={L}, H={H}, D={D}, t={t}, bytes_per_number={b}) returned {got!r}",
            "return an integer: the bytes of one sequence's cache",
        )
    return int(got)


@reports_unfinished
def check_cache_memory(fn):
    """Check a learner's ``fn(L, H, D, t, bytes_per_number) -> int``: the bytes that
    the key/value cache of one sequence holds after ``t`` positions, for a model of
    ``L`` blocks of ``H`` heads and width ``D`` (each head ``d = D / H`` wide), each
    number taking ``bytes_per_number`` bytes (8 for float64, 4 for float32).

    The answer is compared with the ``nbytes`` of real caches that
    :func:`attncourse.kvcache.prefill` built (two models, ``L = 3, H = 4, D = 8`` and
    ``L = 2, H = 2, D = 6``; float64 and float32; ``t = 1``, 4 and the window), per
    sequence of a batch of two. The result must be **a whole number of bytes**. A
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
