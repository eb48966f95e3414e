"""Tests of Chapter 5's block checkers: check_prenorm_residual (a pre-norm residual
sublayer from scratch) and check_block_residual's guard against in-place updates."""

import contextlib
import io

import numpy as np
import pytest

from attncourse.kit import CheckFailed
from attncourse.kit.exercises import UNFINISHED
from attncourse.kit.exercises.block import (
    PRENORM_RESIDUAL_PROPERTIES,
    check_block_residual,
    check_prenorm_residual,
)
from attncourse.layers.block import residual_backward


def scratch(identity=1.0, mean_term=True, variance_term=True, ddof=0, residual=True,
            dW_T=False, beta_from_dY=False, in_place=False, sign=1.0, sum_rows=True):
    """``Y = X + LN(X) W`` forward and backward in plain numpy, with one chosen defect
    (the defaults give a correct answer)."""

    def fn(X, gamma, beta, W, dY):
        D = X.shape[-1]
        mu = X.mean(axis=-1, keepdims=True)
        var = ((X - mu) ** 2).sum(axis=-1, keepdims=True) / (D - ddof)
        inv_std = 1.0 / np.sqrt(var + 1e-5)
        x_hat = (X - mu) * inv_std
        N = gamma * x_hat + beta
        Y = (X if residual else 0.0) + N @ W
        dN = dY @ W.T
        rows = (lambda M: M.reshape(-1, D).sum(axis=0)) if sum_rows else (
            lambda M: M)
        dW = N.reshape(-1, D).T @ dY.reshape(-1, D)
        if dW_T:
            dW = dW.T
        dbeta = rows(dY if beta_from_dY else dN)
        dgamma = rows(dN * x_hat)
        g = dN * gamma
        dX_ln = g
        if mean_term:
            dX_ln = dX_ln - g.mean(axis=-1, keepdims=True)
        if variance_term:
            dX_ln = dX_ln - x_hat * (g * x_hat).mean(axis=-1, keepdims=True)
        dX_ln = dX_ln * inv_std
        if in_place:
            dY += dX_ln
            return Y, dY, dgamma, dbeta, dW
        return Y, sign * (identity * dY + dX_ln), dgamma, dbeta, dW

    return fn


def failure(checker, fn):
    with pytest.raises(CheckFailed) as info:
        checker(fn)
    assert info.value.fix, "every failure suggests a fix"
    return info.value


def test_a_from_scratch_answer_passes_on_several_seeds():
    for seed in (0, 1, 2):
        assert check_prenorm_residual(scratch(), seed=seed) == \
            PRENORM_RESIDUAL_PROPERTIES


@pytest.mark.parametrize(
    "wrong, prop, words",
    [
        (scratch(residual=False), "Y", "add the input back"),
        (scratch(ddof=1), "Y", "not D - 1"),
        (scratch(dW_T=True), "dW", "transpose"),
        (scratch(beta_from_dY=True), "dbeta", "not of Y"),
        (scratch(identity=0.0), "dX", "the identity path is missing"),
        (scratch(identity=2.0), "dX", "counted twice"),
        (scratch(mean_term=False), "dX", "mean term is missing"),
        (scratch(variance_term=False), "dX", "variance term is missing"),
        (scratch(sign=-1.0), "dX", "wrong sign"),
        (scratch(in_place=True), "inputs unchanged", "must not be written into dY"),
    ],
)
def test_each_typical_mistake_is_named_with_its_fix(wrong, prop, words):
    error = failure(check_prenorm_residual, wrong)
    assert error.property == prop and str(error).startswith(prop + ":")
    assert words in error.fix, error.fix


def test_gradients_not_summed_over_the_rows_are_a_shape_error():
    error = failure(check_prenorm_residual, scratch(sum_rows=False))
    assert error.property == "returns Y, dX, dgamma, dbeta, dW"
    assert "dgamma has shape (2, 5, 6), expected (6,)" in error.detail
    assert "sum dgamma and dbeta over every row" in error.fix


def test_a_stub_is_reported_in_one_line():
    def prenorm_from_scratch(X, gamma, beta, W, dY):
        raise NotImplementedError("your code here")

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert check_prenorm_residual(prenorm_from_scratch) is None
    assert printed.getvalue() == UNFINISHED.format(name="prenorm_from_scratch") + "\n"


def test_the_residual_checker_rejects_an_overwritten_gradient():
    def overwrites(dY, d_sublayer):
        dY += d_sublayer
        return dY

    def mutates_the_other(dY, d_sublayer):
        d_sublayer += dY
        return d_sublayer

    for fn, name in ((overwrites, "dY"), (mutates_the_other, "d_sublayer")):
        error = failure(check_block_residual, fn)
        assert error.property == "inputs unchanged"
        assert f"wrote into its input {name}" in error.detail
        assert "return a new array" in error.fix
    assert check_block_residual(residual_backward)[1] == "inputs unchanged"


def test_the_chapter_solution_passes_the_checker():
    import json
    import pathlib
    import re

    notebook = (pathlib.Path(__file__).resolve().parents[1] / "chapters"
                / "05_the_block.ipynb")
    cells = json.loads(notebook.read_text())["cells"]
    solution = next("".join(c["source"]) for c in cells if c["cell_type"] == "markdown"
                    and "````{solution} ex-ch5-prenorm" in "".join(c["source"]))
    code = re.search(r"```python\n(.*?)```", solution, re.S).group(1)
    namespace = {"np": np, "check_prenorm_residual": check_prenorm_residual}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(code, namespace)  # defines my_prenorm_residual, prints the verdict
    assert check_prenorm_residual(namespace["my_prenorm_residual"]) == \
        PRENORM_RESIDUAL_PROPERTIES
    assert "attncourse" not in code  # numpy only
