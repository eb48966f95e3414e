import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose

from attncourse.gradcheck import STEPS, TOLERANCE, numerical_gradient
from attncourse.jacobian import check_softmax_jacobian, softmax_jacobian
from attncourse.softmax import softmax, softmax_backward
from strategies import matrices

EPS = np.finfo(np.float64).eps


def numeric_jacobian(z, h):
    """Row j is the central-difference gradient of softmax(z)_j."""
    return np.stack([numerical_gradient(lambda v, j=j: softmax(v)[j], z, h) for j in range(z.size)])


def test_known_value():
    # z = ln(1, 3): p = (1/4, 3/4), so every entry is +-(1/4)(3/4) = +-3/16
    assert_allclose(softmax_jacobian(np.log([1.0, 3.0])), [[3 / 16, -3 / 16], [-3 / 16, 3 / 16]], rtol=4 * EPS)


def test_matches_finite_differences_at_both_steps():
    z = np.random.default_rng(3).normal(size=6)
    for h in STEPS:
        assert np.max(np.abs(softmax_jacobian(z) - numeric_jacobian(z, h))) < TOLERANCE


def test_extreme_logits_are_finite():
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        J = softmax_jacobian(np.array([1000.0, -1000.0, 0.0]))
    assert np.all(J == 0.0)


def test_batched_and_bad_input():
    z = np.random.default_rng(4).normal(size=(2, 3, 5))
    J = softmax_jacobian(z)
    assert J.shape == (2, 3, 5, 5)
    assert_allclose(J[1, 2], softmax_jacobian(z[1, 2]), rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"at least one entry along its last axis, got shape \(\)"):
        softmax_jacobian(np.float64(1.0))
    with pytest.raises(ValueError, match=r"got shape \(3, 0\)"):
        softmax_jacobian(np.zeros((3, 0)))


def test_checker_passes_the_reference_and_names_failures():
    assert len(check_softmax_jacobian(softmax_jacobian)) == 5
    numerator_only = lambda z: np.diag(softmax(z))  # noqa: E731
    with pytest.raises(AssertionError, match="^rows sum to zero"):
        check_softmax_jacobian(numerator_only)
    with pytest.raises(AssertionError, match="^shape"):
        check_softmax_jacobian(lambda z: softmax(z))
    with pytest.raises(AssertionError, match="^matches central differences"):
        check_softmax_jacobian(lambda z: 2 * softmax_jacobian(z))
    naive = lambda z: (lambda p: np.diag(p) - np.outer(p, p))(np.exp(z) / np.exp(z).sum())  # noqa: E731
    with np.errstate(all="ignore"), pytest.raises(AssertionError, match="^finite for extreme logits"):
        check_softmax_jacobian(naive)


@given(st.data(), st.integers(1, 6))
def test_properties(data, n):
    z = data.draw(matrices((n,), scale=20.0))
    J = softmax_jacobian(z)
    assert_allclose(J, J.T, rtol=0, atol=0)
    assert_allclose(J.sum(axis=1), 0.0, rtol=0, atol=2 * n * EPS)
    assert_allclose(softmax_jacobian(z + 7.5), J, rtol=0, atol=64 * EPS)  # a shift of all logits changes nothing
    assert np.all(np.linalg.eigvalsh(J) > -16 * EPS)  # positive semi-definite
    g = data.draw(matrices((n,)))
    # the vector-Jacobian product is the package's softmax backward
    assert_allclose(J.T @ g, softmax_backward(softmax(z), g), rtol=0, atol=64 * EPS)  # (n, n) x (n,) -> (n,)
