"""Tests of attncourse.layers.embedding: one-hot vectors, the lookup pair and its
initialisation."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

from attncourse.kit.faults.embedding import (
    embedding_backward_fancy_iadd,
    embedding_backward_overwrite,
)
from attncourse.layers.embedding import (
    embedding_backward,
    embedding_forward,
    init_embedding,
    one_hot,
)
from attncourse.kit.gradients import layer_gradcheck
from strategies import matrices

EPS = np.finfo(np.float64).eps


def downstream(X, W, C):
    """A small nonlinear objective J = sum(C * tanh(X W)) and its gradient with respect
    to X."""
    H = np.tanh(X @ W)  # (T, D) x (D, k) -> (T, k)
    return float(np.sum(C * H)), (C * (1 - H**2)) @ W.T  # (T, k) x (k, D) -> (T, D)


def test_one_hot():
    H = one_hot(np.array([[2, 0], [1, 2]]), 3)
    assert H.shape == (2, 2, 3) and H.dtype == np.float64
    assert_array_equal(H[0], [[0, 0, 1], [1, 0, 0]])
    assert_array_equal(H[1], [[0, 1, 0], [0, 0, 1]])
    assert one_hot(np.zeros(0, dtype=int), 4).shape == (0, 4)


def test_lookup_is_a_row_gather_and_a_one_hot_product():
    rng = np.random.default_rng(0)
    n_vocab, D = 7, 4
    E = rng.normal(size=(n_vocab, D))
    ids = np.array([5, 0, 5, 3, 6])
    X, saved = embedding_forward({"E": E}, ids)
    assert_array_equal(X, E[ids])
    # each sum has one non-zero term
    assert_allclose(X, one_hot(ids, n_vocab) @ E, rtol=0, atol=0)
    assert_array_equal(saved["ids"], ids)


def test_repeated_token_receives_the_sum():
    dX = np.array([[1.0, 2.0], [10.0, 20.0], [100.0, 200.0]])
    params = {"E": np.zeros((4, 2))}
    _, saved = embedding_forward(params, np.array([1, 3, 1]))
    dparams, dx = embedding_backward(params, saved, dX)
    assert dx is None and set(dparams) == {"E"}
    assert_array_equal(dparams["E"], [[0, 0], [101, 202], [0, 0], [10, 20]])
    # fault control: assignment, or fancy-indexed +=, keeps one occurrence of token 1
    for fault in (embedding_backward_overwrite, embedding_backward_fancy_iadd):
        assert_array_equal(fault(params, saved, dX)[0]["E"][1], [100, 200])


def test_gradient_of_the_table_through_a_downstream_objective():
    rng = np.random.default_rng(1)
    n_vocab, D, T, k = 7, 5, 9, 3
    E, W, C = (
        rng.normal(size=(n_vocab, D)),
        rng.normal(size=(D, k)),
        rng.normal(size=(T, k)),
    )
    ids = np.array([2, 6, 2, 0, 2, 6, 1, 1, 4])  # repeats, and tokens 3 and 5 unused
    X, saved = embedding_forward({"E": E}, ids)
    _, dX = downstream(X, W, C)  # the upstream gradient a real objective sends back
    report = layer_gradcheck(
        embedding_forward, embedding_backward, {"E": E}, ids, dy=dX
    )
    assert report.passed, report
    dE = embedding_backward({"E": E}, saved, dX)[0]["E"]
    assert_array_equal(dE[[3, 5]], 0.0)
    # fault controls: the same forward with a backward that drops repeated occurrences
    for fault in (embedding_backward_overwrite, embedding_backward_fancy_iadd):
        assert not layer_gradcheck(
            embedding_forward, fault, {"E": E}, ids, dy=dX
        ).passed


def test_batched_ids():
    rng = np.random.default_rng(2)
    E = rng.normal(size=(6, 3))
    ids = np.array([[0, 5, 5, 1], [5, 2, 0, 0]])
    X, saved = embedding_forward({"E": E}, ids)
    assert X.shape == (2, 4, 3)
    dX = rng.normal(size=X.shape)
    # (6, 8) x (8, 3) -> (6, 3)
    want = one_hot(ids, 6).reshape(-1, 6).T @ dX.reshape(-1, 3)
    assert_allclose(
        embedding_backward({"E": E}, saved, dX)[0]["E"],
        want,
        rtol=8 * EPS,
        atol=8 * EPS,
    )
    assert layer_gradcheck(embedding_forward, embedding_backward, {"E": E}, ids).passed


def test_bad_input():
    params = {"E": np.zeros((4, 3))}
    with pytest.raises(
        ValueError,
        match=r"ids out of range for a vocabulary of 4 tokens \(valid ids are 0..3\): "
            r"\[4, 9\]",
    ):
        embedding_forward(params, [0, 4, 9])
    with pytest.raises(
        ValueError, match=r"^E must have shape \(n_vocab, D\), got shape \(4,\)$"
    ):
        embedding_forward({"E": np.zeros(4)}, [0])
    with pytest.raises(ValueError, match="ids must be integers, got dtype float64"):
        embedding_forward(params, np.array([0.0]))
    with pytest.raises(
        ValueError,
        match=r"embedding params lack \['E'\]; they need \['E'\], got keys \['W'\]",
    ):
        embedding_forward({"W": np.zeros((4, 3))}, [0])
    _, saved = embedding_forward(params, np.zeros((2, 3), dtype=int))
    with pytest.raises(
        ValueError,
        match=r"^dX must have the shape of X = E\[ids\], \(2, 3, 3\), got \(3, 2, 3\)$",
    ):
        embedding_backward(params, saved, np.zeros((3, 2, 3)))
    with pytest.raises(ValueError, match=r"out of range.*\[-1\]"):
        one_hot([-1], 3)


def test_init_embedding_draws_standard_normal_entries_times_scale():
    n_vocab, D = 300, 40
    n = n_vocab * D
    # five standard errors of a sample standard deviation
    tolerance = 5 / np.sqrt(2 * (n - 1))
    for seed, scale in ((0, 1.0), (1, 0.25)):
        E = init_embedding(np.random.default_rng(seed), n_vocab, D, scale=scale)["E"]
        assert E.shape == (n_vocab, D)
        assert abs(E.std() / scale - 1) < tolerance
        assert abs(E.mean()) < 5 * scale / np.sqrt(n)
    assert_array_equal(
        init_embedding(np.random.default_rng(3), 4, 2)["E"],
        init_embedding(np.random.default_rng(3), 4, 2)["E"],
    )
    with pytest.raises(
        ValueError, match=r"sizes must be positive integers: D=0 \(got n_vocab=5, D=0\)"
    ):
        init_embedding(np.random.default_rng(0), 5, 0)


@given(st.data(), st.integers(1, 6), st.integers(1, 5), st.integers(1, 8))
def test_properties(data, n_vocab, D, T):
    ids = np.array(
        data.draw(st.lists(st.integers(0, n_vocab - 1), min_size=T, max_size=T))
    )
    E = data.draw(matrices((n_vocab, D)))
    dX = data.draw(matrices((T, D)))
    X, saved = embedding_forward({"E": E}, ids)
    assert_array_equal(X, E[ids])
    H = one_hot(ids, n_vocab)
    assert_array_equal(H.sum(axis=1), 1.0)
    assert_allclose(H @ E, X, rtol=0, atol=0)
    dE = embedding_backward({"E": E}, saved, dX)[0]["E"]
    # (n_vocab, T) x (T, D) -> (n_vocab, D)
    assert_allclose(dE, H.T @ dX, rtol=0, atol=T * EPS * 3.0)
    # nothing lost, nothing doubled
    assert_allclose(dE.sum(axis=0), dX.sum(axis=0), rtol=0, atol=T * EPS * 3.0)
    counts = np.bincount(ids, minlength=n_vocab)
    assert_array_equal(dE[counts == 0], 0.0)


@given(st.data(), st.integers(2, 5), st.integers(2, 4), st.integers(3, 7))
def test_gradient_matches_finite_differences(data, n_vocab, D, T):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    ids = rng.integers(0, n_vocab, size=T)
    E, W, C = (
        rng.normal(size=(n_vocab, D)),
        rng.normal(size=(D, 2)),
        rng.normal(size=(T, 2)),
    )
    dX = downstream(embedding_forward({"E": E}, ids)[0], W, C)[1]
    report = layer_gradcheck(
        embedding_forward, embedding_backward, {"E": E}, ids, dy=dX
    )
    assert report.passed, report
