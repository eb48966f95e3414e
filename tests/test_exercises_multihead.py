"""Tests of check_multihead_backward (Chapter 4's multi-head attention forward and
backward from scratch): right answers pass, the typical wrong ones are named with
their fix."""

import contextlib
import io

import numpy as np
import pytest

from attncourse.kit import CheckFailed
from attncourse.kit.exercises import UNFINISHED
from attncourse.kit.exercises.multihead import (
    MULTIHEAD_BACKWARD_PROPERTIES,
    check_multihead_backward,
)
from attncourse.layers.multihead import multihead_backward, multihead_forward


def scratch(transpose=True, order=1,  # order=-1: the merge reverses the heads
            causal=True, head_scale=True, branches="QKV",
            batch_sum=True, in_place=False, sign=1.0):
    """Multi-head attention forward and backward in plain numpy, with one chosen
    defect (the defaults give a correct answer)."""

    def fn(X, W_Q, W_K, W_V, W_O, dY, heads):
        B, T, D = X.shape

        def split(M):
            w = M.shape[-1] // heads
            if not transpose:
                return M.reshape(B, heads, T, w)
            return M.reshape(B, T, heads, w).transpose(0, 2, 1, 3)

        def merge(M):
            if not transpose:
                return M.reshape(B, T, -1)
            return M[:, ::order].transpose(0, 2, 1, 3).reshape(B, T, -1)

        Q, K, V = split(X @ W_Q), split(X @ W_K), split(X @ W_V)
        d = Q.shape[-1] if head_scale else W_Q.shape[1]
        S = Q @ K.transpose(0, 1, 3, 2) / np.sqrt(d)  # (B, H, T, T)
        if causal:
            S = np.where(np.tril(np.ones((T, T), dtype=bool)), S, -1e30)
        E = np.exp(S - S.max(axis=-1, keepdims=True))
        A = E / E.sum(axis=-1, keepdims=True)
        C = merge(A @ V)  # (B, T, H r)
        Y = C @ W_O
        reduce = (lambda M: M.sum(axis=0)) if batch_sum else (lambda M: M.mean(axis=0))
        dW_O = reduce(C.transpose(0, 2, 1) @ dY)
        dO = split(dY @ W_O.T)
        dV = A.transpose(0, 1, 3, 2) @ dO
        dA = dO @ V.transpose(0, 1, 3, 2)
        dS = A * (dA - np.sum(A * dA, axis=-1, keepdims=True)) / np.sqrt(d)
        dQ, dK = dS @ K, dS.transpose(0, 1, 3, 2) @ Q
        grads = {"Q": merge(dQ), "K": merge(dK), "V": merge(dV)}
        W = {"Q": W_Q, "K": W_K, "V": W_V}
        dX = sum(grads[n] @ W[n].T for n in branches)
        dW = {n: reduce(X.transpose(0, 2, 1) @ grads[n]) for n in "QKV"}
        if in_place:
            dY += 0.0 * dY  # writes into the caller's array
            dY[...] = 0.0
        return Y, sign * dX, dW["Q"], dW["K"], dW["V"], dW_O

    return fn


def failure(fn):
    with pytest.raises(CheckFailed) as info:
        check_multihead_backward(fn)
    assert info.value.fix, "every failure suggests a fix"
    return info.value


def test_the_package_and_a_from_scratch_answer_pass():
    def package(X, W_Q, W_K, W_V, W_O, dY, heads):
        params = {"W_Q": W_Q, "W_K": W_K, "W_V": W_V, "W_O": W_O}
        Y, saved = multihead_forward(params, X, heads=heads)
        dparams, dX = multihead_backward(params, saved, dY)
        return (Y, dX, *(dparams[n] for n in ("W_Q", "W_K", "W_V", "W_O")))

    assert check_multihead_backward(package) == MULTIHEAD_BACKWARD_PROPERTIES
    assert check_multihead_backward(scratch()) == MULTIHEAD_BACKWARD_PROPERTIES
    for seed in (1, 2, 3):
        assert check_multihead_backward(scratch(), seed=seed)[-1] == "dX"


@pytest.mark.parametrize(
    "wrong, prop, words",
    [
        (scratch(transpose=False), "Y", "one reshape each"),
        (scratch(order=-1), "Y", "wrong order"),
        (scratch(causal=False), "Y", "every key visible"),
        (scratch(head_scale=False), "Y", "the width of one head"),
        (scratch(batch_sum=False), "dW_O", "do not average"),
        (scratch(branches="Q"), "dX", "sum the three branches"),
        (scratch(branches="QK"), "dX", "the V branch is missing"),
        (scratch(branches="QV"), "dX", "the K branch is missing"),
        (scratch(sign=-1.0), "dX", "wrong sign"),
        (scratch(in_place=True), "inputs unchanged", "in place"),
    ],
)
def test_each_typical_mistake_is_named_with_its_fix(wrong, prop, words):
    error = failure(wrong)
    assert error.property == prop and str(error).startswith(prop + ":")
    assert words in error.fix, error.fix


def test_the_mask_hint_never_recommends_minus_infinity():
    error = failure(scratch(causal=False))
    assert "inf" not in error.fix and "boolean visible mask" in error.fix


@pytest.mark.parametrize(
    "fn, words",
    [
        (lambda *a: scratch()(*a)[:5], "got 5 values"),
        (lambda *a: list(scratch()(*a)), "got list"),
        (lambda *a: (*scratch()(*a)[:5], scratch()(*a)[5].T), "dW_O has shape (6, 8)"),
    ],
)
def test_the_wrong_kind_of_result_is_named(fn, words):
    error = failure(fn)
    assert error.property == "returns Y, dX, dW_Q, dW_K, dW_V, dW_O"
    assert words in error.detail


def test_a_stub_is_reported_in_one_line():
    def multihead_from_scratch(X, W_Q, W_K, W_V, W_O, dY, heads):
        raise NotImplementedError("your code here")

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert check_multihead_backward(multihead_from_scratch) is None
    assert printed.getvalue() == UNFINISHED.format(name="multihead_from_scratch") + "\n"


def test_the_chapter_solution_passes_the_checker():
    import json
    import pathlib
    import re

    notebook = (pathlib.Path(__file__).resolve().parents[1] / "chapters"
                / "04_causality_heads_positions.ipynb")
    cells = json.loads(notebook.read_text())["cells"]
    solution = next("".join(c["source"]) for c in cells if c["cell_type"] == "markdown"
                    and "````{solution} ex-ch4-multihead" in "".join(c["source"]))
    code = re.search(r"```python\n(.*?)```", solution, re.S).group(1)
    namespace = {"np": np, "check_multihead_backward": check_multihead_backward}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(code, namespace)  # defines my_multihead, prints the checker's verdict
    assert check_multihead_backward(namespace["my_multihead"]) == \
        MULTIHEAD_BACKWARD_PROPERTIES
    assert "package" not in code and "attncourse" not in code  # numpy only
