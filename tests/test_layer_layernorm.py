"""Tests of attncourse.layers.layernorm: Y = gamma * (X - mu) / sqrt(var + eps) + beta.

Forward against an independent direct formula, the row properties (mean beta, spread
gamma; invariance to shifting and scaling a row), the compact backward's two
orthogonalities, finite differences on every coordinate, and bad input."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose

from attncourse.kit.faults import layernorm as fl
from attncourse.layers.layernorm import (init_layernorm, layernorm_backward,
                                         layernorm_forward)
from attncourse.kit.gradients import layer_gradcheck
from strategies import matrices

EPS = np.finfo(np.float64).eps


def case(seed=0, shape=(2, 5, 7), spread=1.0):
    """Random gamma (mixed signs), beta; X: rows of unequal spread and offset; dY."""
    rng = np.random.default_rng(seed)
    D = shape[-1]
    params = {"gamma": rng.uniform(0.5, 1.5, size=D) * rng.choice([-1.0, 1.0], size=D),
              "beta": rng.normal(size=D)}
    row_scale = rng.uniform(0.5, 2.0, size=shape[:-1] + (1,))
    X = spread * rng.normal(size=shape) * row_scale + rng.normal(size=shape[:-1] + (1,))
    return params, X, rng.normal(size=shape)


def direct(params, X, eps):
    """An independent computation, one row at a time with Python sums."""
    out = np.empty_like(X)
    for idx in np.ndindex(X.shape[:-1]):
        row = [float(v) for v in X[idx]]
        mu = sum(row) / len(row)
        var = sum((v - mu) ** 2 for v in row) / len(row)
        out[idx] = [(v - mu) / (var + eps) ** 0.5 for v in row]
    return params["gamma"] * out + params["beta"]


def test_init_is_the_identity_gain_and_zero_shift():
    params = init_layernorm(4)
    assert_allclose(params["gamma"], np.ones(4), rtol=0, atol=0)
    assert_allclose(params["beta"], np.zeros(4), rtol=0, atol=0)


@pytest.mark.parametrize("eps", [0.0, 1e-5, 0.1])
def test_forward_matches_the_direct_formula(eps):
    params, X, _ = case(1)
    Y, saved = layernorm_forward(params, X, eps=eps)
    assert Y.shape == X.shape and saved["inv_std"].shape == X.shape[:-1] + (1,)
    assert_allclose(Y, direct(params, X, eps), rtol=1e-13, atol=1e-13)
    assert_allclose(saved["x_hat"], (Y - params["beta"]) / params["gamma"], rtol=1e-12,
                    atol=1e-13)


def test_rows_of_the_output_have_mean_beta_and_spread_gamma_per_feature():
    params, X, _ = case(2, shape=(3, 4, 6))
    Y, saved = layernorm_forward(params, X, eps=0.0)
    x_hat = (Y - params["beta"]) / params["gamma"]
    assert_allclose(x_hat.mean(axis=-1), 0.0, atol=1e-15)
    assert_allclose(np.var(x_hat, axis=-1), 1.0, rtol=1e-14)  # biased variance
    var = np.var(X, axis=-1, keepdims=True)
    assert_allclose(var * saved["inv_std"] ** 2, 1.0, rtol=1e-14)


def test_eps_shrinks_the_spread_by_exactly_var_over_var_plus_eps():
    params, X, _ = case(3)
    eps = 0.05
    _, saved = layernorm_forward(params, X, eps=eps)
    var = np.var(X, axis=-1)
    assert_allclose(np.mean(saved["x_hat"] ** 2, axis=-1), var / (var + eps),
                    rtol=1e-13)


def test_output_is_invariant_to_shifting_and_positive_scaling_of_a_row():
    params, X, _ = case(4)
    rng = np.random.default_rng(40)
    shift = rng.normal(size=X.shape[:-1] + (1,)) * 10
    scale = rng.uniform(0.1, 10.0, size=X.shape[:-1] + (1,))
    Y, _ = layernorm_forward(params, X, eps=0.0)
    for moved in (X + shift, scale * X):
        assert_allclose(layernorm_forward(params, moved, eps=0.0)[0], Y, rtol=1e-12,
                        atol=1e-12)
    # a negative scale flips x_hat: invariance holds for positive scales only
    Y_neg = layernorm_forward(params, -X, eps=0.0)[0]
    assert_allclose(Y_neg - params["beta"], -(Y - params["beta"]), rtol=1e-12,
                    atol=1e-12)


def test_with_eps_scaling_a_row_changes_the_output_by_the_eps_effect_only():
    params, X, _ = case(5)
    eps, c = 1e-5, 3.0
    Y, _ = layernorm_forward(params, X, eps=eps)
    Y_scaled, _ = layernorm_forward(params, c * X, eps=eps)
    var = np.var(X, axis=-1, keepdims=True)
    x_hat_scaled = (X - X.mean(axis=-1, keepdims=True)) / np.sqrt(var + eps / c**2)
    expected = params["gamma"] * x_hat_scaled + params["beta"]
    assert_allclose(Y_scaled, expected, rtol=1e-13, atol=1e-13)
    gap = float(np.max(np.abs(Y_scaled - Y)))
    assert 0 < gap < eps / np.min(var) * np.max(np.abs(params["gamma"]))


@given(matrices((3, 6), scale=5.0), st.floats(-50, 50), st.floats(0.01, 100))
def test_invariance_property(X, shift, scale):
    spread = np.var(X, axis=-1)
    if np.min(spread) < 1e-2:  # nearly constant rows: nothing to normalise
        return
    params = init_layernorm(6)
    Y, _ = layernorm_forward(params, X, eps=0.0)
    assert_allclose(layernorm_forward(params, scale * X + shift, eps=0.0)[0], Y,
                    rtol=1e-9, atol=1e-9)


def test_a_constant_row_gives_beta_with_eps_and_is_finite():
    params, _, _ = case(6, shape=(2, 3))
    X = np.array([[2.0, 2.0, 2.0], [1.0, 2.0, 4.0]])
    Y, saved = layernorm_forward(params, X)
    assert_allclose(Y[0], params["beta"], rtol=0, atol=0)
    assert np.all(np.isfinite(Y))
    _, dX = layernorm_backward(params, saved, np.ones_like(X))
    assert np.all(np.isfinite(dX))


@pytest.mark.parametrize("shape", [(5, 7), (2, 5, 7), (3, 2, 4, 6), (9,)])
def test_gradients_match_finite_differences_on_every_coordinate(shape):
    params, X, dY = case(7, shape=shape)
    report = layer_gradcheck(layernorm_forward, layernorm_backward, params, X, dy=dY)
    assert report.passed, report
    assert {name for name, _ in report.errors} == {"gamma", "beta", "x"}


def test_gradients_match_finite_differences_with_a_large_eps():
    params, X, dY = case(8)
    report = layer_gradcheck(layernorm_forward, layernorm_backward, params, X, dy=dY,
                             eps=0.3)
    assert report.passed, report


def test_dX_is_orthogonal_to_ones_and_to_x_hat_per_row_with_eps_zero():
    params, X, dY = case(9, shape=(4, 5, 8))
    _, saved = layernorm_forward(params, X, eps=0.0)
    _, dX = layernorm_backward(params, saved, dY)
    scale = np.max(np.abs(dX))
    assert np.max(np.abs(dX.sum(axis=-1))) < 16 * EPS * 8 * scale
    assert np.max(np.abs(np.sum(dX * saved["x_hat"], axis=-1))) < 16 * EPS * 8 * scale


def test_with_eps_dX_dot_x_hat_is_the_stated_eps_term():
    params, X, dY = case(10)
    eps = 1e-2
    _, saved = layernorm_forward(params, X, eps=eps)
    _, dX = layernorm_backward(params, saved, dY)
    assert_allclose(dX.sum(axis=-1), 0.0, atol=1e-14)
    var = np.var(X, axis=-1)
    g = dY * params["gamma"]
    g_dot_x_hat = np.sum(g * saved["x_hat"], axis=-1)
    stated = eps / (var + eps) * saved["inv_std"][..., 0] * g_dot_x_hat
    assert_allclose(np.sum(dX * saved["x_hat"], axis=-1), stated, rtol=1e-10,
                    atol=1e-15)
    assert np.min(np.abs(stated)) > 0  # not orthogonal when eps > 0


def test_dX_equals_the_full_jacobian_transposed_times_dY():
    params, X, dY = case(11, shape=(6,))
    eps = 1e-3
    _, saved = layernorm_forward(params, X, eps=eps)
    _, dX = layernorm_backward(params, saved, dY)
    D = X.shape[0]
    var = np.var(X)
    s = 1 / np.sqrt(var + eps)
    x_hat = (X - X.mean()) * s
    # d x_hat_i / d x_k = s (delta_ik - 1/D - x_hat_i x_hat_k / D)
    J = s * (np.eye(D) - 1 / D - np.outer(x_hat, x_hat) / D)
    # (D, D) x (D,) -> (D,)
    assert_allclose(dX, J.T @ (dY * params["gamma"]), rtol=1e-12, atol=1e-13)


def test_parameter_gradients_are_summed_over_every_leading_axis():
    params, X, dY = case(12, shape=(2, 3, 5))
    _, saved = layernorm_forward(params, X)
    dparams, _ = layernorm_backward(params, saved, dY)
    assert_allclose(dparams["gamma"], np.einsum("btd,btd->d", dY, saved["x_hat"]),
                    rtol=1e-13)
    assert_allclose(dparams["beta"], dY.sum(axis=(0, 1)), rtol=1e-13)


@pytest.mark.parametrize("fault",
                         [f for f in fl.FAULTS if "layer gradcheck" in f.caught_by],
                         ids=lambda f: f.name)
def test_the_planted_faults_fail_the_layer_gradcheck(fault):
    forward, backward = fault.function
    params, X, dY = case(13, spread=0.3)
    report = layer_gradcheck(forward, backward, params, X, dy=dY)
    assert not report.passed, report


def test_the_eps_placement_fault_is_invisible_when_eps_is_zero():
    params, X, dY = case(14, spread=0.3)
    Y, _ = layernorm_forward(params, X, eps=0.0)
    wrong = fl.layernorm_forward_eps_outside
    assert_allclose(wrong(params, X, eps=0.0)[0], Y, rtol=1e-15)
    report = layer_gradcheck(wrong, layernorm_backward, params, X, dy=dY, eps=1e-5)
    assert report.errors[("x", 1e-5)] > 100 * report.tolerance


def test_normalising_over_positions_is_consistent_but_breaks_the_row_invariance():
    params, X, dY = case(15)
    pair = (fl.layernorm_forward_wrong_axis, fl.layernorm_backward_wrong_axis)
    assert layer_gradcheck(*pair, params, X, dy=dY).passed
    shift = np.arange(X.shape[-2], dtype=float)[:, None]  # a different shift per row
    Y, _ = pair[0](params, X, eps=0.0)
    assert np.max(np.abs(pair[0](params, X + shift, eps=0.0)[0] - Y)) > 0.1


@pytest.mark.parametrize("call, message", [
    (lambda: init_layernorm(0), "sizes must be positive integers: D=0"),
    (lambda: layernorm_forward({"gamma": np.ones(3)}, np.ones((2, 3))),
     r"layernorm params lack \['beta'\]"),
    (lambda: layernorm_forward(init_layernorm(4), np.ones((2, 3))),
     r"^gamma must have shape \(D\) with D=3 \(as in X\), got shape \(4,\)$"),
    (lambda: layernorm_forward({"gamma": np.ones(3), "beta": np.ones(4)},
                               np.ones((2, 3))),
     r"^beta must have shape \(D\) with D=3 \(as in X\), got shape \(4,\)$"),
    (lambda: layernorm_forward({"gamma": np.ones((1, 3)), "beta": np.ones(3)},
                               np.ones(3)),
     r"^gamma must have shape \(D\), got shape \(1, 3\)$"),
    (lambda: layernorm_forward(init_layernorm(3), np.ones((2, 3)), eps=-1e-5),
     r"^eps must be a finite number in \[0, inf\), got -1e-05$"),
    (lambda: layernorm_forward(init_layernorm(3), np.ones((2, 3)), eps=float("nan")),
     r"^eps must be a finite number in \[0, inf\), got nan$"),
    (lambda: layernorm_forward(init_layernorm(3), np.ones((2, 3)), eps=True),
     r"^eps must be a finite number in \[0, inf\), got True$"),
    (lambda: layernorm_forward(init_layernorm(3), np.array([["a", "b", "c"]])),
     "^X must be an array of numbers"),
    (lambda: layernorm_forward({"gamma": np.ones(3), "beta": np.ones((1, 3))},
                               np.ones(3)),
     r"^beta must have shape \(D\), got shape \(1, 3\)$"),
    (lambda: layernorm_forward(init_layernorm(3), np.array(2.0)),
     r"^X must have shape \(..., D\), got shape \(\)$"),
])
def test_bad_input_is_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_a_wrong_upstream_gradient_shape_is_named():
    params, X, _ = case(16)
    _, saved = layernorm_forward(params, X)
    message = r"dY must have the shape of Y \(and X\), \(2, 5, 7\)"
    with pytest.raises(ValueError, match=message):
        layernorm_backward(params, saved, np.ones((2, 7, 5)))


def test_backward_names_missing_parameters():
    params, X, dY = case(19, shape=(3, 4))
    _, saved = layernorm_forward(params, X)
    message = (r"^layernorm params lack \['beta'\]; they need \['gamma', 'beta'\], "
               r"got keys \['gamma'\]$")
    with pytest.raises(ValueError, match=message):
        layernorm_backward({"gamma": params["gamma"]}, saved, dY)


def test_a_non_numeric_upstream_gradient_is_named():
    params, X, _ = case(17, shape=(2, 3))
    _, saved = layernorm_forward(params, X)
    with pytest.raises(ValueError, match="^dY must be an array of numbers"):
        layernorm_backward(params, saved, np.full((2, 3), "a"))


def test_the_default_eps_is_1e_minus_5():
    params, X, _ = case(18, shape=(3, 4), spread=0.01)
    Y, saved = layernorm_forward(params, X)
    Y_stated, saved_stated = layernorm_forward(params, X, eps=1e-5)
    assert_allclose(Y, Y_stated, rtol=0, atol=0)
    assert_allclose(saved["inv_std"], saved_stated["inv_std"], rtol=0, atol=0)
    # small rows: the default is far from 0 and from 1e-4 in its effect
    assert np.min(np.abs(Y - layernorm_forward(params, X, eps=0.0)[0])) > 0
    assert not np.allclose(Y, layernorm_forward(params, X, eps=1e-4)[0], rtol=1e-6)
