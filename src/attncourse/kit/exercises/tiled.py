"""Checkers of Chapter 9's tiled attention: merging two states, the tile loop."""

import numpy as np

from ...tiled import empty_state, tile_state
from ..failed import CheckFailed
from ._base import _array, _call, reports_unfinished

__all__ = [
    "MERGE_STATES_PROPERTIES",
    "check_merge_states",
    "TILE_LOOP_PROPERTIES",
    "check_tile_loop",
]


# --- Chapter 9: merging two softmax states --------------------------------------------

MERGE_STATES_PROPERTIES = (
    "returns (m, l, o)",
    "inputs unchanged",
    "merged halves equal the whole",
    "rescales the old output",
    "order does not matter",
    "empty rows stay empty",
    "no overflow",
)


def _state_of(S, V):
    """The package's state ``(m, l, o)`` (:func:`attncourse.tiled.tile_state`) of rows
    with scores ``S (n, k)`` and values ``V (k, r)``, as a tuple of fresh arrays."""
    return tuple(np.array(x) for x in tile_state(S, V))


def _merged(fn, property, a, b):
    given = [tuple(np.array(x) for x in state) for state in (a, b)]
    result = _call(fn, property, *given)
    if not (isinstance(result, (tuple, list)) and len(result) == 3):
        raise CheckFailed(
            "returns (m, l, o)",
            f"got {type(result).__name__}, not a triple",
            "return m, l, o",
        )
    m, l, o = (_array(x, "returns (m, l, o)", float) for x in result)
    shapes = (a[0].shape, a[1].shape, a[2].shape)
    if (m.shape, l.shape, o.shape) != shapes:
        raise CheckFailed(
            "returns (m, l, o)",
            f"shapes {m.shape}, {l.shape}, {o.shape}, "
            f"expected {shapes[0]}, {shapes[1]}, {shapes[2]}",
            "m and l have one entry per row, o one row per row",
        )
    for which, state, copy in zip("ab", (a, b), given):
        for name, x, y in zip("mlo", state, copy):
            if not np.array_equal(x, y):
                raise CheckFailed(
                    "inputs unchanged",
                    f"fn changed {name} of the state {which} it was given",
                    "build the merged state from new arrays: never write into a or b",
                )
    return m, l, o


def _same_state(property, label, got, want, fix):
    for name, x, y in zip("mlo", got, want):
        if not np.allclose(x, y, rtol=1e-12, atol=1e-14):
            worst = np.max(np.abs(x - y)) if np.all(np.isfinite(x)) else np.nan
            raise CheckFailed(
                property,
                f"{label}: {name} differs from the state of the "
                f"whole row by up to {worst:.2e}",
                fix,
            )


@reports_unfinished
def check_merge_states(fn):
    """Check a learner's ``fn(a, b) -> (m, l, o)`` that merges two softmax states.

    A state ``(m, l, o)`` of ``n`` rows holds the running maximum ``m (n,)``, the
    normaliser ``l = sum_j exp(s_j - m) (n,)`` and the unnormalised output
    ``o = sum_j exp(s_j - m) v_j (n, r)``. The merge must give the state of the keys of
    both parts, rescaled to the larger maximum, in either order, keep rows that have
    seen no key (``m = -inf``, ``l = 0``) empty without NaN, not overflow for scores
    near 1000, and leave the two states it is given unchanged. Returns the names of
    the properties checked.

    >>> from attncourse.tiled import merge_states
    >>> check_merge_states(merge_states)[2]
    'merged halves equal the whole'
    >>> check_merge_states(lambda a, b: a)
    Traceback (most recent call last):
    ...
    attncourse.kit.failed.CheckFailed: merged halves equal the whole: first 3 keys, \
last 4: l differs from the state of the whole row by up to 2.51e-01 (likely fix: \
rescale both parts to m = max(m_a, m_b): l = exp(m_a - m) l_a + exp(m_b - m) l_b, \
and o alike)
    """
    rng = np.random.default_rng(9)
    S, V = rng.normal(size=(4, 7)), rng.normal(size=(7, 3))  # 4 rows, 7 keys, r = 3
    S[:, :3] += 4.0  # first, the first part holds the maximum of every row
    fix = (
        "rescale both parts to m = max(m_a, m_b): l = exp(m_a - m) l_a + "
        "exp(m_b - m) l_b, and o alike"
    )
    whole, a, b = (
        _state_of(S, V),
        _state_of(S[:, :3], V[:3]),
        _state_of(S[:, 3:], V[3:]),
    )
    _same_state(
        "merged halves equal the whole",
        "first 3 keys, last 4",
        _merged(fn, "merged halves equal the whole", a, b),
        whole,
        fix,
    )
    S2 = S.copy()
    S2[:, 3:] += 8.0  # then the second part raises the maximum of every row
    whole, a, b = (
        _state_of(S2, V),
        _state_of(S2[:, :3], V[:3]),
        _state_of(S2[:, 3:], V[3:]),
    )
    _same_state(
        "rescales the old output",
        "the second part holds the larger maximum",
        _merged(fn, "rescales the old output", a, b),
        whole,
        "multiply the old o by exp(m_a - m) too, not only l",
    )
    ab = _merged(fn, "order does not matter", a, b)
    ba = _merged(fn, "order does not matter", b, a)
    _same_state(
        "order does not matter",
        "merge(b, a) against merge(a, b)",
        ba,
        ab,
        "treat both parts alike: no part is special",
    )
    empty = tuple(empty_state((4,), 3))  # m = -inf, l = 0, o = 0
    with np.errstate(all="ignore"):
        both = _merged(fn, "empty rows stay empty", empty, empty)
        one = _merged(fn, "empty rows stay empty", empty, a)
    if not (
        np.all(both[0] == -np.inf) and np.all(both[1] == 0) and np.all(both[2] == 0)
    ):
        raise CheckFailed(
            "empty rows stay empty",
            f"two states that have seen no key merge to l = {both[1].tolist()}",
            "use the shift m = max(m_a, m_b) only where it is finite (else 0): "
            "-inf - (-inf) is NaN",
        )
    _same_state(
        "empty rows stay empty",
        "merge(empty, a)",
        one,
        a,
        "the empty state (m = -inf, l = 0, o = 0) must change nothing",
    )
    big, c = _state_of(S + 1000.0, V), _state_of(S[:, :3] + 1000.0, V[:3])
    with np.errstate(all="ignore"):
        merged = _merged(fn, "no overflow", c, _state_of(S[:, 3:] + 1000.0, V[3:]))
    if not all(np.all(np.isfinite(x)) for x in merged):
        raise CheckFailed(
            "no overflow",
            "scores near 1000 give a non-finite state",
            "never form exp(m): only exp(m_a - m) <= 1",
        )
    _same_state("no overflow", "scores near 1000", merged, big, fix)
    return MERGE_STATES_PROPERTIES


# --- Chapter 9: the tile loop ---------------------------------------------------------

TILE_LOOP_PROPERTIES = (
    "shape",
    "inputs unchanged",
    "one tile",
    "tiles that divide T",
    "tiles that do not divide T",
    "tiles of one key",
    "causal",
    "skips the tiles above the diagonal",
    "never stores T x T",
)


class _Counted:
    """Count the calls of the package's ``tile_state`` and ``merge_states`` that a
    learner's function makes, under the names it reads them by (its module's globals,
    and :mod:`attncourse.tiled` itself); restore them on exit."""

    def __init__(self, fn):
        from ... import tiled

        self.calls = {"tile_state": 0, "merge_states": 0}
        self._patched = []
        spaces = [vars(tiled)]
        for f in (fn, getattr(fn, "func", None)):  # a functools.partial: its func
            space = getattr(f, "__globals__", None)
            if isinstance(space, dict) and all(space is not s for s in spaces):
                spaces.append(space)
        for name in self.calls:
            original = getattr(tiled, name)
            counting = self._counting(name, original)
            for space in spaces:
                if space.get(name) is original:
                    self._patched.append((space, name, original))
                    space[name] = counting

    def _counting(self, name, original):
        def counting(*args, **kwargs):
            self.calls[name] += 1
            return original(*args, **kwargs)

        return counting

    def __enter__(self):
        return self.calls

    def __exit__(self, *exc):
        for space, name, original in self._patched:
            space[name] = original
        return False



def _same_inputs(given, Q, K, V, block):
    """The learner's function must leave ``Q``, ``K`` and ``V`` as it found them."""
    for name, x, y in zip("QKV", given, (Q, K, V)):
        if not np.array_equal(x, y):
            raise CheckFailed(
                "inputs unchanged",
                f"block={block}: fn changed the {name} it was given",
                "work on copies or new arrays: never write into Q, K or V",
            )


def _skips_upper_tiles(fn, Q, K, V):
    """Count the tiles the learner's function visits (its calls of ``tile_state``,
    else of ``merge_states``): no more than the causal tiles."""
    from ...tiled import causal_tiles

    T, block = Q.shape[0], 4
    causal = len(causal_tiles(T, T, block, block))
    every = (-(-T // block)) ** 2
    with _Counted(fn) as calls:
        _call(fn, "skips the tiles above the diagonal", Q, K, V, block)
    name = "tile_state" if calls["tile_state"] else "merge_states"
    n = calls[name]
    if n > causal:
        raise CheckFailed(
            "skips the tiles above the diagonal",
            f"T={T}, block={block}: fn called {name} {n} times, once per tile, but "
            f"only {causal} of the {every} tiles hold a key j <= i; {n - causal} "
            f"lie entirely above the diagonal (every key after every query) and "
            f"must be skipped",
            "for the queries i0..i1-1 visit only the key tiles with j0 <= i1 - 1: "
            "range(0, i1, block)",
        )


@reports_unfinished
def check_tile_loop(fn):
    """Check a learner's ``fn(Q, K, V, block) -> O``: causal attention of one head by
    tiles of ``block`` queries and ``block`` keys, ``Q (T, d)``, ``K (T, d)``,
    ``V (T, r)``.

    ``Q``, ``K`` and ``V`` must be left unchanged. ``O`` must equal
    :func:`attncourse.causal_attention`'s output within ``1e-12`` for one tile, tiles
    that do and do not divide ``T``, and tiles of one key; outputs must not change
    when later keys change; the tiles entirely above the diagonal must be skipped
    (counted as the function's calls of :func:`attncourse.tiled.tile_state`, or else
    of :func:`~attncourse.tiled.merge_states`); and at ``T = 1024`` with
    ``block = 32`` the function must not allocate anything near a ``T x T`` array
    (``tracemalloc``).
    Returns the names of the properties checked.

    >>> from attncourse.tiled import tiled_attention_forward
    >>> tiled = lambda Q, K, V, block: tiled_attention_forward(
    ...     Q, K, V, causal=True, block_q=block, block_k=block, workers=1)[0]
    >>> check_tile_loop(tiled)[-1]
    'never stores T x T'
    """
    import tracemalloc

    from ...layers.attention import causal_attention

    rng = np.random.default_rng(10)
    T, d, r = 11, 3, 4
    Q, K, V = rng.normal(size=(T, d)), rng.normal(size=(T, d)), rng.normal(size=(T, r))
    want, _ = causal_attention(Q, K, V)
    for property, block in (
        ("one tile", 16),
        ("tiles that divide T", 11),
        ("tiles that do not divide T", 4),
        ("tiles that do not divide T", 3),
        ("tiles of one key", 1),
    ):
        given = Q.copy(), K.copy(), V.copy()
        O = _array(_call(fn, property, *given, block), property, float)
        if O.shape != (T, r):
            raise CheckFailed(
                "shape",
                f"block={block}: O has shape {O.shape}, expected {(T, r)}",
                "one output row per query, r columns",
            )
        _same_inputs(given, Q, K, V, block)
        if not np.allclose(O, want, rtol=1e-12, atol=1e-12):
            rows = np.flatnonzero(
                ~np.all(np.isclose(O, want, rtol=1e-12, atol=1e-12), axis=1)
            ).tolist()
            raise CheckFailed(
                property,
                f"block={block}: rows {rows} differ from causal attention",
                "visit every tile with j0 <= i1 - 1, mask "
                "keys j > i in the diagonal tiles, merge with rescaling, "
                "divide by l at the end; the last tile may be smaller",
            )
    K2, V2 = K.copy(), V.copy()
    K2[6:], V2[6:] = rng.normal(size=(T - 6, d)), 10 * rng.normal(size=(T - 6, r))
    O2 = _array(_call(fn, "causal", Q, K2, V2, 4), "causal", float)
    O = _array(_call(fn, "causal", Q, K, V, 4), "causal", float)
    if not np.allclose(O2[:6], O[:6], rtol=0, atol=1e-14):
        raise CheckFailed(
            "causal",
            "outputs 0..5 changed when keys 6.. changed",
            "query i reads keys j <= i only",
        )
    _skips_upper_tiles(fn, Q, K, V)
    big = 1024
    Qb, Kb, Vb = (rng.normal(size=(big, w)) for w in (d, d, r))
    tracemalloc.start()
    try:
        _call(fn, "never stores T x T", Qb, Kb, Vb, 32)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    if peak >= big * big * 8 / 8:
        raise CheckFailed(
            "never stores T x T",
            f"T={big}, block=32: {peak / 2**20:.1f} "
            f"MiB allocated at the peak; one T x T array is "
            f"{big * big * 8 / 2**20:.0f} MiB",
            "form scores one tile (block x block) at a time",
        )
    return TILE_LOOP_PROPERTIES
