"""Checker of Chapter 4's exercise on learned positions: their backward pass."""

import numpy as np

from ...layers.positions import positions_backward, positions_forward
from ..failed import CheckFailed
from ._base import _array, _call, reports_unfinished

__all__ = ["POSITIONS_BACKWARD_PROPERTIES", "check_positions_backward"]


POSITIONS_BACKWARD_PROPERTIES = (
    "returns (dP, dX)",
    "shapes",
    "rows 0..T-1: summed over the batch",
    "rows T..T_max-1: zero",
    "dX = dY",
    "any number of batch axes",
)


def _positions_result(fn, prop, dY, T_max):
    result = _call(fn, prop, dY.copy(), T_max)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise CheckFailed(
            "returns (dP, dX)",
            f"got {type(result).__name__}, not a pair",
            "return dP, dX",
        )
    dP, dX = (_array(x, prop, float) for x in result)
    if dP.shape != (T_max, dY.shape[-1]) or dX.shape != dY.shape:
        raise CheckFailed(
            "shapes",
            f"dY {dY.shape}, T_max={T_max}: dP {dP.shape} and dX "
            f"{dX.shape}, expected {(T_max, dY.shape[-1])} and {dY.shape}",
            "dP has the shape of P (T_max, D); dX the shape of dY",
        )
    return dP, dX


def _package_dP(dY, T_max):
    """The package's ``dP`` (:func:`positions_backward`): rows ``0 .. T-1`` are ``dY``
    summed over every batch axis, the others zero."""
    params = {"P": np.zeros((T_max, dY.shape[-1]))}
    _, saved = positions_forward(params, np.zeros_like(dY))
    return positions_backward(params, saved, dY)[0]["P"]


@reports_unfinished
def check_positions_backward(fn):
    """Check a learner's ``fn(dY, T_max) -> (dP, dX)`` for ``Y = X + P[:T]``.

    ``dY`` has shape ``(..., T, D)`` with ``T <= T_max``. Row ``t < T`` of ``dP`` is the
    upstream gradient at position ``t`` **summed** over every batch axis, rows
    ``t >= T`` are exactly zero, and ``dX = dY``. Tried on ``(B, T, D) = (3, 4, 5)``
    with ``T_max = 7``, then without a batch axis and with two. Returns the names of the
    properties checked.

    >>> from attncourse.layers.positions import positions_backward, positions_forward
    >>> import numpy as np
    >>> def learner(dY, T_max):
    ...     params = {"P": np.zeros((T_max, dY.shape[-1]))}
    ...     _, saved = positions_forward(params, np.zeros_like(dY))
    ...     dparams, dX = positions_backward(params, saved, dY)
    ...     return dparams["P"], dX
    >>> check_positions_backward(learner)[-1]
    'any number of batch axes'
    """
    rng = np.random.default_rng(7)
    B, T, D, T_max = 3, 4, 5, 7
    dY = rng.standard_normal((B, T, D))
    dP, dX = _positions_result(fn, "returns (dP, dX)", dY, T_max)
    prop = "rows 0..T-1: summed over the batch"
    want = _package_dP(dY, T_max)[:T]  # dY summed over the batch
    if not np.allclose(dP[:T], want, rtol=1e-12, atol=1e-12):
        close = lambda a: np.allclose(dP[:T], a, rtol=1e-12, atol=1e-12)
        if close(dY[-1]) or close(dY[0]):
            fix = (
                "each sequence overwrote dP: add every sequence's gradient, "
                "dP[:T] = dY.sum(axis=0)"
            )
        elif close(dY.mean(axis=0)):
            fix = "sum over the batch, do not average: row t is used by every sequence"
        else:
            fix = "dP[t] = sum over the batch of dY[b, t]"
        raise CheckFailed(
            prop,
            f"rows 0..{T - 1} of dP differ from dY summed over the "
            f"batch by up to {np.max(np.abs(dP[:T] - want)):.2e}",
            fix,
        )
    if np.any(dP[T:] != 0):
        raise CheckFailed(
            "rows T..T_max-1: zero",
            f"rows {T}..{T_max - 1} took no part "
            f"(T={T}) but hold {np.abs(dP[T:]).max():.2e}",
            "start from dP = np.zeros((T_max, D)) and fill rows 0..T-1 only",
        )
    if not np.array_equal(dX, dY):
        raise CheckFailed(
            "dX = dY",
            "dX differs from dY",
            "Y = X + P[:T]: the gradient passes to X unchanged, dX = dY",
        )
    prop = "any number of batch axes"
    for shape in ((T, D), (2, 3, T, D)):
        dY2 = rng.standard_normal(shape)
        dP2, _ = _positions_result(fn, prop, dY2, T_max)
        want2 = _package_dP(dY2, T_max)[:T]
        if not np.allclose(dP2[:T], want2, rtol=1e-12, atol=1e-12) or np.any(
            dP2[T:] != 0
        ):
            raise CheckFailed(
                prop,
                f"dY of shape {shape}: dP[:T] is not dY summed over its leading axes",
                "sum over every axis but the last two: "
                "dY.reshape(-1, T, D).sum(axis=0)",
            )
    return POSITIONS_BACKWARD_PROPERTIES
