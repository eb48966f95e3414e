import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose

from attncourse.cross_entropy import cross_entropy, cross_entropy_backward
from attncourse.gradcheck import gradcheck
from attncourse.unembedding import unembedding_backward, unembedding_forward
from strategies import matrices

EPS = np.finfo(np.float64).eps


def test_forward_is_x_times_u():
    rng = np.random.default_rng(7)
    X, U = rng.normal(size=(5, 3)), rng.normal(size=(3, 8))
    assert_allclose(unembedding_forward(X, U), X @ U, rtol=0, atol=0)


def test_gradients_through_cross_entropy():
    rng = np.random.default_rng(8)
    B, D, n_vocab = 6, 3, 8
    X, U, y = rng.normal(size=(B, D)), rng.normal(size=(D, n_vocab)), rng.integers(0, n_vocab, size=B)
    dZ = cross_entropy_backward(unembedding_forward(X, U), y)
    dX, dU = unembedding_backward(X, U, dZ)
    assert dX.shape == (B, D) and dU.shape == (D, n_vocab)
    report = gradcheck(lambda X, U: cross_entropy(unembedding_forward(X, U), y), {"X": X, "U": U}, {"X": dX, "U": dU})
    assert report.passed, str(report)


def test_batched_gradient_of_u_sums_over_every_position():
    rng = np.random.default_rng(9)
    X, U, dZ = rng.normal(size=(2, 4, 3)), rng.normal(size=(3, 5)), rng.normal(size=(2, 4, 5))
    dX, dU = unembedding_backward(X, U, dZ)
    assert_allclose(dU, X[0].T @ dZ[0] + X[1].T @ dZ[1], rtol=1e-13, atol=1e-13)
    assert_allclose(dX, dZ @ U.T, rtol=0, atol=0)


def test_bad_input():
    with pytest.raises(ValueError, match=r"U must have one row per feature of X: X has shape \(4, 3\) \(D=3\), U has shape \(5, 7\)"):
        unembedding_forward(np.ones((4, 3)), np.ones((5, 7)))
    with pytest.raises(ValueError, match=r"U must be 2-D \(D, n_vocab\), got shape \(3,\)"):
        unembedding_forward(np.ones((4, 3)), np.ones(3))
    with pytest.raises(ValueError, match=r"dZ must have the shape of Z = X U, \(4, 5\), got \(5, 4\)"):
        unembedding_backward(np.ones((4, 3)), np.ones((3, 5)), np.ones((5, 4)))


@given(st.data(), st.integers(1, 4), st.integers(1, 4), st.integers(2, 5))
def test_gradients_match_finite_differences(data, B, D, n_vocab):
    X, U = data.draw(matrices((B, D), scale=2.0)), data.draw(matrices((D, n_vocab), scale=2.0))
    W = data.draw(matrices((B, n_vocab), scale=2.0))
    f = lambda X, U: float(np.sum(W * unembedding_forward(X, U)))  # noqa: E731  (J linear in Z: dZ = W)
    dX, dU = unembedding_backward(X, U, W)
    report = gradcheck(f, {"X": X, "U": U}, {"X": dX, "U": dU})
    assert report.passed, str(report)
