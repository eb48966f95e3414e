"""Layer normalisation over the last axis, as a forward/backward pair.

Each row ``x`` (the ``D`` features of one position) is centred and scaled, then given a
learned gain ``gamma`` and shift ``beta``, both of shape ``(D,)``::

    mu = mean(x),  var = mean((x - mu)^2)        (biased: divide by D)
    inv_std = 1 / sqrt(var + eps),  x_hat = (x - mu) * inv_std
    y = gamma * x_hat + beta

The backward pass is the compact formula, ``g = dy * gamma``, means over the row::

    dx = (g - mean(g) - x_hat * mean(g * x_hat)) * inv_std
    dgamma = sum(dy * x_hat),  dbeta = sum(dy)   (summed over every leading axis)

The subtracted ``mean(g)`` makes every row of ``dx`` sum to zero (``dx`` is orthogonal
to the ones vector: shifting a row does not change ``y``); the ``x_hat`` term makes it
orthogonal to ``x_hat`` when ``eps = 0`` (scaling a row does not change ``y``). With
``eps > 0`` the second is approximate:
``x_hat . dx = eps / (var + eps) * inv_std * (g . x_hat)``.

>>> import numpy as np
>>> params = init_layernorm(4)
>>> Y, saved = layernorm_forward(params, np.array([[1.0, 2.0, 3.0, 6.0]]), eps=0.0)
>>> Y  # mean 3, variance 3.5
array([[-1.06904497, -0.53452248,  0.        ,  1.60356745]])
>>> dparams, dX = layernorm_backward(params, saved, np.array([[1.0, 0.0, 0.0, 0.0]]))
>>> bool(abs(dX.sum()) < 1e-15), bool(abs(dX @ saved["x_hat"][0]) < 1e-15)
(True, True)
"""

import math

import numpy as np

from .._validate import as_float_array, require_params, require_sizes

__all__ = ["init_layernorm", "layernorm_forward", "layernorm_backward"]

PARAMETER_NAMES = ("gamma", "beta")


def init_layernorm(D):
    """Return ``{"gamma": ones(D), "beta": zeros(D)}``: at initialisation ``y = x_hat``.

    >>> init_layernorm(3)
    {'gamma': array([1., 1., 1.]), 'beta': array([0., 0., 0.])}
    """
    require_sizes(D=D)
    return {"gamma": np.ones(D), "beta": np.zeros(D)}


def _require_eps(eps):
    """Raise ``ValueError`` unless ``eps`` is a finite number ``>= 0`` (not a bool)."""
    if isinstance(eps, (bool, np.bool_)) or not isinstance(
            eps, (int, float, np.integer, np.floating)):
        raise ValueError(f"eps must be a non-negative number, got {eps!r}")
    if not (math.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")


def _check(params, X):
    """Return ``gamma, beta, X`` as float arrays; ``ValueError`` names wrong shapes."""
    require_params("layernorm", params, PARAMETER_NAMES)
    gamma = as_float_array("gamma", params["gamma"], ndim=1)
    beta = as_float_array("beta", params["beta"], ndim=1)
    X = as_float_array("X", X, min_ndim=1)
    D = X.shape[-1]
    for name, p in (("gamma", gamma), ("beta", beta)):
        if p.shape != (D,):
            raise ValueError(
                f"{name} must have one entry per feature of X: X has shape {X.shape} "
                f"(D={D}), {name} has shape {p.shape}"
            )
    return gamma, beta, X


def layernorm_forward(params, X, *, eps=1e-5):
    """Return ``Y, saved``, ``Y = gamma * (X - mu) / sqrt(var + eps) + beta`` per row.

    ``mu`` and ``var`` (biased) are taken over the last axis of ``X (..., D)``; ``Y``
    has the shape of ``X``. ``saved`` holds ``X``, ``x_hat (..., D)`` and
    ``inv_std (..., 1)``. With ``eps = 0`` a constant row divides by zero.

    >>> Y, saved = layernorm_forward(init_layernorm(3), np.ones((2, 5, 3)))
    >>> Y.shape, saved["inv_std"].shape  # a constant row: x_hat = 0, Y = beta
    ((2, 5, 3), (2, 5, 1))
    >>> layernorm_forward(init_layernorm(4), np.ones((2, 3)))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: gamma must have one entry per feature of X: X has shape (2, 3) ...
    """
    _require_eps(eps)
    gamma, beta, X = _check(params, X)
    D = X.shape[-1]
    mu = X.sum(axis=-1, keepdims=True) / D  # (..., 1)
    centred = X - mu
    var = (centred * centred).sum(axis=-1, keepdims=True) / D  # biased: divide by D
    inv_std = 1.0 / np.sqrt(var + eps)  # (..., 1)
    x_hat = centred * inv_std
    Y = gamma * x_hat + beta
    return Y, {"X": X, "x_hat": x_hat, "inv_std": inv_std}


def layernorm_backward(params, saved, dY):
    """Return ``{"gamma": dgamma, "beta": dbeta}, dX`` by the compact formula.

    >>> params = init_layernorm(3)
    >>> _, saved = layernorm_forward(params, np.arange(6.0).reshape(2, 3))
    >>> layernorm_backward(params, saved, np.ones((3, 2)))
    Traceback (most recent call last):
    ...
    ValueError: dY must have the shape of Y (and X), (2, 3), got (3, 2)
    """
    gamma, _, X = _check(params, saved["X"])
    x_hat, inv_std = saved["x_hat"], saved["inv_std"]
    dY = as_float_array("dY", dY)
    if dY.shape != X.shape:
        raise ValueError(
            f"dY must have the shape of Y (and X), {X.shape}, got {dY.shape}")
    D = X.shape[-1]
    g = dY * gamma  # the gradient with respect to x_hat
    mean_g = g.sum(axis=-1, keepdims=True) / D  # the mean path
    mean_gx = (g * x_hat).sum(axis=-1, keepdims=True) / D  # the variance path
    dX = (g - mean_g - x_hat * mean_gx) * inv_std
    dgamma = np.sum((dY * x_hat).reshape(-1, D), axis=0)  # summed over leading axes
    dbeta = np.sum(dY.reshape(-1, D), axis=0)
    return {"gamma": dgamma, "beta": dbeta}, dX
