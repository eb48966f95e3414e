"""Tests of attncourse.layers.linear: the pair Y = X W (+ b), matmul_backward and
init_linear.

Chapter 2's unembedding Z = X U is this layer with params {"W": U}."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

from attncourse.kit.faults.linear import linear_backward_transposed
from attncourse.layers.linear import (
    init_linear,
    linear_backward,
    linear_forward,
    matmul_backward,
)
from attncourse.loss import cross_entropy_backward, cross_entropy_forward
from attncourse.kit.gradients import layer_gradcheck
from strategies import matrices

EPS = np.finfo(np.float64).eps


def unembed_loss_forward(params, X, *, targets):
    """The unembedding followed by the mean cross-entropy, composed from the two
    pairs."""
    Z, saved_linear = linear_forward(params, X)  # (B, D) x (D, n_vocab) -> (B, n_vocab)
    loss, saved_loss = cross_entropy_forward({}, Z, targets=targets)
    return loss, (saved_linear, saved_loss)


def unembed_loss_backward(params, saved, dloss):
    saved_linear, saved_loss = saved
    _, dZ = cross_entropy_backward({}, saved_loss, dloss)
    return linear_backward(params, saved_linear, dZ)


def test_forward_is_x_times_w_plus_b():
    rng = np.random.default_rng(7)
    X, U, b = rng.normal(size=(5, 3)), rng.normal(size=(3, 8)), rng.normal(size=8)
    Z, saved = linear_forward({"W": U}, X)
    assert_allclose(Z, X @ U, rtol=0, atol=0)
    assert_array_equal(saved["X"], X)
    assert_allclose(linear_forward({"W": U, "b": b}, X)[0], X @ U + b, rtol=0, atol=0)


def test_gradients_through_cross_entropy():
    rng = np.random.default_rng(8)
    B, D, n_vocab = 6, 3, 8
    X, U, y = (
        rng.normal(size=(B, D)),
        rng.normal(size=(D, n_vocab)),
        rng.integers(0, n_vocab, size=B),
    )
    _, saved = unembed_loss_forward({"W": U}, X, targets=y)
    dparams, dX = unembed_loss_backward({"W": U}, saved, 1.0)
    assert dX.shape == (B, D) and dparams["W"].shape == (D, n_vocab)
    report = layer_gradcheck(
        unembed_loss_forward, unembed_loss_backward, {"W": U}, X, targets=y
    )
    assert report.passed, report


def test_batched_gradient_of_w_sums_over_every_position():
    rng = np.random.default_rng(9)
    X, U, b, dZ = (
        rng.normal(size=(2, 4, 3)),
        rng.normal(size=(3, 5)),
        rng.normal(size=5),
        rng.normal(size=(2, 4, 5)),
    )
    _, saved = linear_forward({"W": U, "b": b}, X)
    dparams, dX = linear_backward({"W": U, "b": b}, saved, dZ)
    assert_allclose(
        dparams["W"], X[0].T @ dZ[0] + X[1].T @ dZ[1], rtol=1e-13, atol=1e-13
    )
    assert_allclose(dparams["b"], dZ.sum(axis=(0, 1)), rtol=16 * EPS, atol=16 * EPS)
    assert_allclose(dX, dZ @ U.T, rtol=0, atol=0)
    report = layer_gradcheck(
        linear_forward, linear_backward, {"W": U, "b": b}, X, dy=dZ
    )
    assert report.passed, report


def test_matmul_backward_sums_weight_gradient_over_the_batch():
    rng = np.random.default_rng(3)
    T, D, d = 5, 4, 3
    X, W, dY = (
        rng.normal(size=(2, T, D)),
        rng.normal(size=(D, d)),
        rng.normal(size=(2, T, d)),
    )
    dX, dW = matmul_backward(X, W, dY)
    assert dX.shape == X.shape and dW.shape == W.shape
    assert_allclose(dW, X[0].T @ dY[0] + X[1].T @ dY[1], rtol=1e-14)
    assert_allclose(dX, dY @ W.T, rtol=1e-15)


def test_bias_gradient_is_checked_and_a_wrong_one_is_caught():
    rng = np.random.default_rng(10)
    params = {"W": rng.normal(size=(4, 3)), "b": rng.normal(size=3)}
    X = rng.normal(size=(2, 5, 4))
    report = layer_gradcheck(linear_forward, linear_backward, params, X)
    assert report.passed, report
    assert {name for name, _ in report.errors} == {"W", "b", "x"}

    def backward_bias_last_position(params, saved, dY):
        dparams, dX = linear_backward(params, saved, dY)
        # the fault: one position instead of all
        return {**dparams, "b": dY[..., -1, :].sum(axis=0)}, dX

    bad = layer_gradcheck(linear_forward, backward_bias_last_position, params, X)
    assert not bad.passed
    assert {name for (name, _), err in bad.errors.items() if err >= bad.tolerance} == {
        "b"
    }


def test_transposed_weight_gradient_is_caught():
    # fault control: with D_in = D_out only the values expose dW^T; otherwise its shape
    # does
    rng = np.random.default_rng(11)
    square = {"W": rng.normal(size=(4, 4))}
    X = rng.normal(size=(6, 4))
    assert layer_gradcheck(linear_forward, linear_backward, square, X).passed
    assert not layer_gradcheck(
        linear_forward, linear_backward_transposed, square, X
    ).passed
    with pytest.raises(
        ValueError, match=r"gradient for W has shape \(3, 4\), input has \(4, 3\)"
    ):
        layer_gradcheck(
            linear_forward,
            linear_backward_transposed,
            {"W": rng.normal(size=(4, 3))},
            X,
        )


def test_bad_input():
    with pytest.raises(
        ValueError,
        match=r"^W must have shape \(D_in, D_out\) with D_in=3 \(as in X\), got shape "
            r"\(5, 7\)$",
    ):
        linear_forward({"W": np.ones((5, 7))}, np.ones((4, 3)))
    with pytest.raises(
        ValueError, match=r"^W must have shape \(D_in, D_out\), got shape \(3,"
    ):
        linear_forward({"W": np.ones(3)}, np.ones((4, 3)))
    with pytest.raises(
        ValueError, match=r"^X must have shape \(\.\.\., D_in\), got shape \(\)$"
    ):
        linear_forward({"W": np.ones((1, 2))}, 1.0)
    with pytest.raises(
        ValueError,
        match=r"^b must have shape \(D_out\) with D_out=5 \(as in W\), got shape \(3,",
    ):
        linear_forward({"W": np.ones((3, 5)), "b": np.ones(3)}, np.ones((4, 3)))
    with pytest.raises(
        ValueError, match=r"^b must have shape \(D_out\), got shape \(1, 5\)$"
    ):
        linear_forward({"W": np.ones((3, 5)), "b": np.ones((1, 5))}, np.ones((4, 3)))
    with pytest.raises(
        ValueError,
        match=r"linear params lack \['W'\]; they need \['W'\], got keys \['U'\]",
    ):
        linear_forward({"U": np.ones((3, 5))}, np.ones((4, 3)))
    params = {"W": np.ones((3, 5))}
    _, saved = linear_forward(params, np.ones((4, 3)))
    with pytest.raises(
        ValueError, match=r"dY must have the shape of Y = X W, \(4, 5\), got \(5, 4\)"
    ):
        linear_backward(params, saved, np.ones((5, 4)))


def test_init_linear_spread_is_scale_over_sqrt_fan_in():
    D_in, D_out = 64, 48
    n = D_in * D_out
    # five standard errors of a sample standard deviation
    tolerance = 5 / np.sqrt(2 * (n - 1))
    for seed, scale in ((0, 1.0), (1, 2.0)):
        params = init_linear(
            np.random.default_rng(seed), D_in, D_out, bias=True, scale=scale
        )
        assert params["W"].shape == (D_in, D_out) and params["b"].shape == (D_out,)
        assert abs(params["W"].std() * np.sqrt(D_in) / scale - 1) < tolerance
        assert abs(params["W"].mean()) < 5 * scale / np.sqrt(D_in * n)
        assert_array_equal(params["b"], 0.0)
    assert set(init_linear(np.random.default_rng(0), 3, 2)) == {"W"}
    with pytest.raises(
        ValueError,
        match=r"sizes must be positive integers: D_out=0 \(got D_in=3, D_out=0\)",
    ):
        init_linear(np.random.default_rng(0), 3, 0)


@given(st.data(), st.integers(1, 4), st.integers(1, 4), st.integers(2, 5))
def test_gradients_match_finite_differences(data, B, D, n_vocab):
    X, U = (
        data.draw(matrices((B, D), scale=2.0)),
        data.draw(matrices((D, n_vocab), scale=2.0)),
    )
    b = data.draw(matrices((n_vocab,), scale=2.0))
    # J = sum(W * Z) is linear in Z: dZ = W
    W = data.draw(matrices((B, n_vocab), scale=2.0))
    report = layer_gradcheck(linear_forward, linear_backward, {"W": U, "b": b}, X, dy=W)
    assert report.passed, report
