"""Planted mistakes in :mod:`attncourse.layers.gelu`, with their registry.

The derivative of the tanh form used with the exact forward pass, and a derivative that
drops the product rule's second term. Each fault is the correct forward pass with
another backward, of the signature of :func:`attncourse.layers.gelu.gelu_backward`.

The two forms' derivatives differ by at most about ``8.7e-4`` (near ``|x| = 2``), far
above the layer gradient check's tolerance ``1e-7``, so the check catches the first
fault; a check at tolerance ``1e-2`` is blind to it. :data:`FAULTS` says which of
:data:`CHECKS` catch each fault and which are blind to it; :data:`CORRECT` holds the
package pair every check must pass.
"""

import math

import numpy as np

from ...layers.gelu import gelu_backward, gelu_derivative, gelu_forward
from ..gradients import layer_gradcheck
from ._registry import Check, Fault, require_gradcheck

__all__ = [
    "FAULTS",
    "CHECKS",
    "CORRECT",
    "BUILDING_BLOCKS",
    "gelu_backward_tanh_derivative",
    "gelu_backward_no_x_phi",
]

COARSE_TOLERANCE = 1e-2
"""The tolerance of the coarse check: above the gap between the two forms' slopes."""


def gelu_backward_tanh_derivative(params, saved, dY):
    """FAULT: ``dX = dY * (tanh form's derivative)``, whatever form the forward used.

    With the exact forward, ``dX`` is off by up to ``8.7e-4 |dY|``.

    >>> _, saved = gelu_forward({}, np.array([2.0]))
    >>> _, dX = gelu_backward_tanh_derivative({}, saved, np.ones(1))
    >>> round(float(dX[0] - gelu_derivative(np.array([2.0]))[0]), 5)
    0.00087
    """
    dY = np.asarray(dY, dtype=np.float64)
    return {}, dY * gelu_derivative(saved["X"], approximate=True)


def gelu_backward_no_x_phi(params, saved, dY):
    """FAULT: ``dX = dY * Phi(x)``: ``Phi`` taken as constant, ``x phi(x)`` lost.

    With the tanh forward, likewise ``dX = dY (1 + tanh u) / 2``.
    """
    X, dY = saved["X"], np.asarray(dY, dtype=np.float64)
    if saved["approximate"]:
        u = math.sqrt(2.0 / math.pi) * (X + 0.044715 * X**3)
        return {}, dY * 0.5 * (1.0 + np.tanh(u))
    Phi = 0.5 * (1.0 + np.vectorize(math.erf, otypes=[np.float64])(X / math.sqrt(2.0)))
    return {}, dY * Phi


# --- the registry ---------------------------------------------------------------------


def _case():
    """``X (5, 7)`` of spread 2 (the largest gap is at ``|x| = 2``), ``|dY| < 2``."""
    rng = np.random.default_rng(9)
    return 2.0 * rng.normal(size=(5, 7)), rng.uniform(-2.0, 2.0, size=(5, 7))


def _gradcheck(pair, *, approximate, tolerance=None):
    forward, backward = pair
    X, dY = _case()
    extra = {} if tolerance is None else {"tolerance": tolerance}
    report = layer_gradcheck(forward, backward, {}, X, dy=dY, approximate=approximate,
                             **extra)
    require_gradcheck("gradient check of the layer pair", report)


CHECKS = {c.name: c for c in (
    Check("layer gradcheck", "gelu pair",
          lambda pair: _gradcheck(pair, approximate=False)),
    Check("layer gradcheck, tanh form", "gelu pair",
          lambda pair: _gradcheck(pair, approximate=True)),
    Check("coarse gradcheck (1e-2)", "gelu pair",
          lambda pair: _gradcheck(pair, approximate=False, tolerance=COARSE_TOLERANCE)),
)}
"""Check name -> :class:`~attncourse.kit.faults.Check`."""

FAULTS = (
    Fault("gelu_backward_tanh_derivative",
          "the tanh form's derivative used with the exact forward",
          (gelu_forward, gelu_backward_tanh_derivative), "gelu pair",
          caught_by=("layer gradcheck",),
          blind=("layer gradcheck, tanh form", "coarse gradcheck (1e-2)")),
    Fault("gelu_backward_no_x_phi",
          "dX = dY Phi(x): the product rule's x phi(x) term dropped",
          (gelu_forward, gelu_backward_no_x_phi), "gelu pair",
          caught_by=("layer gradcheck", "layer gradcheck, tanh form",
                     "coarse gradcheck (1e-2)")),
)
"""The planted mistakes: the checks that catch each one, and those blind to it."""

CORRECT = {"gelu pair": (gelu_forward, gelu_backward)}
"""Role -> the package pair: every check must pass it."""

BUILDING_BLOCKS = {}
"""Public functions that are not faults themselves -> the fault they are part of."""
