"""Tests of attncourse.softmax: the row-wise softmax, its masked form, log-sum-exp, the
backward pass and the dense Jacobian."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

from attncourse.kit.faults.softmax import (
    softmax_backward_numerator_only,
    softmax_without_max_subtraction,
)
from attncourse.softmax import logsumexp, softmax, softmax_backward, softmax_jacobian
from attncourse.kit.gradients import STEPS, TOLERANCE, gradcheck, numerical_jacobian
from strategies import masks, matrices, sizes

EPS = np.finfo(np.float64).eps


def test_known_row():
    # softmax([0, ln 3]) = [1/4, 3/4]
    assert_allclose(
        softmax(np.array([[0.0, np.log(3.0)]])), [[0.25, 0.75]], rtol=4 * EPS
    )


def test_extreme_scores_are_finite():
    S = np.array([[1e4, -1e4, 0.0], [-1e4, -1e4, -1e4], [1e300, 1e300, -1e300]])
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        A = softmax(S)
    assert np.all(np.isfinite(A))
    assert_allclose(A, [[1, 0, 0], [1 / 3, 1 / 3, 1 / 3], [0.5, 0.5, 0]], rtol=4 * EPS)


def test_naive_softmax_overflows():
    # fault control for the max subtraction: without it exp(1e4) overflows to inf and
    # inf/inf = NaN
    S = np.array([1e4, 0.0])
    with np.errstate(over="ignore", invalid="ignore"):
        naive = np.exp(S) / np.exp(S).sum()
        planted = softmax_without_max_subtraction(S)
    assert np.isnan(naive).any() and np.isnan(planted).any()
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


def large_masked_scores():
    """Scores between 850 and 1e4 (exp overflows above ~709) with a partial mask and an
    empty row."""
    rng = np.random.default_rng(11)
    S = rng.uniform(850.0, 1e4, size=(4, 6))
    # a row whose answer is known: (e, e, 1) / (2e + 1)
    S[1, :3] = [1000.0, 1000.0, 999.0]
    visible = np.array(
        [
            [True, False, True, True, False, True],
            [True, True, True, False, False, False],
            [False, False, False, False, False, False],  # nothing visible
            [False, False, False, False, True, False],  # one key visible
        ]
    )
    return S, visible


def test_masked_softmax_of_large_scores_is_finite_and_correct():
    # the masked path subtracts its own (visible) row maximum; without it exp(850) =
    # inf, inf/inf = NaN
    S, visible = large_masked_scores()
    with np.errstate(over="raise", invalid="raise", divide="raise", under="ignore"):
        A = softmax(S, visible)
    assert np.all(np.isfinite(A))
    assert np.all(A[~visible] == 0.0)
    # a row with a visible key equals the softmax of its visible scores alone
    for i in (0, 1, 3):
        assert_allclose(
            A[i, visible[i]], softmax(S[i, visible[i]]), rtol=4 * EPS, atol=0
        )
    assert_allclose(
        A[1, :3], np.array([np.e, np.e, 1.0]) / (2 * np.e + 1), rtol=8 * EPS, atol=0
    )
    assert_array_equal(A[2], 0.0)
    assert A[3, 4] == 1.0
    # fault control: the same scores without a max subtraction are not finite
    with np.errstate(over="ignore", invalid="ignore"):
        assert np.isnan(
            softmax_without_max_subtraction(np.where(visible, S, -np.inf))[[0, 1, 3]]
        ).any()


def test_masked_softmax_broadcasts_a_mask():
    rng = np.random.default_rng(12)
    S = rng.normal(size=(2, 3, 5))
    causal = np.tril(np.ones((3, 5), dtype=bool))  # (3, 5) broadcasts against (2, 3, 5)
    A = softmax(S, causal)
    assert A.shape == (2, 3, 5)
    for b in range(2):
        assert_array_equal(A[b], softmax(S[b], causal))
    assert np.all(A[:, ~causal] == 0.0)


def test_a_batched_mask_batches_unbatched_scores():
    rng = np.random.default_rng(13)
    S = rng.normal(size=(3, 5))
    visible = rng.random((2, 3, 5)) < 0.7  # each sequence of a batch hides other keys
    A = softmax(S, visible)
    assert A.shape == (2, 3, 5)
    for b in range(2):
        assert_array_equal(A[b], softmax(S, visible[b]))
    assert_allclose(
        logsumexp(S, visible)[1], logsumexp(S, visible[1]), rtol=1e-15, atol=0
    )


@pytest.mark.parametrize("fn", [softmax, logsumexp])
def test_a_mask_that_does_not_broadcast_is_named(fn):
    message = r"^leading batch dimensions do not broadcast: S \(3, 5\), visible \(3, 4"
    with pytest.raises(ValueError, match=message):
        fn(np.zeros((3, 5)), np.ones((3, 4), dtype=bool))


def test_logsumexp_is_stable_and_matches_definition():
    assert_allclose(
        logsumexp(np.array([1000.0, 1000.0])), 1000.0 + np.log(2.0), rtol=4 * EPS
    )
    z = np.random.default_rng(0).normal(size=(3, 5))
    assert_allclose(logsumexp(z), np.log(np.exp(z).sum(-1)), rtol=8 * EPS)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        assert (
            logsumexp(np.array([1.0, 2.0]), visible=np.array([False, False])) == -np.inf
        )


def test_logsumexp_with_partial_visibility_matches_a_direct_computation():
    rng = np.random.default_rng(13)
    S = rng.normal(size=(4, 7))
    visible = rng.random((4, 7)) < 0.5
    visible[:, 0] = True  # every row sees at least one entry
    direct = [np.log(np.sum(np.exp(S[i, visible[i]]))) for i in range(4)]
    assert_allclose(logsumexp(S, visible=visible), direct, rtol=8 * EPS, atol=8 * EPS)
    # hidden entries take no part: changing them changes nothing
    assert_array_equal(
        logsumexp(np.where(visible, S, 1e3), visible=visible),
        logsumexp(S, visible=visible),
    )
    # a mask that hides nothing is the unmasked log-sum-exp
    assert_array_equal(logsumexp(S, visible=np.ones_like(visible)), logsumexp(S))


def test_logsumexp_of_large_scores_with_a_mask():
    S, visible = large_masked_scores()
    with np.errstate(over="raise", invalid="raise", divide="ignore", under="ignore"):
        out = logsumexp(S, visible=visible)
    # np.logaddexp.reduce is an independent, overflow-free computation of the same
    # quantity
    for i in (0, 1, 3):
        assert_allclose(
            out[i], np.logaddexp.reduce(S[i, visible[i]]), rtol=4 * EPS, atol=0
        )
    assert_allclose(out[1], 1000.0 + np.log(2.0 + np.exp(-1.0)), rtol=4 * EPS, atol=0)
    assert out[2] == -np.inf and out[3] == S[3, 4]


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


@given(st.data(), sizes, sizes, st.floats(-1e4, 1e4))
def test_masked_softmax_is_the_softmax_of_the_visible_entries(data, T, n, shift):
    S = data.draw(matrices((T, n), scale=50.0)) + shift
    visible = data.draw(masks((T, n)))
    with np.errstate(over="raise", invalid="raise", divide="raise", under="ignore"):
        A = softmax(S, visible)
        lse = logsumexp(S, visible=visible)
    assert np.all(A[~visible] == 0.0)
    for i in range(T):
        if visible[i].any():
            assert_allclose(
                A[i, visible[i]], softmax(S[i, visible[i]]), rtol=0, atol=4 * n * EPS
            )
            assert_allclose(
                lse[i],
                np.logaddexp.reduce(S[i, visible[i]]),
                rtol=4 * n * EPS,
                atol=4 * n * EPS,
            )
        else:
            assert_array_equal(A[i], 0.0)
            assert lse[i] == -np.inf


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
    wrong = softmax_backward_numerator_only(softmax(S), dA)
    assert_array_equal(wrong, softmax(S) * dA)
    assert np.max(np.abs(wrong.sum(axis=-1))) > 1e-3
    assert not gradcheck(
        lambda S: float(np.sum(softmax(S) * dA)), {"S": S}, {"S": wrong}
    ).passed


def test_backward_rejects_mismatched_shapes():
    with pytest.raises(
        ValueError,
        match=r"^dA must have the shape of A, \(2, 3\), got \(3, 2\)$",
    ):
        softmax_backward(np.ones((2, 3)) / 3, np.ones((3, 2)))


def test_bad_input_is_named():
    with pytest.raises(
        ValueError, match="^S must be an array of numbers, got dtype <U1"
    ):
        softmax(np.array([["a"]]))
    with pytest.raises(ValueError, match="^S must be an array of numbers"):
        logsumexp(np.array(["a"]))
    with pytest.raises(ValueError, match="^dA must be an array of numbers"):
        softmax_backward(np.ones((1, 2)), np.array([["a", "b"]]))
    with pytest.raises(ValueError, match="^A must be an array of numbers"):
        softmax_backward(np.array([["a", "b"]]), np.ones((1, 2)))
    with pytest.raises(ValueError, match="^z must be an array of numbers"):
        softmax_jacobian(np.array(["a", "b"]))


# --- the dense Jacobian ---------------------------------------------------------------


def test_jacobian_known_value():
    # z = ln(1, 3): p = (1/4, 3/4), so every entry is +-(1/4)(3/4) = +-3/16
    assert_allclose(
        softmax_jacobian(np.log([1.0, 3.0])),
        [[3 / 16, -3 / 16], [-3 / 16, 3 / 16]],
        rtol=4 * EPS,
    )


def test_jacobian_matches_finite_differences_at_both_steps():
    z = np.random.default_rng(3).normal(size=6)
    for h in STEPS:
        assert (
            np.max(np.abs(softmax_jacobian(z) - numerical_jacobian(softmax, z, h)))
            < TOLERANCE
        )


def test_softmax_backward_is_the_jacobian_transpose_times_upstream_row_by_row():
    rng = np.random.default_rng(7)
    # T = 5 rows of n = 7 entries
    S, dA = rng.normal(size=(5, 7)), rng.normal(size=(5, 7))
    A = softmax(S)
    by_jacobian = np.einsum("tjm,tj->tm", softmax_jacobian(S), dA)  # row t: J_t^T dA_t
    assert_allclose(softmax_backward(A, dA), by_jacobian, rtol=0, atol=16 * EPS)
    # and both are the gradient of J = sum(dA * softmax(S)); the numerator-only backward
    # is not
    J = lambda S: float(np.sum(dA * softmax(S)))  # noqa: E731
    assert gradcheck(J, {"S": S}, {"S": softmax_backward(A, dA)}).passed
    faulty = gradcheck(J, {"S": S}, {"S": softmax_backward_numerator_only(A, dA)})
    assert not faulty.passed and faulty.worst > 1e3 * TOLERANCE


def test_jacobian_of_extreme_logits_is_finite():
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        J = softmax_jacobian(np.array([1000.0, -1000.0, 0.0]))
    assert np.all(J == 0.0)


def test_jacobian_batched_and_bad_input():
    z = np.random.default_rng(4).normal(size=(2, 3, 5))
    J = softmax_jacobian(z)
    assert J.shape == (2, 3, 5, 5)
    assert_allclose(J[1, 2], softmax_jacobian(z[1, 2]), rtol=0, atol=0)
    with pytest.raises(
        ValueError, match=r"^z must have a non-empty last axis, got shape \(\)$"
    ):
        softmax_jacobian(np.float64(1.0))
    with pytest.raises(ValueError, match=r"non-empty last axis, got shape \(3, 0\)$"):
        softmax_jacobian(np.zeros((3, 0)))


@given(st.data(), st.integers(1, 6))
def test_jacobian_properties(data, n):
    z = data.draw(matrices((n,), scale=20.0))
    J = softmax_jacobian(z)
    assert_allclose(J, J.T, rtol=0, atol=0)
    assert_allclose(J.sum(axis=1), 0.0, rtol=0, atol=2 * n * EPS)
    # a shift of all logits changes nothing
    assert_allclose(softmax_jacobian(z + 7.5), J, rtol=0, atol=64 * EPS)
    assert np.all(np.linalg.eigvalsh(J) > -16 * EPS)  # positive semi-definite
    g = data.draw(matrices((n,)))
    # the vector-Jacobian product is the package's softmax backward
    # (n, n) x (n,) -> (n,)
    assert_allclose(J.T @ g, softmax_backward(softmax(z), g), rtol=0, atol=64 * EPS)


def test_a_row_with_no_entries_has_an_empty_softmax_and_a_log_sum_exp_of_minus_inf():
    S = np.zeros((3, 0))
    for visible in (None, np.zeros((3, 0), bool)):
        A = softmax(S, visible)
        assert A.shape == (3, 0)
        assert_array_equal(logsumexp(S, visible), np.full(3, -np.inf))
    # a row with entries is unchanged by the empty case's handling
    assert_allclose(logsumexp(np.array([[-1e3, -1e3]])), [-1e3 + np.log(2)], rtol=1e-15)


def test_a_non_finite_visible_score_makes_its_row_nan_with_or_without_a_mask():
    # the masked path must not normalise the finite part of such a row on its own
    S = np.array([[np.nan, 1.0, 0.5], [np.inf, 710.0, 0.0], [0.0, np.log(3.0), 9.0]])
    visible = np.array([True, True, False])
    with np.errstate(invalid="ignore"):
        plain, masked = softmax(S[:, :2]), softmax(S, visible)
    assert np.isnan(plain[:2]).all()
    assert np.isnan(masked[0, :2]).all() and np.isnan(masked[1, :2]).any()
    assert (masked[:, 2] == 0).all()  # hidden entries stay exactly 0
    assert_allclose(masked[2, :2], [0.25, 0.75], rtol=4 * np.finfo(float).eps)


def test_a_row_whose_visible_scores_are_all_minus_inf_gets_weights_0():
    # as a row with nothing visible: no NaN from -inf - (-inf), no warning
    S = np.array([[-np.inf, -np.inf, 2.0], [0.0, 1.0, 2.0]])
    visible = np.array([[True, True, False], [False, False, False]])
    assert_array_equal(softmax(S, visible), np.zeros((2, 3)))
