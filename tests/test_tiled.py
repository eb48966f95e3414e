"""Tests of attncourse.tiled beyond the conformance suite (which holds the causal pair
to values, gradients, causality, padding, the prefix interface, extreme scores, bad
input and the dropout contract): the online-softmax state and its merge, the tiles, the
non-causal pass, the threads, and memory that never grows as T x T."""

import itertools
import tracemalloc

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from attncourse.layers.attention import (attention_backward, attention_forward,
                                         causal_attention, causal_mask,
                                         key_valid_from_lengths)
from attncourse.tiled import (SoftmaxState, TiledWeights, causal_tiles, empty_state,
                              finish_state, merge_states, tile_state,
                              tiled_attention_backward, tiled_attention_forward,
                              tiled_causal_attention, tiled_causal_attention_backward,
                              tiled_implementation)


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
        match=r"S \(\.\.\., n, k\) .* S has shape \(3, 11\), "
        r"V has shape \(4, 2\)",
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
    with pytest.raises(
        ValueError,
        match=rf"^block_q must be a positive integer, got "
        rf"{repr(bad).replace('.', '[.]')}$",
    ):
        tiled_attention_forward(Q, Q, Q, block_q=bad)
    with pytest.raises(ValueError, match=r"^block_k must be a positive integer"):
        tiled_causal_attention(Q, Q, Q, block_k=bad)
    with pytest.raises(ValueError, match=r"^block_k must be a positive integer"):
        causal_tiles(4, 4, 2, bad)
    with pytest.raises(ValueError, match=r"^block_q must be a positive integer"):
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
        tiled_attention_backward(saved, G), attention_backward(Q, K, V, G)
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
    with pytest.raises(ValueError, match="workers must be a positive integer, got 0"):
        tiled_attention_forward(Q, K, V, workers=0)


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
        match=r"dO must have the shape of the output, "
        r"\(7, 5\), got \(5, 7\)",
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
