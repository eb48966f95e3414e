"""The whole model: embeddings, positions, L pre-norm blocks, a final norm, the logits.

Composed from the layer pairs only; no layer is written twice::

    X_0 = E[ids] + P[:T]                 embedding, positions       (..., T, D)
    X_l = block_l(X_{l-1}), l = 1 .. L   pre-norm blocks (causal)   (..., T, D)
    H   = LN_f(X_L)                      final layer norm           (..., T, D)
    Z   = H U   (or Z = H E^T if tied)   unembedding (linear)       (..., T, n_vocab)

and the loss is the mean next-token cross-entropy of :mod:`attncourse.loss`.
``saved`` holds each layer's own ``saved`` dict; :func:`model_backward` walks them in
reverse. With ``tied=True`` the token table ``E`` is used twice, as the lookup and as
the unembedding ``U = E^T``: its gradient is the **sum** of the two uses.

Parameters nest by layer (no ``"unembed"`` when tied)::

    {"embed": {"E"}, "pos": {"P"}, "blocks": [block params, ...], "ln_f": {...},
     "unembed": {"W"}}

**Initialisation** (:func:`init_model`, GPT-2's scheme): every weight matrix is drawn
from ``N(0, std^2)`` with ``std = 0.02``; LayerNorm gains are 1 and shifts 0; biases
are 0. The two projections that write into the residual stream, ``attn.W_O`` and
``mlp.down.W``, are further scaled by ``1/sqrt(2 L)``. Why: the stream after ``L``
blocks is ``X_0`` plus ``2 L`` branch outputs (an attention and an MLP per block). By
Chapter 3's variance argument, a sum of independent terms has the sum of their
variances, so with equal branches the variance added to the stream grows like ``2 L``;
dividing each branch's last projection by ``sqrt(2 L)`` divides its variance by ``2 L``
and keeps the total added variance independent of the depth.

>>> config = ModelConfig(n_vocab=7, T_max=6, D=4, heads=2, layers=2, ratio=2)
>>> params = init_model(config)
>>> ids = np.array([[1, 2, 3], [0, 6, 5]])
>>> logits, saved = model_forward(params, ids, config=config)
>>> logits.shape, count_parameters(params)
((2, 3, 7), 400)
"""

import dataclasses
import functools
import json
import math
from dataclasses import dataclass

import numpy as np

from ._validate import (as_float_array, as_float_like, as_ids, as_number, require_a,
                        require_bool, require_like, require_params, require_sizes,
                        require_that)
from .layers.block import block_backward, block_forward, init_block
from .layers.embedding import embedding_backward, embedding_forward
from .layers.layernorm import init_layernorm, layernorm_backward, layernorm_forward
from .layers.linear import linear_backward, linear_forward
from .layers.positions import positions_backward, positions_forward
from .loss import cross_entropy_backward, cross_entropy_forward
from .params import flatten_params, unflatten_params

__all__ = [
    "ModelConfig",
    "init_model",
    "model_forward",
    "model_backward",
    "model_loss",
    "count_parameters",
    "save_model",
    "load_model",
    "spread_params",
]

RESIDUAL_PROJECTIONS = ("attn.W_O", "mlp.down.W")
"""The weights (dotted paths inside a block) whose output is added to the stream."""


@dataclass(frozen=True)
class ModelConfig:
    """The sizes and switches of a model; validated on construction.

    ``n_vocab`` tokens, at most ``T_max`` positions, width ``D``, ``heads`` heads of
    width ``d = D // heads``, ``layers`` blocks, an MLP of width ``ratio * D``;
    ``tied`` uses ``E^T`` as the unembedding; ``eps`` is every LayerNorm's; the MLP uses
    the tanh form of GELU when ``approximate_gelu`` (GPT-2's convention).

    >>> ModelConfig(n_vocab=7, T_max=6, D=4, heads=2, layers=2).d
    2
    >>> ModelConfig(n_vocab=7, T_max=6, D=6, heads=4, layers=2)
    Traceback (most recent call last):
    ...
    ValueError: D=6 must be divisible by heads=4: each head gets D // heads features
    """

    n_vocab: int
    T_max: int
    D: int
    heads: int
    layers: int
    ratio: int = 4
    tied: bool = False
    eps: float = 1e-5
    approximate_gelu: bool = True

    def __post_init__(self):
        require_sizes(n_vocab=self.n_vocab, T_max=self.T_max, D=self.D,
                      heads=self.heads, layers=self.layers, ratio=self.ratio)
        require_bool("tied", self.tied)
        require_bool("approximate_gelu", self.approximate_gelu)
        as_number("eps", self.eps, "(0, inf)")
        require_that(self.D % self.heads == 0, "D={} must be divisible by heads={}: "
                     "each head gets D // heads features", self.D, self.heads)

    @property
    def d(self):
        """The width of each head, ``D // heads``."""
        return self.D // self.heads


def _require_config(config):
    require_a("config", config, ModelConfig)


def _redrawn(template, rng, std, residual_std):
    """Return ``template`` with each weight matrix redrawn from ``N(0, std^2)``.

    The residual projections get ``residual_std``; 1-D arrays (LayerNorm gains and
    shifts, biases) keep the template's values (ones and zeros).
    """
    flat = {}
    for path, value in flatten_params(template).items():
        if value.ndim == 2:
            scale = residual_std if path in RESIDUAL_PROJECTIONS else std
            flat[path] = rng.normal(0.0, scale, size=value.shape)
        else:
            flat[path] = np.array(value, dtype=np.float64)
    return unflatten_params(flat, template)


def init_model(config, seed=0, *, std=0.02):
    """Return the parameters of a fresh model, drawn from ``default_rng(seed)``.

    Weights ``N(0, std^2)``, residual projections ``N(0, std^2 / (2 L))``, LayerNorm
    ``gamma = 1``, ``beta = 0``, biases 0 (the module docstring says why).

    >>> params = init_model(ModelConfig(n_vocab=7, T_max=6, D=4, heads=2, layers=2,
    ...                                 tied=True))
    >>> sorted(params), len(params["blocks"]), sorted(params["blocks"][0])
    (['blocks', 'embed', 'ln_f', 'pos'], 2, ['attn', 'ln1', 'ln2', 'mlp'])
    """
    _require_config(config)
    as_number("std", std, "(0, inf)")
    rng = np.random.default_rng(seed)
    n_vocab, D, L = config.n_vocab, config.D, config.layers
    # the structure (names, shapes, gains, biases) of a block; its weights are redrawn
    template = init_block(np.random.default_rng(0), D, heads=config.heads,
                          ratio=config.ratio)
    residual_std = std / math.sqrt(2 * L)
    params = {
        "embed": {"E": rng.normal(0.0, std, size=(n_vocab, D))},
        "pos": {"P": rng.normal(0.0, std, size=(config.T_max, D))},
        "blocks": [_redrawn(template, rng, std, residual_std) for _ in range(L)],
        "ln_f": init_layernorm(D),
    }
    if not config.tied:
        params["unembed"] = {"W": rng.normal(0.0, std, size=(D, n_vocab))}
    return params


def count_parameters(params):
    """Return the number of numbers in ``params`` (every array of the nesting).

    >>> count_parameters({"embed": {"E": np.zeros((5, 3))},
    ...                   "blocks": [{"b": np.zeros(2)}]})
    17
    """
    return int(sum(np.size(value) for value in flatten_params(params).values()))


@functools.lru_cache(maxsize=32)
def _layout(config):
    """``{dotted path: shape}`` of every array a model of ``config`` holds."""
    return {path: np.shape(x) for path, x in flatten_params(init_model(config)).items()}


def _require_arrays(shapes, config, where):
    """Raise ``ValueError`` unless ``shapes`` (``{dotted path: shape}``) names exactly
    the arrays of a model of ``config``, each with the shape the config gives it."""
    want = _layout(config)
    missing, extra = sorted(set(want) - set(shapes)), sorted(set(shapes) - set(want))
    hint = " (a tied model has no 'unembed': Z = H E^T)" if "unembed.W" in extra else ""
    require_that(not (missing or extra), "{} do not match the config: missing {}, "
                 "extra {}{}", where, missing, extra, hint)
    for path, shape in want.items():
        require_that(shapes[path] == shape, "{}: {} has shape {}, the config needs {}",
                     where, path, shapes[path], shape)


def _require_model(params, config):
    """Raise ``ValueError`` unless ``params`` are the nested arrays of a model of
    ``config``."""
    _require_config(config)
    require_params("model", params, ("blocks",))
    blocks = params["blocks"]
    listed = isinstance(blocks, (list, tuple))
    require_that(listed and len(blocks) == config.layers, "params['blocks'] must be a "
                 "list of config.layers={} blocks, got {}", config.layers,
                 len(blocks) if listed else type(blocks).__name__)
    _require_arrays({path: np.shape(x) for path, x in flatten_params(params).items()},
                    config, "params")


def _require_inputs(params, ids, key_valid, config):
    """Return ``ids`` (int64) and ``key_valid`` (or None) for a forward pass of a model
    with ``params`` and ``config``, or raise ``ValueError`` naming what is wrong."""
    _require_model(params, config)
    ids = as_ids(ids, config.n_vocab)
    require_that(ids.ndim and ids.shape[-1], "ids must have shape (..., T) with T >= "
                 "1, got shape {}", ids.shape)
    require_that(ids.shape[-1] <= config.T_max, "ids have T={} positions, more than "
                 "config.T_max={}", ids.shape[-1], config.T_max)
    kind, shape = np.asarray(key_valid).dtype, np.shape(key_valid)
    require_that(key_valid is None or kind == np.bool_ and shape == ids.shape,
                 "key_valid must be a boolean array of the shape of ids, {}, got {} of "
                 "shape {}", ids.shape, kind, shape)
    return ids, key_valid


def _unembedding(params, tied):
    """The linear layer's params: ``{"W": U}``, or ``{"W": E^T}`` when tied."""
    if tied:
        return {"W": as_float_array("E", params["embed"]["E"]).T}  # (D, n_vocab)
    return params["unembed"]


def model_forward(params, ids, *, config, key_valid=None):
    """Return ``logits (..., T, n_vocab), saved`` for token ids ``(..., T)``.

    ``X = E[ids] + P[:T]``, ``L`` blocks, ``H = LN_f(X)``, ``Z = H U`` (``U = E^T``
    when tied). ``key_valid`` (optional, boolean, the shape of ``ids``) marks the real
    tokens: padded keys get weight exactly 0 in every head of every block. Attention is
    causal, so the logits at ``t`` depend on ``ids[..., :t + 1]`` only.

    >>> config = ModelConfig(n_vocab=5, T_max=4, D=4, heads=2, layers=1)
    >>> model_forward(init_model(config), np.array([1, 2, 3, 4, 0]), config=config)
    Traceback (most recent call last):
    ...
    ValueError: ids have T=5 positions, more than config.T_max=4
    """
    ids, key_valid = _require_inputs(params, ids, key_valid, config)
    X, saved_embed = embedding_forward(params["embed"], ids)  # (..., T) -> (..., T, D)
    X, saved_pos = positions_forward(params["pos"], X)  # (..., T, D) + (T, D)
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


def _require_gradient(params, saved, dZ):
    """Return the unembedding's params ``{"W": U}`` and ``dZ`` (float), or raise
    ``ValueError`` unless ``params`` match the forward pass of ``saved`` and ``dZ`` its
    logits."""
    tied, untied = saved["tied"], "unembed" in params
    require_that(tied != untied, "params and saved disagree: the forward pass was {}, "
                 "params {} 'unembed'", "tied" if tied else "untied",
                 "have" if untied else "lack")
    unembed = _unembedding(params, tied)
    Z_shape = saved["unembed"]["X"].shape[:-1] + (np.shape(unembed["W"])[1],)
    return unembed, as_float_like("dZ", dZ, Z_shape, "the logits Z")


def model_backward(params, saved, dZ):
    """Return ``dparams, None`` for ``dZ = dJ/dZ``, the gradient of the logits:
    gradients nested like ``params`` (ids have none).

    The layers' backward passes in reverse order; with tied weights ``dE`` is the sum
    of the embedding's and the unembedding's gradients, ``dE = dE_lookup + dU^T``.

    >>> config = ModelConfig(n_vocab=5, T_max=4, D=4, heads=2, layers=1, tied=True)
    >>> params = init_model(config)
    >>> logits, saved = model_forward(params, np.array([1, 2, 3]), config=config)
    >>> dparams, dids = model_backward(params, saved, np.ones_like(logits))
    >>> dparams["embed"]["E"].shape, "unembed" in dparams, dids
    ((5, 4), False, None)
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
    if saved["tied"]:  # U = E^T: dU^T has E's shape; add the two uses
        dparams["embed"] = {"E": d_embed["E"] + d_unembed["W"].T}
    else:
        dparams["unembed"] = d_unembed
    return dparams, None


def model_loss(params, ids, targets, *, config, key_valid=None, counted=None):
    """Return ``loss, grads``: the mean next-token cross-entropy and its gradients.

    ``targets`` has the shape of ``ids`` (``targets[..., t]`` is the token that follows
    ``ids[..., t]``). With ``key_valid`` the mean runs over the real positions only;
    padded positions get zero gradient. ``counted`` (boolean, the shape of ``ids``)
    narrows the mean further to the positions whose prediction is scored, e.g. the
    answer of a recall question; the others still feed attention but add no loss.
    ``grads`` nests like ``params``.

    >>> config = ModelConfig(n_vocab=7, T_max=6, D=4, heads=2, layers=2)
    >>> ids = np.array([[1, 2, 3, 4], [0, 6, 5, 1]])
    >>> params = init_model(config)
    >>> loss, grads = model_loss(params, ids[:, :-1], ids[:, 1:], config=config)
    >>> bool(abs(loss - np.log(7)) < 0.01), grads["unembed"]["W"].shape
    (True, (4, 7))
    """
    Z, saved = model_forward(params, ids, config=config, key_valid=key_valid)
    targets, counted = _require_targets(targets, counted, Z.shape[:-1])
    real = counted if key_valid is None else counted & np.asarray(key_valid)
    require_that(real.any(), "no position is counted: the mean loss would be empty")
    loss, saved_loss = cross_entropy_forward({}, Z[real], targets=targets[real])
    _, dZ_real = cross_entropy_backward({}, saved_loss, 1.0)  # (N_real, n_vocab)
    dZ = np.zeros_like(Z)
    dZ[real] = dZ_real  # the other positions take no part in the mean
    grads, _ = model_backward(params, saved, dZ)
    return loss, grads


def _require_targets(targets, counted, shape):
    """Return ``targets`` and ``counted`` (all True when None) as arrays of ``shape``,
    the shape of ``ids``, or raise ``ValueError``."""
    targets = require_like("targets", np.asarray(targets), shape, "ids")
    counted = np.ones(shape, dtype=bool) if counted is None else np.asarray(counted)
    require_that(counted.dtype == bool and counted.shape == shape, "counted must be a "
                 "boolean array of the shape of ids, {}, got {} {}", shape,
                 counted.dtype, counted.shape)
    return targets, counted


CONFIG_KEY = "config"
"""The name of the JSON string of the config inside a saved ``.npz`` file."""


def save_model(path, params, config):
    """Write ``params`` and ``config`` to one ``.npz`` file at exactly ``path``.

    Each array is stored under its dotted path (``"blocks.0.attn.W_Q"``); the config as
    a JSON string under ``"config"``. Nothing is pickled.
    """
    _require_model(params, config)
    flat = {path_: np.asarray(value) for path_, value in flatten_params(params).items()}
    fields = {
        name: value.item() if isinstance(value, np.generic) else value
        for name, value in dataclasses.asdict(config).items()
    }  # JSON numbers
    flat[CONFIG_KEY] = np.array(json.dumps(fields))
    with open(path, "wb") as file:
        np.savez(file, **flat)


def load_model(path):
    """Return ``params, config`` from a file written by :func:`save_model`.

    Raises ``ValueError`` when the config is missing or does not validate, when an array
    is missing or extra, or when an array has the wrong shape for the config. The file
    is read with ``allow_pickle=False``.
    """
    with np.load(path, allow_pickle=False) as data:
        stored = {name: data[name] for name in data.files}
    require_that(CONFIG_KEY in stored, "{} holds no config (no {!r} entry)", path,
                 CONFIG_KEY)
    try:
        config = ModelConfig(**json.loads(str(stored.pop(CONFIG_KEY))))
    except (TypeError, json.JSONDecodeError) as e:
        raise ValueError(f"the config in {path} is not a ModelConfig: {e}") from e
    _require_arrays({name: x.shape for name, x in stored.items()}, config, str(path))
    for name, x in stored.items():
        require_that(x.dtype.kind == "f", "{}: {} must hold floats, got {}", path, name,
                     x.dtype)
    like = init_model(config)  # the nesting this config needs
    return unflatten_params(stored, like), config


def spread_params(config, seed=0, *, rng=None):
    """Return parameters moved off :func:`init_model`'s values: a well-conditioned point
    for a gradient check.

    At ``std = 0.02``, gains 1 and biases 0 many gradients are tiny and a missing term
    could hide below the tolerance, so: weights ``N(0, 0.3^2)``, the tables ``E`` and
    ``P`` standard normal, gains ``1 + N(0, 0.1^2)``, shifts and biases ``N(0, 0.1^2)``,
    drawn from ``rng`` (default ``np.random.default_rng(seed)``).

    >>> config = ModelConfig(n_vocab=6, T_max=5, D=4, heads=2, layers=1, ratio=2)
    >>> float(spread_params(config)["blocks"][0]["ln1"]["gamma"].std()) > 0
    True
    """
    rng = np.random.default_rng(seed) if rng is None else rng
    params = init_model(config, seed=seed, std=0.3)
    flat = {}
    for name, value in flatten_params(params).items():
        if name in ("embed.E", "pos.P"):
            flat[name] = rng.normal(size=value.shape)
        elif value.ndim == 2:
            flat[name] = value
        else:
            flat[name] = value + 0.1 * rng.normal(size=value.shape)
    return unflatten_params(flat, params)
