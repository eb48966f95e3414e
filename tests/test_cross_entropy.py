import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose

from attncourse.cross_entropy import REDUCTION, check_cross_entropy, cross_entropy, cross_entropy_backward
from attncourse.gradcheck import gradcheck
from attncourse.softmax import softmax
from strategies import matrices

EPS = np.finfo(np.float64).eps


def reference(Z, y):
    return cross_entropy(Z, y), cross_entropy_backward(Z, y)


def test_known_values():
    z = np.log(np.array([1.0, 2.0, 3.0, 6.0]))  # p = (1, 2, 3, 6) / 12
    assert_allclose(cross_entropy(z, np.array(2)), np.log(4.0), rtol=4 * EPS)
    assert_allclose(cross_entropy_backward(z, np.array(2)), [1 / 12, 1 / 6, -3 / 4, 1 / 2], rtol=8 * EPS)
    assert REDUCTION == "mean"


def test_mean_over_the_batch():
    rng = np.random.default_rng(5)
    Z, y = rng.normal(size=(3, 4)), np.array([0, 3, 3])
    per_example = [cross_entropy(Z[b], y[b]) for b in range(3)]
    assert_allclose(cross_entropy(Z, y), np.mean(per_example), rtol=4 * EPS)
    assert_allclose(cross_entropy(np.concatenate([Z, Z]), np.concatenate([y, y])), cross_entropy(Z, y), rtol=4 * EPS)


def test_extreme_logits_give_finite_loss_and_gradient():
    Z = np.array([[1000.0, -1000.0, 0.0], [1000.0, -1000.0, 0.0]])
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        loss_right = cross_entropy(Z[:1], np.array([0]))
        loss_wrong = cross_entropy(Z[:1], np.array([1]))
        dZ = cross_entropy_backward(Z, np.array([0, 1]))
    assert loss_right == 0.0 and loss_wrong == 2000.0
    assert_allclose(dZ, [[0.0, 0.0, 0.0], [0.5, -0.5, 0.0]], rtol=0, atol=0)


def test_gradient_matches_finite_differences_batched():
    rng = np.random.default_rng(6)
    Z, y = rng.normal(size=(2, 3, 5)), rng.integers(0, 5, size=(2, 3))
    report = gradcheck(lambda Z: cross_entropy(Z, y), {"Z": Z}, {"Z": cross_entropy_backward(Z, y)})
    assert report.passed, str(report)


def test_bad_input():
    Z = np.zeros((4, 5))
    with pytest.raises(ValueError, match=r"y must have shape Z.shape\[:-1\] = \(4,\), got y of shape \(3,\)"):
        cross_entropy(Z, np.array([0, 1, 2]))
    with pytest.raises(ValueError, match=r"targets y out of range for a vocabulary of 5 tokens \(valid ids are 0..4\): \[5\]"):
        cross_entropy_backward(Z, np.array([0, 1, 5, 2]))
    with pytest.raises(ValueError, match="empty batch"):
        cross_entropy(np.zeros((0, 5)), np.zeros(0, dtype=int))
    with pytest.raises(ValueError, match="Z contains NaN or infinity"):
        cross_entropy(np.array([0.0, np.nan]), np.array(0))
    with pytest.raises(ValueError, match=r"non-empty last axis of logits, got shape \(\)"):
        cross_entropy(np.float64(0.0), np.array(0))
    with pytest.raises(ValueError, match="targets y must be integers"):
        cross_entropy(Z, np.zeros(4))


def test_checker_passes_the_reference_and_names_failures():
    assert len(check_cross_entropy(reference)) == 7
    with pytest.raises(AssertionError, match="^loss is the mean of -log p_y"):
        check_cross_entropy(lambda Z, y: (cross_entropy(Z, y) + 1.0, cross_entropy_backward(Z, y)))
    with pytest.raises(AssertionError, match="^mean over the batch"):
        check_cross_entropy(lambda Z, y: (cross_entropy(Z, y) * y.size / 4, cross_entropy_backward(Z, y)))
    with pytest.raises(AssertionError, match="^gradient has the shape of Z"):
        check_cross_entropy(lambda Z, y: (cross_entropy(Z, y), cross_entropy_backward(Z, y).T))
    with pytest.raises(AssertionError, match="^gradient rows sum to zero"):
        check_cross_entropy(lambda Z, y: (cross_entropy(Z, y), softmax(Z) / y.size))
    with pytest.raises(AssertionError, match="^gradient matches central differences"):
        check_cross_entropy(lambda Z, y: (cross_entropy(Z, y), -cross_entropy_backward(Z, y)))


@given(st.data(), st.integers(1, 5), st.integers(2, 6))
def test_properties(data, B, n_vocab):
    Z = data.draw(matrices((B, n_vocab), scale=30.0))
    y = np.array(data.draw(st.lists(st.integers(0, n_vocab - 1), min_size=B, max_size=B)))
    loss = cross_entropy(Z, y)
    dZ = cross_entropy_backward(Z, y)
    assert loss >= 0.0
    assert_allclose(cross_entropy(Z - 123.0, y), loss, rtol=1e-12, atol=1e-12)  # shifting logits changes nothing
    assert_allclose(dZ.sum(axis=1), 0.0, rtol=0, atol=4 * n_vocab * EPS)
    assert np.all(dZ[np.arange(B), y] <= 0.0)  # raising the target's logit never increases the loss
    scale = data.draw(st.floats(1e3, 1e300))
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        assert np.isfinite(cross_entropy(np.sign(Z) * scale, y))
        assert np.all(np.isfinite(cross_entropy_backward(np.sign(Z) * scale, y)))


@given(st.data(), st.integers(1, 4), st.integers(2, 5))
def test_gradient_matches_finite_differences(data, B, n_vocab):
    Z = data.draw(matrices((B, n_vocab), scale=3.0))
    y = np.array(data.draw(st.lists(st.integers(0, n_vocab - 1), min_size=B, max_size=B)))
    report = gradcheck(lambda Z: cross_entropy(Z, y), {"Z": Z}, {"Z": cross_entropy_backward(Z, y)})
    assert report.passed, str(report)
