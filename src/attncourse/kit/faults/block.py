"""Planted mistakes in :mod:`attncourse.layers.block`, with their registry.

The residual's backward with the identity path dropped (only the sublayer path
returned) or counted twice, both as the residual step alone, of the signature of
:func:`attncourse.layers.block.residual_backward`, and inside the whole block's
backward, of the signature of :func:`attncourse.layers.block.block_backward`
(paired with the correct forward). :data:`FAULTS` says which of :data:`CHECKS` catch
each one; :data:`CORRECT` holds the package functions every check must pass.
"""

import numpy as np

from ..._validate import as_float_like, shaped
from ...layers.attention import key_valid_from_lengths
from ...layers.block import (SPEC, _as_W_O, block_backward, block_forward, init_block,
                             residual_backward)
from ...layers.layernorm import layernorm_backward
from ...layers.mlp import mlp_backward
from ...layers.multihead import multihead_backward
from ..exercises import check_block_residual
from ..gradients import layer_gradcheck
from ._registry import Check, Fault, learner_checker, require_gradcheck

__all__ = [
    "FAULTS",
    "CHECKS",
    "CORRECT",
    "BUILDING_BLOCKS",
    "residual_backward_dropped",
    "residual_backward_doubled",
    "block_backward_residual_dropped",
    "block_backward_residual_doubled",
]


def residual_backward_dropped(dY, d_sublayer):
    """FAULT: ``dX = d_sublayer``: the identity path of ``y = x + f(x)`` is dropped.

    >>> residual_backward_dropped(np.ones(2), np.array([0.5, -1.0]))
    array([ 0.5, -1. ])
    """
    return np.asarray(d_sublayer, dtype=np.float64)


def residual_backward_doubled(dY, d_sublayer):
    """FAULT: ``dX = 2 dY + d_sublayer``: the identity path is counted twice."""
    return 2.0 * np.asarray(dY, dtype=np.float64) + d_sublayer


def _block_backward(params, saved, dY, residual):
    """A copy of :func:`attncourse.layers.block.block_backward` whose two residual
    steps call ``residual`` (a planted one) instead of ``residual_backward``."""
    X, _ = shaped(SPEC, saved["ln1"]["X"], _as_W_O(params))
    dY = as_float_like("dY", dY, X.shape, "Y (and X)")
    dmlp, dN2 = mlp_backward(params["mlp"], saved["mlp"], dY)
    dln2, dH_sub = layernorm_backward(params["ln2"], saved["ln2"], dN2)
    dH = residual(dY, dH_sub)  # planted
    dattn, dN1 = multihead_backward(params["attn"], saved["attn"], dH)
    dln1, dX_sub = layernorm_backward(params["ln1"], saved["ln1"], dN1)
    dX = residual(dH, dX_sub)  # planted
    return {"ln1": dln1, "attn": dattn, "ln2": dln2, "mlp": dmlp}, dX


def block_backward_residual_dropped(params, saved, dY):
    """FAULT: the block's backward, :func:`residual_backward_dropped` at both."""
    return _block_backward(params, saved, dY, residual_backward_dropped)


def block_backward_residual_doubled(params, saved, dY):
    """FAULT: the block's backward, :func:`residual_backward_doubled` at both."""
    return _block_backward(params, saved, dY, residual_backward_doubled)


# --- the registry ---------------------------------------------------------------------


def _gradcheck(backward):
    """The layer gradient check of the block: B=2, T=5, D=6, H=2, d=2, r=3, padded.

    Sequence 0 has two padded (left) positions; LayerNorm gains and shifts are random.
    """
    rng = np.random.default_rng(3)
    D, H = 6, 2
    params = init_block(rng, D, heads=H, d=2, r=3, ratio=2)
    for name in ("ln1", "ln2"):
        params[name] = {"gamma": rng.uniform(0.5, 1.5, size=D),
                        "beta": rng.normal(size=D)}
    X = rng.normal(size=(2, 5, D))
    key_valid = key_valid_from_lengths([3, 5], 5, side="left")
    report = layer_gradcheck(block_forward, backward, params, X, heads=H,
                             key_valid=key_valid, approximate=True)
    require_gradcheck("gradient check of the block", report)


CHECKS = {c.name: c for c in (
    Check("layer gradcheck", "block_backward", _gradcheck),
    Check("learner checker", "residual_backward",
          lambda fn: learner_checker("learner checker", check_block_residual, fn)),
)}
"""Check name -> :class:`~attncourse.kit.faults.Check`."""

FAULTS = (
    Fault("residual_backward_dropped", "dX = d_sublayer: the identity path dropped",
          residual_backward_dropped, "residual_backward",
          caught_by=("learner checker",)),
    Fault("residual_backward_doubled",
          "dX = 2 dY + d_sublayer: the identity path twice",
          residual_backward_doubled, "residual_backward",
          caught_by=("learner checker",)),
    Fault("block_backward_residual_dropped",
          "the block's backward returns only the sublayer paths at both residuals",
          block_backward_residual_dropped, "block_backward",
          caught_by=("layer gradcheck",)),
    Fault("block_backward_residual_doubled",
          "the block's backward counts the identity path twice at both residuals",
          block_backward_residual_doubled, "block_backward",
          caught_by=("layer gradcheck",)),
)
"""The planted mistakes: the checks that catch each one, and those blind to it."""

CORRECT = {"block_backward": block_backward, "residual_backward": residual_backward}
"""Role -> the package function: every check must pass it."""

BUILDING_BLOCKS = {}
"""Public functions that are not faults themselves -> the fault they are part of."""
