"""Fault controls: every planted mistake in attncourse.faults is caught by the check meant to catch it."""

import inspect
import math

import numpy as np
import pytest
from hypothesis import given
from numpy.testing import assert_allclose

import attncourse as ac
from attncourse import faults
from attncourse.checks import check_rows_sum_to_one, check_rows_sum_to_zero, check_transpose
from attncourse.examples import attention_objective, example1, head_objective, random_head
from strategies import matrices

TIGHT = 64 * np.finfo(np.float64).eps


def qkv(seed=0, **sizes):
    h = random_head(seed=seed, **sizes)
    return (*ac.project(h.X, h.W_Q, h.W_K, h.W_V), h.G)


def gradcheck_qkv(backward, Q, K, V, G):
    dQ, dK, dV = backward(Q, K, V, G)
    return ac.gradcheck(lambda Q, K, V: attention_objective(Q, K, V, G),
                        {"Q": Q, "K": K, "V": V}, {"Q": dQ, "K": dK, "V": dV})


IMITATES = {
    faults.attention_scores_missing_transpose: ac.attention_scores,
    faults.attention_forward_missing_transpose: ac.attention_forward,
    faults.attention_backward_missing_transpose: ac.attention_backward,
    faults.softmax_columnwise: ac.softmax,
    faults.attention_forward_columnwise: ac.attention_forward,
    faults.softmax_backward_numerator_only: ac.softmax_backward,
    faults.attention_backward_numerator_only: ac.attention_backward,
    faults.attention_forward_unscaled: ac.attention_forward,
    faults.attention_backward_unscaled: ac.attention_backward,
    faults.attention_backward_unscaled_throughout: ac.attention_backward,
    faults.head_backward_last_branch: ac.head_backward,
    faults.softmax_without_max_subtraction: ac.softmax,
}


@pytest.mark.parametrize("fault, correct", IMITATES.items(), ids=lambda f: getattr(f, "__name__", ""))
def test_fault_has_the_signature_of_the_function_it_imitates(fault, correct):
    fault_params = list(inspect.signature(fault).parameters)
    correct_params = list(inspect.signature(correct).parameters)
    # same required parameters, in order (optional ones such as `visible` may be missing)
    required = [p for p, v in inspect.signature(correct).parameters.items() if v.default is inspect.Parameter.empty]
    assert fault_params[: len(required)] == required
    assert set(fault_params) <= set(correct_params)


def test_every_fault_is_listed_and_exported():
    listed = " ".join(functions for functions, _ in faults.FAULTS.values())
    for fault in IMITATES:
        assert fault.__name__ in listed
        assert fault.__name__ in faults.__all__


# --- 1. missing transpose -------------------------------------------------------------

def test_missing_transpose_in_scores_is_caught_by_the_transpose_check():
    check_transpose(ac.attention_scores)  # the correct function passes
    with pytest.raises(AssertionError, match="transpose: .*the transpose of K is missing"):
        check_transpose(faults.attention_scores_missing_transpose)


def test_missing_transpose_in_scores_is_invisible_on_example1():
    # the reason the transpose check exists: K = I is symmetric
    ex = example1()
    Q, K, V = ac.project(ex.X, ex.W_Q, ex.W_K, ex.W_V)
    O_bad, A_bad = faults.attention_forward_missing_transpose(Q, K, V)
    O, A = ac.attention_forward(Q, K, V)
    assert_allclose(A_bad, A, rtol=0, atol=0)


def test_missing_transpose_in_scores_changes_the_weights_when_K_is_not_symmetric():
    # d == T_k, so the product runs; a random (non-symmetric) K exposes it
    Q, K, V, _ = qkv(4, T=3, D=5, d=3, r=2)
    assert not np.allclose(K, K.T)
    A_bad = faults.attention_forward_missing_transpose(Q, K, V)[1]
    assert np.abs(A_bad - ac.attention_forward(Q, K, V)[1]).max() > 1e-3


def test_missing_transpose_in_scores_does_not_run_on_non_square_shapes():
    Q, K, V, _ = qkv()  # d = 3, T = 5
    with pytest.raises(ValueError):
        faults.attention_forward_missing_transpose(Q, K, V)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_missing_transpose_in_dK_is_caught_by_gradcheck(seed):
    Q, K, V, G = qkv(seed)
    assert gradcheck_qkv(ac.attention_backward, Q, K, V, G).passed
    report = gradcheck_qkv(faults.attention_backward_missing_transpose, Q, K, V, G)
    assert not report.passed
    assert report.errors[("K", 1e-5)] > 1e-3 and report.errors[("Q", 1e-5)] < 1e-7  # only dK is wrong


def test_missing_transpose_in_dK_is_caught_by_example1_values():
    ex = example1()
    Q, K, V = ac.project(ex.X, ex.W_Q, ex.W_K, ex.W_V)
    dS = np.array([[3 / 8, -3 / 8], [-3 / 2, 3 / 2]])
    dK_bad = faults.attention_backward_missing_transpose(Q, K, V, ex.G)[1]
    assert not np.allclose(dK_bad, math.log(3) * dS.T)


# --- 2. column-wise normalisation ------------------------------------------------------

def test_columnwise_normalisation_is_caught_by_the_row_check():
    Q, K, V, _ = qkv()
    A_bad = faults.attention_forward_columnwise(Q, K, V)[1]
    assert_allclose(A_bad.sum(axis=-2), 1.0, rtol=TIGHT)  # it normalised the other axis
    with pytest.raises(AssertionError, match="rows summing to one"):
        check_rows_sum_to_one(A_bad)
    check_rows_sum_to_one(ac.attention_forward(Q, K, V)[1])


@given(matrices((3, 5), scale=4.0))
def test_columnwise_softmax_fails_the_row_check_on_non_square_scores(S):
    # 3 queries x 5 keys: columns sum to one, so the rows sum to 5/3 on average
    with pytest.raises(AssertionError, match="rows summing to one"):
        check_rows_sum_to_one(faults.softmax_columnwise(S))


# --- 3. numerator-only softmax backward --------------------------------------------------

def test_numerator_only_backward_is_caught_by_zero_row_sums():
    ex = example1()
    A = np.array([[0.75, 0.25], [0.25, 0.75]])
    dA = ex.G @ np.diag([2.0, 4.0]).T  # G V^T
    dS_bad = faults.softmax_backward_numerator_only(A, dA)
    assert_allclose(dS_bad.sum(axis=-1), [1.5, 6.0])  # the row means the denominator path subtracts
    with pytest.raises(AssertionError, match="rows of dS summing to zero"):
        check_rows_sum_to_zero(dS_bad)
    check_rows_sum_to_zero(ac.softmax_backward(A, dA))


@given(matrices((4, 6), scale=3.0), matrices((4, 6), scale=3.0))
def test_numerator_only_differs_from_correct_by_the_row_mean(S, dA):
    A = ac.softmax(S)
    row_mean = np.sum(A * dA, axis=-1, keepdims=True)
    assert_allclose(faults.softmax_backward_numerator_only(A, dA) - ac.softmax_backward(A, dA), A * row_mean,
                    rtol=1e-12, atol=1e-12)


def test_numerator_only_backward_is_caught_by_gradcheck():
    Q, K, V, G = qkv(1)
    assert not gradcheck_qkv(faults.attention_backward_numerator_only, Q, K, V, G).passed


def test_numerator_only_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match=r"A \(2, 3\) and dA \(3, 2\)"):
        faults.softmax_backward_numerator_only(np.ones((2, 3)), np.ones((3, 2)))


# --- 4. dropped 1/sqrt(d) ------------------------------------------------------------------

def test_unscaled_forward_is_caught_by_example1_values():
    ex = example1()
    Q, K, V = ac.project(ex.X, ex.W_Q, ex.W_K, ex.W_V)
    A_bad = faults.attention_forward_unscaled(Q, K, V)[1]
    assert not np.allclose(A_bad, [[0.75, 0.25], [0.25, 0.75]])
    # it is the correct attention with queries scaled by sqrt(d)
    assert_allclose(A_bad, ac.attention_forward(Q * math.sqrt(2), K, V)[1], rtol=TIGHT, atol=TIGHT)


def test_unscaled_backward_is_caught_by_gradcheck_and_is_off_by_sqrt_d():
    Q, K, V, G = qkv(2)
    assert not gradcheck_qkv(faults.attention_backward_unscaled, Q, K, V, G).passed
    dQ, dK, dV = ac.attention_backward(Q, K, V, G)
    bad = faults.attention_backward_unscaled(Q, K, V, G)
    d = Q.shape[-1]
    assert_allclose(bad[0], math.sqrt(d) * dQ, rtol=1e-12, atol=1e-14)
    assert_allclose(bad[1], math.sqrt(d) * dK, rtol=1e-12, atol=1e-14)
    assert_allclose(bad[2], dV, rtol=0, atol=0)


@pytest.mark.parametrize("seed", [0, 3])
def test_unscaled_throughout_passes_gradcheck_and_fails_the_values(seed):
    # forward and backward both drop the scale: they agree, so only values can catch it
    Q, K, V, G = qkv(seed)
    dQ, dK, dV = faults.attention_backward_unscaled_throughout(Q, K, V, G)
    J_unscaled = lambda Q, K, V: attention_objective(Q, K, V, G, forward=faults.attention_forward_unscaled)
    assert ac.gradcheck(J_unscaled, {"Q": Q, "K": K, "V": V}, {"Q": dQ, "K": dK, "V": dV}).passed  # blind
    assert not gradcheck_qkv(faults.attention_backward_unscaled_throughout, Q, K, V, G).passed  # correct forward
    ex = example1()
    Q1, K1, V1 = ac.project(ex.X, ex.W_Q, ex.W_K, ex.W_V)
    assert not np.allclose(faults.attention_forward_unscaled(Q1, K1, V1)[1], [[0.75, 0.25], [0.25, 0.75]])


def test_unscaled_throughout_is_the_correct_backward_at_sqrt_d_times_Q():
    Q, K, V, G = qkv(5)
    c = math.sqrt(Q.shape[-1])
    dQ, dK, dV = ac.attention_backward(c * Q, K, V, G)
    for bad, good in zip(faults.attention_backward_unscaled_throughout(Q, K, V, G), (c * dQ, dK, dV)):
        assert_allclose(bad, good, rtol=1e-12, atol=1e-14)


def test_unscaled_throughout_rejects_a_G_of_the_wrong_shape():
    Q, K, V, G = qkv(0)
    with pytest.raises(ValueError, match=r"G must have the shape of O = A V, \(5, 4\), got \(4, 5\)"):
        faults.attention_backward_unscaled_throughout(Q, K, V, G.T)


def test_saturated_weights_hide_the_unscaled_and_transposed_backward():
    # fault control of the test point itself: saturation makes the gradient check blind
    Q, K, V, G = qkv(0, scale=40.0)
    for backward in (faults.attention_backward_unscaled, faults.attention_backward_missing_transpose):
        assert gradcheck_qkv(backward, Q, K, V, G).passed


# --- 5. dX keeps only the last branch ----------------------------------------------------

def test_last_branch_dX_is_caught_only_by_perturbing_X():
    h = random_head(seed=3, T=4, D=6, d=2, r=5)
    good, bad = ac.head_backward(*h), faults.head_backward_last_branch(*h)
    inputs = {"X": h.X, "W_Q": h.W_Q, "W_K": h.W_K, "W_V": h.W_V}
    J = lambda X, W_Q, W_K, W_V: head_objective(X, W_Q, W_K, W_V, h.G)
    assert ac.gradcheck(J, inputs, {"W_Q": bad.dW_Q, "W_K": bad.dW_K, "W_V": bad.dW_V}).passed  # blind
    assert not ac.gradcheck(J, inputs, {"X": bad.dX}).passed                                      # caught
    assert ac.gradcheck(J, inputs, {"X": good.dX}).passed
    Q, K, V = ac.project(h.X, h.W_Q, h.W_K, h.W_V)
    dV = ac.attention_backward(Q, K, V, h.G)[2]
    assert_allclose(bad.dX, dV @ h.W_V.T, rtol=1e-12, atol=1e-14)  # (T, r) x (r, D) -> (T, D)


# --- a numerical fault: no max subtraction ------------------------------------------------

def test_no_max_subtraction_overflows_on_extreme_scores():
    S = np.array([[1e4, -1e4, 0.0], [-1e4, 1e4, 1e4]])
    with np.errstate(over="ignore", invalid="ignore"):
        A_bad = faults.softmax_without_max_subtraction(S)
    assert np.isnan(A_bad).any()
    with pytest.raises(AssertionError, match="rows summing to one: A holds a non-finite weight"):
        check_rows_sum_to_one(A_bad)
    check_rows_sum_to_one(ac.softmax(S))


@given(matrices((3, 4), scale=20.0))
def test_no_max_subtraction_agrees_on_mild_scores(S):
    # the fault is purely numerical: on mild scores it is the softmax
    assert_allclose(faults.softmax_without_max_subtraction(S), ac.softmax(S), rtol=1e-12, atol=1e-300)
