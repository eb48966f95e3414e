"""Every planted mistake of Chapters 1 and 2 is caught by the check that exists for it."""

import numpy as np
import pytest

from attncourse.cross_entropy import check_cross_entropy, cross_entropy, cross_entropy_backward
from attncourse.embedding import check_embedding_backward, embedding_backward, embedding_forward
from attncourse.faults_ch12 import (
    cross_entropy_backward_sum,
    cross_entropy_backward_wrong_sign,
    cross_entropy_naive,
    embedding_backward_fancy_iadd,
    embedding_backward_overwrite,
    unembedding_backward_transposed,
)
from attncourse.faults import softmax_without_max_subtraction
from attncourse.gradcheck import gradcheck
from attncourse.softmax import softmax
from attncourse.unembedding import unembedding_backward, unembedding_forward


def embedding_case():
    rng = np.random.default_rng(11)
    n_vocab, D = 6, 4
    E, W = rng.normal(size=(n_vocab, D)), rng.normal(size=(D, 3))
    ids = np.array([1, 4, 1, 0, 4, 4, 2])
    J = lambda E: float(np.sum(np.sin(embedding_forward(E, ids) @ W)))  # noqa: E731
    dX = np.cos(embedding_forward(E, ids) @ W) @ W.T  # (T, 3) x (3, D) -> (T, D)
    return E, ids, J, dX, n_vocab


def unembedding_case(D, n_vocab, B=5):
    rng = np.random.default_rng(12)
    X, U, y = rng.normal(size=(B, D)), rng.normal(size=(D, n_vocab)), rng.integers(0, n_vocab, size=B)
    J = lambda X, U: cross_entropy(unembedding_forward(X, U), y)  # noqa: E731
    dZ = cross_entropy_backward(unembedding_forward(X, U), y)
    return X, U, y, J, dZ


@pytest.mark.parametrize("fault", [embedding_backward_overwrite, embedding_backward_fancy_iadd])
def test_overwrite_in_the_embedding_backward_is_caught(fault):
    E, ids, J, dX, n_vocab = embedding_case()
    assert gradcheck(J, {"E": E}, {"E": embedding_backward(dX, ids, n_vocab)}).passed
    faulty = gradcheck(J, {"E": E}, {"E": fault(dX, ids, n_vocab)})
    assert not faulty.passed and faulty.worst > 1e-2
    with pytest.raises(AssertionError, match="^repeated tokens add their gradients"):
        check_embedding_backward(fault)
    # without repeated ids the fault is invisible: the check needs a repeated token
    distinct = np.array([3, 0, 5])
    dX3 = np.random.default_rng(14).normal(size=(3, 4))
    assert np.array_equal(fault(dX3, distinct, n_vocab), embedding_backward(dX3, distinct, n_vocab))


def test_naive_softmax_and_log_are_caught_at_extreme_logits():
    Z = np.array([[1000.0, -1000.0, 0.0]])
    with np.errstate(over="ignore", invalid="ignore"):
        assert np.isnan(softmax_without_max_subtraction(Z)).any()
    assert np.all(np.isfinite(softmax(Z)))
    assert not np.isfinite(cross_entropy_naive(Z, np.array([0])))  # inf / inf = NaN
    assert not np.isfinite(cross_entropy_naive(np.array([[0.0, -1000.0]]), np.array([1])))  # log 0 = -inf
    assert cross_entropy(np.array([[0.0, -1000.0]]), np.array([1])) == 1000.0
    naive_pair = lambda Z, y: (cross_entropy_naive(Z, y), cross_entropy_backward(Z, y))  # noqa: E731
    with pytest.raises(AssertionError, match="^finite for extreme logits"):
        check_cross_entropy(naive_pair)
    # at moderate logits the naive formula is right: only the extreme check can catch it
    Zm = np.random.default_rng(13).normal(size=(3, 4))
    assert abs(cross_entropy_naive(Zm, np.array([0, 1, 2])) - cross_entropy(Zm, np.array([0, 1, 2]))) < 1e-12


@pytest.mark.parametrize("fault", [cross_entropy_backward_wrong_sign, cross_entropy_backward_sum])
def test_sign_and_reduction_faults_are_caught_by_finite_differences(fault):
    X, U, y, J, dZ = unembedding_case(D=3, n_vocab=7)
    Z = unembedding_forward(X, U)
    assert gradcheck(lambda Z: cross_entropy(Z, y), {"Z": Z}, {"Z": dZ}).passed
    faulty = gradcheck(lambda Z: cross_entropy(Z, y), {"Z": Z}, {"Z": fault(Z, y)})
    assert not faulty.passed and faulty.worst > 1e-3
    assert np.allclose(fault(Z, y).sum(axis=1), 0)  # rows still sum to zero: that check alone would miss it
    with pytest.raises(AssertionError, match="^gradient matches central differences"):
        check_cross_entropy(lambda Z, y: (cross_entropy(Z, y), fault(Z, y)))


def test_sum_fault_is_invisible_for_a_batch_of_one():
    X, U, y, J, dZ = unembedding_case(D=3, n_vocab=7, B=1)
    Z = unembedding_forward(X, U)
    assert np.allclose(cross_entropy_backward_sum(Z, y), dZ)  # hence every check uses B >= 2


def test_transposed_unembedding_gradient_is_caught():
    X, U, y, J, dZ = unembedding_case(D=3, n_vocab=7)
    dX, dU = unembedding_backward(X, U, dZ)
    assert gradcheck(J, {"X": X, "U": U}, {"X": dX, "U": dU}).passed
    _, dU_T = unembedding_backward_transposed(X, U, dZ)
    with pytest.raises(ValueError, match=r"gradient for U has shape \(7, 3\), input has \(3, 7\)"):
        gradcheck(J, {"X": X, "U": U}, {"U": dU_T})  # unequal sizes: the shape alone exposes it
    Xs, Us, ys, Js, dZs = unembedding_case(D=5, n_vocab=5)  # square: only the values can
    _, dU_Ts = unembedding_backward_transposed(Xs, Us, dZs)
    faulty = gradcheck(Js, {"X": Xs, "U": Us}, {"U": dU_Ts})
    assert not faulty.passed and faulty.worst > 1e-3
