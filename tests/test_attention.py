import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

from attncourse import (
    attention_backward,
    attention_forward,
    attention_scores,
    causal_attention,
    causal_mask,
    gradcheck,
)
from strategies import matrices, sizes

EPS = np.finfo(np.float64).eps


def random_qkv(rng, batch=(), T_q=4, T_k=5, d=3, r=2, scale=1.0):
    Q = scale * rng.normal(size=(*batch, T_q, d))
    K = scale * rng.normal(size=(*batch, T_k, d))
    V = rng.normal(size=(*batch, T_k, r))
    return Q, K, V


def probe(G):
    """The objective J = sum(O * G), whose gradient with respect to O is G."""
    return lambda Q, K, V: float(np.sum(attention_forward(Q, K, V)[0] * G))


def test_scores_use_the_transpose():
    Q = np.array([[1.0, 2.0], [0.0, 1.0]])
    K = np.array([[1.0, 0.0], [2.0, 1.0]])
    assert_array_equal(attention_scores(Q, K) * math.sqrt(2), [[1.0, 4.0], [0.0, 1.0]])
    assert_array_equal(Q @ K, [[5.0, 2.0], [2.0, 1.0]])  # what a missing transpose would give


def test_forward_matches_the_definition_elementwise():
    rng = np.random.default_rng(0)
    Q, K, V = random_qkv(rng)
    O, A = attention_forward(Q, K, V)
    d = Q.shape[1]
    S = np.array([[sum(Q[i, a] * K[j, a] for a in range(d)) / math.sqrt(d) for j in range(5)] for i in range(4)])
    expected_A = np.exp(S) / np.exp(S).sum(axis=1, keepdims=True)
    assert_allclose(A, expected_A, rtol=1e-14)
    assert_allclose(O, [[sum(A[i, j] * V[j, l] for j in range(5)) for l in range(2)] for i in range(4)], rtol=1e-13)


def test_batched_equals_one_at_a_time():
    rng = np.random.default_rng(1)
    Q, K, V = random_qkv(rng, batch=(2, 3))
    G = rng.normal(size=(2, 3, 4, 2))
    O, A = attention_forward(Q, K, V)
    grads = attention_backward(Q, K, V, G)
    for b in np.ndindex(2, 3):
        O_b, A_b = attention_forward(Q[b], K[b], V[b])
        assert_allclose(O[b], O_b, rtol=1e-14)
        for batched, single in zip(grads, attention_backward(Q[b], K[b], V[b], G[b])):
            assert_allclose(batched[b], single, rtol=1e-13, atol=1e-15)


def test_broadcast_batch_gradients_are_summed_back():
    rng = np.random.default_rng(2)
    Q = rng.normal(size=(4, 3))  # shared by both batch entries
    K, V = rng.normal(size=(2, 5, 3)), rng.normal(size=(2, 5, 2))
    G = rng.normal(size=(2, 4, 2))
    dQ, dK, dV = attention_backward(Q, K, V, G)
    assert dQ.shape == Q.shape and dK.shape == K.shape and dV.shape == V.shape
    report = gradcheck(probe(G), {"Q": Q, "K": K, "V": V}, {"Q": dQ, "K": dK, "V": dV})
    assert report.passed, report


def test_gradients_match_finite_differences_on_unequal_sizes():
    rng = np.random.default_rng(3)
    Q, K, V = random_qkv(rng, batch=(2,), T_q=3, T_k=5, d=4, r=2)
    G = rng.normal(size=(2, 3, 2))
    dQ, dK, dV = attention_backward(Q, K, V, G)
    report = gradcheck(probe(G), {"Q": Q, "K": K, "V": V}, {"Q": dQ, "K": dK, "V": dV})
    assert report.passed, report


def test_gradcheck_catches_a_dropped_scale():
    # fault control: the same check fails when dQ and dK lose their 1/sqrt(d)
    rng = np.random.default_rng(3)
    Q, K, V = random_qkv(rng, T_q=3, T_k=5, d=4, r=2)
    G = rng.normal(size=(3, 2))
    dQ, dK, dV = attention_backward(Q, K, V, G)
    wrong = {"Q": dQ * 2.0, "K": dK * 2.0, "V": dV}  # sqrt(4) = 2
    assert not gradcheck(probe(G), {"Q": Q, "K": K, "V": V}, wrong).passed


@settings(max_examples=15)
@given(st.data(), sizes, sizes, sizes, sizes, st.integers(1, 2))
def test_gradients_match_finite_differences_property(data, T_q, T_k, d, r, B):
    Q = data.draw(matrices((B, T_q, d), scale=1.0))
    K = data.draw(matrices((B, T_k, d), scale=1.0))
    V = data.draw(matrices((B, T_k, r), scale=1.0))
    G = data.draw(matrices((B, T_q, r), scale=1.0))
    dQ, dK, dV = attention_backward(Q, K, V, G)
    report = gradcheck(probe(G), {"Q": Q, "K": K, "V": V}, {"Q": dQ, "K": dK, "V": dV})
    assert report.passed, report


@given(st.data(), sizes, sizes, sizes, sizes)
def test_rows_sum_to_one_and_output_is_in_the_convex_hull(data, T_q, T_k, d, r):
    Q, K, V = (data.draw(matrices(s)) for s in ((T_q, d), (T_k, d), (T_k, r)))
    O, A = attention_forward(Q, K, V)
    assert np.all(A >= 0)
    assert_allclose(A.sum(axis=-1), 1.0, atol=T_k * EPS)
    tol = 8 * EPS * max(1.0, np.abs(V).max())
    assert np.all(O >= V.min(axis=0) - tol) and np.all(O <= V.max(axis=0) + tol)


@given(st.data(), sizes, st.integers(2, 5), sizes, sizes)
def test_permuting_keys_and_values_together_changes_nothing(data, T_q, T_k, d, r):
    Q, K, V = (data.draw(matrices(s)) for s in ((T_q, d), (T_k, d), (T_k, r)))
    perm = data.draw(st.permutations(range(T_k)))
    O, A = attention_forward(Q, K, V)
    O_p, A_p = attention_forward(Q, K[perm], V[perm])
    assert_allclose(O_p, O, rtol=1e-12, atol=1e-12)
    assert_allclose(A_p, A[:, perm], rtol=1e-12, atol=1e-15)


@given(st.data(), st.integers(2, 5), sizes, sizes, sizes)
def test_permuting_queries_permutes_outputs(data, T_q, T_k, d, r):
    Q, K, V = (data.draw(matrices(s)) for s in ((T_q, d), (T_k, d), (T_k, r)))
    perm = data.draw(st.permutations(range(T_q)))
    assert_allclose(attention_forward(Q[perm], K, V)[0], attention_forward(Q, K, V)[0][perm], rtol=1e-12, atol=1e-12)


def test_identical_keys_give_zero_query_gradient():
    rng = np.random.default_rng(4)
    Q, _, V = random_qkv(rng, T_q=3, T_k=4)
    K = np.tile(rng.normal(size=(1, 3)), (4, 1))
    dQ, dK, _ = attention_backward(Q, K, V, rng.normal(size=(3, 2)))
    assert_allclose(dQ, 0.0, atol=1e-15)
    assert np.abs(dK).max() > 1e-3


def test_extreme_scores_are_finite():
    Q = np.array([[100.0, 0.0], [-100.0, 0.0]])
    K = np.array([[100.0, 0.0], [0.0, 0.0]])
    V = np.array([[1.0, 2.0], [3.0, 4.0]])
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        O, A = attention_forward(Q, K, V)  # scores reach +-1e4 / sqrt(2)
        grads = attention_backward(Q, K, V, np.ones((2, 2)))
    assert np.all(np.isfinite(O)) and all(np.all(np.isfinite(g)) for g in grads)
    assert_allclose(A, [[1.0, 0.0], [0.0, 1.0]])


@pytest.mark.parametrize(
    "shapes, message",
    [
        (((3, 2), (4, 5), (4, 1)), r"share the key width d: Q has shape \(3, 2\) \(d=2\), K has shape \(4, 5\) \(d=5\)"),
        (((3, 2), (4, 2), (5, 1)), r"K has shape \(4, 2\) \(4 keys\), V has shape \(5, 1\) \(5 values\)"),
        (((2,), (4, 2), (4, 1)), r"Q must be at least 2-D .* got shape \(2,\)"),
        (((2, 3, 2), (3, 4, 2), (3, 4, 1)), r"batch dimensions do not broadcast: Q \(2, 3, 2\), K \(3, 4, 2\)"),
    ],
)
def test_bad_shapes_are_named(shapes, message):
    Q, K, V = (np.ones(s) for s in shapes)
    with pytest.raises(ValueError, match=message):
        attention_forward(Q, K, V)
    with pytest.raises(ValueError, match=message):
        causal_attention(Q, K, V)


def test_upstream_gradient_must_match_the_output():
    Q, K, V = random_qkv(np.random.default_rng(5))
    with pytest.raises(ValueError, match=r"G must have the shape of O = A V, \(4, 2\), got \(2, 4\)"):
        attention_backward(Q, K, V, np.ones((2, 4)))


def test_causal_mask_and_offset():
    assert_array_equal(causal_mask(2, 4, query_offset=2), [[1, 1, 1, 0], [1, 1, 1, 1]])
    with pytest.raises(ValueError, match="non-negative"):
        causal_mask(2, 2, query_offset=-1)


def test_causal_attention_hides_the_future_exactly():
    rng = np.random.default_rng(6)
    Q, K, V = random_qkv(rng, batch=(2,), T_q=5, T_k=5, d=3, r=4)
    out, P = causal_attention(Q, K, V)
    future = ~causal_mask(5, 5)
    assert np.all(P[:, future] == 0.0)
    assert_allclose(P.sum(-1), 1.0, atol=5 * EPS)
    # the visible part is ordinary attention over the prefix
    for t in range(5):
        O_t, _ = attention_forward(Q[:, t:t + 1], K[:, :t + 1], V[:, :t + 1])
        assert_allclose(out[:, t:t + 1], O_t, rtol=1e-13, atol=1e-15)


def test_causal_attention_masked_gradients_are_exactly_zero():
    rng = np.random.default_rng(7)
    Q, K, V = random_qkv(rng, T_q=4, T_k=4, d=3, r=2)
    G = np.zeros((4, 2))
    G[1] = rng.normal(size=2)  # only position 1's output matters
    dQ, dK, dV = attention_backward(Q, K, V, G, visible=causal_mask(4, 4))
    assert np.all(dK[2:] == 0.0) and np.all(dV[2:] == 0.0)


def test_causal_attention_dropout_contract():
    rng = np.random.default_rng(8)
    Q, K, V = random_qkv(rng, T_q=4, T_k=4, d=3, r=2)
    keep = rng.random((4, 4)) > 0.3

    def dropout(P):
        return np.where(keep, P / 0.7, 0.0)

    out, P = causal_attention(Q, K, V, dropout=dropout)
    _, P_plain = causal_attention(Q, K, V)
    assert_array_equal(P, P_plain)  # returned probabilities are the undropped ones
    assert_allclose(out, dropout(P) @ V, rtol=1e-14)


def test_causal_attention_offset_waits_for_the_cache_chapter():
    Q, K, V = random_qkv(np.random.default_rng(9), T_q=2, T_k=4)
    with pytest.raises(NotImplementedError, match="Chapter 10"):
        causal_attention(Q, K, V, query_offset=2)
