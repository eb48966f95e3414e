"""Tests of attncourse.layers.head: one attention head with its projections, as a layer
pair."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose

from attncourse.kit.faults.head import head_backward_last_branch
from attncourse.layers.attention import (AttentionSaved, attention_backward,
                                         attention_forward)
from attncourse.layers.head import (
    PARAMETER_NAMES,
    PROJECTIONS,
    head_backward,
    head_forward,
    project,
)
from attncourse._validate import shaped
from attncourse.kit.gradients import layer_gradcheck
from strategies import matrices

T, D, d, r = 5, 4, 3, 2  # unequal on purpose


def random_head(rng, batch=()):
    X = rng.normal(size=(*batch, T, D))
    params = {
        "W_Q": rng.normal(size=(D, d)),
        "W_K": rng.normal(size=(D, d)),
        "W_V": rng.normal(size=(D, r)),
    }
    G = rng.normal(size=(*batch, T, r))
    return X, params, G


def failing(report):
    return {name for (name, _), err in report.errors.items() if err >= report.tolerance}


def test_projections_and_forward():
    rng = np.random.default_rng(0)
    X, params, _ = random_head(rng)
    Q, K, V = project(X, params["W_Q"], params["W_K"], params["W_V"])
    assert (Q.shape, K.shape, V.shape) == ((T, d), (T, d), (T, r))
    O, saved = head_forward(params, X)
    O_ref, saved_ref = attention_forward(
        X @ params["W_Q"], X @ params["W_K"], X @ params["W_V"]
    )
    assert_allclose(O, O_ref, rtol=1e-15)
    assert set(saved) == {"X", "Q", "K", "V", "A"}
    assert_allclose(saved["A"], saved_ref.A, rtol=1e-15)
    for name, value in (("Q", Q), ("K", K), ("V", V), ("X", X)):
        assert_allclose(saved[name], value, rtol=0, atol=0)
    assert PARAMETER_NAMES == ("W_Q", "W_K", "W_V")


@pytest.mark.parametrize("batch", [(), (3,), (2, 2)])
def test_all_gradients_match_finite_differences(batch):
    rng = np.random.default_rng(1)
    X, params, G = random_head(rng, batch)
    _, saved = head_forward(params, X)
    dparams, dX = head_backward(params, saved, G)
    report = layer_gradcheck(head_forward, head_backward, params, X, dy=G)
    assert report.passed, report
    assert {name for name, _ in report.errors} == {"W_Q", "W_K", "W_V", "x"}
    assert set(dparams) == set(params) and dX.shape == X.shape
    for name, value in params.items():
        assert dparams[name].shape == value.shape


@pytest.mark.parametrize("kept", ["Q", "K", "V"])
def test_finite_differences_catch_a_dX_with_one_branch(kept):
    # fault control: dX must add the three branches; keeping any single one is caught
    rng = np.random.default_rng(2)
    X, params, G = random_head(rng)

    def backward_one_branch(params, saved, G):
        dparams, _ = head_backward(params, saved, G)
        attention = AttentionSaved(*(saved[n] for n in AttentionSaved._fields))
        dQ, dK, dV = attention_backward(attention, G)
        branch = {
            "Q": dQ @ params["W_Q"].T,
            "K": dK @ params["W_K"].T,
            "V": dV @ params["W_V"].T,
        }[kept]
        return dparams, branch  # (T, w) x (w, D) -> (T, D)

    report = layer_gradcheck(head_forward, backward_one_branch, params, X, dy=G)
    assert not report.passed and failing(report) == {"x"}
    assert layer_gradcheck(head_forward, head_backward, params, X, dy=G).passed


def test_the_planted_last_branch_fault_is_caught_in_dX_only():
    rng = np.random.default_rng(4)
    X, params, G = random_head(rng, (2,))
    report = layer_gradcheck(head_forward, head_backward_last_branch, params, X, dy=G)
    assert not report.passed and failing(report) == {"x"}


@settings(max_examples=10)
@given(
    st.data(),
    st.integers(1, 4),
    st.integers(1, 4),
    st.integers(1, 3),
    st.integers(1, 3),
)
def test_gradients_property(data, T_, D_, d_, r_):
    X = data.draw(matrices((2, T_, D_), scale=1.0))
    W_Q, W_K = (
        data.draw(matrices((D_, d_), scale=1.0)),
        data.draw(matrices((D_, d_), scale=1.0)),
    )
    W_V = data.draw(matrices((D_, r_), scale=1.0))
    G = data.draw(matrices((2, T_, r_), scale=1.0))
    params = {"W_Q": W_Q, "W_K": W_K, "W_V": W_V}
    report = layer_gradcheck(head_forward, head_backward, params, X, dy=G)
    assert report.passed, report


@pytest.mark.parametrize(
    "shapes, message",
    [
        (
            ((T, D), (D + 1, d), (D, d), (D, r)),
            r"^W_Q must have shape \(D, d\) with D=4 \(as in X\), got shape \(5, 3\)$",
        ),
        (
            ((T, D), (D, d), (D, d + 1), (D, r)),
            r"^W_K must have shape \(D, d\) with d=3 \(as in W_Q\), got shape "
            r"\(4, 4\)$",
        ),
        (((T, D), (D, d), (D, d), (D,)), r"^W_V must have shape \(D, r\), got shape "
                                         r"\(4,\)$"),
        (((D,), (D, d), (D, d), (D, r)), r"^X must have shape \(\.\.\., T, D\), got "
                                         r"shape \(4,\)$"),
    ],
)
def test_bad_shapes_are_named(shapes, message):
    X, W_Q, W_K, W_V = [np.ones(s) for s in shapes]
    params = {"W_Q": W_Q, "W_K": W_K, "W_V": W_V}
    with pytest.raises(ValueError, match=message):
        head_forward(params, X)
    with pytest.raises(ValueError, match=message):
        shaped(PROJECTIONS, X, W_Q, W_K, W_V)
    # the backward checks the parameters it is given against the saved input
    good = {"W_Q": np.ones((D, d)), "W_K": np.ones((D, d)), "W_V": np.ones((D, r))}
    _, saved = head_forward(good, np.ones((T, D)))
    if X.shape == (T, D):
        with pytest.raises(ValueError, match=message):
            head_backward(params, saved, np.ones((T, r)))


def test_other_bad_input_is_named():
    rng = np.random.default_rng(5)
    X, params, G = random_head(rng)
    with pytest.raises(
        ValueError,
        match=r"head params lack \['W_V'\]; they need \['W_Q', 'W_K', 'W_V'\]",
    ):
        head_forward({"W_Q": params["W_Q"], "W_K": params["W_K"]}, X)
    _, saved = head_forward(params, X)
    with pytest.raises(
        ValueError, match=r"G must have the shape of O = A V, \(5, 2\), got \(2, 5\)"
    ):
        head_backward(params, saved, G.T)
