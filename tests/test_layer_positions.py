"""Tests of attncourse.layers.positions: learned absolute positions (forward, dP summed
over the batch, the T_max check, initialisation)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

from attncourse.kit.faults.positions import positions_backward_overwrite
from attncourse.layers import multihead as mh
from attncourse.layers.positions import (
    init_positions,
    positions_backward,
    positions_forward,
)
from attncourse.kit.gradients import layer_gradcheck
from strategies import matrices


def test_forward_adds_the_same_row_to_every_sequence():
    rng = np.random.default_rng(0)
    params = init_positions(rng, T_max=6, D=3)
    X = rng.normal(size=(2, 4, 3))
    Y, saved = positions_forward(params, X)
    for b in range(2):
        for t in range(4):
            assert_array_equal(Y[b, t], X[b, t] + params["P"][t])
    Y2, _ = positions_forward(params, X[0])  # a single sequence (T, D)
    assert_array_equal(Y2, Y[0])
    assert saved["T"] == 4


def test_backward_sums_over_the_batch_and_leaves_unused_rows_at_zero():
    rng = np.random.default_rng(1)
    params = init_positions(rng, T_max=7, D=3)
    X = rng.normal(size=(4, 5, 3))
    dY = rng.normal(size=X.shape)
    _, saved = positions_forward(params, X)
    dparams, dX = positions_backward(params, saved, dY)
    assert set(dparams) == {"P"} and dparams["P"].shape == (7, 3)
    assert_allclose(dparams["P"][:5], dY.sum(axis=0), rtol=1e-15)
    assert np.all(dparams["P"][5:] == 0.0)
    assert_array_equal(dX, dY)
    assert dX is not dY


def test_gradient_matches_finite_differences_with_several_batch_dimensions():
    rng = np.random.default_rng(2)
    params = init_positions(rng, T_max=6, D=4)
    X = rng.normal(size=(2, 3, 5, 4))  # two leading dimensions
    W = rng.normal(size=(4, 3))
    G = rng.normal(size=(2, 3, 5, 3))
    Y, _ = positions_forward(params, X)
    # J = sum(G tanh(Y W)): (..., T, 3) x (3, 4) -> (..., T, 4)
    dY = (1 - np.tanh(Y @ W) ** 2) * G @ W.T
    report = layer_gradcheck(positions_forward, positions_backward, params, X, dy=dY)
    assert report.passed, report
    assert {name for name, _ in report.errors} == {"P", "x"}


def positions_then_attention(heads):
    """The pair ``multihead(X + P[:T])``, parameters nested
    ``{"pos": {"P"}, "attn": {...}}``."""

    def forward(params, X):
        X_pos, saved_pos = positions_forward(params["pos"], X)
        Y, saved_attn = mh.multihead_forward(params["attn"], X_pos, heads=heads)
        return Y, (saved_pos, saved_attn)

    def backward(params, saved, dY):
        saved_pos, saved_attn = saved
        d_attn, dX_pos = mh.multihead_backward(params["attn"], saved_attn, dY)
        d_pos, dX = positions_backward(params["pos"], saved_pos, dX_pos)
        return {"pos": d_pos, "attn": d_attn}, dX

    return forward, backward


def test_positions_feeding_attention_match_finite_differences():
    rng = np.random.default_rng(3)
    B, T, D, H = 2, 4, 5, 2
    params = {
        "attn": mh.init_multihead(rng, D, heads=H, d=3, r=2),
        "pos": init_positions(rng, 6, D),
    }
    X = rng.normal(size=(B, T, D))
    G = rng.normal(size=(B, T, D))
    report = layer_gradcheck(*positions_then_attention(H), params, X, dy=G)
    assert report.passed, report
    assert {name for name, _ in report.errors} == {
        "pos.P",
        "attn.W_Q",
        "attn.W_K",
        "attn.W_V",
        "attn.W_O",
        "x",
    }


@given(
    st.data(),
    st.integers(1, 3),
    st.integers(1, 5),
    st.integers(0, 3),
    st.integers(1, 4),
)
def test_dP_is_the_batch_sum_property(data, B, T, extra, D):
    P = data.draw(matrices((T + extra, D)))
    X = data.draw(matrices((B, T, D)))
    dY = data.draw(matrices((B, T, D)))
    Y, saved = positions_forward({"P": P}, X)
    assert_array_equal(Y, X + P[:T])
    dparams, dX = positions_backward({"P": P}, saved, dY)
    expected = np.zeros_like(P)
    for b in range(B):
        expected[:T] += dY[b]
    assert_allclose(dparams["P"], expected, rtol=1e-14, atol=1e-14)
    assert np.all(dparams["P"][T:] == 0.0)
    assert_array_equal(dX, dY)


def test_overwriting_instead_of_summing_is_caught_by_finite_differences():
    rng = np.random.default_rng(4)
    params = init_positions(rng, T_max=5, D=3)
    X = rng.normal(size=(3, 4, 3))
    G = rng.normal(size=X.shape)
    assert layer_gradcheck(
        positions_forward, positions_backward, params, X, dy=G
    ).passed
    report = layer_gradcheck(
        positions_forward, positions_backward_overwrite, params, X, dy=G
    )
    assert not report.passed
    assert {
        name for (name, _), err in report.errors.items() if err >= report.tolerance
    } == {"P"}
    # a batch of one cannot tell the two apart: the check needs B >= 2
    _, saved1 = positions_forward(params, X[:1])
    assert_array_equal(
        positions_backward_overwrite(params, saved1, G[:1])[0]["P"],
        positions_backward(params, saved1, G[:1])[0]["P"],
    )
    assert layer_gradcheck(
        positions_forward, positions_backward_overwrite, params, X[:1], dy=G[:1]
    ).passed


def test_init_positions_draws_standard_normal_entries_times_scale():
    T_max, D = 128, 24
    n = T_max * D
    # five standard errors of a sample standard deviation
    tolerance = 5 / np.sqrt(2 * (n - 1))
    for seed, scale in ((0, 1.0), (1, 0.02)):
        P = init_positions(np.random.default_rng(seed), T_max, D, scale=scale)["P"]
        assert P.shape == (T_max, D)
        assert abs(P.std() / scale - 1) < tolerance
        assert abs(P.mean()) < 5 * scale / np.sqrt(n)


@pytest.mark.parametrize(
    "P, X, message",
    [
        (
            np.zeros((3, 2)),
            np.zeros((2, 4, 2)),
            r"sequence length T=4 exceeds T_max=3: P has shape \(3, 2\), X has shape "
            r"\(2, 4, 2\)",
        ),
        (
            np.zeros((3, 2)),
            np.zeros((2, 3)),
            r"^X must have shape \(\.\.\., T, D\) with D=2 \(as in P\), got shape "
            r"\(2, 3\)$",
        ),
        (
            np.zeros(3),
            np.zeros((2, 3)),
            r"^P must have shape \(T_max, D\), got shape \(3,\)$",
        ),
        (
            np.zeros((3, 2)),
            np.zeros(2),
            r"^X must have shape \(\.\.\., T, D\), got shape \(2,\)$",
        ),
    ],
)
def test_bad_input_is_named(P, X, message):
    with pytest.raises(ValueError, match=message):
        positions_forward({"P": P}, X)


def test_other_bad_input_is_named():
    with pytest.raises(ValueError, match=r"positions params lack \['P'\]"):
        positions_forward({}, np.zeros((2, 2)))
    with pytest.raises(
        ValueError,
        match=r"sizes must be positive integers: T_max=0 \(got T_max=0, D=3\)",
    ):
        init_positions(np.random.default_rng(0), 0, 3)
    params = {"P": np.zeros((4, 2))}
    _, saved = positions_forward(params, np.zeros((2, 3, 2)))
    with pytest.raises(
        ValueError,
        match=r"dY must have the shape of the output, \(2, 3, 2\), got \(3, 2\)",
    ):
        positions_backward(params, saved, np.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"positions params lack \['P'\]"):
        positions_backward({}, saved, np.zeros((2, 3, 2)))
