"""The GELU activation, exact and tanh forms: a layer pair without parameters.

The exact form weighs ``x`` by the standard normal distribution function ``Phi``::

    gelu(x) = x Phi(x),   Phi(x) = (1 + erf(x / sqrt 2)) / 2
    gelu'(x) = Phi(x) + x phi(x),   phi(x) = exp(-x^2 / 2) / sqrt(2 pi)

numpy has no ``erf`` (and scipy is not a dependency), so the exact form calls
``math.erf`` once per element: fine for the small arrays of the course. The tanh form
(``approximate=True``) is fast and is what the model uses by default (GPT-2's
convention)::

    gelu(x) ~ x/2 (1 + tanh(u)),   u = sqrt(2/pi) (x + 0.044715 x^3)
    d/dx = (1 + tanh(u))/2 + x/2 (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)

The two forms differ by less than ``1e-3`` in value and in slope: each derivative goes
with its own forward, and only a check at a tight tolerance tells them apart. The layer
has no parameters: ``params = {}`` and ``dparams = {}``.

>>> import numpy as np
>>> gelu(np.array([-1.0, 0.0, 1.0]))
array([-0.15865525,  0.        ,  0.84134475])
>>> Y, saved = gelu_forward({}, np.array([[1.0, 2.0]]), approximate=True)
>>> dparams, dX = gelu_backward({}, saved, np.ones((1, 2)))
>>> slope = gelu_derivative(np.array([[1.0, 2.0]]), approximate=True)
>>> dparams, bool(np.allclose(dX, slope))
({}, True)
"""

import math

import numpy as np

from .._validate import as_float_array, as_float_like, require_bool, require_that

__all__ = ["gelu", "gelu_derivative", "gelu_forward", "gelu_backward"]

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
CUBIC = 0.044715  # the tanh form's coefficient of x^3

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _tanh_u(x):
    """Return ``tanh(u)``, ``u = sqrt(2/pi) (x + 0.044715 x^3)``."""
    return np.tanh(SQRT_2_OVER_PI * (x + CUBIC * (x * x * x)))


def gelu(x, *, approximate=False):
    """Return ``x Phi(x)`` elementwise (``approximate=True``: the tanh form).

    >>> gelu(np.array([-3.0, 3.0])).round(6)  # exact: -3 Phi(-3), 3 Phi(3)
    array([-0.00405,  2.99595])
    >>> gelu(np.array([-3.0, 3.0]), approximate=True).round(6)
    array([-0.003637,  2.996363])
    """
    require_bool("approximate", approximate)
    x = as_float_array("x", x)
    if approximate:
        return 0.5 * x * (1.0 + _tanh_u(x))
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def gelu_derivative(x, *, approximate=False):
    """Return ``d gelu / dx`` elementwise (``approximate=True``: of the tanh form).

    >>> gelu_derivative(np.array([0.0, 1.0])).round(6)  # Phi(0) = 1/2; Phi(1) + phi(1)
    array([0.5     , 1.083315])
    """
    require_bool("approximate", approximate)
    x = as_float_array("x", x)
    if approximate:
        t = _tanh_u(x)
        du = SQRT_2_OVER_PI * (1.0 + 3.0 * CUBIC * x**2)  # du/dx
        return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du
    Phi = 0.5 * (1.0 + _erf(x / math.sqrt(2.0)))
    phi = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    return Phi + x * phi


def _as_input(params, X):
    """``X`` as a float array; ``ValueError`` unless ``params`` is ``{}``."""
    require_that(isinstance(params, dict) and not params, "gelu has no parameters: "
                 "params must be {{}}, got {!r}", params)
    return as_float_array("X", X)


def gelu_forward(params, X, *, approximate=False):
    """Return ``Y = gelu(X), saved``; ``params`` must be ``{}``.

    >>> gelu_forward({"W": 1.0}, np.ones(2))
    Traceback (most recent call last):
    ...
    ValueError: gelu has no parameters: params must be {}, got {'W': 1.0}
    """
    X = _as_input(params, X)
    Y = gelu(X, approximate=approximate)  # (...), elementwise
    return Y, {"X": X, "approximate": approximate}


def gelu_backward(params, saved, dY):
    """Return ``{}, dX``, ``dX = dY * gelu'(X)``: the derivative of the forward's form.

    >>> _, saved = gelu_forward({}, np.ones((2, 3)))
    >>> gelu_backward({}, saved, np.ones((3, 2)))
    Traceback (most recent call last):
    ...
    ValueError: dY must have the shape of Y (and X), (2, 3), got (3, 2)
    """
    X = _as_input(params, saved["X"])
    dY = as_float_like("dY", dY, X.shape, "Y (and X)")
    return {}, dY * gelu_derivative(X, approximate=saved["approximate"])  # elementwise
