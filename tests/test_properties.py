"""Tests of attncourse.kit.properties, including fault controls of the checks
themselves."""

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from attncourse.kit.faults import attention as fa
from attncourse.kit.faults import softmax as fs
from attncourse.layers.attention import attention_forward, attention_scores
from attncourse.softmax import softmax, softmax_backward
from attncourse.kit import CheckFailed
from attncourse.kit.properties import (
    assert_convex_hull,
    assert_rows_sum_to_one,
    assert_rows_sum_to_zero,
    assert_transposed_scores,
)
from strategies import matrices


# --- rows of A sum to one -------------------------------------------------------------

@given(matrices((2, 3, 5), scale=30.0))
def test_softmax_rows_pass(S):
    assert_rows_sum_to_one(softmax(S))


@pytest.mark.parametrize(
    "A, message",
    [
        (np.array([[0.5, 0.6]]), r"rows summing to one: row \(0,\) of A sums to 1.1"),
        (
            np.array([[1.2, -0.2]]),
            r"rows summing to one: A holds a negative weight -0.2 at \(0, 1\)",
        ),
        (
            np.array([[np.nan, 1.0]]),
            r"rows summing to one: A holds a non-finite weight nan at \(0, 0\)",
        ),
        (
            np.array([[[1.0, 0.0]], [[0.3, 0.3]]]),
            r"rows summing to one: row \(1, 0\) of A sums to 0.6",
        ),
    ],
)
def test_bad_rows_are_named(A, message):
    with pytest.raises(CheckFailed, match=message):
        assert_rows_sum_to_one(A)


def test_row_check_tolerance_is_tight():
    assert_rows_sum_to_one(np.array([[0.5, 0.5 + 1e-16]]))
    with pytest.raises(CheckFailed, match="rows summing to one"):
        assert_rows_sum_to_one(np.array([[0.5, 0.5 + 1e-12]]))


# --- convex hull ----------------------------------------------------------------------


@given(
    matrices((4, 3), scale=5.0),
    matrices((3, 6), scale=5.0),
    matrices((6, 2), scale=5.0),
)
def test_attention_outputs_lie_in_the_hull(Q, K_T, V):
    O, _ = attention_forward(Q, K_T.T, V)
    assert_convex_hull(O, V)


def test_hull_check_catches_unnormalised_weights():
    rng = np.random.default_rng(0)
    S, V = rng.standard_normal((4, 5)), rng.uniform(1.0, 2.0, size=(5, 3))
    E = np.exp(S - S.max())  # not divided by the row sums
    # weights sum to 3: outside the hull of positive V
    O_bad = (E / E.sum(axis=-1, keepdims=True) * 3.0) @ V
    with pytest.raises(
        CheckFailed, match=r"convex-hull bound: O\[0, 0\] = .* lies outside"
    ):
        assert_convex_hull(O_bad, V)


def test_hull_check_names_the_batch():
    V = np.zeros((2, 3, 2))
    V[:, 0] = 1.0  # columns range over [0, 1]
    O = np.full((2, 1, 2), 0.5)
    O[1, 0, 1] = 1.5
    with pytest.raises(
        CheckFailed,
        match=r"O\[1, 0, 1\] = 1.5 lies outside \[0, 1\].*column 1 of V \(batch "
            r"\(1,\)\)",
    ):
        assert_convex_hull(O, V)


def test_hull_check_rejects_mismatched_widths():
    with pytest.raises(
        ValueError,
        match=r"O and V must have the same width r, got O \(2, 3\) and V \(4, 2\)",
    ):
        assert_convex_hull(np.zeros((2, 3)), np.zeros((4, 2)))
    with pytest.raises(ValueError, match=r"O must be at least 2-D, got shape \(3,\)"):
        assert_convex_hull(np.zeros(3), np.zeros((4, 3)))


# --- rows of dS sum to zero -----------------------------------------------------------


@given(matrices((3, 5), scale=10.0), matrices((3, 5), scale=10.0))
def test_softmax_backward_rows_pass(S, dA):
    assert_rows_sum_to_zero(softmax_backward(softmax(S), dA))


# dA with every entry of magnitude in [0.1, 3], built directly (a filter would reject
# most draws)
away_from_zero = st.builds(
    lambda m, sign: m * sign, st.floats(0.1, 3.0), st.sampled_from([-1.0, 1.0])
)


@given(matrices((3, 5), scale=3.0), arrays(np.float64, (3, 5), elements=away_from_zero))
def test_numerator_only_rows_fail_unless_the_row_mean_vanishes(S, dA):
    A = softmax(S)
    dS_bad = fs.softmax_backward_numerator_only(A, dA)
    row_mean = np.sum(A * dA, axis=-1)
    # a zero row mean is the one case the fault is harmless
    assume(np.abs(row_mean).max() > 1e-9)
    with pytest.raises(CheckFailed, match="rows of dS summing to zero"):
        assert_rows_sum_to_zero(dS_bad)


def test_zero_row_check_names_the_row_and_rejects_nan():
    with pytest.raises(CheckFailed, match=r"row \(1,\) sums to -2"):
        assert_rows_sum_to_zero(np.array([[1.0, -1.0], [-1.0, -1.0]]))
    with pytest.raises(CheckFailed, match="NaN or infinity"):
        assert_rows_sum_to_zero(np.array([[np.inf, 0.0]]))


# --- transpose ------------------------------------------------------------------------


def test_transpose_check():
    assert_transposed_scores(attention_scores)
    with pytest.raises(
        CheckFailed,
        match=r"transpose: .*\[\[5.0, 2.0\], \[2.0, 1.0\]\].*transpose of K is missing",
    ):
        assert_transposed_scores(fa.attention_scores_missing_transpose)
    # (2, 2) x (2, 2) -> (2, 2); right product, wrong scale: no hint
    unscaled = lambda Q, K: Q @ K.T
    with pytest.raises(
        CheckFailed,
        match=r"transpose: .*expected Q K\^T = \[\[1.0, 4.0\], \[0.0, 1.0\]\]$",
    ):
        assert_transposed_scores(unscaled)


def test_a_failure_names_its_property_and_detail():
    with pytest.raises(CheckFailed) as info:
        assert_rows_sum_to_one(np.array([[0.5, 0.6]]))
    assert info.value.property == "rows summing to one"
    assert info.value.detail == "row (0,) of A sums to 1.1"
    # pytest and nbval report it as a failed check
    assert isinstance(info.value, AssertionError)
