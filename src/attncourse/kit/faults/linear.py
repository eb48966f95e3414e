"""Planted mistakes in :mod:`attncourse.layers.linear`, with their registry.

A weight gradient returned transposed. The fault has the signature of
:func:`attncourse.linear_backward` and pairs with the correct forward pass.
:data:`FAULTS` says which of :data:`CHECKS` catch it; :data:`CORRECT` holds the package
function every check must pass.
"""

import numpy as np

from ...layers.linear import linear_backward, linear_forward
from ..failed import CheckFailed
from ..gradients import layer_gradcheck
from ._registry import Check, Fault, require_gradcheck

__all__ = [
    "FAULTS",
    "CHECKS",
    "CORRECT",
    "BUILDING_BLOCKS",
    "linear_backward_transposed",
]


def linear_backward_transposed(params, saved, dY):
    """FAULT: ``dW = dY^T X`` (the transpose of ``X^T dY``); ``dX`` is correct.

    Its shape is ``(D_out, D_in)`` instead of ``(D_in, D_out)``: unequal sizes expose
    it at once, and with ``D_in = D_out`` only a value check (finite differences) can.

    >>> params, saved = {"W": np.ones((2, 3))}, {"X": np.ones((4, 2))}
    >>> dparams, dX = linear_backward_transposed(params, saved, np.ones((4, 3)))
    >>> dX.shape, dparams["W"].shape  # W has shape (2, 3)
    ((4, 2), (3, 2))
    """
    W = np.asarray(params["W"], dtype=np.float64)
    X, dY = np.asarray(saved["X"], dtype=np.float64), np.asarray(dY, dtype=np.float64)
    D_in, D_out = W.shape
    dX = dY @ W.T  # (..., D_out) x (D_out, D_in) -> (..., D_in)
    # (D_out, N) x (N, D_in) -> (D_out, D_in)
    dW_T = dY.reshape(-1, D_out).T @ X.reshape(-1, D_in)
    return {"W": dW_T}, dX


# --- the registry ---------------------------------------------------------------------


def _gradcheck(backward, D_in, D_out):
    """The layer gradient check of the linear layer on 5 rows of ``X``.

    A gradient of the wrong shape is a failure of the check, named as such.
    """
    rng = np.random.default_rng(12)
    params = {"W": rng.normal(size=(D_in, D_out))}
    X = rng.normal(size=(5, D_in))
    try:
        report = layer_gradcheck(linear_forward, backward, params, X)
    except ValueError as e:
        raise CheckFailed("gradient shapes", str(e)) from e
    require_gradcheck("gradient check of the linear layer", report)


CHECKS = {c.name: c for c in (
    Check("layer gradcheck", "linear_backward",
          lambda backward: _gradcheck(backward, D_in=3, D_out=7)),
    Check("gradcheck, square W", "linear_backward",
          lambda backward: _gradcheck(backward, D_in=5, D_out=5)),
)}
"""Check name -> :class:`~attncourse.kit.faults.Check`."""

FAULTS = (
    Fault("linear_backward_transposed", "dW = dY^T X: the weight gradient transposed",
          linear_backward_transposed, "linear_backward",
          caught_by=("layer gradcheck", "gradcheck, square W")),
)
"""The planted mistakes: the checks that catch each one, and those blind to it."""

CORRECT = {"linear_backward": linear_backward}
"""Role -> the package function: every check must pass it."""

BUILDING_BLOCKS = {}
"""Public functions that are not faults themselves -> the fault they are part of."""
