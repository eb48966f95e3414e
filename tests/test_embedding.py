import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

from attncourse.embedding import check_embedding_backward, check_one_hot, embedding_backward, embedding_forward, one_hot
from attncourse.gradcheck import gradcheck
from strategies import matrices

EPS = np.finfo(np.float64).eps


def downstream(X, W, C):
    """A small nonlinear objective J = sum(C * tanh(X W)) and its gradient with respect to X."""
    H = np.tanh(X @ W)  # (T, D) x (D, k) -> (T, k)
    return float(np.sum(C * H)), (C * (1 - H**2)) @ W.T  # (T, k) x (k, D) -> (T, D)


def test_lookup_is_a_row_gather_and_a_one_hot_product():
    rng = np.random.default_rng(0)
    n_vocab, D = 7, 4
    E = rng.normal(size=(n_vocab, D))
    ids = np.array([5, 0, 5, 3, 6])
    X = embedding_forward(E, ids)
    assert_array_equal(X, E[ids])
    assert_allclose(X, one_hot(ids, n_vocab) @ E, rtol=0, atol=0)  # each sum has one non-zero term


def test_repeated_token_receives_the_sum():
    dX = np.array([[1.0, 2.0], [10.0, 20.0], [100.0, 200.0]])
    dE = embedding_backward(dX, np.array([1, 3, 1]), 4)
    assert_array_equal(dE, [[0, 0], [101, 202], [0, 0], [10, 20]])


def test_gradient_of_the_table_through_a_downstream_objective():
    rng = np.random.default_rng(1)
    n_vocab, D, T, k = 7, 5, 9, 3
    E, W, C = rng.normal(size=(n_vocab, D)), rng.normal(size=(D, k)), rng.normal(size=(T, k))
    ids = np.array([2, 6, 2, 0, 2, 6, 1, 1, 4])  # repeats, and tokens 3 and 5 unused
    _, dX = downstream(embedding_forward(E, ids), W, C)
    dE = embedding_backward(dX, ids, n_vocab)
    report = gradcheck(lambda E: downstream(embedding_forward(E, ids), W, C)[0], {"E": E}, {"E": dE})
    assert report.passed, str(report)
    assert_array_equal(dE[[3, 5]], 0.0)


def test_batched_ids():
    rng = np.random.default_rng(2)
    E = rng.normal(size=(6, 3))
    ids = np.array([[0, 5, 5, 1], [5, 2, 0, 0]])
    X = embedding_forward(E, ids)
    assert X.shape == (2, 4, 3)
    dX = rng.normal(size=X.shape)
    want = one_hot(ids, 6).reshape(-1, 6).T @ dX.reshape(-1, 3)  # (6, 8) x (8, 3) -> (6, 3)
    assert_allclose(embedding_backward(dX, ids, 6), want, rtol=8 * EPS, atol=8 * EPS)


def test_bad_input():
    E = np.zeros((4, 3))
    with pytest.raises(ValueError, match=r"ids out of range for a vocabulary of 4 tokens \(valid ids are 0..3\): \[4, 9\]"):
        embedding_forward(E, [0, 4, 9])
    with pytest.raises(ValueError, match=r"E must be 2-D \(n_vocab, D\), got shape \(4,\)"):
        embedding_forward(np.zeros(4), [0])
    with pytest.raises(ValueError, match="ids must be integers, got dtype float64"):
        embedding_forward(E, np.array([0.0]))
    with pytest.raises(ValueError, match=r"dX must have shape ids.shape \+ \(D,\) = \(2, 3, D\), got dX of shape \(3, 2, 3\)"):
        embedding_backward(np.zeros((3, 2, 3)), np.zeros((2, 3), dtype=int), 4)
    with pytest.raises(ValueError, match=r"out of range.*\[-1\]"):
        one_hot([-1], 3)


def test_checkers_pass_the_reference_and_name_failures():
    assert len(check_one_hot(one_hot)) == 5
    assert len(check_embedding_backward(embedding_backward)) == 5
    with pytest.raises(AssertionError, match="^shape"):
        check_one_hot(lambda ids, n: one_hot(ids, n)[..., :-1])
    with pytest.raises(AssertionError, match="^the 1 sits at the id"):
        check_one_hot(lambda ids, n: one_hot((np.asarray(ids) + 1) % n, n))
    with pytest.raises(AssertionError, match="^rejects ids out of range"):
        check_one_hot(lambda ids, n: np.eye(n + 1)[np.asarray(ids)][..., :n])
    with pytest.raises(AssertionError, match="^shape"):
        check_embedding_backward(lambda dX, ids, n: embedding_backward(dX, ids, n).T)
    with pytest.raises(AssertionError, match="^batched ids"):
        check_embedding_backward(lambda dX, ids, n: embedding_backward(dX[..., 0, :] if dX.ndim == 3 else dX,
                                                                      ids[..., 0] if ids.ndim == 2 else ids, n))


@given(st.data(), st.integers(1, 6), st.integers(1, 5), st.integers(1, 8))
def test_properties(data, n_vocab, D, T):
    ids = np.array(data.draw(st.lists(st.integers(0, n_vocab - 1), min_size=T, max_size=T)))
    E = data.draw(matrices((n_vocab, D)))
    dX = data.draw(matrices((T, D)))
    assert_array_equal(embedding_forward(E, ids), E[ids])
    H = one_hot(ids, n_vocab)
    assert_array_equal(H.sum(axis=1), 1.0)
    assert_allclose(H @ E, embedding_forward(E, ids), rtol=0, atol=0)
    dE = embedding_backward(dX, ids, n_vocab)
    assert_allclose(dE, H.T @ dX, rtol=0, atol=T * EPS * 3.0)  # (n_vocab, T) x (T, D) -> (n_vocab, D)
    assert_allclose(dE.sum(axis=0), dX.sum(axis=0), rtol=0, atol=T * EPS * 3.0)  # nothing lost, nothing doubled
    counts = np.bincount(ids, minlength=n_vocab)
    assert_array_equal(dE[counts == 0], 0.0)


@given(st.data(), st.integers(2, 5), st.integers(2, 4), st.integers(3, 7))
def test_gradient_matches_finite_differences(data, n_vocab, D, T):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    ids = rng.integers(0, n_vocab, size=T)
    E, W, C = rng.normal(size=(n_vocab, D)), rng.normal(size=(D, 2)), rng.normal(size=(T, 2))
    dE = embedding_backward(downstream(embedding_forward(E, ids), W, C)[1], ids, n_vocab)
    report = gradcheck(lambda E: downstream(embedding_forward(E, ids), W, C)[0], {"E": E}, {"E": dE})
    assert report.passed, str(report)
