"""Checker of Chapter 5's exercise on layer normalisation: its backward pass."""

import math

import numpy as np

from ...layers.layernorm import layernorm_forward
from ..failed import CheckFailed
from ..gradients import TOLERANCE, numerical_gradient
from ._base import _array, _call, reports_unfinished

__all__ = ["check_layernorm_backward"]


def _layernorm_case(rng, eps):
    """A LayerNorm input ``X (2, 3, 5)`` (rows of unequal scales) and its forward."""
    X = rng.normal(size=(2, 3, 5)) * rng.uniform(0.5, 2.0, size=(2, 3, 1)) + 0.7
    gamma = rng.uniform(0.5, 1.5, size=5) * rng.choice([-1.0, 1.0], size=5)
    params = {"gamma": gamma, "beta": rng.normal(size=5)}
    _, saved = layernorm_forward(params, X, eps=eps)
    return params, X, saved


@reports_unfinished
def check_layernorm_backward(fn, seed=0):
    """Check a learner's LayerNorm backward ``fn(dY, x_hat, inv_std, gamma) -> dX``.

    ``x_hat (..., D)`` and ``inv_std (..., 1)`` are what the forward pass saved,
    ``gamma (D,)`` the gain. Properties, in order: **shape** (``dX`` has the shape of
    ``dY``, also with batch axes); **rows of dX sum to zero** (the mean path: shifting a
    row leaves ``y`` unchanged); **dX orthogonal to x_hat** (the variance path: with
    ``eps = 0`` scaling a row leaves ``y`` unchanged), both to rounding error, with
    ``eps = 0``; **matches central differences of LayerNorm** (``eps = 1e-5``, every
    coordinate of ``X``, tolerance ``1e-7``).

    Raises :class:`CheckFailed` naming the first failed property; reports a stub
    (``NotImplementedError``) as unfinished. Returns the properties checked.

    >>> def compact(dY, x_hat, inv_std, gamma):
    ...     g = dY * gamma
    ...     mean_g = g.mean(axis=-1, keepdims=True)
    ...     mean_gx = (g * x_hat).mean(axis=-1, keepdims=True)
    ...     return (g - mean_g - x_hat * mean_gx) * inv_std
    >>> check_layernorm_backward(compact)[-1]
    'matches central differences of LayerNorm'
    >>> def no_mean(dY, x_hat, inv_std, gamma):
    ...     g = dY * gamma
    ...     return (g - x_hat * (g * x_hat).mean(axis=-1, keepdims=True)) * inv_std
    >>> check_layernorm_backward(no_mean)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    attncourse.kit.failed.CheckFailed: rows of dX sum to zero: ...
    """
    rng = np.random.default_rng(seed)
    params, X, saved = _layernorm_case(rng, eps=0.0)
    dY = rng.normal(size=X.shape)
    args = (
        dY.copy(),
        saved["x_hat"].copy(),
        saved["inv_std"].copy(),
        params["gamma"].copy(),
    )
    dX = _array(_call(fn, "shape", *args), "shape", np.float64)
    if dX.shape != dY.shape:
        raise CheckFailed(
            "shape",
            f"expected the shape of dY, {dY.shape}, got {dX.shape}",
            "dX has the shape of X and dY; means run over the last axis",
        )
    scale = 1e-12 * (1.0 + float(np.max(np.abs(dX))))  # rounding of a sum of D terms
    sums = dX.sum(axis=-1)
    if not np.all(np.abs(sums) <= scale):
        raise CheckFailed(
            "rows of dX sum to zero",
            f"the largest row sum is {float(np.max(np.abs(sums))):.2e}",
            "subtract the row mean of g = dY * gamma: the mean path",
        )
    along = np.sum(dX * saved["x_hat"], axis=-1)
    if not np.all(np.abs(along) <= scale):
        raise CheckFailed(
            "dX orthogonal to x_hat",
            f"with eps = 0, the largest x_hat . dX over a row is "
            f"{float(np.max(np.abs(along))):.2e}",
            "subtract x_hat * mean(g * x_hat): the variance path",
        )
    params, X, saved = _layernorm_case(rng, eps=1e-5)
    dY = rng.normal(size=X.shape)
    args = (
        dY.copy(),
        saved["x_hat"].copy(),
        saved["inv_std"].copy(),
        params["gamma"].copy(),
    )
    dX = _array(
        _call(fn, "matches central differences of LayerNorm", *args),
        "matches central differences of LayerNorm",
        np.float64,
    )

    def J(X):
        return float(np.sum(layernorm_forward(params, X, eps=1e-5)[0] * dY))

    numeric = numerical_gradient(J, X, 1e-5)
    err = float(np.max(np.abs(dX - numeric))) if dX.shape == X.shape else math.inf
    if not err < TOLERANCE:
        raise CheckFailed(
            "matches central differences of LayerNorm",
            f"eps = 1e-5: max |error| = {err:.1e} >= {TOLERANCE:.0e}",
            "g = dY * gamma (the gain first); multiply by inv_std last",
        )
    return (
        "shape",
        "rows of dX sum to zero",
        "dX orthogonal to x_hat",
        "matches central differences of LayerNorm",
    )
