"""Planted mistakes in :mod:`attncourse.layers.positions`, with their registry.

Positions added after attention instead of before it, and a ``dP`` that each sequence
overwrites instead of adding to. :data:`FAULTS` says which of :data:`CHECKS` catch each
one and which are blind to it; :data:`CORRECT` holds the functions every check must
pass.
"""

import numpy as np

from ...layers.multihead import init_multihead, multihead_forward
from ...layers.positions import init_positions, positions_backward, positions_forward
from ..failed import CheckFailed
from ..gradients import STEPS, TOLERANCE, layer_gradcheck, numerical_gradient
from ._registry import Check, Fault, require_gradcheck

__all__ = [
    "FAULTS",
    "CHECKS",
    "CORRECT",
    "BUILDING_BLOCKS",
    "positions_after_attention",
    "positions_backward_overwrite",
]


def positions_after_attention(attention_params, position_params, X, heads):
    """WRONG: ``multihead(X) + P[:T]``: attention never sees where a token is."""
    Y, _ = multihead_forward(attention_params, X, heads=heads)
    P = position_params["P"]
    return Y + P[: X.shape[-2]]  # (..., T, D) + (T, D)


def positions_backward_overwrite(params, saved, dY):
    """WRONG: each sequence **overwrites** ``dP[:T]`` instead of adding to it.

    The last sequence wins; with a single sequence the result is right.

    >>> params = {"P": np.zeros((3, 1))}
    >>> _, saved = positions_forward(params, np.zeros((2, 2, 1)))  # 2 sequences, T = 2
    >>> positions_backward_overwrite(params, saved, np.ones((2, 2, 1)))[0]["P"].ravel()
    array([1., 1., 0.])
    """
    T = saved["T"]
    dP = np.zeros_like(np.asarray(params["P"], dtype=np.float64))
    for dY_b in np.asarray(dY).reshape(-1, T, dP.shape[1]):
        dP[:T] = dY_b
    return {"P": dP}, np.array(dY, dtype=np.float64)


def _positions_then_attention(attention_params, position_params, X, heads):
    """The correct wiring, ``multihead(X + P[:T])``: the reference for the role."""
    X_pos, _ = positions_forward(position_params, X)
    return multihead_forward(attention_params, X_pos, heads=heads)[0]


# --- the registry ---------------------------------------------------------------------


def _gradcheck(backward):
    """The layer gradient check of positions on a batch of two sequences."""
    rng = np.random.default_rng(3)
    params = init_positions(rng, 6, 7)
    X = rng.normal(size=(2, 5, 7))
    report = layer_gradcheck(positions_forward, backward, params, X)
    require_gradcheck("gradient check of the positions", report)


def _model_case():
    rng = np.random.default_rng(1)
    params = init_multihead(rng, 7, heads=2, d=3, r=2)
    X = rng.normal(size=(2, 5, 7))
    P = init_positions(np.random.default_rng(2), 8, 7)["P"]
    return params, X, P


def _earlier_positions_reach_t(model):
    """Central differences: the output at ``t`` depends on ``P[:t]`` (t = 1, 3, 4)."""
    params, X, P = _model_case()
    g = np.random.default_rng(0).normal(size=P.shape[1])
    for t in (1, 3, 4):
        def f(P, t=t):
            return float(np.sum(model(params, {"P": P}, X, 2)[..., t, :] * g))

        influence = float(np.abs(numerical_gradient(f, P, STEPS[0])[:t]).max())
        if not influence > TOLERANCE:
            raise CheckFailed(
                "earlier positions reach position t",
                f"the output at t = {t} does not depend on the rows P[:{t}] "
                f"(max |dJ/dP| = {influence:.1e}): attention never saw the positions")


CHECKS = {c.name: c for c in (
    Check("layer gradcheck", "positions_backward", _gradcheck),
    Check("earlier positions reach t", "positions then attention",
          _earlier_positions_reach_t),
)}
"""Check name -> :class:`~attncourse.kit.faults.Check`."""

FAULTS = (
    Fault("positions_backward_overwrite",
          "dP[:T] overwritten by each sequence, not summed",
          positions_backward_overwrite, "positions_backward",
          caught_by=("layer gradcheck",)),
    Fault("positions_after_attention",
          "P added to the output of attention, not to its input",
          positions_after_attention, "positions then attention",
          caught_by=("earlier positions reach t",)),
)
"""The planted mistakes: the checks that catch each one, and those blind to it."""

CORRECT = {
    "positions_backward": positions_backward,
    "positions then attention": _positions_then_attention,
}
"""Role -> the correct function: every check must pass it."""

BUILDING_BLOCKS = {}
"""Public functions that are not faults themselves -> the fault they are part of."""
