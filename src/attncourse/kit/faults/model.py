"""Planted mistakes in :mod:`attncourse.model`, with their registry.

A tied table that gets only one of its two gradients, positions never added, the final
LayerNorm skipped in the backward pass, and padding not passed to the blocks. The faults
are model pairs ``(forward, backward)``: a wrong forward with its own consistent
backward (finite differences are blind to it), or the correct forward with a wrong
backward. :data:`FAULTS` says which of :data:`CHECKS` catch each one and which are
blind to it; :data:`CORRECT` holds the package pair every check must pass.
"""

import numpy as np

from ...layers.attention import key_valid_from_lengths
from ...layers.positions import positions_forward
from ...model import (ModelConfig, _backward, _forward, model_backward,
                     model_forward, spread_params)
from ..failed import CheckFailed
from ..gradients import layer_gradcheck
from ._registry import Check, Fault, require_close, require_gradcheck

__all__ = [
    "FAULTS",
    "CHECKS",
    "CORRECT",
    "BUILDING_BLOCKS",
    "model_backward_tied_lookup_only",
    "model_backward_tied_unembedding_only",
    "model_forward_without_positions",
    "model_backward_without_positions",
    "model_backward_final_norm_skipped",
    "model_forward_ignoring_padding",
]


def model_backward_tied_lookup_only(params, saved, dlogits):
    """FAULT: tied ``dE`` is the lookup's gradient only; the unembedding's is lost.

    What a backward pass that assigns ``grads["embed"] = ...`` last does. Untied, the
    pass is correct.
    """
    return _backward(params, saved, dlogits, tie=lambda lookup, unembedding: lookup)


def model_backward_tied_unembedding_only(params, saved, dlogits):
    """FAULT: tied ``dE`` is the unembedding's gradient ``dW^T`` only (lookup lost)."""
    return _backward(params, saved, dlogits,
                     tie=lambda lookup, unembedding: unembedding)


def _without_positions(params, X):
    """The positions step of the fault: ``P`` is never added."""
    return X, {"T": X.shape[-2], "shape": X.shape}


def _without_positions_backward(params, saved, dY):
    """Its consistent backward: ``P`` took no part, so ``dP = 0``; ``dX = dY``."""
    return {"P": np.zeros(np.shape(params["P"]))}, np.array(dY, dtype=np.float64)


def model_forward_without_positions(params, ids, *, config, key_valid=None):
    """FAULT: the logits of ``E[ids]`` alone: the positions ``P`` are never added.

    Causal attention then cannot tell where a token is: a run of one token gives
    the same logits at every position.
    """
    return _forward(params, ids, config, key_valid, _without_positions)


def model_backward_without_positions(params, saved, dlogits):
    """FAULT: the consistent backward of :func:`model_forward_without_positions`."""
    return _backward(params, saved, dlogits, positions=_without_positions_backward)


def _skipped_norm_backward(params, saved, dY):
    """The final LayerNorm treated as the identity in the backward pass."""
    zeros = np.zeros(np.shape(params["gamma"]))
    return {"gamma": zeros, "beta": zeros.copy()}, np.array(dY, dtype=np.float64)


def model_backward_final_norm_skipped(params, saved, dlogits):
    """FAULT: the backward skips the final LayerNorm: ``dX = dH``, no gain, no shift."""
    return _backward(params, saved, dlogits, final_norm=_skipped_norm_backward)


def model_forward_ignoring_padding(params, ids, *, config, key_valid=None):
    """FAULT: ``key_valid`` is accepted but never passed to the blocks.

    Every query reads the padded keys too; with padding at the end of a sequence the
    causal mask hides it anyway, so only padding at the start shows the mistake.
    """
    return _forward(params, ids, config, None, positions_forward)


# --- the registry ---------------------------------------------------------------------

SIZES = dict(n_vocab=6, T_max=5, D=4, heads=2, layers=1, ratio=2)
"""1 block, D = 4: 2 heads of width 2, an MLP of width 8; 6 tokens, 5 positions."""


def _case(tied):
    """A small model at :func:`attncourse.model.spread_params`, and padded ids (sequence
    0: 2 pads).

    Every row a LayerNorm sees there has a spread above 0.5: a near-constant row makes
    LayerNorm so curved that the step ``1e-5`` errs above the tolerance even for a
    correct gradient.
    """
    config = ModelConfig(**SIZES, tied=tied)
    rng = np.random.default_rng(0)
    params = spread_params(config, seed=0, rng=rng)
    ids = rng.integers(0, config.n_vocab, size=(2, 4))
    key_valid = key_valid_from_lengths([2, 4], 4, side="left")
    return config, params, ids, key_valid


def _gradcheck(pair, tied):
    """The layer gradient check of the whole model, padded ids as its input."""
    forward, backward = pair
    config, params, ids, key_valid = _case(tied)
    report = layer_gradcheck(forward, backward, params, ids, config=config,
                             key_valid=key_valid)
    which = "tied" if tied else "untied"
    require_gradcheck(f"gradient check of the {which} model", report)


def _positions_reach_the_logits(pair):
    """A run of one token: the logits must differ between positions.

    Without positions every query sees the same keys and values, so every position
    gets the same output up to rounding (about ``1e-16``).
    """
    forward, _ = pair
    config, params, _, _ = _case(tied=False)
    logits, _ = forward(params, np.full(4, 2), config=config)
    spread = float(np.max(np.abs(logits - logits[0])))
    if not spread > 1e-9:
        raise CheckFailed(
            "positions reach the logits",
            f"a run of token 2 gives the same logits at every position (max difference "
            f"{spread:.1e}): the model cannot tell where a token is")


def _padding_is_ignored(pair):
    """Changing the padded tokens leaves the logits at every real position unchanged."""
    forward, _ = pair
    config, params, ids, key_valid = _case(tied=False)
    other = np.where(key_valid, ids, (ids + 1) % config.n_vocab)  # new tokens at pads
    logits, _ = forward(params, ids, config=config, key_valid=key_valid)
    changed, _ = forward(params, other, config=config, key_valid=key_valid)
    require_close("padding changes nothing", "the logits at real positions",
                  changed[key_valid], logits[key_valid])


CHECKS = {c.name: c for c in (
    Check("layer gradcheck, untied", "model pair",
          lambda pair: _gradcheck(pair, tied=False)),
    Check("layer gradcheck, tied", "model pair",
          lambda pair: _gradcheck(pair, tied=True)),
    Check("positions reach the logits", "model pair", _positions_reach_the_logits),
    Check("padding changes nothing", "model pair", _padding_is_ignored),
)}
"""Check name -> :class:`~attncourse.kit.faults.Check`."""

FAULTS = (
    Fault("model_backward_tied_lookup_only",
          "tied: dE is the lookup's gradient only, the unembedding's overwritten",
          (model_forward, model_backward_tied_lookup_only), "model pair",
          caught_by=("layer gradcheck, tied",), blind=("layer gradcheck, untied",)),
    Fault("model_backward_tied_unembedding_only",
          "tied: dE is the unembedding's gradient only, the lookup's dropped",
          (model_forward, model_backward_tied_unembedding_only), "model pair",
          caught_by=("layer gradcheck, tied",)),
    Fault("model_without_positions_pair",
          "P never added, in both passes (dP = 0)",
          (model_forward_without_positions, model_backward_without_positions),
          "model pair",
          caught_by=("positions reach the logits",),
          blind=("layer gradcheck, untied",)),
    Fault("model_backward_final_norm_skipped",
          "the backward pass treats the final LayerNorm as the identity",
          (model_forward, model_backward_final_norm_skipped), "model pair",
          caught_by=("layer gradcheck, untied",)),
    Fault("model_forward_ignoring_padding",
          "key_valid never reaches the blocks: queries read padded keys",
          (model_forward_ignoring_padding, model_backward), "model pair",
          caught_by=("padding changes nothing",)),
)
"""The planted mistakes: the checks that catch each one, and those blind to it."""

CORRECT = {"model pair": (model_forward, model_backward)}
"""Role -> the package pair: every check must pass it."""

BUILDING_BLOCKS = {}
"""Public functions that are not faults themselves -> the fault they are part of."""
