"""Tests of attncourse.kit.examples: the worked examples, the transpose pair, the random
head, the probe."""

import math

import numpy as np
import pytest
from hypothesis import given
from numpy.testing import assert_allclose

from attncourse.kit.faults.attention import attention_forward_unscaled
from attncourse.layers.attention import attention_backward, attention_forward
from attncourse.layers.head import head_backward, head_forward, project
from attncourse.kit.gradients import numerical_gradient
from attncourse.kit.examples import (
    HeadExample,
    attention_objective,
    example1,
    example2,
    head_objective,
    probe_objective,
    random_head,
    transpose_pair,
)
from strategies import matrices

TIGHT = 64 * np.finfo(np.float64).eps
LN3 = math.log(3.0)


def test_example1_forward_values():
    ex = example1()
    assert all(m.dtype == np.float64 for m in ex)
    Q, K, V = project(ex.X, ex.W_Q, ex.W_K, ex.W_V)
    assert_allclose(Q, math.sqrt(2) * LN3 * np.eye(2), rtol=TIGHT)
    assert_allclose(K, np.eye(2))
    assert_allclose(V, [[2.0, 0.0], [0.0, 4.0]])
    O, saved = head_forward(ex.params, ex.X)
    A = saved["A"]
    assert_allclose(A, [[0.75, 0.25], [0.25, 0.75]], rtol=TIGHT, atol=TIGHT)
    assert_allclose(O, [[1.5, 1.0], [0.5, 3.0]], rtol=TIGHT, atol=TIGHT)
    assert probe_objective(O, ex.G) == pytest.approx(7.5, abs=TIGHT)
    assert head_objective(*ex) == pytest.approx(7.5, abs=TIGHT)


def test_example1_backward_values():
    ex = example1()
    Q, K, V = project(ex.X, ex.W_Q, ex.W_K, ex.W_V)
    dQ, dK, dV = attention_backward(attention_forward(Q, K, V)[1], ex.G)
    dS = np.array([[3 / 8, -3 / 8], [-3 / 2, 3 / 2]])
    assert_allclose(dV, [[0.75, 0.5], [0.25, 1.5]], rtol=TIGHT, atol=TIGHT)
    assert_allclose(dQ, dS / math.sqrt(2), rtol=TIGHT, atol=TIGHT)
    assert_allclose(dK, LN3 * dS.T, rtol=TIGHT, atol=TIGHT)
    _, saved = head_forward(ex.params, ex.X)
    _, dX = head_backward(ex.params, saved, ex.G)
    desired = [[1.5 + 3 * LN3 / 4, 2 - 15 * LN3 / 8], [0.5 - 15 * LN3 / 8, 6 + 3 * LN3]]
    assert_allclose(dX, desired, rtol=TIGHT, atol=TIGHT)


def test_example2_identical_keys():
    ex = example2()
    Q, K, V = project(ex.X, ex.W_Q, ex.W_K, ex.W_V)
    assert (K == 1.0).all()
    O, saved = attention_forward(Q, K, V)
    assert (saved.A == 0.5).all()
    assert (O == np.array([[1.0, 2.0], [1.0, 2.0]])).all()
    assert probe_objective(O, ex.G) == 5.0
    dQ, dK, _ = attention_backward(saved, ex.G)
    assert (dQ == 0.0).all()  # exactly
    assert_allclose(
        dK, [[LN3 / 2, -math.log(9)], [-LN3 / 2, math.log(9)]], rtol=TIGHT, atol=TIGHT
    )


def test_example2_differs_from_example1_only_in_W_K():
    e1, e2 = example1(), example2()
    for name in ("X", "W_Q", "W_V", "G"):
        assert (getattr(e1, name) == getattr(e2, name)).all()
    assert not np.array_equal(e1.W_K, e2.W_K)


def test_params_is_the_head_layer_dict():
    ex = random_head(seed=7)
    assert list(ex.params) == ["W_Q", "W_K", "W_V"]
    for name, W in ex.params.items():
        assert W is getattr(ex, name)
    assert head_objective(*ex) == probe_objective(
        head_forward(ex.params, ex.X)[0], ex.G
    )


def test_examples_return_fresh_arrays():
    ex = example1()
    ex.X[0, 0] = 99.0
    assert example1().X[0, 0] == 1.0


def test_transpose_pair_exposes_a_missing_transpose():
    Q, K = transpose_pair()
    # (2, 2) x (2, 2) -> (2, 2)
    assert (Q @ K.T == np.array([[1.0, 4.0], [0.0, 1.0]])).all()
    assert (Q @ K == np.array([[5.0, 2.0], [2.0, 1.0]])).all()
    assert not np.array_equal(K, K.T)


def test_random_head_is_seeded_non_square_and_float64():
    a, b, c = random_head(seed=3), random_head(seed=3), random_head(seed=4)
    for x, y in zip(a, b):
        assert_allclose(x, y, rtol=0, atol=0)
    assert not np.array_equal(a.X, c.X)
    assert [m.shape for m in a] == [(5, 7), (7, 3), (7, 3), (7, 4), (5, 4)]
    assert all(m.dtype == np.float64 for m in a)
    h = random_head(seed=0, T=2, D=6, d=4, r=3)
    assert isinstance(h, HeadExample) and h.W_V.shape == (6, 3) and h.G.shape == (2, 3)


@pytest.mark.parametrize("seed", [0, 1, 5])
def test_random_head_default_scale_is_not_saturated(seed):
    h = random_head(seed=seed)
    A = head_forward(h.params, h.X)[1]["A"]
    assert A.min() > 0.02 and A.max() < 0.9


def test_random_head_large_scale_saturates():
    h = random_head(seed=0, scale=40.0)
    A = head_forward(h.params, h.X)[1]["A"]
    assert A.max(axis=-1).min() > 1 - 1e-6


@pytest.mark.parametrize(
    "sizes, shown",
    [
        (dict(T=0), "T=0"),
        (dict(D=-1), "D=-1"),
        (dict(d=2.5), "d=2.5"),
        (dict(r=None), "r=None"),
        (dict(T=True), "T=True"),
    ],
)
def test_random_head_rejects_bad_sizes(sizes, shown):
    with pytest.raises(ValueError, match=f"sizes must be positive integers.*{shown}"):
        random_head(**sizes)


def test_probe_objective_rejects_mismatched_shapes():
    with pytest.raises(
        ValueError,
        match=r"O and G must have the same shape, got O \(2, 3\) and G \(3, 2\)",
    ):
        probe_objective(np.ones((2, 3)), np.ones((3, 2)))


@given(matrices((3, 4)), matrices((3, 4)))
def test_probe_objective_has_gradient_G(O, G):
    grad = numerical_gradient(lambda O_: probe_objective(O_, G), O, 1e-3)
    # J is linear in O: the difference quotient is exact up to rounding
    assert_allclose(grad, G, rtol=1e-9, atol=1e-9)


@given(matrices((2, 5)), matrices((2, 5)), matrices((2, 5)))
def test_probe_objective_is_linear(O1, O2, G):
    assert probe_objective(O1 + O2, G) == pytest.approx(
        probe_objective(O1, G) + probe_objective(O2, G), abs=1e-12
    )


def test_attention_objective_accepts_a_planted_forward():
    h = random_head(seed=2)
    Q, K, V = project(h.X, h.W_Q, h.W_K, h.W_V)
    J = attention_objective(Q, K, V, h.G)
    assert J == pytest.approx(
        probe_objective(attention_forward(Q, K, V)[0], h.G), abs=0
    )
    assert attention_objective(
        Q, K, V, h.G, forward=attention_forward_unscaled
    ) != pytest.approx(J)


def test_head_objective_matches_attention_objective():
    h = random_head(seed=6, T=4, D=5, d=2, r=3)
    Q, K, V = project(h.X, h.W_Q, h.W_K, h.W_V)
    assert head_objective(*h) == pytest.approx(
        attention_objective(Q, K, V, h.G), rel=TIGHT
    )
