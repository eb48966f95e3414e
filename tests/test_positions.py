"""Learned absolute positions: forward, dP summed over the batch, and the T_max check."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

import attncourse as ac
from attncourse import faults_ch4 as faults
from strategies import matrices


def test_forward_adds_the_same_row_to_every_sequence():
    rng = np.random.default_rng(0)
    params = ac.init_positions(rng, T_max=6, D=3)
    X = rng.normal(size=(2, 4, 3))
    Y, cache = ac.positions_forward(params, X)
    for b in range(2):
        for t in range(4):
            assert_array_equal(Y[b, t], X[b, t] + params["P"][t])
    Y2, _ = ac.positions_forward(params, X[0])  # a single sequence (T, D)
    assert_array_equal(Y2, Y[0])
    assert cache["T"] == 4


def test_backward_sums_over_the_batch_and_leaves_unused_rows_at_zero():
    rng = np.random.default_rng(1)
    params = ac.init_positions(rng, T_max=7, D=3)
    X = rng.normal(size=(4, 5, 3))
    dY = rng.normal(size=X.shape)
    _, cache = ac.positions_forward(params, X)
    dparams, dX = ac.positions_backward(params, cache, dY)
    assert set(dparams) == {"P"} and dparams["P"].shape == (7, 3)
    assert_allclose(dparams["P"][:5], dY.sum(axis=0), rtol=1e-15)
    assert np.all(dparams["P"][5:] == 0.0)
    assert_array_equal(dX, dY)
    assert dX is not dY


def test_gradient_matches_finite_differences_with_several_batch_dimensions():
    rng = np.random.default_rng(2)
    params = ac.init_positions(rng, T_max=6, D=4)
    X = rng.normal(size=(2, 3, 5, 4))  # two leading dimensions
    G = rng.normal(size=X.shape)
    W = rng.normal(size=(4, 3))
    J = lambda P, X: float(np.sum(np.tanh(ac.positions_forward({"P": P}, X)[0] @ W) * G[..., :3]))
    Y, cache = ac.positions_forward(params, X)
    dY = (1 - np.tanh(Y @ W) ** 2) * G[..., :3] @ W.T  # (..., T, 3) x (3, 4) -> (..., T, 4)
    dparams, dX = ac.positions_backward(params, cache, dY)
    report = ac.gradcheck(J, {"P": params["P"], "X": X}, {"P": dparams["P"], "X": dX})
    assert report.passed, report


def test_positions_feeding_attention_match_finite_differences():
    rng = np.random.default_rng(3)
    B, T, D, H = 2, 4, 5, 2
    params = {**ac.init_multihead(rng, D, H, 3, 2), **ac.init_positions(rng, 6, D)}
    X = rng.normal(size=(B, T, D))
    G = rng.normal(size=(B, T, D))

    def forward(P):
        return ac.multihead_forward(params, ac.positions_forward({"P": P}, X)[0], H)[0]

    X_pos, pos_cache = ac.positions_forward(params, X)
    _, attn_cache = ac.multihead_forward(params, X_pos, H)
    _, dX_pos = ac.multihead_backward(params, attn_cache, G)
    dparams, _ = ac.positions_backward(params, pos_cache, dX_pos)
    report = ac.gradcheck(lambda P: float(np.sum(forward(P) * G)), {"P": params["P"]}, dparams)
    assert report.passed, report


@given(st.data(), st.integers(1, 3), st.integers(1, 5), st.integers(0, 3), st.integers(1, 4))
def test_dP_is_the_batch_sum_property(data, B, T, extra, D):
    P = data.draw(matrices((T + extra, D)))
    X = data.draw(matrices((B, T, D)))
    dY = data.draw(matrices((B, T, D)))
    Y, cache = ac.positions_forward({"P": P}, X)
    assert_array_equal(Y, X + P[:T])
    dparams, dX = ac.positions_backward({"P": P}, cache, dY)
    expected = np.zeros_like(P)
    for b in range(B):
        expected[:T] += dY[b]
    assert_allclose(dparams["P"], expected, rtol=1e-14, atol=1e-14)
    assert np.all(dparams["P"][T:] == 0.0)
    assert_array_equal(dX, dY)


def test_overwriting_instead_of_summing_is_caught_by_finite_differences():
    rng = np.random.default_rng(4)
    params = ac.init_positions(rng, T_max=5, D=3)
    X = rng.normal(size=(3, 4, 3))
    G = rng.normal(size=X.shape)
    J = lambda P: float(np.sum(ac.positions_forward({"P": P}, X)[0] ** 2 * G))
    Y, cache = ac.positions_forward(params, X)
    dY = 2 * Y * G
    good, _ = ac.positions_backward(params, cache, dY)
    wrong, _ = faults.positions_backward_overwrite(params, cache, dY)
    assert ac.gradcheck(J, {"P": params["P"]}, good).passed
    assert not ac.gradcheck(J, {"P": params["P"]}, wrong).passed
    # a batch of one cannot tell the two apart: the check needs B >= 2
    _, cache1 = ac.positions_forward(params, X[:1])
    assert_array_equal(faults.positions_backward_overwrite(params, cache1, dY[:1])[0]["P"],
                       ac.positions_backward(params, cache1, dY[:1])[0]["P"])


@pytest.mark.parametrize(
    "P, X, message",
    [
        (np.zeros((3, 2)), np.zeros((2, 4, 2)), r"sequence length T=4 exceeds T_max=3: P has shape \(3, 2\), X has shape \(2, 4, 2\)"),
        (np.zeros((3, 2)), np.zeros((2, 3)), r"X and P must share the width D: X has shape \(2, 3\), P has shape \(3, 2\)"),
        (np.zeros(3), np.zeros((2, 3)), r"P must be 2-D \(T_max, D\), got shape \(3,\)"),
        (np.zeros((3, 2)), np.zeros(2), r"X must be at least 2-D .* got shape \(2,\)"),
    ],
)
def test_bad_input_is_named(P, X, message):
    with pytest.raises(ValueError, match=message):
        ac.positions_forward({"P": P}, X)


def test_other_bad_input_is_named():
    with pytest.raises(ValueError, match=r"params lacks 'P'"):
        ac.positions_forward({}, np.zeros((2, 2)))
    with pytest.raises(ValueError, match=r"T_max and D must be positive, got T_max=0, D=3"):
        ac.init_positions(np.random.default_rng(0), 0, 3)
    params = {"P": np.zeros((4, 2))}
    _, cache = ac.positions_forward(params, np.zeros((2, 3, 2)))
    with pytest.raises(ValueError, match=r"dY must have the shape of the output, \(2, 3, 2\), got \(3, 2\)"):
        ac.positions_backward(params, cache, np.zeros((3, 2)))
