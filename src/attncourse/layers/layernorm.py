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

import numpy as np

from .._validate import as_float_like, as_number, as_params, require_sizes, shaped

__all__ = ["init_layernorm", "layernorm_forward", "layernorm_backward"]

PARAMETER_NAMES = ("gamma", "beta")
SPEC = "X(..., D) gamma(D) beta(D)"


def init_layernorm(D):
    """Return ``{"gamma": ones(D), "beta": zeros(D)}``: at initialisation ``y = x_hat``.

    >>> init_layernorm(3)
    {'gamma': array([1., 1., 1.]), 'beta': array([0., 0., 0.])}
    """
    require_sizes(D=D)
    return {"gamma": np.ones(D), "beta": np.zeros(D)}


def layernorm_forward(params, X, *, eps=1e-5):
    """Return ``Y, saved``, ``Y = gamma * (X - mu) / sqrt(var + eps) + beta`` per row.

    ``mu`` and ``var`` (biased) are taken over the last axis of ``X (..., D)``; ``Y``
    has the shape of ``X``. ``saved`` holds ``X``, ``x_hat (..., D)`` and
    ``inv_std (..., 1)``. With ``eps = 0`` a constant row divides by zero.

    >>> Y, saved = layernorm_forward(init_layernorm(3), np.ones((2, 5, 3)))
    >>> Y.shape, saved["inv_std"].shape  # a constant row: x_hat = 0, Y = beta
    ((2, 5, 3), (2, 5, 1))
    >>> layernorm_forward(init_layernorm(4), np.ones((2, 3)))
    Traceback (most recent call last):
    ...
    ValueError: gamma must have shape (D) with D=3 (as in X), got shape (4,)
    """
    X, gamma, beta = shaped(SPEC, X, *as_params("layernorm", params, PARAMETER_NAMES))
    eps = as_number("eps", eps, "[0, inf)")
    D = X.shape[-1]
    mu = X.sum(axis=-1, keepdims=True) / D  # (..., 1)
    centred = X - mu  # (..., D)
    var = (centred * centred).sum(axis=-1, keepdims=True) / D  # biased: divide by D
    inv_std = 1.0 / np.sqrt(var + eps)  # (..., 1)
    x_hat = centred * inv_std  # (..., D)
    Y = gamma * x_hat + beta  # (D,) * (..., D) + (D,) -> (..., D)
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
    X, gamma, _ = shaped(SPEC, saved["X"], *as_params("layernorm", params,
                                                      PARAMETER_NAMES))
    dY = as_float_like("dY", dY, X.shape, "Y (and X)")
    x_hat, inv_std = saved["x_hat"], saved["inv_std"]  # (..., D), (..., 1)
    D = X.shape[-1]
    g = dY * gamma  # (..., D): the gradient with respect to x_hat
    mean_g = g.sum(axis=-1, keepdims=True) / D  # the mean path
    mean_gx = (g * x_hat).sum(axis=-1, keepdims=True) / D  # the variance path
    dX = (g - mean_g - x_hat * mean_gx) * inv_std  # (..., D)
    dgamma = np.sum((dY * x_hat).reshape(-1, D), axis=0)  # summed over leading axes
    dbeta = np.sum(dY.reshape(-1, D), axis=0)
    return {"gamma": dgamma, "beta": dbeta}, dX
