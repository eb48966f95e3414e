"""Tests of attncourse.optim: AdamW as pure functions, clipping, the schedule; the
planted mistakes of attncourse.kit.faults.optim shown caught."""

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

from attncourse.kit.faults import optim as fo
from attncourse.model import ModelConfig, init_model
from attncourse.optim import (adamw_init, adamw_step, clip_by_global_norm, decays,
                              global_norm, lr_at)
from attncourse.params import flatten_params, unflatten_params
from attncourse.kit import CheckFailed
from strategies import matrices


def nested(seed=0, dtype=np.float64):
    """Nested like a model: matrices, a gain, a bias in a list of dicts."""
    rng = np.random.default_rng(seed)
    tree = {"embed": {"E": rng.normal(size=(5, 3))},
            "blocks": [{"ln": {"gamma": rng.uniform(0.5, 1.5, size=3)},
                        "mlp": {"W": rng.normal(size=(3, 4)),
                                "b": rng.normal(size=4)}}]}
    return unflatten_params(
        {k: v.astype(dtype) for k, v in flatten_params(tree).items()}, tree)


def flat(tree):
    return flatten_params(tree)


def copy(tree):
    return unflatten_params({k: np.array(v, copy=True) for k, v in flat(tree).items()},
                            tree)


def by_formula(p, g, m, v, t, lr, b1=0.9, b2=0.999, eps=1e-8, wd=0.0):
    """One AdamW step of one array, written out (float64)."""
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g ** 2
    m_hat, v_hat = m / (1 - b1 ** t), v / (1 - b2 ** t)
    return p - lr * (m_hat / (np.sqrt(v_hat) + eps) + wd * p), m, v


# --- adamw_init -----------------------------------------------------------------------


def test_init_gives_step_zero_and_zero_moments_nested_like_params():
    params = nested()
    state = adamw_init(params)
    assert state["step"] == 0
    for name in ("m", "v"):
        assert list(flat(state[name])) == list(flat(params))
        for path, z in flat(state[name]).items():
            assert z.shape == flat(params)[path].shape and not z.any()
    # m and v are separate arrays: writing one cannot change the other
    assert not np.shares_memory(state["m"]["embed"]["E"], state["v"]["embed"]["E"])


def test_init_rejects_integer_parameters():
    with pytest.raises(ValueError, match=r"^params\['blocks.0.W'\] must be a float "
                                         r"array, got dtype int64$"):
        adamw_init({"blocks": [{"W": np.ones((2, 2), dtype=np.int64)}]})


# --- adamw_step: the formula ----------------------------------------------------------


def test_three_steps_equal_the_formula_written_out_on_every_array():
    params, state = nested(0), None
    state = adamw_init(params)
    expected = {k: (p, np.zeros_like(p), np.zeros_like(p))
                for k, p in flat(params).items()}
    for t in range(1, 4):
        grads = nested(10 + t)
        params, state = adamw_step(params, grads, state, lr=0.05, weight_decay=0.2)
        for path, (p, m, v) in expected.items():
            wd = 0.2 if p.ndim >= 2 else 0.0
            expected[path] = by_formula(p, flat(grads)[path], m, v, t, 0.05, wd=wd)
    assert state["step"] == 3
    for path, (p, m, v) in expected.items():
        assert_allclose(flat(params)[path], p, rtol=1e-13, atol=1e-15)
        assert_allclose(flat(state["m"])[path], m, rtol=1e-13, atol=1e-15)
        assert_allclose(flat(state["v"])[path], v, rtol=1e-13, atol=1e-15)


@given(matrices((3, 4), scale=100.0))
def test_the_first_step_moves_each_coordinate_by_lr_whatever_the_gradient_scale(g):
    p = {"W": np.ones((3, 4))}
    new, _ = adamw_step(p, {"W": g}, adamw_init(p), lr=0.01)
    # bias correction: m_hat = g and v_hat = g^2 at t = 1
    assert_allclose(new["W"], 1.0 - 0.01 * g / (np.abs(g) + 1e-8), rtol=1e-14)


def test_a_constant_gradient_gives_steps_of_lr_from_the_first_step_on():
    # the bias correction undoes the zero start: m_hat = g, v_hat = g^2 for every t
    p = {"W": np.zeros((2, 3))}
    g = {"W": np.array([[1e-3, -2.0, 50.0], [0.5, -7.0, 3.0]])}
    state = adamw_init(p)
    for t in range(1, 6):
        p, state = adamw_step(p, g, state, lr=0.1)
        step = g["W"] / (np.abs(g["W"]) + 1e-8)  # sign(g), to eps
        assert_allclose(p["W"], -0.1 * t * step, rtol=1e-12)


def test_bias_correction_against_the_factors_of_the_zero_start():
    g = {"W": np.array([[2.0, -3.0]])}
    p = {"W": np.zeros((1, 2))}
    _, state = adamw_step(p, g, adamw_init(p), lr=0.1)
    _, state = adamw_step(p, g, state, lr=0.1)
    # for a stationary gradient E[m_t] = (1 - b1^t) g, E[v_t] = (1 - b2^t) g^2
    assert_allclose(state["m"]["W"], (1 - 0.9 ** 2) * g["W"], rtol=1e-15)
    # (1 - 0.999^2 cancels: a float64 rounding of 0.999^2 is 1e-13 of the result)
    assert_allclose(state["v"]["W"], (1 - 0.999 ** 2) * g["W"] ** 2, rtol=1e-12)


def test_weight_decay_is_decoupled_from_the_moments():
    params, grads = nested(1), nested(2)
    plain, s0 = adamw_step(params, grads, adamw_init(params), lr=0.1)
    decayed, s1 = adamw_step(params, grads, adamw_init(params), lr=0.1,
                             weight_decay=0.3)
    for path, p in flat(params).items():
        shift = flat(decayed)[path] - flat(plain)[path]
        want = -0.1 * 0.3 * p if p.ndim >= 2 else np.zeros_like(p)
        assert_allclose(shift, want, rtol=1e-12, atol=1e-15)
        for name in ("m", "v"):
            assert_array_equal(flat(s1[name])[path], flat(s0[name])[path])


def test_l2_in_the_gradient_differs_where_gradients_differ_in_scale():
    # the reason for decoupling: Adam rescales an L2 term by 1 / sqrt(v_hat)
    p = {"W": np.array([[1.0, 1.0]])}
    g = {"W": np.array([[100.0, 0.0]])}
    good, _ = adamw_step(p, g, adamw_init(p), lr=0.01, weight_decay=0.1)
    bad, _ = fo.adamw_l2_in_gradient(p, g, adamw_init(p), lr=0.01, weight_decay=0.1)
    # decoupled: each coordinate decays by lr wd p = 1e-3 besides its Adam step
    assert_allclose(good["W"], [[1.0 - 0.01 - 1e-3, 1.0 - 1e-3]], rtol=1e-9)
    # L2: beside g = 100 the decay vanishes in the normalised step (moves by lr);
    # alone (g = 0) it is normalised to a full step of lr, ten times lr wd p
    assert_allclose(bad["W"], [[1.0 - 0.01, 1.0 - 0.01]], rtol=1e-8)  # eps / 0.1


def test_the_default_rule_decays_the_matrices_of_the_model_and_nothing_else():
    params = init_model(ModelConfig(n_vocab=7, T_max=6, D=4, heads=2, layers=2))
    rule = {path: decays(path, p) for path, p in flat(params).items()}
    assert {path for path, d in rule.items() if d} == {
        "embed.E", "pos.P", "unembed.W",
        *(f"blocks.{i}.{name}" for i in range(2) for name in (
            "attn.W_Q", "attn.W_K", "attn.W_V", "attn.W_O", "mlp.up.W", "mlp.down.W"))}
    assert all(path.endswith(("gamma", "beta", ".b")) for path, d in rule.items()
               if not d)


def test_gains_and_biases_are_not_decayed_and_a_custom_rule_is_followed():
    params = nested(3)
    zero = unflatten_params({k: np.zeros_like(v) for k, v in flat(params).items()},
                            params)
    new, _ = adamw_step(params, zero, adamw_init(params), lr=0.1, weight_decay=0.5)
    for path, p in flat(params).items():
        assert_allclose(flat(new)[path], p * 0.95 if p.ndim >= 2 else p, rtol=1e-15)
    only_gamma, _ = adamw_step(params, zero, adamw_init(params), lr=0.1,
                               weight_decay=0.5,
                               decay=lambda path, a: path.endswith("gamma"))
    for path, p in flat(params).items():
        assert_allclose(flat(only_gamma)[path],
                        p * 0.95 if path.endswith("gamma") else p, rtol=1e-15)


def test_the_step_is_pure():
    params, grads = nested(4), nested(5)
    state = adamw_step(params, grads, adamw_init(params), lr=0.1)[1]
    before = [copy(t) for t in (params, grads, state["m"], state["v"])]
    new, new_state = adamw_step(params, grads, state, lr=0.1, weight_decay=0.1)
    for tree, kept in zip((params, grads, state["m"], state["v"]), before):
        for path, value in flat(tree).items():
            assert_array_equal(value, flat(kept)[path])
    assert state["step"] == 1 and new_state["step"] == 2
    assert not np.shares_memory(new["embed"]["E"], params["embed"]["E"])


def test_float32_parameters_stay_float32():
    params = nested(6, dtype=np.float32)
    grads = nested(7)  # float64 gradients
    new, state = adamw_step(params, grads, adamw_init(params), lr=0.1,
                            weight_decay=0.1)
    assert {v.dtype for v in flat(new).values()} == {np.dtype(np.float32)}
    assert {v.dtype for v in flat(state["m"]).values()} == {np.dtype(np.float32)}
    ref, _ = adamw_step(nested(6), nested(7), adamw_init(nested(6)), lr=0.1,
                        weight_decay=0.1)
    for path, value in flat(new).items():
        assert_allclose(value, flat(ref)[path], rtol=1e-5, atol=1e-6)


def test_the_nesting_of_lists_and_tuples_is_kept():
    params = {"blocks": ({"W": np.ones((2, 2))}, {"W": np.ones((2, 2))})}
    new, state = adamw_step(params, params, adamw_init(params), lr=0.1)
    assert isinstance(new["blocks"], tuple) and isinstance(state["m"]["blocks"], tuple)


def test_a_step_at_lr_0_leaves_every_parameter_and_still_updates_the_moments():
    # the cosine schedule ends at lr = 0, and the decoupled decay is scaled by lr too:
    # the last step of a run changes no parameter, decayed matrices included
    assert lr_at(10, lr=0.1, warmup=2, total=10) == 0.0
    params, grads = nested(11), nested(12)
    state = adamw_step(params, nested(13), adamw_init(params), lr=0.1)[1]
    new, new_state = adamw_step(params, grads, state, lr=0.0, weight_decay=0.5)
    for path, p in flat(params).items():
        assert_array_equal(flat(new)[path], p, err_msg=path)
        _, m, v = by_formula(p, flat(grads)[path], flat(state["m"])[path],
                             flat(state["v"])[path], 2, lr=0.0)
        assert_allclose(flat(new_state["m"])[path], m, rtol=1e-15, atol=0)
        assert_allclose(flat(new_state["v"])[path], v, rtol=1e-15, atol=0)
    assert new_state["step"] == 2
    # ... while any lr > 0 moves them: the test is not blind
    moved, _ = adamw_step(params, grads, state, lr=1e-3, weight_decay=0.5)
    assert all(np.all(flat(moved)[k] != p) for k, p in flat(params).items())


# --- adamw_step: bad input ------------------------------------------------------------


@pytest.mark.parametrize("kwargs, message", [
    ({"lr": -0.1}, r"^lr must be a finite number in \[0, inf\), got -0.1$"),
    ({"lr": float("nan")}, r"^lr must be a finite number in \[0, inf\), got nan$"),
    ({"lr": True}, r"^lr must be a finite number in \[0, inf\), got True$"),
    ({"lr": 0.1, "betas": (0.9, 1.0)},
     r"^betas\[1\] must be a finite number in \[0, 1\), got 1.0$"),
    ({"lr": 0.1, "betas": (-0.1, 0.9)},
     r"^betas\[0\] must be a finite number in \[0, 1\), got -0.1$"),
    ({"lr": 0.1, "betas": 0.9}, r"betas must be a pair \(b1, b2\), got 0.9"),
    ({"lr": 0.1, "eps": 0.0}, r"^eps must be a finite number in \(0, inf\), got 0.0$"),
    ({"lr": 0.1, "weight_decay": -1.0},
     r"^weight_decay must be a finite number in \[0, inf\), got -1.0$"),
    ({"lr": 0.1, "decay": "matrices"},
     r"^decay must be None or a callable, got 'matrices'$"),
    ({"lr": 0.1, "weight_decay": 0.1, "decay": lambda path, a: a.ndim},
     r"^decay\('W', array\) must be True or False, got 2$"),
])
def test_bad_hyperparameters_are_named(kwargs, message):
    params = {"W": np.ones((2, 3)), "b": np.ones(3)}
    with pytest.raises(ValueError, match=message):
        adamw_step(params, params, adamw_init(params), **kwargs)


def test_grads_and_state_that_do_not_match_params_name_the_dotted_path():
    params = nested()
    grads = copy(params)
    del grads["blocks"][0]["mlp"]["b"]
    with pytest.raises(ValueError, match=r"grads must nest like params: it lacks "
                                         r"\['blocks.0.mlp.b'\] and has extra \[\]"):
        adamw_step(params, grads, adamw_init(params), lr=0.1)
    grads = copy(params)
    grads["blocks"][0]["mlp"]["W"] = grads["blocks"][0]["mlp"]["W"].T
    message = (r"grads\['blocks.0.mlp.W'\] has shape \(4, 3\), "
               r"params\['blocks.0.mlp.W'\] has \(3, 4\)")
    with pytest.raises(ValueError, match=message):
        adamw_step(params, grads, adamw_init(params), lr=0.1)
    with pytest.raises(ValueError, match=r"state must be a dict with keys 'step', 'm', "
                                         r"'v' \(from adamw_init\), got \['m', 'v'\]"):
        adamw_step(params, params, {"m": params, "v": params}, lr=0.1)
    state = dict(adamw_init(params), step=-1)
    with pytest.raises(ValueError, match=r"state\['step'\] must be an integer in "
                                         r"\[0, inf\), got -1$"):
        adamw_step(params, params, state, lr=0.1)
    state = dict(adamw_init(params), v=adamw_init(nested())["v"]["blocks"])
    with pytest.raises(ValueError, match=r"state\['v'\] must nest like params"):
        adamw_step(params, params, state, lr=0.1)
    with pytest.raises(ValueError, match=r"grads\['embed.E'\] must be an array of "
                                         r"numbers, got dtype <U1"):
        adamw_step({"embed": {"E": np.ones(1)}}, {"embed": {"E": np.array(["a"])}},
                   adamw_init({"embed": {"E": np.ones(1)}}), lr=0.1)


# --- the planted mistakes -------------------------------------------------------------


def test_no_bias_correction_makes_the_first_step_3_16_times_too_long():
    p, g = {"W": np.zeros((1, 2))}, {"W": np.array([[4.0, -0.5]])}
    bad, _ = fo.adamw_no_bias_correction(p, g, adamw_init(p), lr=0.1)
    ratio = (1 - 0.9) / math.sqrt(1 - 0.999)
    assert_allclose(bad["W"], -0.1 * ratio * np.sign(g["W"]), rtol=1e-6)
    assert 3.16 < ratio < 3.17


def test_decaying_gains_shrinks_them_with_zero_gradient():
    p = {"gamma": np.ones(3), "W": np.ones((3, 2))}
    zero = {"gamma": np.zeros(3), "W": np.zeros((3, 2))}
    bad, _ = fo.adamw_decays_gains(p, zero, adamw_init(p), lr=0.1, weight_decay=0.5)
    assert_allclose(bad["gamma"], 0.95)
    good, _ = adamw_step(p, zero, adamw_init(p), lr=0.1, weight_decay=0.5)
    assert_array_equal(good["gamma"], 1.0)


def test_the_in_place_step_moves_the_callers_arrays():
    params, grads = nested(8), nested(9)
    kept = copy(params)
    state = adamw_init(params)
    new, new_state = fo.adamw_in_place(params, grads, state, lr=0.1)
    assert new is params and new_state is state and state["step"] == 1
    assert not np.array_equal(params["embed"]["E"], kept["embed"]["E"])
    right, _ = adamw_step(kept, grads, adamw_init(kept), lr=0.1)
    assert_allclose(new["embed"]["E"], right["embed"]["E"], rtol=1e-15)


@pytest.mark.parametrize("fault, property", [
    ("adamw_no_bias_correction", "bias correction"),
    ("adamw_l2_in_gradient", "decoupled weight decay"),
    ("adamw_decays_gains", "which parameters decay"),
    ("adamw_in_place", "purity"),
])
def test_each_adamw_fault_is_named_by_the_learner_checker(fault, property):
    with pytest.raises(CheckFailed) as info:
        fo.CHECKS["learner checker"].run(getattr(fo, fault))
    assert info.value.property == property and info.value.fix


@pytest.mark.parametrize("fault", ["adamw_no_bias_correction", "adamw_l2_in_gradient",
                                   "adamw_decays_gains"])
def test_the_exact_check_sees_each_value_fault_at_the_first_or_second_step(fault):
    with pytest.raises(CheckFailed, match=r"after step [12], params blocks.0.(W|gamma) "
                                          r"differs from the exact value by \d"):
        fo.CHECKS["three steps equal exact rationals"].run(getattr(fo, fault))


# --- the exact computation ------------------------------------------------------------


def test_the_exact_problem_keeps_v_hat_a_square_and_every_sign_clear_of_a_tie():
    steps = fo._exact_steps(3)
    b2 = Fraction(fo._EXACT_HYPER["betas"][1])
    start = flat(fo._EXACT_START)
    for t, (p, _, v) in enumerate(steps, start=1):
        for path, values in v.items():
            weights = fo._EXACT_WEIGHT[path].ravel()
            for value, w in zip(values, weights):
                assert value / (1 - b2 ** t) == Fraction(w) ** 2
    points = [{k: [Fraction(x) for x in a.ravel()] for k, a in start.items()}]
    points += [p for p, _, _ in steps[:-1]]  # where the three gradients are taken
    margin = min(abs(x - Fraction(c)) for p in points for path, xs in p.items()
                 for x, c in zip(xs, fo._EXACT_TARGET[path].ravel()))
    assert margin > Fraction(19, 1000)
    # the signs change along the path, so m_hat is not a constant multiple of g
    targets = fo._EXACT_TARGET["blocks.0.W"].ravel()
    signs = {tuple(x > Fraction(c) for x, c in zip(p["blocks.0.W"], targets))
             for p in points}
    assert len(signs) == 3


def test_the_betas_of_the_exact_check_make_the_bias_factors_exact_in_float64():
    for b in fo._EXACT_HYPER["betas"]:
        for t in (1, 2, 3):
            assert Fraction(1 - b ** t) == 1 - Fraction(b) ** t
    # with the default b2 the factor 1 - b2^t is off by many ulps (cancellation)
    exact = 1 - Fraction(0.999) ** 2
    relative = abs(Fraction(1 - 0.999 ** 2) - exact) / exact
    assert relative > 50 * 2.0 ** -53


def test_the_exact_check_has_room_below_its_tolerance_on_the_package_step():
    params, state = copy(fo._EXACT_START), adamw_init(fo._EXACT_START)
    worst = 0.0
    for p, _, _ in fo._exact_steps(3):
        params, state = adamw_step(params, fo._l1_gradient(params), state,
                                   **fo._EXACT_HYPER)
        for path, values in flat(params).items():
            worst = max(worst, max(float(abs(Fraction(float(x)) - e))
                                   for x, e in zip(values.ravel(), p[path])))
    assert 0 < worst <= fo._EXACT_TOLERANCE / 2  # rounding is there, and well inside


def test_exact_sqrt_refuses_a_non_square():
    assert fo._exact_sqrt(Fraction(9, 16)) == Fraction(3, 4)
    with pytest.raises(ValueError, match="2 is not the square of a rational"):
        fo._exact_sqrt(Fraction(2))


# --- global_norm and clipping ---------------------------------------------------------


def test_global_norm_is_the_norm_of_all_coordinates_together():
    grads = nested(11)
    everything = np.concatenate([g.ravel() for g in flat(grads).values()])
    assert math.isclose(global_norm(grads), float(np.linalg.norm(everything)),
                        rel_tol=1e-14)
    assert global_norm({"W": np.zeros((2, 2))}) == 0.0 and global_norm({}) == 0.0
    assert global_norm({"W": np.array([1e-200, 1e-200])}) == pytest.approx(
        math.sqrt(2) * 1e-200, rel=1e-14)  # no underflow either
    assert math.isnan(global_norm({"a": np.array([1.0]), "b": np.array([np.nan])}))
    assert math.isnan(global_norm({"a": np.array([np.nan]), "b": np.array([1.0])}))
    assert global_norm({"a": np.array([np.inf, 1.0])}) == math.inf


@given(matrices((3, 4), scale=10.0), matrices((4,), scale=10.0),
       st.floats(0.01, 20.0))
def test_clipping_scales_every_array_by_one_factor(W, b, max_norm):
    grads = {"blocks": [{"W": W, "b": b}]}
    clipped, norm = clip_by_global_norm(grads, max_norm)
    assert norm == global_norm(grads)
    factor = min(1.0, max_norm / norm) if norm > 0 else 1.0
    assert_allclose(clipped["blocks"][0]["W"], W * factor, rtol=1e-15, atol=0)
    assert_allclose(clipped["blocks"][0]["b"], b * factor, rtol=1e-15, atol=0)
    assert global_norm(clipped) <= max_norm * (1 + 1e-12) or factor == 1.0


def test_clipping_below_the_threshold_returns_equal_new_arrays():
    grads = {"W": np.array([[0.3, -0.4]]), "b": np.zeros(2, dtype=np.float32)}
    clipped, norm = clip_by_global_norm(grads, max_norm=1.0)
    assert norm == pytest.approx(0.5, rel=1e-15)
    assert_array_equal(clipped["W"], grads["W"])
    assert clipped["W"] is not grads["W"] and clipped["b"].dtype == np.float32
    zero, norm = clip_by_global_norm({"W": np.zeros(3)}, max_norm=1.0)
    assert norm == 0.0 and not zero["W"].any()


def test_a_norm_below_one_is_clipped_too():
    # 0 < max_norm < norm < 1: the factor is max_norm / norm, not 1
    grads = {"W": np.array([[0.3, -0.4]]), "b": np.array([0, 0], dtype=np.int64)}
    clipped, norm = clip_by_global_norm(grads, max_norm=0.2)
    assert norm == pytest.approx(0.5, rel=1e-15)
    assert_allclose(clipped["W"], [[0.12, -0.16]], rtol=4 * np.finfo(float).eps)
    assert clipped["b"].dtype == np.float64 and not clipped["b"].any()
    assert global_norm(clipped) == pytest.approx(0.2, rel=1e-15)


def test_per_tensor_clipping_turns_the_gradient_and_one_array_hides_it():
    grads = {"a": np.array([3.0]), "b": np.array([4.0])}
    bad, norm = fo.clip_per_tensor(grads, max_norm=1.0)
    good, _ = clip_by_global_norm(grads, max_norm=1.0)
    assert norm == 5.0 and global_norm(bad) == pytest.approx(math.sqrt(2))
    assert bad["a"] / bad["b"] != grads["a"] / grads["b"]
    assert_allclose(good["a"] / good["b"], grads["a"] / grads["b"])
    # the blind spot of a one-array test: per tensor is global there
    one = {"W": np.array([[3.0, 4.0]])}
    assert_allclose(fo.clip_per_tensor(one, 1.0)[0]["W"],
                    clip_by_global_norm(one, 1.0)[0]["W"], rtol=1e-15)


@pytest.mark.parametrize("max_norm, message", [
    (0.0, r"^max_norm must be a finite number in \(0, inf\), got 0.0$"),
    (-1.0, r"^max_norm must be a finite number in \(0, inf\), got -1.0$"),
    (float("inf"), r"^max_norm must be a finite number in \(0, inf\), got inf$"),
    ("1", r"^max_norm must be a finite number in \(0, inf\), got '1'$"),
])
def test_clipping_rejects_a_bad_max_norm(max_norm, message):
    with pytest.raises(ValueError, match=message):
        clip_by_global_norm({"W": np.ones(2)}, max_norm)


def test_clipping_rejects_non_finite_gradients():
    with pytest.raises(ValueError, match=r"their global norm is inf"):
        clip_by_global_norm({"W": np.array([np.inf])}, 1.0)


# --- lr_at ----------------------------------------------------------------------------


def test_schedule_warms_up_linearly_then_follows_a_cosine_to_min_lr():
    lrs = [lr_at(s, lr=0.1, warmup=10, total=50, min_lr=0.01) for s in range(1, 51)]
    assert_allclose(lrs[:10], 0.1 * np.arange(1, 11) / 10, rtol=1e-15)
    assert lrs[9] == 0.1 and lrs[-1] == pytest.approx(0.01, rel=1e-15)
    assert np.all(np.diff(lrs[:10]) > 0) and np.all(np.diff(lrs[9:]) < 0)
    middle = lr_at(30, lr=0.1, warmup=10, total=50, min_lr=0.01)  # half-way down
    assert middle == pytest.approx((0.1 + 0.01) / 2, rel=1e-14)


@given(st.integers(1, 200), st.integers(0, 200), st.floats(0.0, 1.0))
def test_schedule_stays_between_min_lr_and_lr(step, warmup, fraction):
    total = max(step, warmup, 1)
    value = lr_at(step, lr=0.5, warmup=warmup, total=total, min_lr=0.5 * fraction)
    low = 0.5 * fraction if step > warmup else 0.0
    assert low - 1e-15 <= value <= 0.5


def test_schedule_without_warmup_and_with_warmup_only():
    assert lr_at(4, lr=1.0, warmup=0, total=4) == 0.0
    assert lr_at(1, lr=1.0, warmup=0, total=2) == pytest.approx(0.5)
    assert [lr_at(s, lr=1.0, warmup=2, total=2) for s in (1, 2)] == [0.5, 1.0]


@pytest.mark.parametrize("step, kwargs, message", [
    (0, {}, r"^step must be an integer in \[1, 10\], got 0$"),
    (1.0, {}, r"^step must be an integer in \[1, 10\], got 1.0$"),
    (11, {}, r"^step must be an integer in \[1, 10\], got 11$"),
    (1, {"warmup": 11}, r"^warmup must be an integer in \[0, 10\], got 11$"),
    (1, {"warmup": -1}, r"^warmup must be an integer in \[0, 10\], got -1$"),
    (1, {"total": 0}, r"^total must be an integer in \[1, inf\), got 0$"),
    (1, {"lr": -1.0}, r"^lr must be a finite number in \[0, inf\), got -1.0$"),
    (1, {"min_lr": 0.2}, r"^min_lr must be a finite number in \[0, 0.1\], got 0.2$"),
    (1, {"lr": float("inf")}, r"^lr must be a finite number in \[0, inf\), got inf$"),
])
def test_schedule_rejects_bad_arguments(step, kwargs, message):
    arguments = dict({"lr": 0.1, "warmup": 2, "total": 10}, **kwargs)
    with pytest.raises(ValueError, match=message):
        lr_at(step, **arguments)


# --- the edges found by mutation testing ----------------------------------------------


@pytest.mark.parametrize("kwargs, message", [
    ({"betas": (0.9, float("nan"))},
     r"^betas\[1\] must be a finite number in \[0, 1\), got nan$"),
    ({"eps": float("nan")}, r"^eps must be a finite number in \(0, inf\), got nan$"),
    ({"weight_decay": float("inf")},
     r"^weight_decay must be a finite number in \[0, inf\), got inf$"),
])
def test_a_non_finite_hyperparameter_is_named(kwargs, message):
    params = {"W": np.ones((2, 3))}
    with pytest.raises(ValueError, match=message):
        adamw_step(params, params, adamw_init(params), lr=0.1, **kwargs)


def test_betas_of_zero_are_allowed_and_forget_the_history():
    # 0 <= b < 1: with b1 = b2 = 0, m = g, v = g^2 and 1 - 0^t = 1 (no correction)
    p = {"W": np.array([[1.0, -2.0, 0.5]])}
    _, state = adamw_step(p, {"W": np.full((1, 3), 5.0)}, adamw_init(p), lr=0.1)
    g = {"W": np.array([[0.3, -4.0, 2.0]])}
    new, state = adamw_step(p, g, state, lr=0.1, betas=(0.0, 0.0))
    assert_array_equal(state["m"]["W"], g["W"])
    assert_array_equal(state["v"]["W"], g["W"] ** 2)
    assert_allclose(new["W"], p["W"] - 0.1 * g["W"] / (np.abs(g["W"]) + 1e-8),
                    rtol=1e-15)


def test_integer_params_and_a_bad_state_are_named():
    params = {"W": np.ones((2, 3))}
    state = adamw_init(params)
    with pytest.raises(ValueError, match=r"params\['W'\] must be a float array, got "
                                         r"dtype int"):
        adamw_step({"W": np.ones((2, 3), dtype=int)}, params, state, lr=0.1)
    # a tuple (step, m, v) is not the state: named by its type
    with pytest.raises(ValueError, match=r"\(from adamw_init\), got tuple$"):
        adamw_step(params, params, (0, state["m"], state["v"]), lr=0.1)
    with pytest.raises(ValueError, match=r"state\['m'\] must nest like params: it "
                                         r"lacks \['W'\] and has extra \['V'\]"):
        adamw_step(params, params, dict(state, m={"V": np.zeros((2, 3))}), lr=0.1)


def test_the_default_rule_needs_a_dotted_name():
    with pytest.raises(ValueError,
                       match=r"^path must be a dotted name \(str\), got 0$"):
        decays(0, np.zeros((2, 2)))


def test_global_norm_and_clipping_name_a_leaf_that_is_not_numbers():
    grads = {"W": np.ones(2), "blocks": [{"b": np.array(["x"])}]}
    for fn in (global_norm, lambda g: clip_by_global_norm(g, 1.0)):
        with pytest.raises(ValueError, match=r"grads\['blocks.0.b'\] must be an array "
                                             r"of numbers, got dtype <U1"):
            fn(grads)


def test_schedule_edges_lr_zero_min_lr_equal_to_lr_and_a_non_finite_min_lr():
    steps = range(1, 6)
    assert [lr_at(s, lr=0.0, warmup=2, total=5) for s in steps] == [0.0] * 5
    # min_lr = lr: warm-up, then flat (the cosine has nothing to descend)
    assert [lr_at(s, lr=0.1, warmup=2, total=5, min_lr=0.1) for s in steps] == [
        0.05, 0.1, 0.1, 0.1, 0.1]
    with pytest.raises(ValueError, match=r"^min_lr must be a finite number in "
                                         r"\[0, 0.1\], got nan$"):
        lr_at(1, lr=0.1, warmup=2, total=5, min_lr=float("nan"))
