"""Tests of attncourse.checks, including fault controls of the checkers themselves."""

import math

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from numpy.testing import assert_allclose

import attncourse as ac
from attncourse import faults
from attncourse.checks import (
    check_causal_attention,
    check_convex_hull,
    check_rows_sum_to_one,
    check_rows_sum_to_zero,
    check_transpose,
)
from strategies import matrices


# --- rows of A sum to one ------------------------------------------------------------------

@given(matrices((2, 3, 5), scale=30.0))
def test_softmax_rows_pass(S):
    check_rows_sum_to_one(ac.softmax(S))


@pytest.mark.parametrize("A, message", [
    (np.array([[0.5, 0.6]]), r"rows summing to one: row \(0,\) of A sums to 1.1"),
    (np.array([[1.2, -0.2]]), r"rows summing to one: A holds a negative weight -0.2 at \(0, 1\)"),
    (np.array([[np.nan, 1.0]]), r"rows summing to one: A holds a non-finite weight nan at \(0, 0\)"),
    (np.array([[[1.0, 0.0]], [[0.3, 0.3]]]), r"rows summing to one: row \(1, 0\) of A sums to 0.6"),
])
def test_bad_rows_are_named(A, message):
    with pytest.raises(AssertionError, match=message):
        check_rows_sum_to_one(A)


def test_row_check_tolerance_is_tight():
    check_rows_sum_to_one(np.array([[0.5, 0.5 + 1e-16]]))
    with pytest.raises(AssertionError, match="rows summing to one"):
        check_rows_sum_to_one(np.array([[0.5, 0.5 + 1e-12]]))


# --- convex hull ---------------------------------------------------------------------------

@given(matrices((4, 3), scale=5.0), matrices((3, 6), scale=5.0), matrices((6, 2), scale=5.0))
def test_attention_outputs_lie_in_the_hull(Q, K_T, V):
    O, _ = ac.attention_forward(Q, K_T.T, V)
    check_convex_hull(O, V)


def test_hull_check_catches_unnormalised_weights():
    rng = np.random.default_rng(0)
    S, V = rng.standard_normal((4, 5)), rng.uniform(1.0, 2.0, size=(5, 3))
    E = np.exp(S - S.max())  # not divided by the row sums
    O_bad = (E / E.sum(axis=-1, keepdims=True) * 3.0) @ V  # weights sum to 3: outside the hull of positive V
    with pytest.raises(AssertionError, match=r"convex-hull bound: O\[0, 0\] = .* lies outside"):
        check_convex_hull(O_bad, V)


def test_hull_check_names_the_batch():
    V = np.zeros((2, 3, 2)); V[:, 0] = 1.0  # columns range over [0, 1]
    O = np.full((2, 1, 2), 0.5); O[1, 0, 1] = 1.5
    with pytest.raises(AssertionError, match=r"O\[1, 0, 1\] = 1.5 lies outside \[0, 1\].*column 1 of V \(batch \(1,\)\)"):
        check_convex_hull(O, V)


def test_hull_check_rejects_mismatched_widths():
    with pytest.raises(ValueError, match=r"O and V must have the same width r, got O \(2, 3\) and V \(4, 2\)"):
        check_convex_hull(np.zeros((2, 3)), np.zeros((4, 2)))
    with pytest.raises(ValueError, match=r"O must be at least 2-D, got shape \(3,\)"):
        check_convex_hull(np.zeros(3), np.zeros((4, 3)))


# --- rows of dS sum to zero ----------------------------------------------------------------

@given(matrices((3, 5), scale=10.0), matrices((3, 5), scale=10.0))
def test_softmax_backward_rows_pass(S, dA):
    check_rows_sum_to_zero(ac.softmax_backward(ac.softmax(S), dA))


@given(matrices((3, 5), scale=3.0), matrices((3, 5), scale=3.0).filter(lambda dA: np.all(np.abs(dA) > 0.1)))
def test_numerator_only_rows_fail_unless_the_row_mean_vanishes(S, dA):
    A = ac.softmax(S)
    dS_bad = faults.softmax_backward_numerator_only(A, dA)
    row_mean = np.sum(A * dA, axis=-1)
    assume(np.abs(row_mean).max() > 1e-9)  # a zero row mean is the one case the fault is harmless
    with pytest.raises(AssertionError, match="rows of dS summing to zero"):
        check_rows_sum_to_zero(dS_bad)


def test_zero_row_check_names_the_row_and_rejects_nan():
    with pytest.raises(AssertionError, match=r"row \(1,\) sums to -2"):
        check_rows_sum_to_zero(np.array([[1.0, -1.0], [-1.0, -1.0]]))
    with pytest.raises(AssertionError, match="NaN or infinity"):
        check_rows_sum_to_zero(np.array([[np.inf, 0.0]]))


# --- transpose -----------------------------------------------------------------------------

def test_transpose_check():
    check_transpose(ac.attention_scores)
    with pytest.raises(AssertionError, match=r"transpose: .*\[\[5.0, 2.0\], \[2.0, 1.0\]\].*transpose of K is missing"):
        check_transpose(faults.attention_scores_missing_transpose)
    unscaled = lambda Q, K: Q @ K.T  # (2, 2) x (2, 2) -> (2, 2); right product, wrong scale: no hint
    with pytest.raises(AssertionError, match=r"transpose: .*expected Q K\^T = \[\[1.0, 4.0\], \[0.0, 1.0\]\]$"):
        check_transpose(unscaled)


# --- the causal_attention checker -----------------------------------------------------------

PROPERTIES = ["shape", "rows summing to one", "causality", "scaling", "dropout contract", "offset"]


def make(mask="before", scale=True, renormalise=True, swap=False, dropout_mode="output", offset="raise",
         transpose="swapaxes", neg=-np.inf, output_factor=1.0):
    """Build a causal_attention with one chosen defect (defaults give a correct one)."""

    def fn(query, key, value, query_offset=0, dropout=None):
        if query_offset != 0:
            if offset == "raise":
                raise NotImplementedError("Chapter 10")
            if offset == "valueerror":
                raise ValueError("no offsets")
        d = query.shape[-1]
        key_T = np.swapaxes(key, -1, -2) if transpose == "swapaxes" else key.T
        S = query @ key_T  # (..., T, d) x (..., d, T) -> (..., T, T)
        if scale is True:
            S = S / math.sqrt(d)
        elif scale == "by_d":
            S = S / d
        T_q, T_k = S.shape[-2:]
        future = np.arange(T_k)[None, :] > np.arange(T_q)[:, None]
        if mask == "before":
            S = np.where(future, neg, S)
        P = np.exp(S - S.max(axis=-1, keepdims=True))
        P = P / P.sum(axis=-1, keepdims=True)
        if mask == "after":
            P = np.where(future, 0.0, P)
            if renormalise:
                P = P / P.sum(axis=-1, keepdims=True)
        used = P
        if dropout is not None:
            if dropout_mode == "output":
                used = dropout(P)
            elif dropout_mode == "returned":
                P = used = dropout(P)
            elif dropout_mode == "twice":
                dropout(P)
                used = dropout(P)
            elif dropout_mode == "ignored":
                used = P
        out = output_factor * (used @ value)  # (..., T, T) x (..., T, r) -> (..., T, r)
        return (P, out) if swap else (out, P)

    return fn


def test_reference_and_a_correct_variant_pass():
    assert check_causal_attention(ac.causal_attention) == PROPERTIES
    assert check_causal_attention(make()) == PROPERTIES
    assert check_causal_attention(make(mask="after", renormalise=True)) == PROPERTIES  # mathematically the same
    assert check_causal_attention(make(neg=-1e4)) == PROPERTIES  # exp(-1e4) is exactly 0 in float64


def test_a_stub_raises_not_implemented():
    def stub(query, key, value, query_offset=0, dropout=None):
        raise NotImplementedError("attention")

    with pytest.raises(NotImplementedError):
        check_causal_attention(stub)


@pytest.mark.parametrize("broken, prop", [
    (make(swap=True), "shape"),
    (make(transpose="T"), "shape"),                          # .T also reverses the batch axes
    (lambda q, k, v, query_offset=0, dropout=None: make()(q, k, v)[0], "shape"),
    (make(mask="after", renormalise=False), "rows summing to one"),
    (make(mask="none"), "causality"),
    (make(neg=-100.0), "causality"),                         # leaks a weight of about e^-100
    (make(scale=False), "scaling"),
    (make(scale="by_d"), "scaling"),
    (make(output_factor=2.0), "scaling"),
    (make(dropout_mode="returned"), "dropout contract"),
    (make(dropout_mode="ignored"), "dropout contract"),
    (make(dropout_mode="twice"), "dropout contract"),
    (lambda q, k, v, query_offset=0: make()(q, k, v, query_offset), "dropout contract"),  # no dropout argument
    (make(offset="ignore"), "offset"),
    (make(offset="valueerror"), "offset"),
])
def test_each_broken_variant_fails_with_the_right_property(broken, prop):
    with pytest.raises(AssertionError) as info:
        check_causal_attention(broken)
    message = str(info.value)
    assert message.startswith(prop + ":"), message
    assert prop in PROPERTIES


@given(st.integers(0, 2**32 - 1))
def test_checker_is_stable_over_seeds(seed):
    assert check_causal_attention(ac.causal_attention, seed=seed) == PROPERTIES
    with pytest.raises(AssertionError, match="^causality:"):
        check_causal_attention(make(mask="none"), seed=seed)


def test_the_correct_variant_agrees_with_the_package():
    # the checker's own reference agrees with the package's causal attention
    rng = np.random.default_rng(7)
    q, k, v = rng.standard_normal((5, 3)), rng.standard_normal((5, 3)), rng.standard_normal((5, 4))
    out, P = ac.causal_attention(q, k, v)
    out2, P2 = make()(q, k, v)
    assert_allclose(out2, out, rtol=1e-12, atol=1e-12)
    assert_allclose(P2, P, rtol=1e-12, atol=1e-12)
