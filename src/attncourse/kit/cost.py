"""A counting model of the cost of one dense attention head, and a reference that
counts.

The model counts multiply-adds of the matrix products and the numbers stored for the
weights: ``T D (2d + r)`` for the three projections, ``T^2 d`` for ``Q K^T``, ``T^2 r``
for ``A V``, and ``T^2`` stored weights. It is a count, not a device timing: the scale
``1/sqrt(d)``, the exponentials and the normalisations (all of order ``T^2``) are left
out.

For the whole model of :mod:`attncourse.model` (Chapter 6),
:func:`model_parameter_count` is the closed-form number of parameters and
:func:`model_flops_per_token` the forward pass's floating-point operations per token
(2 per multiply-add), matched exactly by :func:`counted_model_flops`, which reads the
shapes of the arrays a real pass saved. :func:`counted_decode_flops` counts one decode
step of the key/value cache (Chapter 10) the same way.

>>> attention_cost(T=5, D=7, d=3, r=4)
AttentionCost(projections=350, scores=75, output=100, weights_stored=25)
"""

import math
from typing import NamedTuple

import numpy as np

from .._validate import shaped
from ..layers.head import PROJECTIONS
from .._validate import require_sizes

__all__ = [
    "AttentionCost", "attention_cost", "counted_head_forward",
    "model_parameter_count", "ModelFlops", "model_flops_per_token",
    "counted_model_flops", "counted_decode_flops",
]


class AttentionCost(NamedTuple):
    """Multiply-adds of each product, and the number of attention weights stored."""

    projections: int
    scores: int
    output: int
    weights_stored: int

    @property
    def multiply_adds(self):
        """All multiply-adds of the head: projections, scores and output."""
        return self.projections + self.scores + self.output


def attention_cost(T, D, d, r):
    """Return the :class:`AttentionCost` of one head on ``T`` positions of width ``D``.

    >>> attention_cost(T=5, D=7, d=3, r=0)
    Traceback (most recent call last):
    ...
    ValueError: sizes must be positive integers: r=0 (got T=5, D=7, d=3, r=0)
    """
    require_sizes(T=T, D=D, d=d, r=r)
    return AttentionCost(
        projections=T * D * (2 * d + r),
        scores=T * T * d,
        output=T * T * r,
        weights_stored=T * T,
    )


def counted_head_forward(X, W_Q, W_K, W_V):
    """Run one head with explicit loops, counting every multiply-add; return
    ``O, A, AttentionCost``.

    Only 2-D input ``X (T, D)``. The loops are written for counting, not for speed.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> shapes = [(5, 7), (7, 3), (7, 3), (7, 4)]
    >>> X, W_Q, W_K, W_V = (rng.standard_normal(s) for s in shapes)
    >>> O, A, counted = counted_head_forward(X, W_Q, W_K, W_V)
    >>> counted == attention_cost(T=5, D=7, d=3, r=4)
    True
    """
    X, W_Q, W_K, W_V = shaped(PROJECTIONS, X, W_Q, W_K, W_V)
    if X.ndim != 2:
        raise ValueError(
            f"counted_head_forward takes a 2-D X (T, D), got shape {X.shape}"
        )
    T, D = X.shape
    d = W_Q.shape[1]
    madds = {"projections": 0, "scores": 0, "output": 0}

    def matmul(M, N, kind):
        out = np.zeros((M.shape[0], N.shape[1]))
        for i in range(M.shape[0]):
            for j in range(N.shape[1]):
                total = 0.0
                for m in range(M.shape[1]):
                    total += M[i, m] * N[m, j]
                    madds[kind] += 1
                out[i, j] = total
        return out

    Q = matmul(X, W_Q, "projections")  # (T, D) x (D, d) -> (T, d)
    K = matmul(X, W_K, "projections")  # (T, D) x (D, d) -> (T, d)
    V = matmul(X, W_V, "projections")  # (T, D) x (D, r) -> (T, r)
    S = matmul(Q, K.T, "scores") / math.sqrt(d)  # (T, d) x (d, T) -> (T, T)
    A = np.zeros((T, T))
    stored = 0
    for i in range(T):
        m = max(S[i])
        e = [math.exp(S[i, j] - m) for j in range(T)]
        z = sum(e)
        for j in range(T):
            A[i, j] = e[j] / z
            stored += 1
    O = matmul(A, V, "output")  # (T, T) x (T, r) -> (T, r)
    return O, A, AttentionCost(weights_stored=stored, **madds)


# --- the whole model (Chapter 6) ------------------------------------------------------


def _model_sizes(config):
    """Return ``n_vocab, T_max, D, L, F`` of a model config, or raise ``ValueError``."""
    sizes = {
        name: getattr(config, name, None)
        for name in ("n_vocab", "T_max", "D", "heads", "layers", "ratio")
    }
    require_sizes(**sizes)
    if sizes["D"] % sizes["heads"]:
        raise ValueError(f"D={sizes['D']} must be divisible by heads={sizes['heads']}")
    D = sizes["D"]
    return sizes["n_vocab"], sizes["T_max"], D, sizes["layers"], sizes["ratio"] * D


def model_parameter_count(config):
    """Return the number of parameters of the model ``config`` describes (closed form).

    Per block: attention ``4 D^2`` (``W_Q``, ``W_K``, ``W_V``, ``W_O``, each ``D x D``
    in total over the heads), the MLP ``2 F D + F + D`` (two weights and two biases,
    ``F = ratio D``), two LayerNorms ``4 D``. Outside the blocks: the token table
    ``n_vocab D``, the positions ``T_max D``, the final LayerNorm ``2 D`` and, unless
    tied, the unembedding ``D n_vocab``. Equals
    ``attncourse.model.count_parameters(init_model(config))``.

    >>> from attncourse.model import ModelConfig
    >>> model_parameter_count(ModelConfig(n_vocab=7, T_max=6, D=4, heads=2, layers=2,
    ...                                   ratio=2))
    400
    """
    n_vocab, T_max, D, L, F = _model_sizes(config)
    block = 4 * D * D + (2 * F * D + F + D) + 2 * (2 * D)
    unembedding = 0 if config.tied else D * n_vocab
    return n_vocab * D + T_max * D + L * block + 2 * D + unembedding


class ModelFlops(NamedTuple):
    """Floating-point operations per token of the forward pass: 2 per multiply-add."""

    matmul: int  # the products with a weight matrix (projections, MLP, unembedding)
    attention: int  # Q K^T and A V in every head: grows with T

    @property
    def total(self):
        """All floating-point operations per token counted by the model."""
        return self.matmul + self.attention


def model_flops_per_token(config, T):
    """Return the :class:`ModelFlops` of one forward pass on ``T`` positions, per token.

    Every weight entry that enters a product is one multiply-add per token: per block
    ``4 D^2`` (attention's four projections) and ``2 F D`` (the MLP), and ``D n_vocab``
    for the unembedding (tied or not), so
    ``matmul = 2 (L (4 D^2 + 2 F D) + D n_vocab)``: twice the parameters that multiply,
    without the lookup tables, biases and LayerNorms. Each head computes the full
    ``T x T`` scores ``Q K^T`` (``T^2 d``) and ``A V`` (``T^2 r``); summed over the
    ``H`` heads (``H d = H r = D``) and divided by the ``T`` tokens,
    ``attention = 2 L (2 T D) = 4 L T D``. Elementwise work (LayerNorm, GELU, softmax,
    the residual adds) is not counted.

    >>> from attncourse.model import ModelConfig
    >>> config = ModelConfig(n_vocab=7, T_max=6, D=4, heads=2, layers=2, ratio=2)
    >>> model_flops_per_token(config, T=5)
    ModelFlops(matmul=568, attention=160)
    """
    n_vocab, T_max, D, L, F = _model_sizes(config)
    require_sizes(T=T)
    if T > T_max:
        raise ValueError(f"T={T} exceeds the model's T_max={T_max}")
    return ModelFlops(
        matmul=2 * (L * (4 * D * D + 2 * F * D) + D * n_vocab), attention=4 * L * T * D
    )


def _rows(X):
    """The number of rows ``X (..., n)`` holds: every leading axis multiplied out."""
    return int(np.prod(np.shape(X)[:-1]))


def _count(params, saved, madds):
    """Add the multiply-adds of every product under ``params`` to ``madds``.

    ``params`` and ``saved`` nest alike (each layer's ``saved`` sits under its name). A
    linear layer ``Y = X W`` costs ``rows(X) size(W)``, ``X`` being the input it saved;
    multi-head attention costs ``rows(X) size(W_Q, W_K, W_V)`` for the projections,
    ``rows(C) size(W_O)`` for the output projection and ``size(A) (d + r)`` for
    ``Q K^T`` and ``A V``, ``A (..., H, T, T)`` being the weights it saved.
    """
    if isinstance(params, (list, tuple)):
        for p, s in zip(params, saved):
            _count(p, s, madds)
    elif isinstance(params, dict) and "W_Q" in params:  # multi-head attention
        projections = sum(np.size(params[n]) for n in ("W_Q", "W_K", "W_V"))
        madds["matmul"] += _rows(saved["X"]) * projections + _rows(
            saved["C"]
        ) * np.size(params["W_O"])
        d, r = np.shape(saved["Q"])[-1], np.shape(saved["V"])[-1]
        madds["attention"] += np.size(saved["A"]) * (d + r)
    elif isinstance(params, dict) and "W" in params:  # a linear layer
        madds["matmul"] += _rows(saved["X"]) * np.size(params["W"])
    elif isinstance(params, dict):
        for name, p in params.items():
            if isinstance(p, (dict, list, tuple)):  # a layer inside: arrays are leaves
                _count(p, saved[name], madds)


def counted_model_flops(params, saved):
    """Count the pass that produced ``saved``; return its :class:`ModelFlops` per token.

    ``params, saved`` as used and returned by :func:`attncourse.model.model_forward`.
    The count reads the shapes of the arrays the pass itself saved (each product's input
    and each head's weights ``A``), layer by layer, not the formula; it divides by the
    number of tokens, ``ids.size``.

    >>> from attncourse.model import ModelConfig, init_model, model_forward
    >>> config = ModelConfig(n_vocab=7, T_max=6, D=4, heads=2, layers=2, ratio=2)
    >>> params = init_model(config)
    >>> _, saved = model_forward(params, np.zeros((3, 5), dtype=int), config=config)
    >>> counted_model_flops(params, saved) == model_flops_per_token(config, T=5)
    True
    """
    madds = {"matmul": 0, "attention": 0}
    _count(params, saved, madds)
    if saved["tied"]:  # the unembedding's weight is E^T, not a parameter of its own
        E = params["embed"]["E"]
        madds["matmul"] += _rows(saved["unembed"]["X"]) * np.size(E)
    tokens = np.size(saved["embed"]["ids"])
    per_token = {}
    for kind, count in madds.items():
        if count % tokens:
            raise ValueError(
                f"{count} {kind} multiply-adds do not split evenly over {tokens} tokens"
            )
        per_token[kind] = 2 * (count // tokens)
    return ModelFlops(**{kind: int(v) for kind, v in per_token.items()})


def counted_decode_flops(params, cache, ids, *, config):
    """Run one :func:`attncourse.kvcache.decode_step` and count it from its arrays;
    return ``logits, cache, flops`` (the step's results and its :class:`ModelFlops`
    per token).

    While the step runs, each call of ``block_forward`` it makes is recorded with the
    ``saved`` it returns; the blocks are then counted as :func:`counted_model_flops`
    counts them (the inputs of the products, and the weights ``A (..., H, 1, t + 1)``
    each head's attention really formed), plus the unembedding of the one position.
    The count reads what the step computed, not the cache it returns.

    >>> from attncourse.kvcache import prefill
    >>> from attncourse.model import ModelConfig, init_model
    >>> config = ModelConfig(n_vocab=7, T_max=6, D=4, heads=2, layers=2, ratio=2)
    >>> params = init_model(config)
    >>> _, cache = prefill(params, np.array([1, 2, 3]), config=config)
    >>> counted_decode_flops(params, cache, np.array(4), config=config)[2]
    ModelFlops(matmul=568, attention=128)
    """
    from .. import kvcache

    seen = []
    block_forward = kvcache.block_forward

    def recorded(*args, **kwargs):
        Y, saved = block_forward(*args, **kwargs)
        seen.append(saved)
        return Y, saved

    kvcache.block_forward = recorded
    try:
        logits, longer = kvcache.decode_step(params, cache, ids, config=config)
    finally:
        kvcache.block_forward = block_forward
    if len(seen) != config.layers:
        raise ValueError(f"the step ran {len(seen)} blocks, the model has "
                         f"config.layers={config.layers}")
    madds = {"matmul": 0, "attention": 0}
    _count(params["blocks"], seen, madds)
    tokens = max(1, int(np.size(ids)))
    madds["matmul"] += tokens * config.D * config.n_vocab  # the unembedding
    flops = ModelFlops(**{kind: 2 * (n // tokens) for kind, n in madds.items()})
    return logits, longer, flops
