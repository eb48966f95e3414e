"""Tests of attncourse.layers.block: the pre-norm block H = X + multihead(LN1(X)),
Y = H + mlp(LN2(H)), composed of the layer pairs, and its backward."""

import numpy as np
import pytest
from numpy.testing import assert_allclose

from attncourse.kit.faults import block as fb
from attncourse.layers.attention import key_valid_from_lengths
from attncourse.layers.block import (block_backward, block_forward, init_block,
                                     residual_backward)
from attncourse.layers.layernorm import layernorm_forward
from attncourse.layers.mlp import mlp_forward
from attncourse.layers.multihead import multihead_forward
from attncourse.kit.examples import multihead_reference
from attncourse.kit.gradients import layer_gradcheck

EVERY_PARAMETER = {"ln1.gamma", "ln1.beta", "attn.W_Q", "attn.W_K", "attn.W_V",
                   "attn.W_O", "ln2.gamma", "ln2.beta", "mlp.up.W", "mlp.up.b",
                   "mlp.down.W", "mlp.down.b", "x"}


def case(seed=0, B=2, T=5, D=6, H=2, d=2, r=3, ratio=2):
    """A seeded block (random LayerNorm gains, shifts, MLP biases); ``X (B, T, D)``."""
    rng = np.random.default_rng(seed)
    params = init_block(rng, D, heads=H, d=d, r=r, ratio=ratio)
    for name in ("ln1", "ln2"):
        params[name] = {"gamma": rng.uniform(0.5, 1.5, size=D),
                        "beta": rng.normal(size=D)}
    for layer in ("up", "down"):
        b = params["mlp"][layer]["b"]
        params["mlp"][layer]["b"] = 0.3 * rng.normal(size=b.shape)
    return params, rng.normal(size=(B, T, D)), H


def test_init_shapes_and_defaults():
    params = init_block(np.random.default_rng(0), 8, heads=2)
    assert sorted(params) == ["attn", "ln1", "ln2", "mlp"]
    assert {k: W.shape for k, W in params["attn"].items()} == {
        "W_Q": (8, 8), "W_K": (8, 8), "W_V": (8, 8), "W_O": (8, 8)}  # d = r = D / H
    assert params["mlp"]["up"]["W"].shape == (8, 32)  # ratio 4
    assert_allclose(params["ln1"]["gamma"], np.ones(8), rtol=0, atol=0)
    params = init_block(np.random.default_rng(0), 6, heads=4, d=2, r=5, ratio=3)
    assert params["attn"]["W_Q"].shape == (6, 8)  # the given d = 2, not D // heads
    assert params["attn"]["W_V"].shape == (6, 20)
    assert params["attn"]["W_O"].shape == (20, 6)
    assert params["mlp"]["down"]["W"].shape == (18, 6)


@pytest.mark.parametrize("approximate", [False, True])
def test_forward_is_the_composition_of_the_pairs(approximate):
    params, X, H = case(1)
    key_valid = key_valid_from_lengths([3, 5], 5, side="left")
    Y, saved = block_forward(params, X, heads=H, key_valid=key_valid, eps=1e-3,
                             approximate=approximate)
    N1 = layernorm_forward(params["ln1"], X, eps=1e-3)[0]
    Hs = X + multihead_reference(params["attn"], N1, heads=H, key_valid=key_valid)
    N2 = layernorm_forward(params["ln2"], Hs, eps=1e-3)[0]
    expected = Hs + mlp_forward(params["mlp"], N2, approximate=approximate)[0]
    assert_allclose(Y, expected, rtol=1e-12, atol=1e-12)
    assert saved["attn"]["A"].shape == (2, H, 5, 5)


@pytest.mark.parametrize("approximate", [False, True])
def test_gradients_match_finite_differences_on_every_parameter_and_x(approximate):
    params, X, H = case(2, B=2, T=5, D=6, H=2, d=2, r=3, ratio=2)
    report = layer_gradcheck(block_forward, block_backward, params, X, heads=H,
                             approximate=approximate)
    assert report.passed, report
    assert {name for name, _ in report.errors} == EVERY_PARAMETER


@pytest.mark.parametrize("B, T, D, H, d, r, lengths", [
    (2, 5, 6, 2, 2, 3, [3, 5]),
    (3, 4, 7, 3, 3, 2, [1, 4, 2]),
])
def test_gradients_with_key_padding(B, T, D, H, d, r, lengths):
    params, X, H = case(3, B=B, T=T, D=D, H=H, d=d, r=r)
    key_valid = key_valid_from_lengths(lengths, T, side="left")
    report = layer_gradcheck(block_forward, block_backward, params, X, heads=H,
                             key_valid=key_valid, approximate=True)
    assert report.passed, report


def test_fully_masked_query_rows_stay_finite():
    params, X, H = case(4)
    key_valid = key_valid_from_lengths([0, 2], 5, side="left")  # sequence 0: padding
    Y, saved = block_forward(params, X, heads=H, key_valid=key_valid)
    dparams, dX = block_backward(params, saved, np.ones_like(Y))
    assert np.all(np.isfinite(Y)) and np.all(np.isfinite(dX))
    assert all(np.all(np.isfinite(v)) for p in dparams.values() for v in _leaves(p))
    assert_allclose(saved["attn"]["A"][0], 0.0, rtol=0, atol=0)  # no key to read


def _leaves(p):
    return [v for q in p.values() for v in _leaves(q)] if isinstance(p, dict) else [p]


def test_output_at_t_ignores_later_positions():
    params, X, H = case(5)
    Y, _ = block_forward(params, X, heads=H)
    X2 = X.copy()
    X2[:, 3:] = np.random.default_rng(50).normal(size=X2[:, 3:].shape)
    Y2, _ = block_forward(params, X2, heads=H)
    assert_allclose(Y2[:, :3], Y[:, :3], rtol=1e-13, atol=1e-13)
    Y_prefix, _ = block_forward(params, X[:, :3], heads=H)
    assert_allclose(Y_prefix, Y[:, :3], rtol=1e-13, atol=1e-13)


def test_with_zero_sublayer_outputs_the_block_is_the_identity_forward_and_backward():
    params, X, H = case(6)
    params["attn"]["W_O"] = np.zeros_like(params["attn"]["W_O"])
    down = params["mlp"]["down"]
    params["mlp"]["down"] = {k: np.zeros_like(v) for k, v in down.items()}
    Y, saved = block_forward(params, X, heads=H)
    assert_allclose(Y, X, rtol=0, atol=0)
    dY = np.random.default_rng(60).normal(size=X.shape)
    _, dX = block_backward(params, saved, dY)
    assert_allclose(dX, dY, rtol=0, atol=0)  # only the identity paths carry a gradient
    _, dX_dropped = fb.block_backward_residual_dropped(params, saved, dY)
    assert_allclose(dX_dropped, 0.0, rtol=0, atol=0)
    _, dX_doubled = fb.block_backward_residual_doubled(params, saved, dY)
    assert_allclose(dX_doubled, 4 * dY, rtol=0, atol=0)  # twice at each residual


def test_residual_backward_adds_both_paths_once():
    dY, d_sub = np.array([[1.0, -2.0]]), np.array([[0.5, 0.25]])
    assert_allclose(residual_backward(dY, d_sub), [[1.5, -1.75]], rtol=0, atol=0)


@pytest.mark.parametrize("fault", [fb.block_backward_residual_dropped,
                                   fb.block_backward_residual_doubled])
def test_the_residual_faults_fail_the_layer_gradcheck(fault):
    params, X, H = case(7)
    report = layer_gradcheck(block_forward, fault, params, X, heads=H, approximate=True)
    assert not report.passed
    assert report.errors[("x", 1e-5)] > 0.1  # dX is off by a whole dY
    # the parameter gradients of the sublayers below the second residual see it too
    assert report.errors[("ln1.gamma", 1e-5)] > 1e-3


def test_backward_gradients_have_the_nesting_of_the_parameters():
    params, X, H = case(8)
    Y, saved = block_forward(params, X, heads=H)
    dparams, dX = block_backward(params, saved, np.ones_like(Y))
    for name in ("ln1", "ln2"):
        shapes = {k: v.shape for k, v in dparams[name].items()}
        assert shapes == {"gamma": (6,), "beta": (6,)}
    assert {k: v.shape for k, v in dparams["attn"].items()} == {
        k: v.shape for k, v in params["attn"].items()}
    assert dparams["mlp"]["up"]["W"].shape == params["mlp"]["up"]["W"].shape
    assert dX.shape == X.shape


@pytest.mark.parametrize("call, message", [
    (lambda p, X: init_block(np.random.default_rng(0), 6, heads=4),
     "D = 6 does not split into heads = 4 equal heads: give d and r"),
    (lambda p, X: init_block(np.random.default_rng(0), 6, heads=0),
     "sizes must be positive integers: heads=0"),
    (lambda p, X: block_forward({k: v for k, v in p.items() if k != "mlp"}, X, heads=2),
     r"block params lack \['mlp'\]"),
    (lambda p, X: block_forward(p, X[0, 0], heads=2),
     r"^X must have shape \(..., T, D\), got shape \(6,\)$"),
    (lambda p, X: block_forward(p, X[..., :5], heads=2),
     r"^W_O must have shape \(Hr, D\) with D=5 \(as in X\), got shape \(6, 6\)$"),
    (lambda p, X: block_forward(
        {**p, "attn": {**p["attn"], "W_O": p["attn"]["W_O"][:, :4]}}, X, heads=2),
     r"^W_O must have shape \(Hr, D\) with D=6 \(as in X\), got shape \(6, 4\)$"),
    (lambda p, X: block_forward(p, X, heads=2, eps=-1.0),
     r"^eps must be a finite number in \[0, inf\), got -1.0$"),
    (lambda p, X: block_forward(p, X, heads=2, key_valid=np.ones((2, 4), dtype=bool)),
     "key_valid"),
    (lambda p, X: block_backward(p, block_forward(p, X, heads=2)[1], X[:, :4]),
     r"dY must have the shape of Y \(and X\), \(2, 5, 6\), got \(2, 4, 6\)"),
])
def test_bad_input_is_named(call, message):
    params, X, _ = case(9)
    with pytest.raises(ValueError, match=message):
        call(params, X)


def test_the_defaults_are_eps_1e_minus_5_and_the_exact_gelu():
    params, X, H = case(10)
    Y, _ = block_forward(params, X, heads=H)
    Y_stated, _ = block_forward(params, X, heads=H, eps=1e-5, approximate=False)
    assert_allclose(Y, Y_stated, rtol=0, atol=0)
    for other in ({"eps": 1e-3}, {"approximate": True}):
        assert np.max(np.abs(block_forward(params, X, heads=H, **other)[0] - Y)) > 1e-9


def _mlp_to_width(p, width):
    """The block's MLP with ``down`` mapping to ``width`` features instead of D."""
    down = {"W": p["mlp"]["down"]["W"][:, :width], "b": p["mlp"]["down"]["b"][:width]}
    return {**p, "mlp": {**p["mlp"], "down": down}}


@pytest.mark.parametrize("call, message", [
    (lambda p, X: init_block(np.random.default_rng(0), 0, heads=1),
     r"^sizes must be positive integers: D=0 \(got D=0, heads=1, ratio=4\)"),
    (lambda p, X: init_block(np.random.default_rng(0), 6, heads=2, ratio=0),
     r"^sizes must be positive integers: ratio=0 \(got D=6, heads=2, ratio=0\)"),
    (lambda p, X: init_block(np.random.default_rng(0), 6, heads=4, d=2),
     "^D = 6 does not split into heads = 4 equal heads: give d and r"),
    (lambda p, X: init_block(np.random.default_rng(0), 6, heads=4, r=2),
     "^D = 6 does not split into heads = 4 equal heads: give d and r"),
    (lambda p, X: block_forward(_mlp_to_width(p, 4), X, heads=2),
     r"^W_down must have shape \(F, D\) with D=6 \(as in X\), got shape \(12, 4\)$"),
    (lambda p, X: block_backward({k: v for k, v in p.items() if k != "mlp"},
                                 block_forward(p, X, heads=2)[1], X),
     r"^block params lack \['mlp'\]"),
    (lambda p, X: block_backward(p, block_forward(p, X, heads=2)[1],
                                 np.full(X.shape, "a")),
     "^dY must be an array of numbers"),
])
def test_more_bad_input_is_named(call, message):
    params, X, _ = case(11)
    with pytest.raises(ValueError, match=message):
        call(params, X)
