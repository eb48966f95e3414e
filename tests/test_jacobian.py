import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose

from attncourse.faults import softmax_backward_numerator_only
from attncourse.gradcheck import STEPS, TOLERANCE, gradcheck
from attncourse.jacobian import check_softmax_jacobian, numerical_jacobian, softmax_jacobian
from attncourse.softmax import softmax, softmax_backward
from strategies import matrices

EPS = np.finfo(np.float64).eps


def test_known_value():
    # z = ln(1, 3): p = (1/4, 3/4), so every entry is +-(1/4)(3/4) = +-3/16
    assert_allclose(softmax_jacobian(np.log([1.0, 3.0])), [[3 / 16, -3 / 16], [-3 / 16, 3 / 16]], rtol=4 * EPS)


def test_matches_finite_differences_at_both_steps():
    z = np.random.default_rng(3).normal(size=6)
    for h in STEPS:
        assert np.max(np.abs(softmax_jacobian(z) - numerical_jacobian(softmax, z, h))) < TOLERANCE


def test_numerical_jacobian_of_a_non_square_map():
    A = np.random.default_rng(5).normal(size=(3, 4))
    z = np.random.default_rng(6).normal(size=4)
    J = numerical_jacobian(lambda v: np.tanh(A @ v), z, 1e-5)  # (3, 4) x (4,) -> (3,)
    assert J.shape == (3, 4)
    assert np.max(np.abs(J - (1 - np.tanh(A @ z)[:, None] ** 2) * A)) < TOLERANCE
    with pytest.raises(ValueError, match=r"z must be 1-D \(n,\), got shape \(2, 2\)"):
        numerical_jacobian(softmax, np.zeros((2, 2)), 1e-5)


def test_softmax_backward_is_the_jacobian_transpose_times_upstream_row_by_row():
    rng = np.random.default_rng(7)
    S, dA = rng.normal(size=(5, 7)), rng.normal(size=(5, 7))  # T = 5 rows of n = 7 entries
    A = softmax(S)
    by_jacobian = np.einsum("tjm,tj->tm", softmax_jacobian(S), dA)  # row t: J_t^T dA_t
    assert_allclose(softmax_backward(A, dA), by_jacobian, rtol=0, atol=16 * EPS)
    # and both are the gradient of J = sum(dA * softmax(S)); the numerator-only backward is not
    J = lambda S: float(np.sum(dA * softmax(S)))  # noqa: E731
    assert gradcheck(J, {"S": S}, {"S": softmax_backward(A, dA)}).passed
    faulty = gradcheck(J, {"S": S}, {"S": softmax_backward_numerator_only(A, dA)})
    assert not faulty.passed and faulty.worst > 1e3 * TOLERANCE


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
