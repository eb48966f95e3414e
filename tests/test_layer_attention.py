"""Tests of attncourse.layers.attention: scores, forward, backward, masks and
validation.

The behaviour of ``causal_attention`` and ``causal_attention_backward`` is checked by
the attention conformance suite (tests/test_conformance.py), not here.
"""

import math

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

from attncourse.layers.attention import (
    QKV,
    AttentionSaved,
    _unbroadcast,
    attention_backward,
    attention_forward,
    attention_scores,
    causal_attention,
    causal_attention_backward,
    causal_mask,
    causal_visible,
    combine_masks,
    key_padding_mask,
    key_valid_from_lengths,
)
from attncourse._validate import shaped
from attncourse.kit.gradients import gradcheck, qkv_gradcheck
from strategies import matrices, sizes

EPS = np.finfo(np.float64).eps


def random_qkv(rng, batch=(), T_q=4, T_k=5, d=3, r=2, scale=1.0):
    Q = scale * rng.normal(size=(*batch, T_q, d))
    K = scale * rng.normal(size=(*batch, T_k, d))
    V = rng.normal(size=(*batch, T_k, r))
    return Q, K, V


def probe(G, visible=None):
    """The objective J = sum(O * G), whose gradient with respect to O is G."""
    return lambda Q, K, V: float(np.sum(attention_forward(Q, K, V, visible)[0] * G))


def weights(Q, K, V, visible=None):
    """``O, A``: the output of attention_forward and the weights it saved."""
    O, saved = attention_forward(Q, K, V, visible)
    return O, saved.A


def backward(Q, K, V, G, visible=None):
    """The pair in one call: attention_backward of attention_forward's saved."""
    return attention_backward(attention_forward(Q, K, V, visible)[1], G)


def combined(T, key_valid):
    return combine_masks(causal_mask(T, T), key_padding_mask(key_valid, T))


# --- scores and forward ---------------------------------------------------------------

def test_scores_use_the_transpose():
    Q = np.array([[1.0, 2.0], [0.0, 1.0]])
    K = np.array([[1.0, 0.0], [2.0, 1.0]])
    assert_array_equal(attention_scores(Q, K) * math.sqrt(2), [[1.0, 4.0], [0.0, 1.0]])
    # what a missing transpose would give
    assert_array_equal(Q @ K, [[5.0, 2.0], [2.0, 1.0]])


def test_forward_matches_the_definition_elementwise():
    rng = np.random.default_rng(0)
    Q, K, V = random_qkv(rng)
    O, A = weights(Q, K, V)
    d = Q.shape[1]
    S = np.array(
        [
            [sum(Q[i, a] * K[j, a] for a in range(d)) / math.sqrt(d) for j in range(5)]
            for i in range(4)
        ]
    )
    expected_A = np.exp(S) / np.exp(S).sum(axis=1, keepdims=True)
    assert_allclose(A, expected_A, rtol=1e-14)
    assert_allclose(
        O,
        [
            [sum(A[i, j] * V[j, l] for j in range(5)) for l in range(2)]
            for i in range(4)
        ],
        rtol=1e-13,
    )


def test_a_visible_mask_hides_keys_exactly():
    rng = np.random.default_rng(10)
    Q, K, V = random_qkv(rng, T_q=3, T_k=4)
    visible = np.array(
        [
            [True, False, True, False],
            [False, False, False, False],
            [True, True, True, True],
        ]
    )
    O, A = weights(Q, K, V, visible)
    assert np.all(A[~visible] == 0.0)
    # a row with nothing visible reads nothing
    assert np.all(A[1] == 0.0) and np.all(O[1] == 0.0)
    O_02, A_02 = weights(Q[:1], K[[0, 2]], V[[0, 2]])
    assert_allclose(A[0, [0, 2]], A_02[0], rtol=1e-14)
    assert_allclose(O[0], O_02[0], rtol=1e-14)


def test_batched_equals_one_at_a_time():
    rng = np.random.default_rng(1)
    Q, K, V = random_qkv(rng, batch=(2, 3))
    G = rng.normal(size=(2, 3, 4, 2))
    O, A = weights(Q, K, V)
    grads = backward(Q, K, V, G)
    for b in np.ndindex(2, 3):
        O_b, A_b = weights(Q[b], K[b], V[b])
        assert_allclose(O[b], O_b, rtol=1e-14)
        for batched, single in zip(grads, backward(Q[b], K[b], V[b], G[b])):
            assert_allclose(batched[b], single, rtol=1e-13, atol=1e-15)


# --- backward -------------------------------------------------------------------------


def test_broadcast_batch_gradients_are_summed_back():
    rng = np.random.default_rng(2)
    Q = rng.normal(size=(4, 3))  # shared by both batch entries
    K, V = rng.normal(size=(2, 5, 3)), rng.normal(size=(2, 5, 2))
    G = rng.normal(size=(2, 4, 2))
    dQ, dK, dV = backward(Q, K, V, G)
    assert dQ.shape == Q.shape and dK.shape == K.shape and dV.shape == V.shape
    report = gradcheck(probe(G), {"Q": Q, "K": K, "V": V}, {"Q": dQ, "K": dK, "V": dV})
    assert report.passed, report


def test_size_one_batch_axes_are_summed_back_with_keepdims():
    # Q (1, T, d) against a batched K: the size-1 axis stays, its gradient is the sum
    rng = np.random.default_rng(12)
    Q = rng.normal(size=(1, 4, 3))
    K, V = rng.normal(size=(2, 5, 3)), rng.normal(size=(1, 5, 2))
    G = rng.normal(size=(2, 4, 2))
    dQ, dK, dV = backward(Q, K, V, G)
    assert dQ.shape == (1, 4, 3) and dK.shape == (2, 5, 3) and dV.shape == (1, 5, 2)
    report = gradcheck(probe(G), {"Q": Q, "K": K, "V": V}, {"Q": dQ, "K": dK, "V": dV})
    assert report.passed, report
    per_batch = [backward(Q[0], K[b], V[0], G[b]) for b in range(2)]
    assert_allclose(dQ[0], per_batch[0][0] + per_batch[1][0], rtol=1e-13, atol=1e-15)
    assert_allclose(dV[0], per_batch[0][2] + per_batch[1][2], rtol=1e-13, atol=1e-15)


def test_size_one_axes_inside_the_batch_and_missing_axes_together():
    rng = np.random.default_rng(13)
    Q = rng.normal(size=(2, 1, 3, 2))  # batch (2, 1)
    K = rng.normal(size=(3, 4, 2))  # batch (3,): one axis missing
    V = rng.normal(size=(1, 3, 4, 5))  # batch (1, 3)
    G = rng.normal(size=(2, 3, 3, 5))
    dQ, dK, dV = backward(Q, K, V, G)
    assert (dQ.shape, dK.shape, dV.shape) == (Q.shape, K.shape, V.shape)
    report = gradcheck(probe(G), {"Q": Q, "K": K, "V": V}, {"Q": dQ, "K": dK, "V": dV})
    assert report.passed, report


def test_unbroadcast_sums_exactly_the_added_axes():
    grad = np.arange(24.0).reshape(2, 3, 4)
    assert_array_equal(_unbroadcast(grad, (2, 3, 4)), grad)
    assert_array_equal(_unbroadcast(grad, (3, 4)), grad.sum(axis=0))
    assert_array_equal(_unbroadcast(grad, (1, 3, 4)), grad.sum(axis=0, keepdims=True))
    assert_array_equal(_unbroadcast(grad, (2, 1, 4)), grad.sum(axis=1, keepdims=True))
    assert_array_equal(_unbroadcast(grad, (1, 4)), grad.sum(axis=(0, 1))[None])
    # size 1 kept as is
    assert_array_equal(_unbroadcast(np.ones((1, 3)), (1, 3)), np.ones((1, 3)))


def test_gradients_match_finite_differences_on_unequal_sizes():
    rng = np.random.default_rng(3)
    Q, K, V = random_qkv(rng, batch=(2,), T_q=3, T_k=5, d=4, r=2)
    G = rng.normal(size=(2, 3, 2))
    dQ, dK, dV = backward(Q, K, V, G)
    report = gradcheck(probe(G), {"Q": Q, "K": K, "V": V}, {"Q": dQ, "K": dK, "V": dV})
    assert report.passed, report
    assert qkv_gradcheck(attention_backward, Q, K, V, G).passed


def test_gradients_with_a_mask_match_finite_differences():
    rng = np.random.default_rng(11)
    Q, K, V = random_qkv(rng, batch=(2,), T_q=4, T_k=4, d=3, r=2)
    key_valid = key_valid_from_lengths([2, 4], 4, side="left")
    visible = combined(4, key_valid)
    G = rng.normal(size=(2, 4, 2))
    dQ, dK, dV = backward(Q, K, V, G, visible)
    report = gradcheck(
        probe(G, visible), {"Q": Q, "K": K, "V": V}, {"Q": dQ, "K": dK, "V": dV}
    )
    assert report.passed, report
    assert np.all(dK[~key_valid] == 0.0) and np.all(dV[~key_valid] == 0.0)


def test_gradcheck_catches_a_dropped_scale():
    # fault control: the same check fails when dQ and dK lose their 1/sqrt(d)
    rng = np.random.default_rng(3)
    Q, K, V = random_qkv(rng, T_q=3, T_k=5, d=4, r=2)
    G = rng.normal(size=(3, 2))
    dQ, dK, dV = backward(Q, K, V, G)
    wrong = {"Q": dQ * 2.0, "K": dK * 2.0, "V": dV}  # sqrt(4) = 2
    assert not gradcheck(probe(G), {"Q": Q, "K": K, "V": V}, wrong).passed


@settings(max_examples=15)
@given(st.data(), sizes, sizes, sizes, sizes, st.integers(1, 2))
def test_gradients_match_finite_differences_property(data, T_q, T_k, d, r, B):
    Q = data.draw(matrices((B, T_q, d), scale=1.0))
    K = data.draw(matrices((B, T_k, d), scale=1.0))
    V = data.draw(matrices((B, T_k, r), scale=1.0))
    G = data.draw(matrices((B, T_q, r), scale=1.0))
    dQ, dK, dV = backward(Q, K, V, G)
    report = gradcheck(probe(G), {"Q": Q, "K": K, "V": V}, {"Q": dQ, "K": dK, "V": dV})
    assert report.passed, report


def test_the_forward_saves_its_inputs_and_weights_and_the_backward_reads_them():
    rng = np.random.default_rng(14)
    Q, K, V = random_qkv(rng, batch=(2,), T_q=3, T_k=5, d=4, r=2)
    G = rng.normal(size=(2, 3, 2))
    visible = causal_mask(3, 5)
    O, saved = attention_forward(Q, K, V, visible)
    assert isinstance(saved, AttentionSaved) and saved._fields == ("Q", "K", "V", "A")
    assert saved.Q is Q and saved.K is K and saved.V is V  # float input, kept
    A = saved.A
    assert_array_equal(O, A @ V)  # (2, 3, 5) x (2, 5, 2)
    # the formulas themselves, one at a time
    dQ, dK, dV = attention_backward(saved, G)
    dA = G @ np.swapaxes(V, -1, -2)  # (2, 3, 2) x (2, 2, 5) -> (2, 3, 5)
    dS = A * (dA - np.sum(A * dA, axis=-1, keepdims=True))
    assert_allclose(dV, np.swapaxes(A, -1, -2) @ G, rtol=1e-14)  # (2, 5, 3) x (2, 3, 2)
    # (2, 3, 5) x (2, 5, 4); sqrt(4) = 2
    assert_allclose(dQ, dS @ K / 2.0, rtol=1e-13, atol=1e-16)
    assert_allclose(dK, np.swapaxes(dS, -1, -2) @ Q / 2.0, rtol=1e-13, atol=1e-16)
    assert np.all(dK[:, 3:] == 0.0) and np.all(dV[:, 3:] == 0.0)  # keys no query sees
    # it reads the saved weights: it does not recompute the forward pass
    uniform = saved._replace(A=np.full_like(A, 0.2))
    assert_allclose(attention_backward(uniform, G)[2],
                    np.swapaxes(uniform.A, -1, -2) @ G, rtol=1e-14)


def test_integer_input_is_saved_as_float():
    O, saved = attention_forward([[1, 0]], [[1, 0], [0, 1]], [[1], [2]])
    assert all(x.dtype == np.float64 for x in saved)
    assert O.dtype == np.float64


@given(st.data(), sizes, sizes, sizes, sizes)
def test_rows_sum_to_one_and_output_is_in_the_convex_hull(data, T_q, T_k, d, r):
    Q, K, V = (data.draw(matrices(s)) for s in ((T_q, d), (T_k, d), (T_k, r)))
    O, A = weights(Q, K, V)
    assert np.all(A >= 0)
    assert_allclose(A.sum(axis=-1), 1.0, atol=T_k * EPS)
    tol = 8 * EPS * max(1.0, np.abs(V).max())
    assert np.all(O >= V.min(axis=0) - tol) and np.all(O <= V.max(axis=0) + tol)


@given(st.data(), sizes, st.integers(2, 5), sizes, sizes)
def test_permuting_keys_and_values_together_changes_nothing(data, T_q, T_k, d, r):
    Q, K, V = (data.draw(matrices(s)) for s in ((T_q, d), (T_k, d), (T_k, r)))
    perm = data.draw(st.permutations(range(T_k)))
    O, A = weights(Q, K, V)
    O_p, A_p = weights(Q, K[perm], V[perm])
    assert_allclose(O_p, O, rtol=1e-12, atol=1e-12)
    assert_allclose(A_p, A[:, perm], rtol=1e-12, atol=1e-15)


@given(st.data(), st.integers(2, 5), sizes, sizes, sizes)
def test_permuting_queries_permutes_outputs(data, T_q, T_k, d, r):
    Q, K, V = (data.draw(matrices(s)) for s in ((T_q, d), (T_k, d), (T_k, r)))
    perm = data.draw(st.permutations(range(T_q)))
    assert_allclose(
        attention_forward(Q[perm], K, V)[0],
        attention_forward(Q, K, V)[0][perm],
        rtol=1e-12,
        atol=1e-12,
    )


def test_identical_keys_give_zero_query_gradient():
    rng = np.random.default_rng(4)
    Q, _, V = random_qkv(rng, T_q=3, T_k=4)
    K = np.tile(rng.normal(size=(1, 3)), (4, 1))
    dQ, dK, _ = backward(Q, K, V, rng.normal(size=(3, 2)))
    assert_allclose(dQ, 0.0, atol=1e-15)
    assert np.abs(dK).max() > 1e-3


def test_extreme_scores_are_finite():
    Q = np.array([[100.0, 0.0], [-100.0, 0.0]])
    K = np.array([[100.0, 0.0], [0.0, 0.0]])
    V = np.array([[1.0, 2.0], [3.0, 4.0]])
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        O, A = weights(Q, K, V)  # scores reach +-1e4 / sqrt(2)
        grads = backward(Q, K, V, np.ones((2, 2)))
    assert np.all(np.isfinite(O)) and all(np.all(np.isfinite(g)) for g in grads)
    assert_allclose(A, [[1.0, 0.0], [0.0, 1.0]])


# --- validation -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "shapes, message",
    [
        (
            ((3, 2), (4, 5), (4, 1)),
            r"^K must have shape \(\.\.\., T_k, d\) with d=2 \(as in Q\), got shape "
            r"\(4, 5\)$",
        ),
        (
            ((3, 2), (4, 2), (5, 1)),
            r"^V must have shape \(\.\.\., T_k, r\) with T_k=4 \(as in K\), got shape "
            r"\(5, 1\)$",
        ),
        (((2,), (4, 2), (4, 1)), r"^Q must have shape \(\.\.\., T_q, d\), got shape "
                                 r"\(2,\)$"),
        (((3, 2), (2,), (4, 1)), r"^K must have shape .* got shape \(2,\)$"),
        (((3, 2), (4, 2), (4,)), r"^V must have shape .* got shape \(4,\)$"),
        (
            ((2, 3, 2), (3, 4, 2), (3, 4, 1)),
            r"^leading batch dimensions do not broadcast: Q \(2,\), K \(3,\), "
            r"V \(3,\)$",
        ),
        (
            ((2, 3, 2), (2, 4, 2), (3, 4, 1)),
            r"batch dimensions do not broadcast: .*V \(3,\)$",
        ),
    ],
)
def test_bad_shapes_are_named(shapes, message):
    Q, K, V = (np.ones(s) for s in shapes)
    with pytest.raises(ValueError, match=message):
        shaped(QKV, Q, K, V)
    with pytest.raises(ValueError, match=message):
        attention_forward(Q, K, V)
    with pytest.raises(ValueError, match=message):
        causal_attention(Q, K, V)
    with pytest.raises(ValueError, match=message):
        causal_attention_backward(Q, K, V, np.ones((3, 1)))


@pytest.mark.parametrize("bad", ["Q", "K", "V"])
def test_an_input_that_is_not_numbers_is_named(bad):
    inputs = {"Q": np.ones((1, 2)), "K": np.ones((1, 2)), "V": np.ones((1, 1))}
    inputs[bad] = [["a"]] if bad == "V" else [["a", "b"]]
    with pytest.raises(
        ValueError, match=rf"^{bad} must be an array of numbers, got dtype <U1$"
    ):
        attention_forward(*inputs.values())


def test_a_mismatched_d_names_the_last_axis_of_batched_inputs():
    with pytest.raises(
        ValueError,
        match=r"K must have shape \(\.\.\., T_k, d\) with d=2 \(as in Q\), got shape "
        r"\(2, 4, 5\)$",
    ):
        attention_forward(np.ones((2, 3, 2)), np.ones((2, 4, 5)), np.ones((2, 4, 1)))


def test_upstream_gradient_must_match_the_output():
    Q, K, V = random_qkv(np.random.default_rng(5))
    _, saved = attention_forward(Q, K, V)
    with pytest.raises(
        ValueError, match=r"G must have the shape of O = A V, \(4, 2\), got \(2, 4\)"
    ):
        attention_backward(saved, np.ones((2, 4)))
    with pytest.raises(
        ValueError, match=r"G must have the shape of O = A V, \(4, 2\), got \(3, 4, 2\)"
    ):
        attention_backward(saved, np.ones((3, 4, 2)))  # a batch O does not have
    with pytest.raises(
        ValueError, match=r"^G must be an array of numbers, got dtype <U1$"
    ):
        attention_backward(saved, np.full((4, 2), "a"))
    with pytest.raises(ValueError, match=r"^G must have shape \(\.\.\., T_q, r\), got "
                                         r"shape \(2,\)$"):
        attention_backward(saved, np.ones(2))


def test_the_query_offset_places_the_queries_after_the_prefix():
    # Chapter 10: queries at positions offset .. offset + T_q - 1 read keys 0 .. offset
    # + i
    rng = np.random.default_rng(9)
    Q_full, K, V = random_qkv(rng, T_q=5, T_k=5)
    O_full, A_full = causal_attention(Q_full, K, V)
    O, A = causal_attention(Q_full[3:], K, V, query_offset=3)
    assert_allclose(O, O_full[3:], rtol=1e-13, atol=1e-15)
    assert_array_equal(A == 0, A_full[3:] == 0)
    assert_allclose(A, A_full[3:], rtol=1e-13, atol=1e-15)
    G = rng.normal(size=O.shape)
    G_full = np.concatenate([np.zeros((3, O.shape[-1])), G])
    for got, want in zip(
        causal_attention_backward(Q_full[3:], K, V, G, query_offset=3),
        causal_attention_backward(Q_full, K, V, G_full),
    ):
        want = want[3:] if got.shape[0] == 2 else want
        assert_allclose(got, want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize(
    "offset, words",
    [
        (-1, "query_offset must be an integer >= 0, got -1"),
        (
            3,
            "query_offset=3 puts the 2 queries at positions 3..4, but there are only 4 "
            "keys",
        ),
        (1.0, "query_offset must be an integer >= 0, got 1.0"),
        (True, "query_offset must be an integer >= 0, got True"),
    ],
)
def test_a_bad_query_offset_is_a_value_error_naming_it(offset, words):
    Q, K, V = random_qkv(np.random.default_rng(9), T_q=2, T_k=4)
    with pytest.raises(ValueError, match=re.escape(words)):
        causal_attention(Q, K, V, query_offset=offset)
    with pytest.raises(ValueError, match=re.escape(words)):
        causal_attention_backward(Q, K, V, np.ones((2, 2)), query_offset=offset)
    causal_attention(Q, K, V, query_offset=2)  # the largest consistent offset


# --- the causal mask ------------------------------------------------------------------


def test_causal_mask_and_offset():
    assert_array_equal(causal_mask(3, 3), np.tril(np.ones((3, 3), dtype=bool)))
    # query i reads keys 0..i
    assert_array_equal(causal_mask(2, 4), [[1, 0, 0, 0], [1, 1, 0, 0]])
    assert_array_equal(causal_mask(2, 4, query_offset=2), [[1, 1, 1, 0], [1, 1, 1, 1]])
    assert causal_mask(2, 4).dtype == np.bool_


@pytest.mark.parametrize(
    "args, message",
    [
        ((2, 2, -1), r"non-negative integers: query_offset=-1"),
        ((-1, 2), r"non-negative integers: T_q=-1"),
        ((2, -3), r"non-negative integers: T_k=-3"),
        ((2.5, 2), r"T_q=2.5"),
        ((True, 2), r"T_q=True"),
    ],
)
def test_causal_mask_rejects_bad_sizes(args, message):
    with pytest.raises(ValueError, match=message):
        causal_mask(*args)


def test_causal_mask_allows_zero_sizes():
    assert causal_mask(0, 3).shape == (0, 3)
    assert causal_mask(3, 0).shape == (3, 0)
    assert causal_mask(0, 0, query_offset=0).shape == (0, 0)


# --- padding masks --------------------------------------------------------------------


def test_key_valid_from_lengths_left_and_right():
    assert_array_equal(
        key_valid_from_lengths([2, 0, 4], 4), [[1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]]
    )
    assert_array_equal(
        key_valid_from_lengths([2, 0, 4], 4, side="left"),
        [[0, 0, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1]],
    )
    assert key_valid_from_lengths([1], 3).dtype == np.bool_
    assert_array_equal(
        key_valid_from_lengths(np.array([3], dtype=np.uint8), 3), [[1, 1, 1]]
    )


@pytest.mark.parametrize(
    "lengths, T, side, message",
    [
        ([5], 4, "right", r"every length must lie in \[0, T=4\], got \[5\]"),
        ([-1], 4, "right", r"every length must lie in \[0, T=4\], got \[-1\]"),
        (
            [[1, 2]],
            4,
            "right",
            r"lengths must be a 1-D array of integers, got shape \(1, 2\)",
        ),
        (
            [1.5],
            4,
            "right",
            r"lengths must be a 1-D array of integers, got shape \(1,\) and dtype "
            r"float64",
        ),
        ([1], 4, "middle", r"^side must be 'left' or 'right', got 'middle'$"),
    ],
)
def test_key_valid_from_lengths_rejects_bad_input(lengths, T, side, message):
    with pytest.raises(ValueError, match=message):
        key_valid_from_lengths(lengths, T, side=side)


def test_key_padding_mask_hides_columns_not_rows():
    key_valid = np.array([[False, True, True], [True, True, False]])
    mask = key_padding_mask(key_valid, 3)
    assert mask.shape == (2, 1, 3)
    full = np.broadcast_to(mask, (2, 3, 3))
    for b in range(2):
        for i in range(3):
            # every query row sees the same keys
            assert_array_equal(full[b, i], key_valid[b])
    assert key_padding_mask(key_valid, 3, (2,)).shape == (2, 1, 3)
    # broadcasts to the batch
    assert key_padding_mask(key_valid[0], 3, (4, 2)).shape == (1, 3)


@pytest.mark.parametrize(
    "key_valid, T_k, batch, message",
    [
        (
            np.array([1, 0, 1]),
            3,
            None,
            r"key_valid must be a boolean array, got dtype int64",
        ),
        (
            np.ones((2, 4), dtype=bool),
            3,
            None,
            r"key_valid must have shape \(\.\.\., T_k\) with T_k=3 keys, got shape "
            r"\(2, 4\)",
        ),
        (np.array(True), 1, None, r"got shape \(\)"),
        (
            np.ones((3, 5), dtype=bool),
            5,
            (2,),
            r"key_valid has shape \(3, 5\); its leading dimensions must broadcast to "
            r"the batch shape \(2,\)",
        ),
        (
            np.ones((5, 2, 3), dtype=bool),  # the last leading axis fits, the first not
            3,
            (4, 2),
            r"^key_valid has shape \(5, 2, 3\); its leading dimensions must broadcast "
            r"to the batch shape \(4, 2\)$",
        ),
        (np.ones((2, 5), dtype=bool), 5, (), r"must broadcast to the batch shape \(\)"),
        (
            np.ones((2, 5), dtype=bool),
            5,
            (1,),
            r"must broadcast to the batch shape \(1,\)",
        ),
    ],
)
def test_key_padding_mask_rejects_bad_input(key_valid, T_k, batch, message):
    with pytest.raises(ValueError, match=message):
        key_padding_mask(key_valid, T_k, batch)


def test_combine_masks():
    a = np.array([[True, False], [True, True]])
    b = np.array([[False, True]])
    assert_array_equal(combine_masks(a, b), [[False, False], [False, True]])
    assert_array_equal(combine_masks(a), a)
    assert_array_equal(
        combine_masks(a, a, np.array([True, False])), [[True, False], [True, False]]
    )
    with pytest.raises(ValueError, match="^combine_masks needs at least one mask$"):
        combine_masks()
    with pytest.raises(ValueError, match=r"^mask 1 must be boolean, got dtype int64$"):
        combine_masks(a, np.array([1, 0]))
    with pytest.raises(
        ValueError, match=r"^masks do not broadcast: shapes \[\(2, 2\), \(3,\)\]$"
    ):
        combine_masks(a, np.ones(3, dtype=bool))


# --- causal_visible: the mask causal_attention uses -----------------------------------


def test_causal_visible_is_the_causal_mask_and_the_key_padding_mask_combined():
    rng = np.random.default_rng(0)
    Q, K, V = random_qkv(rng, batch=(2,), T_q=6, T_k=6)
    key_valid = key_valid_from_lengths([3, 6], 6, side="left")
    assert_array_equal(causal_visible(Q, K, V), causal_mask(6, 6))
    assert_array_equal(causal_visible(Q, K, V, 0, key_valid), combined(6, key_valid))
    O, A = causal_attention(Q, K, V, key_valid=key_valid)
    O_ref, A_ref = weights(Q, K, V, visible=combined(6, key_valid))
    assert_array_equal(O, O_ref)
    assert_array_equal(A, A_ref)
    G = rng.normal(size=O.shape)
    for mine, reference in zip(
        causal_attention_backward(Q, K, V, G, key_valid=key_valid),
        backward(Q, K, V, G, combined(6, key_valid)),
    ):
        assert_array_equal(mine, reference)


def test_causal_visible_places_the_queries_at_the_offset():
    # causal_attention itself refuses an offset until Chapter 10; the mask already takes
    # one
    rng = np.random.default_rng(16)
    Q, K, V = random_qkv(rng, batch=(2,), T_q=2, T_k=5)
    key_valid = key_valid_from_lengths([5, 3], 5)
    assert_array_equal(causal_visible(Q, K, V, 3), causal_mask(2, 5, 3))
    assert_array_equal(
        causal_visible(Q, K, V, 3, key_valid),
        combine_masks(causal_mask(2, 5, 3), key_padding_mask(key_valid, 5)),
    )


@pytest.mark.parametrize("carrier", ["Q", "K", "V"])
def test_the_key_valid_batch_shape_comes_from_all_three_inputs(carrier):
    # only one of Q, K, V carries the batch axis; key_valid must match it whichever it
    # is
    rng = np.random.default_rng(15)
    shapes = {"Q": (4, 3), "K": (4, 3), "V": (4, 2)}
    shapes[carrier] = (2, *shapes[carrier])
    Q, K, V = (rng.normal(size=shapes[n]) for n in "QKV")
    key_valid = key_valid_from_lengths([2, 4], 4)
    assert causal_visible(Q, K, V, 0, key_valid).shape == (2, 4, 4)
    O, A = causal_attention(Q, K, V, key_valid=key_valid)
    assert A.shape == (2, 4, 4) and np.all(A[0, :, 2:] == 0.0)
    with pytest.raises(
        ValueError, match=r"key_valid has shape \(3, 4\); .* batch shape \(2,\)"
    ):
        causal_visible(Q, K, V, 0, np.ones((3, 4), dtype=bool))
    with pytest.raises(
        ValueError, match=r"key_valid has shape \(3, 4\); .* batch shape \(2,\)"
    ):
        causal_attention(Q, K, V, key_valid=np.ones((3, 4), dtype=bool))


def test_an_offset_past_the_keys_is_named_with_the_positions_it_would_need():
    rng = np.random.default_rng(4)
    Q, K, V = (rng.standard_normal((T, w)) for T, w in ((3, 2), (5, 2), (5, 4)))
    message = (r"^query_offset=3 puts the 3 queries at positions 3\.\.5, but there are "
               r"only 5 keys \(positions 0\.\.4\): query has shape \(3, 2\), key has "
               r"shape \(5, 2\); query_offset \+ T_q must be <= T_k$")
    with pytest.raises(ValueError, match=message):
        causal_attention(Q, K, V, query_offset=3)
