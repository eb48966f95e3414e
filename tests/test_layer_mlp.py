"""Tests of attncourse.layers.mlp: D -> ratio D -> D, of the linear and GELU pairs."""

import numpy as np
import pytest
from numpy.testing import assert_allclose

from attncourse.layers.gelu import gelu, gelu_derivative
from attncourse.layers.mlp import init_mlp, mlp_backward, mlp_forward
from attncourse.kit.gradients import layer_gradcheck


def case(seed=0, D=5, ratio=3, shape=(2, 4), bias_scale=0.5):
    rng = np.random.default_rng(seed)
    params = init_mlp(rng, D, ratio=ratio)
    for layer in ("up", "down"):  # non-zero biases, so their gradients are tested
        params[layer]["b"] = bias_scale * rng.normal(size=params[layer]["b"].shape)
    return params, rng.normal(size=shape + (D,))


def test_init_shapes_and_spread():
    params = init_mlp(np.random.default_rng(0), 64, ratio=4)
    assert params["up"]["W"].shape == (64, 256) and params["up"]["b"].shape == (256,)
    assert params["down"]["W"].shape == (256, 64) and params["down"]["b"].shape == (64,)
    assert not params["up"]["b"].any() and not params["down"]["b"].any()
    assert abs(params["up"]["W"].std() * np.sqrt(64) - 1) < 0.05
    assert abs(params["down"]["W"].std() * np.sqrt(256) - 1) < 0.05


@pytest.mark.parametrize("approximate", [False, True])
def test_forward_is_the_composition(approximate):
    params, X = case(1)
    Y, _ = mlp_forward(params, X, approximate=approximate)
    # (2, 4, D) x (D, F) -> (2, 4, F); (2, 4, F) x (F, D) -> (2, 4, D)
    U = X @ params["up"]["W"] + params["up"]["b"]
    A = gelu(U, approximate=approximate)
    expected = A @ params["down"]["W"] + params["down"]["b"]  # (2, 4, F) x (F, D)
    assert_allclose(Y, expected, rtol=1e-14, atol=1e-14)


def test_positions_do_not_interact():
    params, X = case(2)
    Y, _ = mlp_forward(params, X)
    X2 = X.copy()
    X2[:, 2] += 1.0  # change position 2 only
    Y2, _ = mlp_forward(params, X2)
    changed = np.any(Y2 != Y, axis=-1)
    assert changed[:, 2].all() and not np.delete(changed, 2, axis=1).any()


@pytest.mark.parametrize("approximate", [False, True])
@pytest.mark.parametrize("shape", [(4,), (2, 4), (2, 3, 4)])
def test_gradients_match_finite_differences_on_every_coordinate(approximate, shape):
    params, X = case(3, D=5, ratio=3, shape=shape)
    report = layer_gradcheck(mlp_forward, mlp_backward, params, X,
                             approximate=approximate)
    assert report.passed, report
    names = {name for name, _ in report.errors}
    assert names == {"up.W", "up.b", "down.W", "down.b", "x"}


def test_backward_is_the_three_pairs_in_reverse():
    params, X = case(4)
    _, saved = mlp_forward(params, X)
    dY = np.random.default_rng(40).normal(size=X.shape)
    dparams, dX = mlp_backward(params, saved, dY)
    U = X @ params["up"]["W"] + params["up"]["b"]  # (2, 4, D) x (D, F) -> (2, 4, F)
    A = gelu(U)
    dA = dY @ params["down"]["W"].T  # (2, 4, D) x (D, F) -> (2, 4, F)
    dU = dA * gelu_derivative(U)
    assert_allclose(dparams["down"]["W"], np.einsum("btf,btd->fd", A, dY), rtol=1e-12)
    assert_allclose(dparams["down"]["b"], dY.sum(axis=(0, 1)), rtol=1e-12)
    assert_allclose(dparams["up"]["W"], np.einsum("btd,btf->df", X, dU), rtol=1e-12)
    assert_allclose(dparams["up"]["b"], dU.sum(axis=(0, 1)), rtol=1e-12, atol=1e-14)
    assert_allclose(dX, dU @ params["up"]["W"].T, rtol=1e-12)  # (2, 4, F) x (F, D)


def test_without_biases_the_gradients_have_no_bias_keys():
    params, X = case(5)
    params = {layer: {"W": params[layer]["W"]} for layer in ("up", "down")}
    report = layer_gradcheck(mlp_forward, mlp_backward, params, X)
    assert report.passed, report
    assert {name for name, _ in report.errors} == {"up.W", "down.W", "x"}


@pytest.mark.parametrize("change, message", [
    (lambda p: {"up": p["up"]}, r"mlp params lack \['down'\]"),
    (lambda p: {"up": {"b": p["up"]["b"]}, "down": p["down"]},
     r"^mlp params lack 'up.W'; they need \['up.W', 'down.W'\]$"),
    (lambda p: {**p, "up": {"W": p["up"]["W"][:-1]}},
     r"^W_up must have shape \(D, F\) with D=5 \(as in X\), got shape \(4, 15\)$"),
    (lambda p: {**p, "down": {"W": p["down"]["W"][:-1]}},
     r"^W_down must have shape \(F, D\) with F=15 \(as in W_up\), "
     r"got shape \(14, 5\)$"),
    (lambda p: {**p, "up": {"W": p["up"]["W"][0]}},
     r"^W_up must have shape \(D, F\), got shape \(15,\)$"),
])
def test_bad_parameters_are_named(change, message):
    params, X = case(6)
    with pytest.raises(ValueError, match=message):
        mlp_forward(change(params), X)


def test_other_bad_input_is_named():
    with pytest.raises(ValueError, match="sizes must be positive integers: ratio=0"):
        init_mlp(np.random.default_rng(0), 4, ratio=0)
    params, X = case(7)
    with pytest.raises(ValueError, match="approximate must be True or False"):
        mlp_forward(params, X, approximate=None)
    _, saved = mlp_forward(params, X)
    message = r"dY must have the shape of Y = X W, \(2, 4, 5\)"
    with pytest.raises(ValueError, match=message):
        mlp_backward(params, saved, np.ones((2, 4, 15)))


def test_backward_names_parameters_that_do_not_match_the_forward_pass():
    params, X = case(10)
    _, saved = mlp_forward(params, X)
    dY = np.random.default_rng(100).normal(size=X.shape)
    without_down_W = {"up": params["up"], "down": {"b": params["down"]["b"]}}
    message = r"^mlp params lack 'down.W'; they need \['up.W', 'down.W'\]$"
    with pytest.raises(ValueError, match=message):
        mlp_backward(without_down_W, saved, dY)
    wider, _ = case(11, D=6)  # params of width 6 against a forward pass of width 5
    with pytest.raises(ValueError, match=r"^W_up must have shape \(D, F\) with D=5 "
                       r"\(as in X\), got shape \(6, 18\)$"):
        mlp_backward(wider, saved, dY)


def test_the_default_ratio_is_4():
    params = init_mlp(np.random.default_rng(0), 3)
    assert params["up"]["W"].shape == (3, 12) and params["down"]["W"].shape == (12, 3)


def test_a_single_row_is_a_position_of_its_own():
    params, X = case(8, shape=(4,))
    Y, _ = mlp_forward(params, X)
    Y_row, saved = mlp_forward(params, X[2])  # X (D,): one position, no leading axis
    assert_allclose(Y_row, Y[2], rtol=1e-14, atol=1e-14)
    dY = np.random.default_rng(80).normal(size=X.shape)
    _, dX = mlp_backward(params, mlp_forward(params, X)[1], dY)
    _, dX_row = mlp_backward(params, saved, dY[2])
    assert_allclose(dX_row, dX[2], rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda p, X: init_mlp(np.random.default_rng(0), 0),
            r"^sizes must be positive integers: D=0 \(got D=0, ratio=4\)",
        ),
        (
            lambda p, X: mlp_forward({"up": p["up"], "down": {"b": p["down"]["b"]}}, X),
            r"^mlp params lack 'down.W'; they need \['up.W', 'down.W'\]$",
        ),
        (
            lambda p, X: mlp_forward({**p, "down": {"W": p["down"]["W"][:, 0]}}, X),
            r"^W_down must have shape \(F, D\), got shape \(15,\)$",
        ),
        (
            lambda p, X: mlp_forward(p, np.full(X.shape, "a")),
            "^X must be an array of numbers",
        ),
        (
            lambda p, X: mlp_forward(p, np.array(1.0)),
            r"^X must have shape \(..., D\), got shape \(\)$",
        ),
    ],
)
def test_more_bad_input_is_named(call, message):
    params, X = case(9)
    with pytest.raises(ValueError, match=message):
        call(params, X)
