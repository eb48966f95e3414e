"""Every planted mistake of Chapter 4 is caught by the check that exists to catch it."""

import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import attncourse as ac
from attncourse import faults_ch4 as faults

EPS = np.finfo(np.float64).eps


@pytest.fixture
def qkv():
    rng = np.random.default_rng(0)
    B, T, d, r = 2, 6, 3, 2
    return rng.normal(size=(B, T, d)), rng.normal(size=(B, T, d)), rng.normal(size=(B, T, r))


@pytest.fixture
def layer():
    rng = np.random.default_rng(1)
    B, T, D, H, d, r = 2, 5, 7, 2, 3, 2
    params = ac.init_multihead(rng, D, H, d, r)
    X = rng.normal(size=(B, T, D))
    key_valid = ac.key_valid_from_lengths([3, 5], T, side="left")
    G = rng.normal(size=(B, T, D))
    return params, X, H, key_valid, G


def causal_forward_failures(attend, Q, K, V):
    _, A = attend(Q, K, V)
    T = Q.shape[-2]
    failed = []
    if not np.all(A[..., ~ac.causal_mask(T, T)] == 0.0):
        failed.append("future")
    if not np.allclose(A.sum(axis=-1), 1.0, rtol=0, atol=T * EPS):
        failed.append("rows sum to one")
    if not np.all(np.diagonal(A, axis1=-2, axis2=-1) > 0.0):
        failed.append("reads itself")
    return failed


def test_the_causal_forward_check_passes_the_package(qkv):
    assert causal_forward_failures(ac.causal_attention, *qkv) == []


def test_geq_mask_is_caught(qkv):
    assert not np.any(np.diag(faults.causal_mask_geq(4, 4)))
    assert causal_forward_failures(faults.causal_attention_geq, *qkv) == ["rows sum to one", "reads itself"]


def test_mask_after_softmax_is_caught(qkv):
    assert causal_forward_failures(faults.causal_attention_mask_after_softmax, *qkv) == ["rows sum to one"]
    Q, K, V = qkv
    X_like = np.concatenate([Q, K, V], axis=-1)
    X_other = X_like + 1.0
    attend = lambda X: faults.causal_attention_mask_after_softmax(X[..., :3], X[..., 3:6], X[..., 6:])[0]
    assert not ac.prefix_report(attend, X_like, X_other).passed  # the future still sets the denominator


def test_naive_minus_inf_gives_nan_in_both_passes_and_only_for_empty_rows(qkv):
    Q, K, V = qkv
    T = Q.shape[-2]
    key_valid = ac.key_valid_from_lengths([4, 6], T, side="left")
    visible = ac.combine_masks(ac.causal_mask(T, T), ac.key_padding_mask(key_valid, T))
    empty = ~visible.any(axis=-1)
    G = np.ones((2, T, 2))
    with np.errstate(all="ignore"):
        O, A = faults.naive_masked_attention_forward(Q, K, V, visible)
        dQ, dK, dV = faults.naive_masked_attention_backward(Q, K, V, G, visible)
    assert_array_equal(np.isnan(O).any(axis=-1), empty)
    assert np.isnan(dK[0]).all() and np.isnan(dV[0]).all()
    assert np.isnan(dQ[empty]).all()
    # where no row is empty, the naive version agrees with the package, in both passes
    O_ok, A_ok = ac.causal_attention(Q, K, V, key_valid=key_valid)
    assert_allclose(O[1], O_ok[1], rtol=1e-14, atol=1e-15)
    for naive, package in zip((dQ, dK, dV), ac.attention_backward(Q, K, V, G, visible)):
        assert_allclose(naive[1], package[1], rtol=1e-13, atol=1e-15)
    assert all(np.all(np.isfinite(x)) for x in (O_ok, A_ok))
    with pytest.raises(FloatingPointError, match="invalid value"):
        with np.errstate(invalid="raise"):
            faults.naive_masked_attention_forward(Q, K, V, visible)
    with pytest.warns(RuntimeWarning, match="invalid value"):
        faults.naive_masked_attention_forward(Q, K, V, visible)


def test_naive_minus_inf_equals_the_package_when_no_row_is_empty(qkv):
    Q, K, V = qkv
    causal = ac.causal_mask(6, 6)
    O, A = faults.naive_masked_attention_forward(Q, K, V, causal)
    O_ok, A_ok = ac.attention_forward(Q, K, V, causal)
    assert_allclose(A, A_ok, rtol=1e-14, atol=0)
    assert_allclose(O, O_ok, rtol=1e-14, atol=1e-15)


def padding_failures(attend, Q, K, V, key_valid):
    O, A = attend(Q, K, V, key_valid)
    failed = []
    if not np.all(A[np.broadcast_to(~key_valid[:, None, :], A.shape)] == 0.0):
        failed.append("padded keys get weight 0")
    K2 = np.where(key_valid[..., None], K, K + 1.0)
    V2 = np.where(key_valid[..., None], V, V + 1.0)
    if not np.array_equal(attend(Q, K2, V2, key_valid)[0][key_valid], O[key_valid]):
        failed.append("real outputs ignore padding")
    return failed


def test_padding_on_queries_is_caught(qkv):
    key_valid = ac.key_valid_from_lengths([4, 6], 6, side="left")
    correct = lambda Q, K, V, kv: ac.causal_attention(Q, K, V, key_valid=kv)
    assert padding_failures(correct, *qkv, key_valid) == []
    assert padding_failures(faults.causal_attention_query_padding, *qkv, key_valid) == [
        "padded keys get weight 0", "real outputs ignore padding"]


def test_wrong_split_and_merge_are_inverses_of_each_other_but_not_the_right_ones():
    Y = np.arange(2 * 3 * 4.0).reshape(2, 3, 4)
    assert_array_equal(faults.merge_heads_no_transpose(faults.split_heads_no_transpose(Y, 2)), Y)
    assert_array_equal(faults.merge_heads_reversed(faults.split_heads_reversed(Y, 2)), Y)
    assert not np.array_equal(faults.split_heads_no_transpose(Y, 2), ac.split_heads(Y, 2))
    assert not np.array_equal(faults.merge_heads_reversed(ac.split_heads(Y, 2)), Y)


def gradcheck_pair(forward, backward, params, X, H, key_valid, G):
    _, cache = forward(params, X, H, key_valid)
    dparams, dX = backward(params, cache, G)
    J = lambda X, **w: float(np.sum(forward(w, X, H, key_valid)[0] * G))
    return ac.gradcheck(J, {"X": X, **params}, {"X": dX, **dparams})


def test_wrong_head_arrangement_in_the_forward_is_caught_by_the_loop_reference(layer):
    params, X, H, key_valid, G = layer
    reference = ac.multihead_by_loop(params, X, H, key_valid)
    assert_allclose(ac.multihead_forward(params, X, H, key_valid)[0], reference, rtol=1e-13, atol=1e-15)
    for wrong in (faults.multihead_forward_no_transpose, faults.multihead_forward_reversed):
        assert not np.allclose(wrong(params, X, H, key_valid)[0], reference, rtol=1e-12, atol=1e-12)


def test_a_consistent_wrong_pair_passes_finite_differences(layer):
    # which is why the loop reference is needed: the gradient is right for the wrong function
    assert gradcheck_pair(faults.multihead_forward_no_transpose, faults.multihead_backward_no_transpose, *layer).passed
    assert gradcheck_pair(faults.multihead_forward_reversed, faults.multihead_backward_reversed, *layer).passed


def test_a_wrong_head_order_in_the_backward_is_caught_by_finite_differences(layer):
    assert gradcheck_pair(ac.multihead_forward, ac.multihead_backward, *layer).passed
    assert not gradcheck_pair(ac.multihead_forward, faults.multihead_backward_reversed, *layer).passed


def earlier_position_influence(model, P, t):
    g = np.random.default_rng(0).normal(size=P.shape[1])
    f = lambda P: float(np.sum(model(P)[..., t, :] * g))
    return float(np.abs(ac.numerical_gradient(f, P, ac.STEPS[0])[:t]).max())


def test_positions_after_attention_are_caught(layer):
    params, X, H, _, _ = layer
    P = ac.init_positions(np.random.default_rng(2), 8, X.shape[-1])["P"]
    before = lambda P: ac.multihead_forward(params, ac.positions_forward({"P": P}, X)[0], H)[0]
    after = lambda P: faults.positions_after_attention(params, {"P": P}, X, H)
    for t in (1, 3, 4):
        assert earlier_position_influence(before, P, t) > ac.TOLERANCE
        assert earlier_position_influence(after, P, t) == 0.0
    assert before(P).shape == after(P).shape  # same interface, different wiring


def test_overwritten_dP_is_caught(layer):
    params, X, H, _, G = layer
    pos = ac.init_positions(np.random.default_rng(3), 6, X.shape[-1])
    X_pos, pos_cache = ac.positions_forward(pos, X)
    _, attn_cache = ac.multihead_forward(params, X_pos, H)
    _, dX_pos = ac.multihead_backward(params, attn_cache, G)
    J = lambda P: float(np.sum(ac.multihead_forward(params, ac.positions_forward({"P": P}, X)[0], H)[0] * G))
    good, _ = ac.positions_backward(pos, pos_cache, dX_pos)
    wrong, _ = faults.positions_backward_overwrite(pos, pos_cache, dX_pos)
    assert ac.gradcheck(J, {"P": pos["P"]}, good).passed
    assert not ac.gradcheck(J, {"P": pos["P"]}, wrong).passed


def test_no_warning_from_the_package_where_the_fault_warns(qkv):
    Q, K, V = qkv
    key_valid = ac.key_valid_from_lengths([0, 6], 6, side="left")  # sequence 0: padding only
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(all="raise"):
            O, A = ac.causal_attention(Q, K, V, key_valid=key_valid)
    assert np.all(O[0] == 0.0) and np.all(A[0] == 0.0)
