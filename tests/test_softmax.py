import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

from attncourse import gradcheck, logsumexp, softmax, softmax_backward
from strategies import matrices, sizes

EPS = np.finfo(np.float64).eps


def test_known_row():
    # softmax([0, ln 3]) = [1/4, 3/4]
    assert_allclose(softmax(np.array([[0.0, np.log(3.0)]])), [[0.25, 0.75]], rtol=4 * EPS)


def test_extreme_scores_are_finite():
    S = np.array([[1e4, -1e4, 0.0], [-1e4, -1e4, -1e4], [1e300, 1e300, -1e300]])
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        A = softmax(S)
    assert np.all(np.isfinite(A))
    assert_allclose(A, [[1, 0, 0], [1 / 3, 1 / 3, 1 / 3], [0.5, 0.5, 0]], rtol=4 * EPS)


def test_naive_softmax_overflows():
    # fault control for the max subtraction: without it exp(1e4) overflows to inf and inf/inf = NaN
    S = np.array([1e4, 0.0])
    with np.errstate(over="ignore", invalid="ignore"):
        naive = np.exp(S) / np.exp(S).sum()
    assert np.isnan(naive).any()
    assert np.all(np.isfinite(softmax(S)))


def test_hidden_entries_get_exactly_zero_and_empty_rows_are_zero():
    S = np.array([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    visible = np.array([[True, False, True], [False, False, False]])
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        A = softmax(S, visible)
    assert A[0, 1] == 0.0
    assert_array_equal(A[1], [0.0, 0.0, 0.0])
    assert_allclose(A[0].sum(), 1.0, rtol=4 * EPS)
    assert_allclose(A[0, [0, 2]], softmax(S[0, [0, 2]]), rtol=4 * EPS)


def test_logsumexp_is_stable_and_matches_definition():
    assert_allclose(logsumexp(np.array([1000.0, 1000.0])), 1000.0 + np.log(2.0), rtol=4 * EPS)
    z = np.random.default_rng(0).normal(size=(3, 5))
    assert_allclose(logsumexp(z), np.log(np.exp(z).sum(-1)), rtol=8 * EPS)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        assert logsumexp(np.array([1.0, 2.0]), visible=np.array([False, False])) == -np.inf


@given(st.data(), sizes, sizes)
def test_rows_are_distributions(data, T, n):
    S = data.draw(matrices((T, n), scale=50.0))
    A = softmax(S)
    assert np.all(A >= 0)
    assert_allclose(A.sum(axis=-1), 1.0, rtol=0, atol=n * EPS)


@given(st.data(), sizes, sizes, st.floats(-100, 100))
def test_shift_invariance(data, T, n, c):
    S = data.draw(matrices((T, n)))
    assert_allclose(softmax(S + c), softmax(S), rtol=0, atol=1e-13)


@given(st.data(), sizes, sizes)
def test_backward_rows_sum_to_zero(data, T, n):
    S = data.draw(matrices((T, n)))
    dA = data.draw(matrices((T, n)))
    dS = softmax_backward(softmax(S), dA)
    assert_allclose(dS.sum(axis=-1), 0.0, atol=1e-13)


def test_backward_matches_jacobian_and_finite_differences():
    rng = np.random.default_rng(1)
    S, dA = rng.normal(size=(3, 5)), rng.normal(size=(3, 5))
    A = softmax(S)
    dS = softmax_backward(A, dA)
    for i in range(3):
        jacobian = np.diag(A[i]) - np.outer(A[i], A[i])
        assert_allclose(dS[i], jacobian.T @ dA[i], rtol=1e-13, atol=1e-15)
    report = gradcheck(lambda S: float(np.sum(softmax(S) * dA)), {"S": S}, {"S": dS})
    assert report.passed, report


def test_numerator_only_backward_is_caught():
    # fault control: dropping the denominator path (dS = A * dA) fails both checks above
    rng = np.random.default_rng(2)
    S, dA = rng.normal(size=(3, 5)), rng.normal(size=(3, 5))
    wrong = softmax(S) * dA
    assert np.max(np.abs(wrong.sum(axis=-1))) > 1e-3
    assert not gradcheck(lambda S: float(np.sum(softmax(S) * dA)), {"S": S}, {"S": wrong}).passed


def test_backward_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match=r"A \(2, 3\) and dA \(3, 2\)"):
        softmax_backward(np.ones((2, 3)) / 3, np.ones((3, 2)))
