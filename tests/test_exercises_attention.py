"""Tests of check_attention_backward (Chapter 3's attention forward and backward from
scratch): right answers pass, the typical wrong ones are named with their fix."""

import contextlib
import io
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attncourse.kit import CheckFailed
from attncourse.kit.exercises import UNFINISHED
from attncourse.kit.exercises.attention import (
    ATTENTION_BACKWARD_PROPERTIES,
    check_attention_backward,
)
from attncourse.layers.attention import attention_backward, attention_forward


def scratch(scale=True, scores_T=True, dV_T=True, dK_T=True, denominator=True,
            sign=1.0, axis=-1):
    """Attention forward and backward in plain numpy, with one chosen defect (the
    defaults give a correct answer)."""

    def fn(Q, K, V, G):
        c = 1 / math.sqrt(Q.shape[-1]) if scale else 1.0
        S = (Q @ K.T if scores_T else Q @ K) * c  # (T, d) x (d, T) -> (T, T)
        E = np.exp(S - S.max(axis=axis, keepdims=True))
        A = E / E.sum(axis=axis, keepdims=True)
        O = A @ V  # (T, T) x (T, r) -> (T, r)
        dV = A.T @ G if dV_T else A @ G  # (T, T) x (T, r) -> (T, r)
        dA = G @ V.T  # (T, r) x (r, T) -> (T, T)
        mean = np.sum(A * dA, axis=-1, keepdims=True) if denominator else 0.0
        dS = A * (dA - mean)
        dQ = sign * dS @ K * c  # (T, T) x (T, d) -> (T, d)
        dK = (dS.T if dK_T else dS) @ Q * c  # (T, T) x (T, d) -> (T, d)
        return O, dQ, dK, dV

    return fn


def failure(fn):
    with pytest.raises(CheckFailed) as info:
        check_attention_backward(fn)
    assert info.value.fix, "every failure suggests a fix"
    return info.value


def test_the_package_and_a_from_scratch_answer_pass():
    def package(Q, K, V, G):
        O, saved = attention_forward(Q, K, V)
        return (O, *attention_backward(saved, G))

    assert check_attention_backward(package) == ATTENTION_BACKWARD_PROPERTIES
    assert check_attention_backward(scratch()) == ATTENTION_BACKWARD_PROPERTIES


@pytest.mark.parametrize(
    "wrong, prop, words",
    [
        (scratch(scale=False), "O", "divide the scores by sqrt(d)"),
        (scratch(axis=0), "O", "normalise each query's row"),
        (scratch(dV_T=False), "dV", "transpose A: dV = A^T G"),
        (scratch(denominator=False), "dQ", "numerator path only"),
        (scratch(sign=-1.0), "dQ", "wrong sign"),
        (scratch(dK_T=False), "dK", "transpose dS: dK = dS^T Q / sqrt(d)"),
    ],
)
def test_each_typical_mistake_is_named_with_its_fix(wrong, prop, words):
    error = failure(wrong)
    assert error.property == prop and str(error).startswith(prop + ":")
    assert words in error.fix, error.fix


def test_a_backward_without_its_scale_is_named():
    # the forward pass right, 1/sqrt(d) forgotten in dQ only
    def fn(Q, K, V, G):
        O, dQ, dK, dV = scratch()(Q, K, V, G)
        return O, dQ * math.sqrt(Q.shape[-1]), dK, dV

    error = failure(fn)
    assert error.property == "dQ" and "divide by sqrt(d)" in error.fix


def test_a_missing_transpose_in_the_scores_cannot_run_and_is_reported():
    # Q K with d != T is not a product: the call's error is named, not swallowed
    error = failure(scratch(scores_T=False))
    assert error.property == "returns O, dQ, dK, dV"
    assert "raised ValueError" in error.detail and error.__cause__ is not None


@pytest.mark.parametrize(
    "fn, words",
    [
        (lambda Q, K, V, G: scratch()(Q, K, V, G)[:3], "got 3 values"),
        (lambda Q, K, V, G: list(scratch()(Q, K, V, G)), "got list"),
        (lambda Q, K, V, G: (*scratch()(Q, K, V, G)[:3], V.T), "dV has shape (4, 5)"),
    ],
)
def test_the_wrong_kind_of_result_is_named(fn, words):
    error = failure(fn)
    assert error.property == "returns O, dQ, dK, dV" and words in error.detail


def test_a_stub_is_reported_in_one_line():
    def attention_from_scratch(Q, K, V, G):
        raise NotImplementedError("your code here")

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert check_attention_backward(attention_from_scratch) is None
    assert printed.getvalue() == UNFINISHED.format(name="attention_from_scratch") + "\n"


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_the_checker_is_stable_over_seeds(seed):
    assert check_attention_backward(scratch(), seed=seed)[-1] == "dK"
    with pytest.raises(CheckFailed, match="^dK:"):
        check_attention_backward(scratch(dK_T=False), seed=seed)


def test_an_answer_that_writes_into_its_inputs_is_named():
    right = scratch()

    def subtracts_in_place(Q, K, V, G):
        O, dQ, dK, dV = right(Q, K, V, G)
        G -= O  # the learner reuses G's memory
        return O, dQ, dK, dV

    error = failure(subtracts_in_place)
    assert error.property == "inputs unchanged"
    assert "the G it was given" in error.detail and "never write into" in error.fix
