import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose

from attncourse import attention_backward, attention_forward, gradcheck, head_backward, head_forward, project, projection_backward
from strategies import matrices

T, D, d, r = 5, 4, 3, 2  # unequal on purpose


def random_head(rng, batch=()):
    X = rng.normal(size=(*batch, T, D))
    W_Q, W_K, W_V = rng.normal(size=(D, d)), rng.normal(size=(D, d)), rng.normal(size=(D, r))
    G = rng.normal(size=(*batch, T, r))
    return X, W_Q, W_K, W_V, G


def objective(G):
    return lambda X, W_Q, W_K, W_V: float(np.sum(head_forward(X, W_Q, W_K, W_V)[0] * G))


def as_dict(grads):
    return {"X": grads.dX, "W_Q": grads.dW_Q, "W_K": grads.dW_K, "W_V": grads.dW_V}


def test_projections_and_forward():
    rng = np.random.default_rng(0)
    X, W_Q, W_K, W_V, _ = random_head(rng)
    Q, K, V = project(X, W_Q, W_K, W_V)
    assert (Q.shape, K.shape, V.shape) == ((T, d), (T, d), (T, r))
    O, A = head_forward(X, W_Q, W_K, W_V)
    O_ref, A_ref = attention_forward(X @ W_Q, X @ W_K, X @ W_V)
    assert_allclose(O, O_ref, rtol=1e-15)


@pytest.mark.parametrize("batch", [(), (3,), (2, 2)])
def test_all_gradients_match_finite_differences(batch):
    rng = np.random.default_rng(1)
    X, W_Q, W_K, W_V, G = random_head(rng, batch)
    grads = head_backward(X, W_Q, W_K, W_V, G)
    inputs = {"X": X, "W_Q": W_Q, "W_K": W_K, "W_V": W_V}
    report = gradcheck(objective(G), inputs, as_dict(grads))
    assert report.passed, report
    for name, value in inputs.items():
        assert as_dict(grads)[name].shape == value.shape


@pytest.mark.parametrize("kept", ["Q", "K", "V"])
def test_finite_differences_catch_a_dX_with_one_branch(kept):
    # fault control: dX must add the three branches; keeping any single one is caught
    rng = np.random.default_rng(2)
    X, W_Q, W_K, W_V, G = random_head(rng)
    grads = head_backward(X, W_Q, W_K, W_V, G)
    dQ, dK, dV = attention_backward(*project(X, W_Q, W_K, W_V), G)
    branch = {"Q": dQ @ W_Q.T, "K": dK @ W_K.T, "V": dV @ W_V.T}[kept]
    report = gradcheck(objective(G), {"X": X, "W_Q": W_Q, "W_K": W_K, "W_V": W_V}, {"X": branch})
    assert not report.passed
    assert gradcheck(objective(G), {"X": X, "W_Q": W_Q, "W_K": W_K, "W_V": W_V}, {"X": grads.dX}).passed


def test_projection_backward_sums_weight_gradient_over_the_batch():
    rng = np.random.default_rng(3)
    X, W, dY = rng.normal(size=(2, T, D)), rng.normal(size=(D, d)), rng.normal(size=(2, T, d))
    dX, dW = projection_backward(X, W, dY)
    assert_allclose(dW, X[0].T @ dY[0] + X[1].T @ dY[1], rtol=1e-14)
    assert_allclose(dX, dY @ W.T, rtol=1e-15)


@settings(max_examples=10)
@given(st.data(), st.integers(1, 4), st.integers(1, 4), st.integers(1, 3), st.integers(1, 3))
def test_gradients_property(data, T_, D_, d_, r_):
    X = data.draw(matrices((2, T_, D_), scale=1.0))
    W_Q, W_K = data.draw(matrices((D_, d_), scale=1.0)), data.draw(matrices((D_, d_), scale=1.0))
    W_V = data.draw(matrices((D_, r_), scale=1.0))
    G = data.draw(matrices((2, T_, r_), scale=1.0))
    grads = head_backward(X, W_Q, W_K, W_V, G)
    report = gradcheck(objective(G), {"X": X, "W_Q": W_Q, "W_K": W_K, "W_V": W_V}, as_dict(grads))
    assert report.passed, report


@pytest.mark.parametrize(
    "shapes, message",
    [
        (((T, D), (D + 1, d), (D, d), (D, r)), r"W_Q must have one row per input feature: X has shape \(5, 4\) \(D=4\), W_Q has shape \(5, 3\)"),
        (((T, D), (D, d), (D, d + 1), (D, r)), r"W_Q and W_K must share the key width d: W_Q \(4, 3\), W_K \(4, 4\)"),
        (((T, D), (D, d), (D, d), (D,)), r"W_V must be 2-D \(D, width\), got shape \(4,\)"),
        (((D,), (D, d), (D, d), (D, r)), r"X must be at least 2-D"),
    ],
)
def test_bad_shapes_are_named(shapes, message):
    arrays = [np.ones(s) for s in shapes]
    with pytest.raises(ValueError, match=message):
        head_forward(*arrays)
    with pytest.raises(ValueError, match=message):
        head_backward(*arrays, np.ones((T, r)))
