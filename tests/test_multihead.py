"""Causal multi-head attention with W_O: split/merge, forward against the loop reference, backward."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

import attncourse as ac
from strategies import matrices

EPS = np.finfo(np.float64).eps


def setup(seed=0, B=2, T=5, D=7, H=2, d=3, r=2, D_out=None, lengths=None):
    rng = np.random.default_rng(seed)
    params = ac.init_multihead(rng, D, H, d, r, D_out)
    X = rng.normal(size=(B, T, D)) if B else rng.normal(size=(T, D))
    key_valid = None if lengths is None else ac.key_valid_from_lengths(lengths, T, side="left")
    return rng, params, X, key_valid


def gradcheck_layer(params, X, H, key_valid, G):
    _, cache = ac.multihead_forward(params, X, H, key_valid)
    dparams, dX = ac.multihead_backward(params, cache, G)
    J = lambda X, **w: float(np.sum(ac.multihead_forward(w, X, H, key_valid)[0] * G))
    return ac.gradcheck(J, {"X": X, **params}, {"X": dX, **dparams})


def test_split_gives_each_head_its_block_of_columns():
    Y = np.arange(2 * 3 * 8).reshape(2, 3, 8)  # B=2, T=3, H w = 8
    heads = ac.split_heads(Y, 4)
    assert heads.shape == (2, 4, 3, 2)
    for h in range(4):
        assert_array_equal(heads[:, h], Y[..., 2 * h:2 * h + 2])


def test_merge_is_the_inverse_of_split():
    rng = np.random.default_rng(0)
    Y = rng.normal(size=(2, 3, 5, 12))
    for H in (1, 2, 3, 4, 6):
        assert_array_equal(ac.merge_heads(ac.split_heads(Y, H)), Y)
    O = rng.normal(size=(2, 4, 5, 3))
    assert_array_equal(ac.split_heads(ac.merge_heads(O), 4), O)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: ac.split_heads(np.ones((3, 7)), 2), r"cannot split 7 columns \(shape \(3, 7\)\) into 2 equal heads"),
        (lambda: ac.split_heads(np.ones((3, 4)), 0), r"into 0 equal heads"),
        (lambda: ac.split_heads(np.ones(4), 2), r"at least 2-D input .* got shape \(4,\)"),
        (lambda: ac.merge_heads(np.ones((3, 4))), r"merge_heads needs input of shape \(\.\.\., H, T, w\), got shape \(3, 4\)"),
    ],
)
def test_split_and_merge_reject_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_init_multihead_shapes():
    params = ac.init_multihead(np.random.default_rng(0), D=5, heads=3, d=2, r=4, D_out=6)
    assert {n: W.shape for n, W in params.items()} == {"W_Q": (5, 6), "W_K": (5, 6), "W_V": (5, 12), "W_O": (12, 6)}


@pytest.mark.parametrize("B, H, lengths", [(2, 2, None), (2, 3, [2, 5]), (0, 2, None), (3, 1, [0, 3, 5])])
def test_forward_matches_the_loop_reference(B, H, lengths):
    if B == 0:
        lengths = None
    _, params, X, key_valid = setup(B=B, H=H, lengths=lengths if B else None, D_out=4)
    Y, cache = ac.multihead_forward(params, X, H, key_valid)
    assert Y.shape == X.shape[:-1] + (4,)
    assert cache["A"].shape == X.shape[:-2] + (H, 5, 5)
    assert_allclose(Y, ac.multihead_by_loop(params, X, H, key_valid), rtol=1e-13, atol=1e-15)


def test_batched_equals_one_sequence_at_a_time():
    _, params, X, key_valid = setup(B=3, H=2, lengths=[1, 5, 3])
    Y, _ = ac.multihead_forward(params, X, 2, key_valid)
    for b in range(3):
        Y_b, _ = ac.multihead_forward(params, X[b], 2, key_valid[b])
        assert_allclose(Y[b], Y_b, rtol=1e-14, atol=1e-15)


def test_one_head_with_identity_output_is_the_causal_head():
    rng, params, X, _ = setup(H=1, d=3, r=2)
    params["W_O"] = np.eye(2)
    O, _ = ac.causal_attention(X @ params["W_Q"], X @ params["W_K"], X @ params["W_V"])
    assert_allclose(ac.multihead_forward(params, X, 1)[0], O, rtol=1e-14, atol=1e-15)


def test_masked_weights_are_exact_zeros_in_every_head():
    _, params, X, key_valid = setup(B=2, H=3, lengths=[2, 5])
    Y, cache = ac.multihead_forward(params, X, 3, key_valid)
    hidden = ~np.broadcast_to(ac.combine_masks(ac.causal_mask(5, 5), ac.key_padding_mask(key_valid[:, None, :], 5)), cache["A"].shape)
    assert np.all(cache["A"][hidden] == 0.0)
    assert np.all(Y[0, :2] == 0.0)  # the empty rows of sequence 0


def test_heads_do_not_interact_before_the_output_projection():
    _, params, X, _ = setup(H=2, d=3, r=2)
    _, cache = ac.multihead_forward(params, X, 2)
    for name, cols in (("W_Q", slice(3, 6)), ("W_K", slice(3, 6)), ("W_V", slice(2, 4))):
        changed = {n: W.copy() for n, W in params.items()}
        changed[name][:, cols] += 0.5  # head 1's columns only
        _, cache_changed = ac.multihead_forward(changed, X, 2)
        assert_array_equal(cache_changed["C"][..., :2], cache["C"][..., :2])  # head 0's block: unchanged
        assert not np.allclose(cache_changed["C"][..., 2:], cache["C"][..., 2:])


@pytest.mark.parametrize(
    "B, T, D, H, d, r, D_out, lengths",
    [(2, 5, 7, 2, 3, 2, 7, [3, 5]), (0, 4, 5, 3, 2, 1, 6, None), (3, 3, 4, 2, 1, 3, 2, [0, 3, 1])],
)
def test_gradients_match_finite_differences(B, T, D, H, d, r, D_out, lengths):
    rng, params, X, key_valid = setup(seed=B + T, B=B, T=T, D=D, H=H, d=d, r=r, D_out=D_out, lengths=lengths)
    G = rng.normal(size=X.shape[:-1] + (D_out,))
    report = gradcheck_layer(params, X, H, key_valid, G)
    assert report.passed, report


def test_padded_positions_get_exactly_zero_input_gradient():
    rng, params, X, key_valid = setup(B=2, H=2, lengths=[2, 4])
    Y, cache = ac.multihead_forward(params, X, 2, key_valid)
    dparams, dX = ac.multihead_backward(params, cache, rng.normal(size=Y.shape))
    assert np.all(dX[~key_valid] == 0.0)
    assert np.all(np.abs(dX[key_valid]).sum(-1) > 0.0)
    assert set(dparams) == set(params) and all(dparams[n].shape == params[n].shape for n in params)


def test_weight_gradients_are_summed_over_the_batch():
    rng, params, X, _ = setup(B=3, H=2)
    G = rng.normal(size=(3, 5, 7))
    _, cache = ac.multihead_forward(params, X, 2)
    dparams, _ = ac.multihead_backward(params, cache, G)
    total = {n: 0.0 for n in params}
    for b in range(3):
        _, cache_b = ac.multihead_forward(params, X[b], 2)
        for n, g in ac.multihead_backward(params, cache_b, G[b])[0].items():
            total[n] = total[n] + g
    for n in params:
        assert_allclose(dparams[n], total[n], rtol=1e-12, atol=1e-14)


@settings(max_examples=12)
@given(st.data(), st.integers(1, 2), st.integers(1, 4), st.integers(1, 4), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3))
def test_forward_and_gradients_property(data, B, T, D, H, d, r):
    W = {
        "W_Q": data.draw(matrices((D, H * d), scale=1.0)),
        "W_K": data.draw(matrices((D, H * d), scale=1.0)),
        "W_V": data.draw(matrices((D, H * r), scale=1.0)),
        "W_O": data.draw(matrices((H * r, D), scale=1.0)),
    }
    X = data.draw(matrices((B, T, D), scale=1.0))
    G = data.draw(matrices((B, T, D), scale=1.0))
    lengths = data.draw(st.lists(st.integers(0, T), min_size=B, max_size=B))
    key_valid = ac.key_valid_from_lengths(lengths, T, side="left")
    Y, _ = ac.multihead_forward(W, X, H, key_valid)
    assert_allclose(Y, ac.multihead_by_loop(W, X, H, key_valid), rtol=1e-12, atol=1e-13)
    report = gradcheck_layer(W, X, H, key_valid, G)
    assert report.passed, report


@pytest.mark.parametrize(
    "change, heads, message",
    [
        ({"W_Q": np.ones((7, 5)), "W_K": np.ones((7, 5))}, 2, r"W_Q has shape \(7, 5\): its 5 columns do not split into 2 heads"),
        ({"W_V": np.ones((7, 5))}, 2, r"W_V has shape \(7, 5\): its 5 columns do not split into 2 heads"),
        ({"W_K": np.ones((7, 4))}, 2, r"W_Q and W_K must have the same shape \(D, H d\): W_Q \(7, 6\), W_K \(7, 4\)"),
        ({"W_O": np.ones((3, 7))}, 2, r"W_O must have one row per concatenated value column: W_V \(7, 4\), W_O \(3, 7\)"),
        ({"W_Q": np.ones((6, 6))}, 2, r"W_Q must have one row per input feature: X has shape \(2, 5, 7\), W_Q has shape \(6, 6\)"),
        ({"W_O": np.ones(4)}, 2, r"W_O must be 2-D, got shape \(4,\)"),
        ({}, 0, r"heads must be a positive integer, got 0"),
        ({}, 2.0, r"heads must be a positive integer, got 2.0"),
    ],
)
def test_bad_parameters_are_named(change, heads, message):
    _, params, X, _ = setup()
    with pytest.raises(ValueError, match=message):
        ac.multihead_forward({**params, **change}, X, heads)


def test_other_bad_input_is_named():
    _, params, X, _ = setup()
    with pytest.raises(ValueError, match=r"params lacks \['W_O'\]"):
        ac.multihead_forward({n: params[n] for n in ("W_Q", "W_K", "W_V")}, X, 2)
    with pytest.raises(ValueError, match=r"X must be at least 2-D .* got shape \(7,\)"):
        ac.multihead_forward(params, X[0, 0], 2)
    with pytest.raises(ValueError, match=r"key_valid must have shape \(\.\.\., T_k\) with T_k=5 keys, got shape \(2, 4\)"):
        ac.multihead_forward(params, X, 2, np.ones((2, 4), dtype=bool))
    with pytest.raises(ValueError, match=r"key_valid has shape \(3, 5\); .* batch shape \(2,\)"):
        ac.multihead_forward(params, X, 2, np.ones((3, 5), dtype=bool))
    _, cache = ac.multihead_forward(params, X, 2)
    with pytest.raises(ValueError, match=r"dY must have the shape of the output Y, \(2, 5, 7\), got \(2, 5, 4\)"):
        ac.multihead_backward(params, cache, np.ones((2, 5, 4)))
