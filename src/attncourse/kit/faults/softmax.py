"""Planted mistakes in :mod:`attncourse.softmax`, with their registry.

The wrong axis, the numerator path alone, no max subtraction, ``-inf`` for hidden
entries: each function has the signature of the function it imitates. :data:`FAULTS`
says which of :data:`CHECKS` catch each one and which are blind to it; :data:`CORRECT`
holds the package functions every check must pass.
"""

import numpy as np

from ..._validate import as_float_array, as_float_like
from ...layers.attention import causal_mask
from ...softmax import softmax, softmax_backward
from ..failed import CheckFailed
from ..gradients import gradcheck
from ..properties import assert_rows_sum_to_one, assert_rows_sum_to_zero
from ._registry import Check, Fault, require_gradcheck

__all__ = [
    "FAULTS",
    "CHECKS",
    "CORRECT",
    "BUILDING_BLOCKS",
    "softmax_columnwise",
    "softmax_backward_numerator_only",
    "softmax_without_max_subtraction",
    "naive_masked_softmax",
]


def softmax_columnwise(S, visible=None):
    """FAULT: normalise each column (over queries) instead of each row (over keys).

    ``visible`` is accepted for the signature and ignored.

    >>> import numpy as np
    >>> softmax_columnwise(np.zeros((2, 3)))
    array([[0.5, 0.5, 0.5],
           [0.5, 0.5, 0.5]])
    """
    S = as_float_array("S", S)
    E = np.exp(S - np.max(S, axis=-2, keepdims=True))
    return E / np.sum(E, axis=-2, keepdims=True)  # the fault: axis -2 instead of -1


def softmax_backward_numerator_only(A, dA):
    """FAULT: ``dS = A * dA``, the numerator path alone (the denominator path dropped).

    >>> import numpy as np
    >>> A, dA = np.array([[0.75, 0.25]]), np.array([[2.0, 0.0]])
    >>> softmax_backward_numerator_only(A, dA)
    array([[1.5, 0. ]])
    """
    A = as_float_array("A", A)
    dA = as_float_like("dA", dA, A.shape, "A")
    return A * dA  # the core: A * (dA - row_mean)


def softmax_without_max_subtraction(S, visible=None):
    """FAULT: ``exp(S) / sum(exp(S))`` with no shift: overflows from about 710.

    ``visible`` is accepted for the signature and ignored. Call it under
    ``np.errstate(over="ignore", invalid="ignore")`` to silence the overflow warnings.

    >>> import numpy as np
    >>> with np.errstate(over="ignore", invalid="ignore"):
    ...     softmax_without_max_subtraction(np.array([[1e4, 0.0]]))
    array([[nan,  0.]])
    """
    S = as_float_array("S", S)
    E = np.exp(S)  # the fault: no max subtraction
    return E / np.sum(E, axis=-1, keepdims=True)


def naive_masked_softmax(S, visible):
    """WRONG for rows with nothing visible: hidden scores ``-inf``, then a softmax.

    Such a row has maximum ``-inf``; ``-inf - (-inf)`` is ``NaN``.

    >>> import numpy as np
    >>> visible = np.array([[True, False], [False, False]])  # row 1 has nothing visible
    >>> with np.errstate(invalid="ignore"):
    ...     naive_masked_softmax(np.zeros((2, 2)), visible)
    array([[ 1.,  0.],
           [nan, nan]])
    """
    S = np.where(visible, S, -np.inf)
    shifted = S - np.max(S, axis=-1, keepdims=True)
    E = np.exp(shifted)
    return E / np.sum(E, axis=-1, keepdims=True)


# --- the registry ---------------------------------------------------------------------


def _scores(seed, shape, scale=4.0):
    return scale * np.random.default_rng(seed).standard_normal(shape)


def _rows_sum_to_one(softmax_fn):
    """Random non-square scores: every row of the weights is a distribution."""
    assert_rows_sum_to_one(softmax_fn(_scores(0, (3, 5))))


def _extreme_scores(softmax_fn):
    """Scores of +-1e4 (overflow), a row of -1000 (underflow): finite weights."""
    S = np.array([[1e4, -1e4, 0.0], [-1e4, 1e4, 1e4], [-1e3, -1e3, -1e3]])
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        A = softmax_fn(S)
    assert_rows_sum_to_one(A)


def _hidden_get_zero(A, visible):
    hidden = np.broadcast_to(~np.asarray(visible, dtype=bool), np.shape(A))
    if not np.all(np.asarray(A)[hidden] == 0.0):
        raise CheckFailed("hidden entries get weight 0",
                          "a hidden entry has a non-zero or NaN weight")


def _masked_rows(softmax_fn):
    """A causal mask on 4 x 6 scores (no empty row): hidden entries 0, rows sum to 1."""
    visible = causal_mask(4, 6)
    A = softmax_fn(_scores(1, (4, 6)), visible)
    _hidden_get_zero(A, visible)
    assert_rows_sum_to_one(A)


def _empty_row(softmax_fn):
    """A mask that hides all of row 1: it reads nothing (all 0), the others sum to 1."""
    visible = causal_mask(4, 6)
    visible[1] = False
    with np.errstate(invalid="ignore"):
        A = softmax_fn(_scores(2, (4, 6)), visible)
    _hidden_get_zero(A, visible)
    assert_rows_sum_to_one(np.asarray(A)[[0, 2, 3]])


def _dS_rows_sum_to_zero(backward):
    """Random weights and upstream gradient: every row of ``dS`` sums to zero."""
    A = softmax(_scores(3, (4, 6), scale=1.5))
    assert_rows_sum_to_zero(backward(A, _scores(4, (4, 6), scale=1.0)))


def _softmax_gradcheck(backward):
    """Central differences of ``J = sum(softmax(S) * dA)`` with respect to ``S``."""
    S, dA = _scores(5, (3, 5), scale=1.5), _scores(6, (3, 5), scale=1.0)
    J = lambda S: float(np.sum(softmax(S) * dA))  # noqa: E731
    report = gradcheck(J, {"S": S}, {"S": backward(softmax(S), dA)})
    require_gradcheck("finite differences of the softmax", report)


CHECKS = {c.name: c for c in (
    Check("rows sum to one", "softmax", _rows_sum_to_one),
    Check("extreme scores finite", "softmax", _extreme_scores),
    Check("masked rows sum to one", "softmax", _masked_rows),
    Check("empty row reads nothing", "softmax", _empty_row),
    Check("dS rows sum to zero", "softmax_backward", _dS_rows_sum_to_zero),
    Check("softmax gradcheck", "softmax_backward", _softmax_gradcheck),
)}
"""Check name -> :class:`~attncourse.kit.faults.Check`."""

FAULTS = (
    Fault("softmax_columnwise", "normalises each column (over queries), not each row",
          softmax_columnwise, "softmax",
          caught_by=("rows sum to one", "masked rows sum to one")),
    Fault("softmax_without_max_subtraction", "no max subtraction: exp overflows",
          softmax_without_max_subtraction, "softmax",
          caught_by=("extreme scores finite",), blind=("rows sum to one",)),
    Fault("naive_masked_softmax", "hidden scores set to -inf: an empty row is NaN",
          naive_masked_softmax, "softmax",
          caught_by=("empty row reads nothing",), blind=("masked rows sum to one",)),
    Fault("softmax_backward_numerator_only", "dS = A dA: no denominator path",
          softmax_backward_numerator_only, "softmax_backward",
          caught_by=("dS rows sum to zero", "softmax gradcheck")),
)
"""The planted mistakes: the checks that catch each one, and those blind to it."""

CORRECT = {"softmax": softmax, "softmax_backward": softmax_backward}
"""Role -> the package function: every check must pass it."""

BUILDING_BLOCKS = {}
"""Public functions that are not faults themselves -> the fault they are part of."""
