"""Checkers of Chapter 6's model exercises: the parameter count, the tied gradient,
the model's backward composed from the layers'."""

import dataclasses
import math

import numpy as np

from ..cost import model_parameter_count
from ...model import ModelConfig
from ..failed import CheckFailed
from ..gradients import TOLERANCE
from ._base import _array, _call, reports_unfinished

__all__ = [
    "PARAMETER_COUNT_PROPERTIES",
    "check_parameter_count",
    "TIED_GRADIENT_PROPERTIES",
    "check_tied_gradient",
    "MODEL_BACKWARD_PROPERTIES",
    "check_model_backward",
]


# --- Chapter 6: the parameter count ---------------------------------------------------

PARAMETER_COUNT_PROPERTIES = (
    "a whole number",
    "the position table",
    "the token table and the unembedding",
    "tied: one table",
    "independent of the number of heads",
    "one block",
    "the MLP width",
    "the total",
)



def _tied_fix(dE, lookup, unembedding, *, rtol, atol):
    """The likely fix for a wrong tied-table gradient ``dE``: which of its two uses
    (the lookup, the unembedding) it holds alone, if either."""
    if np.allclose(dE, lookup, rtol=rtol, atol=atol):
        return "add the unembedding's gradient: dE = dE_lookup + dU^T"
    if np.allclose(dE, unembedding, rtol=rtol, atol=atol):
        return "add the lookup's gradient: dE = dE_lookup + dU^T"
    return "E is used twice: dE = dE_lookup + dU^T, the two gradients added"

@reports_unfinished
def check_parameter_count(fn):
    """Check a learner's ``fn(config) -> int``, the number of parameters of a model.

    ``config`` is an :class:`attncourse.model.ModelConfig`. The checker changes one size
    at a time and compares what the count grows by with what that size adds: ``D`` per
    position, a table row per token (two untied, one tied), nothing per head (``H d =
    D``), one block per layer, ``2 D^2 + D`` per unit of ``ratio`` in each block, and
    then the total. Returns the names of the properties checked.

    >>> check_parameter_count(model_parameter_count)[-1]
    'the total'
    >>> def no_positions(config):
    ...     return model_parameter_count(config) - config.T_max * config.D
    >>> check_parameter_count(no_positions)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    attncourse.kit.failed.CheckFailed: the position table: ... by 0, not D = 6 ...
    """
    base = ModelConfig(n_vocab=11, T_max=9, D=6, heads=3, layers=3, ratio=4)
    D, L, F = base.D, base.layers, base.ratio * base.D

    def count(property, config):
        value = _call(fn, property, config)
        whole = isinstance(value, (int, np.integer))
        if isinstance(value, (bool, np.bool_)) or not whole:
            raise CheckFailed(
                "a whole number",
                f"fn returned {value!r} ({type(value).__name__})",
                "return an int: every size is a whole number (no "
                "division, no float factors)",
            )
        return int(value)

    def grows(property, change):
        changed = dataclasses.replace(base, **change)
        return count(property, changed) - count(property, base)

    def should_grow(change):  # what the package's count grows by
        changed = dataclasses.replace(base, **change)
        return model_parameter_count(changed) - model_parameter_count(base)

    count("a whole number", base)
    step = grows("the position table", {"T_max": base.T_max + 1})
    if step != D:
        raise CheckFailed(
            "the position table",
            f"one more position (T_max 9 -> 10) grew by {step}, not D = {D}",
            "add the learned positions P, a (T_max, D) table",
        )
    step = grows("the token table and the unembedding", {"n_vocab": base.n_vocab + 1})
    if step != 2 * D:
        fix = (
            "add the unembedding U (D, n_vocab) of an untied model"
            if step == D
            else "count E (n_vocab, D) and, untied, U (D, n_vocab)"
        )
        raise CheckFailed(
            "the token table and the unembedding",
            f"untied, one more token grew by {step}, not 2 D = {2 * D}",
            fix,
        )
    tied = dataclasses.replace(base, tied=True)
    more = dataclasses.replace(tied, n_vocab=base.n_vocab + 1)
    step = count("tied: one table", more) - count("tied: one table", tied)
    if step != D:
        fix = (
            "count E once: tied, the unembedding is E^T, not a table of its own"
            if step == 2 * D
            else "tied, E (n_vocab, D) is the only table of tokens"
        )
        raise CheckFailed(
            "tied: one table", f"tied, one more token grew by {step}, not D = {D}", fix
        )
    for heads in (1, 2, 6):
        step = grows("independent of the number of heads", {"heads": heads})
        if step != 0:
            raise CheckFailed(
                "independent of the number of heads",
                f"heads 3 -> {heads} changed the count by {step}",
                "W_Q, W_K, W_V are (D, H d) and W_O (H r, D) with H d = H r = D: "
                "count D x D for each, whatever the number of heads",
            )
    block = should_grow({"layers": L + 1})  # 4 D^2 + (2 F D + F + D) + 4 D
    step = grows("one block", {"layers": L + 1})
    if step != block:
        missing = {
            F + D: "the MLP biases (F = ratio D for up, D for down)",
            4 * D: "the two LayerNorms of each block (gamma and beta: 2 D each)",
            2 * D: "one of the two LayerNorms of each block (2 D)",
            D * D: "one of the four attention projections (W_O?)",
        }
        if block - step in missing:
            fix = "add " + missing[block - step]
        else:
            fix = "attention 4 D^2, MLP 2 F D + F + D, LayerNorms 4 D"
        raise CheckFailed(
            "one block",
            f"one more block (layers 3 -> 4) grew by {step}, not {block}",
            fix,
        )
    step = grows("the MLP width", {"ratio": base.ratio + 1})
    mlp = should_grow({"ratio": base.ratio + 1})  # L (2 D^2 + D)
    if step != mlp:
        raise CheckFailed(
            "the MLP width",
            f"ratio 4 -> 5 grew by {step}, not L (2 D^2 + D) = {mlp}",
            "the MLP is D -> F -> D with F = ratio D: use config.ratio",
        )
    want, got = model_parameter_count(base), count("the total", base)
    if got != want:
        if want - got == 2 * D:
            fix = "add the final LayerNorm (gamma and beta, 2 D)"
        else:
            fix = (
                "count the embeddings, positions, L blocks, the final LayerNorm "
                "and the unembedding"
            )
        raise CheckFailed("the total", f"expected {want} parameters, got {got}", fix)
    return PARAMETER_COUNT_PROPERTIES


# --- Chapter 6: the tied table --------------------------------------------------------

TIED_GRADIENT_PROPERTIES = (
    "returns (loss, grads)",
    "the tied loss",
    "the nesting of params",
    "every gradient but E",
    "the tied table: both uses, added",
)


def _tied_case():
    """A small tied model (non-square tables), moved off its initial point, and its
    data."""
    from ...model import init_model
    from ...params import flatten_params, unflatten_params

    config = ModelConfig(n_vocab=7, T_max=6, D=4, heads=2, layers=1, ratio=3, tied=True)
    start = init_model(config, seed=9, std=0.5)
    rng = np.random.default_rng(6)
    params = unflatten_params(
        {
            path: W + 0.1 * rng.normal(size=W.shape)
            for path, W in flatten_params(start).items()
        },
        start,
    )
    ids = np.random.default_rng(6).integers(0, config.n_vocab, size=(2, 4))
    return config, params, ids[:, :-1], ids[:, 1:]


@reports_unfinished
def check_tied_gradient(fn):
    """Check a learner's ``fn(params, ids, targets, *, config) -> (loss, grads)`` for a
    tied model.

    ``config`` is a tied :class:`attncourse.model.ModelConfig` and ``grads`` must nest
    like ``params`` (no ``unembed``). The checker compares the loss with the package's
    tied loss, then every gradient with central differences of that loss on every
    coordinate (:func:`~attncourse.kit.gradients.gradcheck`); a wrong ``embed.E`` is
    diagnosed as the lookup's gradient alone or the unembedding's alone. Returns the
    names of the properties checked.
    """
    from ...loss import cross_entropy
    from ...model import model_forward, model_loss
    from ...params import flatten_params, unflatten_params
    from ..gradients import gradcheck

    config, params, ids, targets = _tied_case()
    prop = "returns (loss, grads)"
    result = _call(fn, prop, params, ids, targets, config=config)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise CheckFailed(
            prop,
            f"fn must return a pair (loss, grads), got {type(result).__name__}",
            "return loss, grads as model_loss does",
        )
    loss, grads = result
    reference, _ = model_loss(params, ids, targets, config=config)
    loss = _array(loss, "the tied loss", dtype=np.float64)
    if loss.shape != () or not math.isclose(float(loss), reference, rel_tol=1e-12):
        raise CheckFailed(
            "the tied loss",
            f"got {loss!r}, the tied model's loss is {reference!r}",
            "run model_loss on the untied configuration "
            "with unembed W = E^T, shape (D, n_vocab): its loss is the tied loss",
        )
    prop = "the nesting of params"
    flat = flatten_params(params)
    try:
        flat_grads = {
            name: _array(g, prop, dtype=np.float64)
            for name, g in flatten_params(grads).items()
        }
    except (TypeError, ValueError, AttributeError) as e:
        raise CheckFailed(
            prop,
            f"grads could not be read as nested arrays ({e})",
            "return grads nested like params",
        ) from e
    if set(flat_grads) != set(flat):
        extra, missing = (
            sorted(set(flat_grads) - set(flat)),
            sorted(set(flat) - set(flat_grads)),
        )
        raise CheckFailed(
            prop,
            f"extra {extra}, missing {missing}",
            "fold the unembedding's gradient into embed.E and drop unembed; "
            "keep every other gradient",
        )
    for name, g in flat_grads.items():
        if g.shape != flat[name].shape:
            raise CheckFailed(
                prop,
                f"{name} has shape {g.shape}, the parameter {flat[name].shape}",
                "transpose dU back to E's shape",
            )

    def J(**arrays):  # the tied loss
        logits, _ = model_forward(unflatten_params(arrays, params), ids, config=config)
        return cross_entropy(logits, targets)

    report = gradcheck(J, flat, flat_grads)
    worst = {}
    for (name, _), error in report.errors.items():
        worst[name] = max(worst.get(name, 0.0), error)
    failing = sorted(name for name, error in worst.items() if not error < TOLERANCE)
    others = [name for name in failing if name != "embed.E"]
    if others:
        raise CheckFailed(
            "every gradient but E",
            f"{others} differ from central "
            f"differences (worst error {max(worst[n] for n in others):.1e})",
            "take these gradients from the untied model_loss unchanged",
        )
    if failing:
        untied = dataclasses.replace(config, tied=False)
        as_untied = dict(params, unembed={"W": params["embed"]["E"].T})
        _, parts = model_loss(as_untied, ids, targets, config=untied)
        lookup, unembedding = parts["embed"]["E"], parts["unembed"]["W"].T
        dE = flat_grads["embed.E"]
        fix = _tied_fix(dE, lookup, unembedding, rtol=1e-6, atol=1e-9)
        raise CheckFailed(
            "the tied table: both uses, added",
            f"embed.E differs from central differences by up to {worst['embed.E']:.1e}",
            fix,
        )
    return TIED_GRADIENT_PROPERTIES


# --- Chapter 6: the model's backward, composed ----------------------------------------

MODEL_BACKWARD_PROPERTIES = (
    "returns dparams",
    "the nesting of params",
    "the unembedding and the final norm",
    "every block, in reverse order",
    "positions and the lookup",
    "the tied table: both uses, added",
)


def _backward_case(tied):
    """A small padded two-block model (non-square tables), moved off its initial
    point, its forward stash and a dense random ``dZ``."""
    from ...layers.attention import key_valid_from_lengths
    from ...model import init_model, model_forward
    from ...params import flatten_params, unflatten_params

    config = ModelConfig(n_vocab=7, T_max=6, D=4, heads=2, layers=2, ratio=3, tied=tied)
    start = init_model(config, seed=8, std=0.5)
    rng = np.random.default_rng(2)
    params = unflatten_params(
        {path: W + 0.1 * rng.normal(size=W.shape)
         for path, W in flatten_params(start).items()}, start)
    ids = np.random.default_rng(6).integers(0, config.n_vocab, size=(2, 3))
    key_valid = key_valid_from_lengths([2, 3], 3, side="left")
    logits, saved = model_forward(params, ids, config=config, key_valid=key_valid)
    dZ = np.random.default_rng(5).normal(size=logits.shape)  # (B, T, n_vocab)
    return params, saved, dZ


def _backward_order(flat, layers):
    """The dotted paths in the order the backward pass reaches them."""
    top = [p for p in flat if p.startswith(("unembed.", "ln_f."))]
    blocks = [p for l in reversed(range(layers)) for p in flat
              if p.startswith(f"blocks.{l}.")]
    bottom = [p for p in flat if p.startswith(("pos.", "embed."))]
    return top + blocks + bottom


@reports_unfinished
def check_model_backward(fn):
    """Check a learner's ``fn(params, saved, dZ) -> dparams``: the whole model's
    backward pass, composed from the layers' backward functions.

    ``saved`` is what :func:`attncourse.model.model_forward` stashed (``saved["tied"]``
    says whether the unembedding is ``E^T``); ``dparams`` must nest like ``params``.
    The checker runs an untied and a tied padded two-block model and compares every
    gradient with :func:`attncourse.model.model_backward` (itself checked by finite
    differences in Chapter 6), in the order the backward pass reaches them, and names
    the first layer whose gradient is wrong with its likely fix. Returns the names of
    the properties checked.
    """
    from ...layers.linear import linear_backward
    from ...model import model_backward
    from ...params import flatten_params

    for tied in (False, True):
        params, saved, dZ = _backward_case(tied)
        kind = "tied" if tied else "untied"
        dZ_before = dZ.copy()
        result = _call(fn, "returns dparams", params, saved, dZ)
        if isinstance(result, tuple) and len(result) == 2 and result[1] is None:
            result = result[0]  # (dparams, None), as model_backward returns
        if not isinstance(result, dict):
            raise CheckFailed(
                "returns dparams",
                f"fn returned {type(result).__name__} on the {kind} model",
                "return the gradients as a dict nested like params",
            )
        if not np.array_equal(dZ, dZ_before):
            raise CheckFailed("returns dparams", "fn changed dZ in place",
                              "compute new arrays; leave the inputs as they are")
        reference = flatten_params(model_backward(params, saved, dZ)[0])
        prop = "the nesting of params"
        try:
            got = {name: _array(g, prop, dtype=np.float64)
                   for name, g in flatten_params(result).items()}
        except (TypeError, ValueError, AttributeError) as e:
            raise CheckFailed(prop, f"the gradients could not be read ({e})",
                              "return dparams nested like params") from e
        if set(got) != set(reference):
            extra = sorted(set(got) - set(reference))
            missing = sorted(set(reference) - set(got))
            fix = ("a tied model has no unembed: fold dU^T into embed.E" if tied
                   and "unembed.W" in extra else "return one gradient per parameter, "
                   "nested like params (blocks as a list)")
            raise CheckFailed(prop, f"{kind} model: extra {extra}, missing {missing}",
                              fix)
        layers = len(params["blocks"])
        for name in _backward_order(reference, layers):
            g, want = got[name], reference[name]
            if g.shape == want.shape and np.allclose(g, want, rtol=1e-9, atol=1e-12):
                continue
            where = f"{kind} model: {name} is wrong"
            if name.startswith(("unembed.", "ln_f.")):
                raise CheckFailed(
                    "the unembedding and the final norm", where,
                    "start from dZ: linear_backward with U (E^T when tied) and "
                    "saved['unembed'], then layernorm_backward with saved['ln_f']")
            if name.startswith("blocks."):
                fix = ("walk the blocks in reversed order, each with its own params "
                       "and saved['blocks'][l], passing the dX it returns to the "
                       "block below")
                raise CheckFailed("every block, in reverse order", where, fix)
            if name == "embed.E" and tied:
                break  # diagnosed below
            raise CheckFailed(
                "positions and the lookup", where,
                "after block 0: positions_backward, then embedding_backward, each with "
                "the dX from the layer above")
        else:
            continue
        d_unembed, _ = linear_backward({"W": params["embed"]["E"].T}, saved["unembed"],
                                       dZ)  # the unembedding's use of E
        dU_T = d_unembed["W"].T
        lookup = reference["embed.E"] - dU_T
        g = got["embed.E"]
        fix = _tied_fix(g, lookup, dU_T, rtol=1e-9, atol=1e-12)
        raise CheckFailed("the tied table: both uses, added",
                          "tied model: embed.E is wrong", fix)
    return MODEL_BACKWARD_PROPERTIES
