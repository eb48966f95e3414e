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
from ...layers.block import block_backward, block_forward
from ...layers.embedding import embedding_backward, embedding_forward
from ...layers.layernorm import layernorm_backward, layernorm_forward
from ...layers.linear import linear_backward, linear_forward
from ...layers.positions import positions_backward, positions_forward
from ...model import (ModelConfig, _require_gradient, _require_inputs, _unembedding,
                     model_backward, model_forward, spread_params)
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

# Each fault is a copy of attncourse.model.model_forward or model_backward with one
# line wrong, marked "the fault".


def model_backward_tied_lookup_only(params, saved, dZ):
    """FAULT: tied ``dE`` is the lookup's gradient only; the unembedding's is lost.

    What a backward pass that assigns ``grads["embed"] = ...`` last does. Untied, the
    pass is correct.
    """
    unembed, dZ = _require_gradient(params, saved, dZ)
    d_unembed, dH = linear_backward(unembed, saved["unembed"], dZ)  # dH = dZ U^T
    d_ln_f, dX = layernorm_backward(params["ln_f"], saved["ln_f"], dH)
    d_blocks = [None] * len(params["blocks"])
    for i in reversed(range(len(params["blocks"]))):
        d_blocks[i], dX = block_backward(params["blocks"][i], saved["blocks"][i], dX)
    d_pos, dX = positions_backward(params["pos"], saved["pos"], dX)
    d_embed, _ = embedding_backward(params["embed"], saved["embed"], dX)
    dparams = {"embed": d_embed, "pos": d_pos, "blocks": d_blocks, "ln_f": d_ln_f}
    if saved["tied"]:
        dparams["embed"] = {"E": d_embed["E"]}  # the fault: dU^T is not added
    else:
        dparams["unembed"] = d_unembed
    return dparams, None


def model_backward_tied_unembedding_only(params, saved, dZ):
    """FAULT: tied ``dE`` is the unembedding's gradient ``dW^T`` only (lookup lost)."""
    unembed, dZ = _require_gradient(params, saved, dZ)
    d_unembed, dH = linear_backward(unembed, saved["unembed"], dZ)  # dH = dZ U^T
    d_ln_f, dX = layernorm_backward(params["ln_f"], saved["ln_f"], dH)
    d_blocks = [None] * len(params["blocks"])
    for i in reversed(range(len(params["blocks"]))):
        d_blocks[i], dX = block_backward(params["blocks"][i], saved["blocks"][i], dX)
    d_pos, dX = positions_backward(params["pos"], saved["pos"], dX)
    d_embed, _ = embedding_backward(params["embed"], saved["embed"], dX)
    dparams = {"embed": d_embed, "pos": d_pos, "blocks": d_blocks, "ln_f": d_ln_f}
    if saved["tied"]:
        dparams["embed"] = {"E": d_unembed["W"].T}  # the fault: the lookup's dE lost
    else:
        dparams["unembed"] = d_unembed
    return dparams, None


def model_forward_without_positions(params, ids, *, config, key_valid=None):
    """FAULT: the logits of ``E[ids]`` alone: the positions ``P`` are never added.

    Causal attention then cannot tell where a token is: a run of one token gives
    the same logits at every position.
    """
    ids, key_valid = _require_inputs(params, ids, key_valid, config)
    X, saved_embed = embedding_forward(params["embed"], ids)  # (..., T) -> (..., T, D)
    saved_pos = None  # the fault: X, saved_pos = positions_forward(params["pos"], X)
    saved_blocks = []
    for block in params["blocks"]:
        X, saved_block = block_forward(block, X, heads=config.heads,
                                       key_valid=key_valid, eps=config.eps,
                                       approximate=config.approximate_gelu)
        saved_blocks.append(saved_block)
    H, saved_ln_f = layernorm_forward(params["ln_f"], X, eps=config.eps)
    unembed = _unembedding(params, config.tied)  # {"W": U}, U = E^T when tied
    Z, saved_unembed = linear_forward(unembed, H)  # (..., T, D) x (D, n) -> (..., T, n)
    saved = {"embed": saved_embed, "pos": saved_pos, "blocks": saved_blocks,
             "ln_f": saved_ln_f, "unembed": saved_unembed, "tied": config.tied}
    return Z, saved


def model_backward_without_positions(params, saved, dZ):
    """FAULT: the consistent backward of :func:`model_forward_without_positions`:
    ``P`` took no part, so ``dP = 0`` and ``dX`` passes through."""
    unembed, dZ = _require_gradient(params, saved, dZ)
    d_unembed, dH = linear_backward(unembed, saved["unembed"], dZ)  # dH = dZ U^T
    d_ln_f, dX = layernorm_backward(params["ln_f"], saved["ln_f"], dH)
    d_blocks = [None] * len(params["blocks"])
    for i in reversed(range(len(params["blocks"]))):
        d_blocks[i], dX = block_backward(params["blocks"][i], saved["blocks"][i], dX)
    d_pos = {"P": np.zeros(np.shape(params["pos"]["P"]))}  # the fault: P not added
    d_embed, _ = embedding_backward(params["embed"], saved["embed"], dX)
    dparams = {"embed": d_embed, "pos": d_pos, "blocks": d_blocks, "ln_f": d_ln_f}
    if saved["tied"]:  # U = E^T: dU^T has E's shape; add the two uses
        dparams["embed"] = {"E": d_embed["E"] + d_unembed["W"].T}
    else:
        dparams["unembed"] = d_unembed
    return dparams, None


def model_backward_final_norm_skipped(params, saved, dZ):
    """FAULT: the backward skips the final LayerNorm: ``dX = dH``, no gain, no shift."""
    unembed, dZ = _require_gradient(params, saved, dZ)
    d_unembed, dH = linear_backward(unembed, saved["unembed"], dZ)  # dH = dZ U^T
    # the fault: the final LayerNorm is treated as the identity, dX = dH
    d_ln_f, dX = {k: np.zeros(np.shape(v)) for k, v in params["ln_f"].items()}, dH
    d_blocks = [None] * len(params["blocks"])
    for i in reversed(range(len(params["blocks"]))):
        d_blocks[i], dX = block_backward(params["blocks"][i], saved["blocks"][i], dX)
    d_pos, dX = positions_backward(params["pos"], saved["pos"], dX)
    d_embed, _ = embedding_backward(params["embed"], saved["embed"], dX)
    dparams = {"embed": d_embed, "pos": d_pos, "blocks": d_blocks, "ln_f": d_ln_f}
    if saved["tied"]:  # U = E^T: dU^T has E's shape; add the two uses
        dparams["embed"] = {"E": d_embed["E"] + d_unembed["W"].T}
    else:
        dparams["unembed"] = d_unembed
    return dparams, None


def model_forward_ignoring_padding(params, ids, *, config, key_valid=None):
    """FAULT: ``key_valid`` is accepted but never passed to the blocks.

    Every query reads the padded keys too; with padding at the end of a sequence the
    causal mask hides it anyway, so only padding at the start shows the mistake.
    """
    ids, key_valid = _require_inputs(params, ids, key_valid, config)
    X, saved_embed = embedding_forward(params["embed"], ids)  # (..., T) -> (..., T, D)
    X, saved_pos = positions_forward(params["pos"], X)  # (..., T, D) + (T, D)
    saved_blocks = []
    for block in params["blocks"]:
        X, saved_block = block_forward(block, X, heads=config.heads,
                                       key_valid=None, eps=config.eps,  # the fault
                                       approximate=config.approximate_gelu)
        saved_blocks.append(saved_block)
    H, saved_ln_f = layernorm_forward(params["ln_f"], X, eps=config.eps)
    unembed = _unembedding(params, config.tied)  # {"W": U}, U = E^T when tied
    Z, saved_unembed = linear_forward(unembed, H)  # (..., T, D) x (D, n) -> (..., T, n)
    saved = {"embed": saved_embed, "pos": saved_pos, "blocks": saved_blocks,
             "ln_f": saved_ln_f, "unembed": saved_unembed, "tied": config.tied}
    return Z, saved


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
