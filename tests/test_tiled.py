"""Tests of attncourse.tiled beyond the conformance suite (which holds the causal pair
to values, gradients, causality, padding, the prefix interface, extreme scores, bad
input and the dropout contract): the online-softmax state and its merge, the tiles, the
non-causal pass, the threads, and memory that never grows as T x T."""

import itertools
import re
import tracemalloc

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import attncourse.fast as fast
import attncourse.tiled as tiled
from attncourse.layers.attention import (attention_backward, attention_forward,
                                         causal_attention, causal_mask,
                                         key_valid_from_lengths)
from attncourse.tiled import (SoftmaxState, TiledWeights, causal_tiles, empty_state,
                              finish_state, merge_states, tile_state,
                              tiled_attention_backward, tiled_attention_forward,
                              tiled_causal_attention, tiled_causal_attention_backward)
from attncourse.kit.conformance import tiled_implementation


def reference_backward(Q, K, V, G, visible=None):
    """``dQ, dK, dV`` of the reference pair: the forward's ``saved``, then the
    backward."""
    return attention_backward(attention_forward(Q, K, V, visible)[1], G)


def row_case(seed, n=3, k=11, r=2):
    """Scores of n rows against k keys, spread so that the maximum moves between
    parts."""
    rng = np.random.default_rng(seed)
    return 3.0 * rng.standard_normal((n, k)), rng.standard_normal((k, r))


def split_states(S, V, cuts):
    bounds = [0, *cuts, S.shape[-1]]
    return [tile_state(S[:, a:b], V[a:b]) for a, b in zip(bounds, bounds[1:])]


def assert_same_state(actual, desired, rtol=1e-14):
    for name in ("m", "l", "o"):
        assert_allclose(getattr(actual, name), getattr(desired, name), rtol=rtol,
                        atol=1e-15, err_msg=name)


# --- the online softmax ---------------------------------------------------------------

@pytest.mark.parametrize("cuts", [[1], [5], [10], [2, 7], [1, 2, 3, 4]])
def test_merging_the_parts_of_a_row_gives_the_state_of_the_whole_row(cuts):
    S, V = row_case(0)
    parts = split_states(S, V, cuts)
    merged = parts[0]
    for part in parts[1:]:
        merged = merge_states(merged, part)
    assert_same_state(merged, tile_state(S, V))


def test_the_merge_is_commutative_exactly_and_associative_to_rounding():
    S, V = row_case(1)
    a, b, c = split_states(S, V, [3, 8])
    ab, ba = merge_states(a, b), merge_states(b, a)
    for x, y in zip(ab, ba):
        assert_array_equal(x, y)  # bit for bit: max and + are symmetric
    for order in itertools.permutations((a, b, c)):
        assert_same_state(merge_states(merge_states(order[0], order[1]), order[2]),
                          tile_state(S, V))
    assert_same_state(merge_states(a, merge_states(b, c)),
                      merge_states(merge_states(a, b), c))


def test_the_finished_state_is_the_softmax_weighted_sum():
    S, V = row_case(2)
    O, lse = finish_state(tile_state(S, V))
    A = np.exp(S - S.max(axis=1, keepdims=True))
    A /= A.sum(axis=1, keepdims=True)
    assert_allclose(O, A @ V, rtol=1e-14)  # (3, 11) x (11, 2)
    assert_allclose(lse, np.log(np.exp(S).sum(axis=1)), rtol=1e-14)


def test_the_empty_state_is_neutral_and_finishes_to_nothing():
    S, V = row_case(3)
    s = tile_state(S, V)
    empty = empty_state((3,), 2)
    with np.errstate(all="raise"):
        for merged in (merge_states(empty, s), merge_states(s, empty)):
            for x, y in zip(merged, s):
                assert_array_equal(x, y)
        both = merge_states(empty, empty)
        O, lse = finish_state(both)
    assert np.all(both.m == -np.inf) and np.all(both.l == 0) and np.all(both.o == 0)
    assert np.all(O == 0) and np.all(lse == -np.inf)


def test_a_tile_with_hidden_keys_only_gives_the_empty_state():
    S, V = row_case(4, n=2, k=3)
    visible = np.array([[True, False, True], [False, False, False]])
    with np.errstate(all="raise"):
        s = tile_state(S, V, visible)
    assert s.m[1] == -np.inf and s.l[1] == 0 and np.all(s.o[1] == 0)
    assert_same_state(SoftmaxState(s.m[:1], s.l[:1], s.o[:1]),
                      tile_state(S[:1, [0, 2]], V[[0, 2]]))


def test_the_state_functions_reject_mismatched_shapes():
    S, V = row_case(5)
    with pytest.raises(
        ValueError,
        match=r"^V must have shape \(\.\.\., k, r\) with k=11 \(as in S\), "
        r"got shape \(4, 2\)$",
    ):
        tile_state(S, V[:4])
    with pytest.raises(ValueError, match=r"o has shapes \(3, 2\) and \(3, 3\)"):
        merge_states(empty_state((3,), 2), empty_state((3,), 3))


# --- the tiles ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "T_q, T_k, bq, bk",
    [(8, 8, 2, 2), (7, 7, 3, 2), (3, 5, 2, 2), (6, 6, 1, 1), (5, 5, 8, 8)],
)
def test_the_causal_tiles_cover_every_visible_pair_once(T_q, T_k, bq, bk):
    count = np.zeros((T_q, T_k), dtype=int)
    for t in causal_tiles(T_q, T_k, bq, bk):
        count[t.i0 : t.i1, t.j0 : t.j1] += 1
        assert t.masked == (not causal_mask(T_q, T_k)[t.i0 : t.i1, t.j0 : t.j1].all())
    visible = causal_mask(T_q, T_k)
    assert np.all(count[visible] == 1)
    assert np.all(count <= 1)


def test_the_tiles_above_the_diagonal_are_skipped():
    T, b = 8, 2
    n = T // b
    assert len(causal_tiles(T, T, b, b)) == n * (n + 1) // 2  # 10 of 16
    assert len(causal_tiles(T, T, b, b, causal=False)) == n * n
    assert not any(t.masked for t in causal_tiles(T, T, b, b, causal=False))
    assert sum(t.masked for t in causal_tiles(T, T, b, b)) == n  # the diagonal only


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, None, "4"])
def test_bad_tile_sizes_raise_value_errors_that_name_them(bad):
    Q = np.ones((4, 3))

    def message(name, block_q, block_k):  # every size is listed, the bad one first
        return re.escape(f"sizes must be positive integers: {name}={bad!r} "
                         f"(got block_q={block_q!r}, block_k={block_k!r})")

    with pytest.raises(ValueError, match=f"^{message('block_q', bad, 256)}$"):
        tiled_attention_forward(Q, Q, Q, block_q=bad)
    with pytest.raises(ValueError, match=f"^{message('block_k', 256, bad)}$"):
        tiled_causal_attention(Q, Q, Q, block_k=bad)
    with pytest.raises(ValueError, match=f"^{message('block_k', 2, bad)}$"):
        causal_tiles(4, 4, 2, bad)
    with pytest.raises(ValueError, match=f"^{message('block_q', bad, 3)}$"):
        causal_tiles(4, 4, bad, 3)
    with pytest.raises(ValueError, match=r"^sizes must be positive integers: block_q="):
        tiled_implementation(bad)


# --- the passes -----------------------------------------------------------------------


def qkv(seed, batch_q=(2, 1), batch_k=(3,), batch_v=(1, 3), T_q=7, T_k=7, d=3, r=5):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((*batch_q, T_q, d)),
        rng.standard_normal((*batch_k, T_k, d)),
        rng.standard_normal((*batch_v, T_k, r)),
    )


@pytest.mark.parametrize("blocks", [(1, 1), (2, 3), (4, 4), (16, 16)])
def test_the_non_causal_pass_equals_the_reference(blocks):
    Q, K, V = qkv(0, T_q=6, T_k=9)  # T_q != T_k != d != r, broadcast batch axes
    bq, bk = blocks
    O, saved = tiled_attention_forward(Q, K, V, block_q=bq, block_k=bk)
    O_ref, _ = attention_forward(Q, K, V)
    assert_allclose(O, O_ref, rtol=1e-12, atol=1e-14)
    G = np.random.default_rng(1).standard_normal(O.shape)
    for got, want in zip(
        tiled_attention_backward(saved, G), reference_backward(Q, K, V, G)
    ):
        assert got.shape == want.shape
        assert_allclose(got, want, rtol=1e-11, atol=1e-13)


def test_padding_without_the_causal_mask():
    Q, K, V = qkv(2, (2,), (2,), (2,))
    key_valid = key_valid_from_lengths([0, 4], 7, side="right")  # sequence 0: no key
    O, saved = tiled_attention_forward(
        Q, K, V, key_valid=key_valid, block_q=2, block_k=3
    )
    visible = np.broadcast_to(key_valid[:, None, :], (2, 7, 7))
    assert_allclose(O, attention_forward(Q, K, V, visible)[0], rtol=1e-12, atol=1e-14)
    assert np.all(O[0] == 0) and np.all(saved.lse[0] == -np.inf)


def test_the_result_does_not_depend_on_the_threads():
    Q, K, V = qkv(3, (2,), (2,), (2,), T_q=40, T_k=40)
    G = np.random.default_rng(4).standard_normal((2, 40, 5))
    results = []
    for workers in (1, 2, 3):
        O, saved = tiled_attention_forward(
            Q, K, V, causal=True, block_q=8, block_k=8, workers=workers
        )
        results.append((O, *tiled_attention_backward(saved, G)))
    for other in results[1:]:
        for x, y in zip(results[0], other):
            assert_allclose(x, y, rtol=1e-14, atol=1e-15)
    again = tiled_attention_backward(saved, G)  # 3 threads once more: bit for bit
    for x, y in zip(results[-1][1:], again):
        assert_array_equal(x, y)
    with pytest.raises(ValueError, match=r"^sizes must be positive integers: workers=0 "
                                         r"\(got workers=0\)$"):
        tiled_attention_forward(Q, K, V, workers=0)
    with pytest.raises(ValueError, match=r"^sizes must be positive integers: "
                                         r"workers=1\.5 "):
        tiled_attention_backward(saved, G, workers=1.5)  # not a bare TypeError of range


def test_float32_stays_float32():
    Q, K, V = (x.astype(np.float32) for x in qkv(5, (), (), ()))
    O, saved = tiled_attention_forward(Q, K, V, causal=True, block_q=2, block_k=2)
    grads = tiled_attention_backward(saved, np.ones_like(O))
    assert O.dtype == np.float32 and all(g.dtype == np.float32 for g in grads)
    assert_allclose(
        O,
        causal_attention(Q.astype(float), K.astype(float), V.astype(float))[0],
        rtol=1e-5,
        atol=1e-6,
    )


def test_the_weights_are_formed_only_on_request():
    Q, K, V = qkv(6, (), (), (), T_q=5, T_k=6)
    O, weights = tiled_causal_attention(Q, K, V, block_q=2, block_k=4)
    assert isinstance(weights, TiledWeights)
    assert weights.shape == (5, 6) and weights.dtype == np.float64
    assert repr(weights) == "TiledWeights(shape=(5, 6), dtype=float64)"
    _, A = causal_attention(Q, K, V)
    assert_allclose(np.asarray(weights), A, rtol=1e-13, atol=1e-16)
    assert_allclose(weights.rows(1, 3), A[1:3], rtol=1e-13, atol=1e-16)
    assert np.asarray(weights, dtype=np.float32).dtype == np.float32


def test_the_backward_rejects_an_upstream_gradient_of_another_shape():
    Q, K, V = qkv(7, (), (), ())
    _, saved = tiled_attention_forward(Q, K, V)
    with pytest.raises(
        ValueError,
        match=r"^G must have the shape of the output O, \(7, 5\), got \(5, 7\)$",
    ):
        tiled_attention_backward(saved, np.ones((5, 7)))
    with pytest.raises(NotImplementedError, match="Chapter 10"):
        tiled_causal_attention_backward(Q, K, V, np.ones((7, 5)), query_offset=2)


# --- memory ---------------------------------------------------------------------------


def peak_bytes(run):
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_grows_as_t_not_as_t_squared():
    d, r, block = 8, 6, 32
    peaks = {}
    for T in (512, 2048):
        rng = np.random.default_rng(T)
        Q, K, V, G = (rng.standard_normal((T, w)) for w in (d, d, r, r))

        def run():
            _, saved = tiled_attention_forward(
                Q, K, V, causal=True, block_q=block, block_k=block, workers=1
            )
            tiled_attention_backward(saved, G)

        peaks[T] = peak_bytes(run)
    one_matrix = 2048 * 2048 * 8  # a single T x T float64 array: 32 MiB
    assert peaks[2048] < one_matrix / 25
    assert peaks[2048] < 5 * peaks[512]  # T grew 4x: linear, not 16x
    # the per-row arrays (O, lse, delta, dQ, dK, dV), a few tiles, small change
    per_row = 2048 * 8 * (r + 2 + 2 * d + r)
    assert peaks[2048] < 2 * per_row + 10 * block * block * 8 + 64 * 1024


def test_a_tile_of_scores_is_worked_on_in_its_own_memory():
    # one tile, T x T: the forward holds one T x T array at a time (the scores become
    # the weights in place), the backward two (the weights, and dA becoming dS), a
    # block of TiledWeights rows one; masks are booleans, an eighth of a tile each
    T, d, r = 600, 4, 3
    rng = np.random.default_rng(23)
    Q, K, V, G = (rng.standard_normal((T, w)) for w in (d, d, r, r))
    key_valid = np.arange(T) < T - 5  # a (1, T) mask, broadcast into the tile in place
    tile = T * T * 8
    for causal, kv in ((True, None), (False, key_valid)):
        def forward():
            return tiled_attention_forward(Q, K, V, causal=causal, key_valid=kv,
                                           block_q=T, block_k=T, workers=1)

        assert peak_bytes(forward) < 1.5 * tile
        _, saved = forward()
        assert peak_bytes(lambda: tiled_attention_backward(saved, G, workers=1)) \
            < 2.5 * tile
    _, saved = tiled_attention_forward(Q, K, V, block_q=T, block_k=T)  # nothing hidden
    weights = TiledWeights(saved)
    assert peak_bytes(lambda: weights.rows(0, T)) < 1.5 * tile
    eps = np.finfo(np.float64).eps  # measured: 12 eps at most
    assert_allclose(weights.rows(0, T), attention_forward(Q, K, V)[1].A, rtol=64 * eps)


# --- dtypes, names and edge cases of the state functions ------------------------------

EPS32 = np.finfo(np.float32).eps


def test_the_state_functions_keep_float32():
    S, V = (x.astype(np.float32) for x in row_case(8, n=3, k=11, r=2))
    empty = empty_state((3,), 2, np.float32)
    assert all(x.dtype == np.float32 for x in empty)
    a, b = tile_state(S[:, :4], V[:4]), tile_state(S[:, 4:], V[4:])
    assert all(x.dtype == np.float32 for x in a)
    merged = merge_states(merge_states(empty, a), b)
    assert all(x.dtype == np.float32 for x in merged)
    O, lse = finish_state(merged)
    assert O.dtype == np.float32 and lse.dtype == np.float32
    O64, lse64 = finish_state(tile_state(S.astype(float), V.astype(float)))
    assert_allclose(O, O64, rtol=16 * EPS32, atol=16 * EPS32)
    assert_allclose(lse, lse64, rtol=16 * EPS32)


def test_the_state_functions_name_the_argument_that_is_not_numbers():
    S, V = row_case(9)
    with pytest.raises(ValueError, match=r"^S must be an array of numbers, got dtype"):
        tile_state(S.astype(str), V)
    with pytest.raises(ValueError, match=r"^V must be an array of numbers, got dtype"):
        tile_state(S, V.astype(str))


def test_tile_state_rejects_scores_of_one_row_without_the_row_axis():
    S, V = row_case(10, n=1, k=4)
    with pytest.raises(
        ValueError,
        match=r"^S must have shape \(\.\.\., n, k\), got shape \(4,\)$",
    ):
        tile_state(S[0], V)


def test_tile_state_of_batched_scores_is_the_state_of_each_batch():
    rng = np.random.default_rng(11)
    S, V = rng.standard_normal((2, 3, 5)), rng.standard_normal((2, 5, 4))  # n != k
    state = tile_state(S, V)
    for b in range(2):
        assert_same_state(SoftmaxState(*(x[b] for x in state)), tile_state(S[b], V[b]))


def test_a_visibility_mask_with_more_batch_axes_than_the_scores_broadcasts_them():
    S, V = row_case(12, n=3, k=5)
    visible = np.ones((2, 3, 5), dtype=bool)
    visible[0, :, 1:] = False  # batch 0: key 0 only; batch 1: every key
    with np.errstate(all="raise"):
        state = tile_state(S, V, visible)
    assert state.m.shape == (2, 3) and state.o.shape == (2, 3, 2)
    assert_same_state(SoftmaxState(*(x[0] for x in state)), tile_state(S[:, :1], V[:1]))
    assert_same_state(SoftmaxState(*(x[1] for x in state)), tile_state(S, V))


@pytest.mark.parametrize("field", ["m", "l"])
def test_the_merge_names_the_part_of_the_state_whose_rows_differ(field):
    a = empty_state((3,), 2)
    b = a._replace(**{field: np.zeros(4)})
    with pytest.raises(ValueError, match=rf"^the two states .*: {field} has shapes "
                       r"\(3,\) and \(4,\)$"):
        merge_states(a, b)


def test_rows_that_saw_no_key_finish_to_exact_zeros_not_to_leftover_memory():
    state = SoftmaxState(np.array([0.5, -np.inf, 1.0, -np.inf]),
                         np.array([2.0, 0.0, 1.0, 0.0]), np.ones((4, 3)))
    state = state._replace(o=state.o * state.l[:, None])
    for _ in range(3):
        leftover = np.full((4, 3), 7.0)  # freed, its memory free for the next array
        del leftover
        O, lse = finish_state(state)
        assert_array_equal(O[[1, 3]], 0.0)
        assert_array_equal(O[[0, 2]], 1.0)
        assert_array_equal(lse[[1, 3]], -np.inf)


# --- the threads ----------------------------------------------------------------------


def test_the_default_is_one_thread_below_sequential_below_scores(monkeypatch):
    monkeypatch.setattr(fast, "default_workers", lambda: 5)
    monkeypatch.setattr(tiled, "default_workers", lambda: 5)
    d, r = 2, 3
    at = fast.SEQUENTIAL_BELOW // (64 * 64)  # 16 x 64 x 64 = SEQUENTIAL_BELOW

    def workers(q, k, v, T_q=64, T_k=64):  # the batch axes of Q, K, V; T_q, T_k
        return tiled._workers(None, np.empty(q + (T_q, d)), np.empty(k + (T_k, d)),
                              np.empty(v + (T_k, r)))

    for which in range(3):  # the batch axes of any one of Q, K, V count
        assert workers(*[(at,) if i == which else () for i in range(3)]) == 5
        assert workers(*[(at - 1,) if i == which else () for i in range(3)]) == 1
    assert workers((), (), (), T_q=32, T_k=2048) == 5  # T_q != T_k: the product
    assert workers((), (), (), T_q=2048, T_k=32) == 5
    assert workers((), (), (), T_q=2048, T_k=31) == 1
    assert tiled._workers(3, *qkv(0, (), (), ())) == 3  # a given count is kept


def spy_on_run_parallel(monkeypatch, module):
    """Record the ``workers`` of every call of ``module.run_parallel``."""
    calls, real = [], module.run_parallel

    def spy(work, units, workers):
        calls.append(workers)
        return real(work, units, workers)

    monkeypatch.setattr(module, "run_parallel", spy)
    return calls


def test_the_backward_uses_the_threads_of_the_forward_unless_told(monkeypatch):
    monkeypatch.setattr(fast, "default_workers", lambda: 4)
    monkeypatch.setattr(tiled, "default_workers", lambda: 4)
    calls = spy_on_run_parallel(monkeypatch, tiled)
    Q, K, V = qkv(13, (), (), (), T_q=9, T_k=9)  # small: one thread by default
    G = np.random.default_rng(14).standard_normal((9, 5))
    kw = dict(causal=True, block_q=2, block_k=2)
    _, saved = tiled_attention_forward(Q, K, V, workers=2, **kw)
    tiled_attention_backward(saved, G)
    tiled_attention_backward(saved, G, workers=3)
    _, saved = tiled_attention_forward(Q, K, V, **kw)
    tiled_attention_backward(saved, G)
    tiled_attention_backward(saved, G, workers=3)
    assert calls == [2, 2, 3, 1, 1, 3]


def test_numpy_integer_thread_counts_are_accepted():
    Q, K, V = qkv(15, (), (), (), T_q=9, T_k=9)
    G = np.random.default_rng(16).standard_normal((9, 5))
    kw = dict(causal=True, block_q=2, block_k=2)
    O, saved = tiled_attention_forward(Q, K, V, workers=1, **kw)
    O3, saved3 = tiled_attention_forward(Q, K, V, workers=np.int64(3), **kw)
    assert_allclose(O3, O, rtol=4 * np.finfo(float).eps, atol=1e-15)
    for x, y in zip(tiled_attention_backward(saved3, G),
                    tiled_attention_backward(saved, G)):
        assert_allclose(x, y, rtol=1e-14, atol=1e-15)


# --- the passes: broadcasting, dtypes, degenerate sizes -------------------------------


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("batched", ["Q", "K", "V"])
def test_one_batched_input_and_padding_broadcast_the_others(batched, causal):
    rng = np.random.default_rng(17)
    T, d, r = 7, 3, 5
    shapes = {"Q": (T, d), "K": (T, d), "V": (T, r)}
    shapes[batched] = (2,) + shapes[batched]
    Q, K, V = (rng.standard_normal(shapes[n]) for n in "QKV")
    key_valid = key_valid_from_lengths([3, 6], T, side="left")
    visible = np.broadcast_to(key_valid[:, None, :], (2, T, T))
    if causal:
        visible = visible & causal_mask(T, T)
    O, saved = tiled_attention_forward(Q, K, V, causal=causal, key_valid=key_valid,
                                       block_q=3, block_k=2)
    O_ref, _ = attention_forward(Q, K, V, visible)
    assert_allclose(O, O_ref, rtol=1e-13, atol=1e-15)
    G = rng.standard_normal(O.shape)
    for got, want in zip(
        tiled_attention_backward(saved, G), reference_backward(Q, K, V, G, visible)
    ):
        assert got.shape == want.shape
        assert_allclose(got, want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("wide", ["Q", "K", "V"])
def test_mixed_precision_inputs_compute_in_the_widest(wide):
    Q, K, V = qkv(18, (), (), (), T_q=6, T_k=9)
    args = {n: x if n == wide else x.astype(np.float32)
            for n, x in zip("QKV", (Q, K, V))}
    O, saved = tiled_attention_forward(*args.values(), block_q=4, block_k=4)
    assert O.dtype == np.float64 and saved.lse.dtype == np.float64
    ref = attention_forward(*(x.astype(np.float64) for x in args.values()))[0]
    assert_allclose(O, ref, rtol=1e-13, atol=1e-15)


def test_the_float32_pass_is_the_float32_merge_of_its_tiles():
    rng = np.random.default_rng(19)
    T_q, T_k, d, r = 6, 9, 3, 5
    Q, K, V = (rng.standard_normal(s).astype(np.float32)
               for s in ((T_q, d), (T_k, d), (T_k, r)))
    O, saved = tiled_attention_forward(Q, K, V, block_q=T_q, block_k=4)
    assert saved.lse.dtype == np.float32
    Qs = Q * np.float32(1 / np.sqrt(d))
    parts = [tile_state(Qs @ K[j0:j0 + 4].T, V[j0:j0 + 4]) for j0 in (0, 4, 8)]
    O_want, lse_want = finish_state(merge_states(merge_states(*parts[:2]), parts[2]))
    assert_array_equal(O, O_want)  # in float32 throughout: bit for bit
    assert_array_equal(saved.lse, lse_want)


def test_the_backward_names_an_upstream_gradient_that_is_not_numbers():
    Q, K, V = qkv(20, (), (), ())
    O, saved = tiled_attention_forward(Q, K, V)
    with pytest.raises(ValueError, match=r"^G must be an array of numbers"):
        tiled_attention_backward(saved, O.astype(str))


def test_a_pass_with_no_keys_reads_nothing_and_keeps_float32():
    rng = np.random.default_rng(21)
    Q = rng.standard_normal((2, 4, 3)).astype(np.float32)
    K, V = np.zeros((2, 0, 3), np.float32), np.zeros((2, 0, 5), np.float32)
    O, saved = tiled_attention_forward(Q, K, V, block_q=3, block_k=2)
    assert O.shape == (2, 4, 5) and np.all(O == 0) and np.all(saved.lse == -np.inf)
    dQ, dK, dV = tiled_attention_backward(saved, np.ones_like(O))
    assert (dQ.shape, dK.shape, dV.shape) == ((2, 4, 3), (2, 0, 3), (2, 0, 5))
    assert all(g.dtype == np.float32 for g in (dQ, dK, dV))
    assert np.all(dQ == 0)
    dQ2, *_ = tiled_attention_backward(saved._replace(Q=Q[0]), np.ones_like(O))
    assert dQ2.shape == (4, 3) and np.all(dQ2 == 0)  # broadcast Q: summed back
    K3, V3 = np.zeros((3, 0, 3), np.float32), np.zeros((3, 0, 5), np.float32)
    O4, saved4 = tiled_attention_forward(Q[:, None], K3, V3)  # batch (2, 1) x (3,)
    dQ4, dK4, dV4 = tiled_attention_backward(saved4, np.ones_like(O4))
    assert (dQ4.shape, dK4.shape, dV4.shape) == ((2, 1, 4, 3), (3, 0, 3), (3, 0, 5))
    assert np.all(dQ4 == 0)


# --- the weights and the causal_attention signature -----------------------------------


def test_float32_weights_are_formed_in_float32_or_the_dtype_asked():
    Q, K, V = (x.astype(np.float32) for x in qkv(22, (2,), (2,), (2,), T_q=5, T_k=5))
    _, weights = tiled_causal_attention(Q, K, V, block_q=2, block_k=2)
    assert weights.ndim == 3 and weights.dtype == np.float32
    A = np.asarray(weights)
    assert A.dtype == np.float32
    assert_allclose(A, causal_attention(*(x.astype(float) for x in (Q, K, V)))[1],
                    rtol=16 * EPS32, atol=16 * EPS32)
    for dtype in (np.float64, np.float16):
        B = weights.__array__(dtype)
        assert B.dtype == dtype
        assert_array_equal(B, A.astype(dtype))
    assert weights.__array__().dtype == np.float32


def test_the_weights_are_formed_one_block_of_rows_at_a_time(monkeypatch):
    Q, K, V = qkv(27, (), (), (), T_q=5, T_k=5)
    _, weights = tiled_causal_attention(Q, K, V, block_q=2, block_k=3)
    blocks, rows = [], TiledWeights.rows

    def spy(self, i0, i1):
        blocks.append((i0, i1))
        return rows(self, i0, i1)

    monkeypatch.setattr(TiledWeights, "rows", spy)
    A = np.asarray(weights)
    assert blocks == [(0, 2), (2, 4), (4, 5)]
    assert_allclose(A, causal_attention(Q, K, V)[1], rtol=1e-13, atol=1e-16)


def test_the_causal_pair_uses_its_tile_sizes():
    Q, K, V = qkv(8, (2,), (2,), (2,))
    G = np.random.default_rng(23).standard_normal((2, 7, 5))
    key_valid = key_valid_from_lengths([7, 4], 7, side="right")
    O, weights = tiled_causal_attention(Q, K, V, key_valid=key_valid, block_q=3,
                                        block_k=2)
    assert (weights.saved.block_q, weights.saved.block_k) == (3, 2)
    O_want, saved = tiled_attention_forward(Q, K, V, causal=True, key_valid=key_valid,
                                            block_q=3, block_k=2)
    assert_array_equal(O, O_want)
    for got, want in zip(
        tiled_causal_attention_backward(Q, K, V, G, key_valid=key_valid, block_q=3,
                                        block_k=2),
        tiled_attention_backward(saved, G),
    ):
        assert_array_equal(got, want)  # the same tiles: bit for bit


def test_tiled_implementation_is_the_causal_pair_with_those_tile_sizes():
    Q, K, V = qkv(8, (2,), (2,), (2,))
    G = np.random.default_rng(24).standard_normal((2, 7, 5))
    key_valid = key_valid_from_lengths([7, 4], 7, side="right")
    impl = tiled_implementation(3, 2)
    assert impl.name == "tiled 3x2" and not impl.offsets
    assert impl.attend.__name__ == "tiled_causal_attention_3x2"
    assert impl.backward.__name__ == "tiled_causal_attention_backward_3x2"
    O, weights = impl.attend(Q, K, V, key_valid=key_valid)
    O_want, weights_want = tiled_causal_attention(Q, K, V, key_valid=key_valid,
                                                  block_q=3, block_k=2)
    assert_array_equal(O, O_want)
    assert (weights.saved.block_q, weights.saved.block_k) == (3, 2)
    assert_array_equal(np.asarray(weights), np.asarray(weights_want))
    O2, A2 = impl.attend(Q, K, V, 0, lambda A: 2 * A, key_valid=key_valid)
    assert_allclose(O2, 2 * O_want, rtol=1e-14, atol=1e-15)
    assert_array_equal(A2, np.asarray(weights_want))
    for got, want in zip(
        impl.backward(Q, K, V, G, key_valid=key_valid),
        tiled_causal_attention_backward(Q, K, V, G, key_valid=key_valid, block_q=3,
                                        block_k=2),
    ):
        assert_array_equal(got, want)
    for call in (lambda: impl.attend(Q, K, V, 1), lambda: impl.backward(Q, K, V, G, 1)):
        with pytest.raises(NotImplementedError, match="Chapter 10"):
            call()


def test_tiled_implementation_defaults_block_k_to_block_q():
    impl = tiled_implementation(3)
    assert impl.name == "tiled 3x3"
    assert impl.attend.__name__ == "tiled_causal_attention_3x3"
    Q, K, V = qkv(25, (), (), ())
    _, weights = impl.attend(Q, K, V)
    assert (weights.saved.block_q, weights.saved.block_k) == (3, 3)


def test_a_query_offset_is_refused_with_the_reason():
    Q, K, V = qkv(26, (), (), ())
    with pytest.raises(
        NotImplementedError,
        match=r"^query_offset != 0 needs the key/value cache of Chapter 10$",
    ):
        tiled_causal_attention(Q, K, V, query_offset=3)
