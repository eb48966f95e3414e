"""Tests of attncourse.loss: the mean cross-entropy, as a value and as a layer pair
without parameters."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

from attncourse.kit.faults.loss import (
    cross_entropy_backward_sum,
    cross_entropy_backward_wrong_sign,
    cross_entropy_naive,
)
from attncourse.loss import (
    REDUCTION,
    cross_entropy,
    cross_entropy_backward,
    cross_entropy_forward,
)
from attncourse.kit.gradients import layer_gradcheck
from strategies import matrices

EPS = np.finfo(np.float64).eps


def loss_gradient(Z, y):
    """``dZ`` of the mean loss (the objective itself: ``dloss = 1``)."""
    _, saved = cross_entropy_forward({}, Z, targets=y)
    dparams, dZ = cross_entropy_backward({}, saved, 1.0)
    assert dparams == {}
    return dZ


def check(Z, y, backward=cross_entropy_backward, **kwargs):
    return layer_gradcheck(cross_entropy_forward, backward, {}, Z, targets=y, **kwargs)


def test_known_values():
    z = np.log(np.array([1.0, 2.0, 3.0, 6.0]))  # p = (1, 2, 3, 6) / 12
    assert_allclose(cross_entropy(z, np.array(2)), np.log(4.0), rtol=4 * EPS)
    loss, saved = cross_entropy_forward({}, z, targets=np.array(2))
    assert loss == cross_entropy(z, np.array(2))
    assert_allclose(
        loss_gradient(z, np.array(2)), [1 / 12, 1 / 6, -3 / 4, 1 / 2], rtol=8 * EPS
    )
    assert REDUCTION == "mean"


def test_the_upstream_gradient_scales_dZ():
    rng = np.random.default_rng(4)
    Z, y = rng.normal(size=(3, 4)), np.array([1, 0, 3])
    _, saved = cross_entropy_forward({}, Z, targets=y)
    assert_allclose(
        cross_entropy_backward({}, saved, -2.5)[1],
        -2.5 * loss_gradient(Z, y),
        rtol=4 * EPS,
        atol=0,
    )
    assert_array_equal(cross_entropy_backward({}, saved, np.float64(0.0))[1], 0.0)


def test_mean_over_the_batch():
    rng = np.random.default_rng(5)
    Z, y = rng.normal(size=(3, 4)), np.array([0, 3, 3])
    per_example = [cross_entropy(Z[b], y[b]) for b in range(3)]
    assert_allclose(cross_entropy(Z, y), np.mean(per_example), rtol=4 * EPS)
    assert_allclose(
        cross_entropy(np.concatenate([Z, Z]), np.concatenate([y, y])),
        cross_entropy(Z, y),
        rtol=4 * EPS,
    )


def test_extreme_logits_give_finite_loss_and_gradient():
    Z = np.array([[1000.0, -1000.0, 0.0], [1000.0, -1000.0, 0.0]])
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        loss_right = cross_entropy(Z[:1], np.array([0]))
        loss_wrong = cross_entropy(Z[:1], np.array([1]))
        dZ = loss_gradient(Z, np.array([0, 1]))
    assert loss_right == 0.0 and loss_wrong == 2000.0
    assert_allclose(dZ, [[0.0, 0.0, 0.0], [0.5, -0.5, 0.0]], rtol=0, atol=0)
    # fault control: without the max subtraction the same loss is not finite
    assert not np.isfinite(cross_entropy_naive(Z[:1], np.array([1])))


def test_gradient_matches_finite_differences_batched():
    rng = np.random.default_rng(6)
    Z, y = rng.normal(size=(2, 3, 5)), rng.integers(0, 5, size=(2, 3))
    report = check(Z, y, dy=1.0)
    assert report.passed, report
    assert {name for name, _ in report.errors} == {"x"}
    assert check(Z, y, seed=3).passed  # any upstream gradient of the scalar loss


@pytest.mark.parametrize(
    "fault", [cross_entropy_backward_wrong_sign, cross_entropy_backward_sum]
)
def test_wrong_backward_passes_are_caught(fault):
    # fault control: the same forward with a backward of the wrong sign, or of the
    # summed loss
    rng = np.random.default_rng(7)
    Z, y = rng.normal(size=(4, 5)), rng.integers(0, 5, size=4)
    assert check(Z, y).passed
    assert not check(Z, y, backward=fault).passed


def test_bad_input():
    Z = np.zeros((4, 5))
    with pytest.raises(
        ValueError,
        match=r"^logits Z must have shape y.shape \+ \(n_vocab,\), n_vocab >= 1: got Z "
            r"of shape \(4, 5\), targets y of shape \(3,\)$",
    ):
        cross_entropy(Z, np.array([0, 1, 2]))
    with pytest.raises(
        ValueError,
        match=r"targets y out of range for a vocabulary of 5 tokens \(valid ids are "
            r"0..4\): \[5\]",
    ):
        cross_entropy_forward({}, Z, targets=np.array([0, 1, 5, 2]))
    with pytest.raises(ValueError, match="^no targets: the mean over an empty batch"):
        cross_entropy(np.zeros((0, 5)), np.zeros(0, dtype=int))
    with pytest.raises(ValueError, match="Z contains NaN or infinity"):
        cross_entropy(np.array([0.0, np.nan]), np.array(0))
    with pytest.raises(ValueError, match=r"n_vocab >= 1: got Z of shape \(\), targets"):
        cross_entropy(np.float64(0.0), np.array(0))
    with pytest.raises(ValueError, match="targets y must be integers"):
        cross_entropy(Z, np.zeros(4))
    with pytest.raises(ValueError, match=r"n_vocab >= 1: got Z of shape \(4, 0\), "):
        cross_entropy(np.zeros((4, 0)), np.zeros(4, dtype=int))


def test_bad_use_of_the_pair():
    Z, y = np.zeros((2, 3)), np.array([0, 2])
    with pytest.raises(
        ValueError,
        match=r"cross_entropy has no parameters; params must be \{\}, got keys \['W'\]",
    ):
        cross_entropy_forward({"W": np.ones(2)}, Z, targets=y)
    _, saved = cross_entropy_forward({}, Z, targets=y)
    with pytest.raises(
        ValueError,
        match=r"^dloss must have the shape of the loss \(a scalar\), \(\), got \(2,\)$",
    ):
        cross_entropy_backward({}, saved, np.ones(2))


def test_the_forward_saves_float_logits_and_int64_targets():
    _, saved = cross_entropy_forward({}, np.array([[1, 2, 3]]),
                                     targets=np.array([2], dtype=np.uint8))
    Z, y = saved["Z"], saved["targets"]
    assert Z.dtype == np.float64 and y.dtype == np.int64
    assert_array_equal(Z, [[1.0, 2.0, 3.0]])
    assert_array_equal(y, [2])


@given(st.data(), st.integers(1, 5), st.integers(2, 6))
def test_properties(data, B, n_vocab):
    Z = data.draw(matrices((B, n_vocab), scale=30.0))
    y = np.array(
        data.draw(st.lists(st.integers(0, n_vocab - 1), min_size=B, max_size=B))
    )
    loss = cross_entropy(Z, y)
    dZ = loss_gradient(Z, y)
    assert loss >= 0.0
    # shifting logits changes nothing
    assert_allclose(cross_entropy(Z - 123.0, y), loss, rtol=1e-12, atol=1e-12)
    assert_allclose(dZ.sum(axis=1), 0.0, rtol=0, atol=4 * n_vocab * EPS)
    # raising the target's logit never increases the loss
    assert np.all(dZ[np.arange(B), y] <= 0.0)
    scale = data.draw(st.floats(1e3, 1e300))
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        assert np.isfinite(cross_entropy(np.sign(Z) * scale, y))
        assert np.all(np.isfinite(loss_gradient(np.sign(Z) * scale, y)))


@given(st.data(), st.integers(1, 4), st.integers(2, 5))
def test_gradient_matches_finite_differences(data, B, n_vocab):
    Z = data.draw(matrices((B, n_vocab), scale=3.0))
    y = np.array(
        data.draw(st.lists(st.integers(0, n_vocab - 1), min_size=B, max_size=B))
    )
    report = check(Z, y, dy=1.0)
    assert report.passed, report
