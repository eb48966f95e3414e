"""Samplers: the exact distribution a sampler draws from, the draw, and generation.

:func:`probabilities` is the whole definition of every sampler of the course, along
the last axis of the logits, in this order:

1. **temperature** ``T``: ``p = softmax(z / T)``; ``T = 0`` is greedy: a one-hot on
   the argmax (ties: the lowest token id);
2. **top-k**: keep exactly the ``k`` most probable tokens (ties at the ``k``-th place
   broken by the lowest token id), zero the rest;
3. **top-p** (nucleus): of what is left, keep the smallest set of most probable tokens
   whose probabilities add up to at least ``p``;
4. **renormalise** what is kept to sum to one.

"Most probable" means ranked by the probability after the temperature, ties by the
lowest token id (a stable sort), in both cuts. :func:`sample` draws from that exact
distribution by the inverse of its cumulative distribution (:func:`draw`), so a test
can compare many draws with :func:`probabilities` itself
(:func:`attncourse.kit.sampling.assert_draws_match`).

>>> z = np.log([1.0, 2.0, 3.0, 4.0])           # softmax(z) = [0.1, 0.2, 0.3, 0.4]
>>> probabilities(z).round(12)
array([0.1, 0.2, 0.3, 0.4])
>>> probabilities(z, temperature=0.5) * 30      # softmax(2 z) is proportional to p^2
array([ 1.,  4.,  9., 16.])
>>> probabilities(z, top_k=2) * 7               # 0.3 and 0.4, renormalised
array([0., 0., 3., 4.])
>>> probabilities(z, top_p=0.6) * 7             # 0.4 < 0.6 <= 0.4 + 0.3
array([0., 0., 3., 4.])
"""

import numpy as np

from ._validate import as_ids, as_number, require_a, require_sizes, require_that
from .model import ModelConfig, model_forward
from .softmax import softmax

__all__ = [
    "TOP_P_TOLERANCE",
    "probabilities",
    "temperature_softmax",
    "top_k_filter",
    "top_p_filter",
    "token_ranks",
    "renormalise",
    "draw",
    "sample",
    "greedy",
    "generate",
]

TOP_P_TOLERANCE = 1e-12
"""The top-p cut keeps tokens until the cumulative probability is ``>= p - 1e-12``.

Without it, ``p = 0.7`` on probabilities ``0.4, 0.3`` could keep a third token when the
floating-point sum ``0.4 + 0.3`` lands one unit below ``0.7``.
"""


# --- validation -----------------------------------------------------------------------


def _as_logits(logits):
    """Return ``logits`` as a float64 array ``(..., n_vocab)``, or raise ``ValueError``.

    NaN and ``+inf`` are rejected; ``-inf`` is allowed (the token gets probability 0)
    but not for a whole row.
    """
    z = np.asarray(logits)
    require_that(z.dtype.kind in "biuf", "logits must be an array of real numbers, got "
                 "dtype {}", z.dtype)
    z = z.astype(np.float64)
    require_that(z.shape[-1:] not in ((), (0,)), "logits must have shape (..., "
                 "n_vocab) with n_vocab >= 1, got shape {}", z.shape)
    for what, where in (("NaN", np.isnan(z)), ("+inf", np.isposinf(z))):
        require_that(not where.any(), "logits must not hold {0}: {1} {0} entries in "
                     "logits of shape {2}", what, int(where.sum()), z.shape)
    empty = np.argwhere(np.all(np.isneginf(z), axis=-1))  # the rows of -inf alone
    require_that(len(empty) == 0, "logits must have a finite entry in every row; row "
                 "{} of logits of shape {} is all -inf",
                 tuple(map(int, empty[:1].ravel())), z.shape)
    return z


def _require_settings(temperature, top_k, top_p):
    """Return ``temperature`` (a float), ``top_k`` (an int or None) and ``top_p`` (a
    float or None), or raise ``ValueError`` naming a bad setting."""
    return (as_number("temperature", temperature, "[0, inf)"),
            as_number("top_k", top_k, "[1, inf)", integer=True, optional=True),
            as_number("top_p", top_p, "(0, 1]", optional=True))


def _require_rng(rng):
    require_a("rng", rng, np.random.Generator,
              "a numpy.random.Generator (np.random.default_rng(seed))")


def _require_generation(prompt, n_new, config, rng, temperature, top_k, top_p):
    """Return the ``prompt`` ids (int64) of a call of :func:`generate`, or raise
    ``ValueError`` naming the argument at fault."""
    require_a("config", config, ModelConfig)
    _require_rng(rng)
    _require_settings(temperature, top_k, top_p)
    require_sizes(allow_zero=True, n_new=n_new)
    ids = np.asarray(prompt)
    require_that(ids.ndim in (1, 2) and ids.shape[-1], "prompt must be token ids of "
                 "shape (t,) or (batch, t) with t >= 1, got shape {}", ids.shape)
    return as_ids(ids, config.n_vocab, "prompt")


# --- the distribution -----------------------------------------------------------------


def token_ranks(p):
    """``(order, ranks)``: the ids by falling probability, and each token's rank in its
    row (0 for the most probable; ties by lowest id)."""
    order = np.argsort(-p, axis=-1, kind="stable")
    ranks = np.empty_like(order)
    positions = np.broadcast_to(np.arange(p.shape[-1]), p.shape)
    np.put_along_axis(ranks, order, positions, axis=-1)
    return order, ranks


def renormalise(p, keep):
    """``p`` with the tokens outside ``keep`` set to 0, rescaled to sum to 1 per row."""
    kept = np.where(keep, p, 0.0)
    return kept / kept.sum(axis=-1, keepdims=True)


def temperature_softmax(z, temperature):
    """``softmax(z / T)``; ``T = 0``: the one-hot on the argmax (lowest id on ties)."""
    if temperature == 0.0:
        return np.eye(z.shape[-1])[np.argmax(z, axis=-1)]
    shifted = z - np.max(z, axis=-1, keepdims=True)  # <= 0, so z / T cannot reach +inf
    with np.errstate(over="ignore"):  # a tiny T sends far-off logits to -inf: weight 0
        return softmax(shifted / temperature)


def top_k_filter(p, k):
    """Keep exactly the ``k`` most probable tokens (ties by lowest id); renormalise."""
    if k >= p.shape[-1]:
        return p
    _, ranks = token_ranks(p)
    return renormalise(p, ranks < k)


def top_p_filter(p, top_p):
    """Keep the smallest prefix (by rank) whose sum reaches ``top_p``; renormalise."""
    order, ranks = token_ranks(p)
    cumulative = np.cumsum(np.take_along_axis(p, order, axis=-1), axis=-1)
    # tokens ranked before the cut sum to less than p; the one that reaches p is kept
    n_keep = 1 + np.sum(cumulative < top_p - TOP_P_TOLERANCE, axis=-1, keepdims=True)
    return renormalise(p, ranks < n_keep)


def probabilities(logits, *, temperature=1.0, top_k=None, top_p=None):
    """Return the exact distribution the sampler draws from, along the last axis.

    Temperature, then top-k, then top-p, then renormalise (the module docstring states
    each step). ``temperature = 0`` gives a one-hot on the argmax, lowest id on ties;
    ``top_k >= n_vocab`` keeps every token; the top-p cut keeps tokens, most probable
    first, until their sum is ``>= top_p - TOP_P_TOLERANCE`` (``1e-12``), and always
    keeps the most probable one. Leading batch axes broadcast; the result is float64.
    ``-inf`` logits get probability 0; NaN, ``+inf``, a row of ``-inf``, a negative or
    non-finite temperature, ``top_k < 1`` or ``top_p`` outside ``(0, 1]`` raise
    ``ValueError``.

    >>> z = np.array([[2.0, 5.0, 5.0, -np.inf], [0.0, 0.0, 0.0, 0.0]])
    >>> probabilities(z, temperature=0)     # greedy: the lowest id of the tied maximum
    array([[0., 1., 0., 0.],
           [1., 0., 0., 0.]])
    >>> probabilities(z, top_k=1)
    array([[0., 1., 0., 0.],
           [1., 0., 0., 0.]])
    >>> probabilities(z[1], top_k=3)       # a four-way tie: ids 0, 1, 2 are kept
    array([0.33333333, 0.33333333, 0.33333333, 0.        ])
    >>> probabilities([0.4, 0.3], top_p=1.5)
    Traceback (most recent call last):
    ...
    ValueError: top_p must be None or a finite number in (0, 1], got 1.5
    >>> probabilities([1.0, np.nan])
    Traceback (most recent call last):
    ...
    ValueError: logits must not hold NaN: 1 NaN entries in logits of shape (2,)
    """
    temperature, top_k, top_p = _require_settings(temperature, top_k, top_p)
    z = _as_logits(logits)  # (..., n_vocab)
    p = temperature_softmax(z, temperature)  # (..., n_vocab)
    if top_k is not None:
        p = top_k_filter(p, top_k)
    if top_p is not None:
        p = top_p_filter(p, top_p)
    return p


# --- the draw -------------------------------------------------------------------------


def draw(P, rng):
    """Draw one token per row of the distributions ``P (..., n_vocab)``: inverse CDF.

    One uniform per row, ``u = rng.random(P.shape[:-1])`` (rows in C order), then the
    token is the first ``i`` with ``F_i > u``, where ``F`` is the cumulative sum of the
    row divided by its last entry (so ``F_last = 1`` exactly and ``u < 1`` always finds
    a token). A token of probability 0 is never drawn: its ``F_i`` equals the one
    before it. The same ``rng`` state gives the same tokens.

    >>> P = np.array([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]])
    >>> np.random.default_rng(0).random(2)   # u: 0.637 picks token 1, 0.270 token 0
    array([0.63696169, 0.26978671])
    >>> draw(P, np.random.default_rng(0))
    array([1, 0])
    >>> draw(np.array([0.5, 0.6]), np.random.default_rng(0))
    Traceback (most recent call last):
    ...
    ValueError: P must hold probabilities (>= 0, each row summing to 1 within 1e-9); \
got shape (2,) with row sums from 1.1 to 1.1
    """
    _require_rng(rng)
    P = np.asarray(P, dtype=np.float64)
    require_that(P.shape[-1:] not in ((), (0,)), "P must have shape (..., n_vocab) "
                 "with n_vocab >= 1, got shape {}", P.shape)
    sums = P.sum(axis=-1)
    require_that(np.all(P >= 0) and np.all(np.abs(sums - 1.0) <= 1e-9), "P must hold "
                 "probabilities (>= 0, each row summing to 1 within 1e-9); got shape "
                 "{} with row sums from {:.3g} to {:.3g}", P.shape,
                 sums.min(initial=np.inf), sums.max(initial=-np.inf))
    F = np.cumsum(P, axis=-1)
    F = F / F[..., -1:]
    u = rng.random(P.shape[:-1])
    return np.sum(F <= np.asarray(u)[..., None], axis=-1).astype(np.int64)


def sample(logits, rng, *, temperature=1.0, top_k=None, top_p=None):
    """Draw one token id per row from ``probabilities(logits, ...)``.

    The result has the shape ``logits.shape[:-1]``.

    ``draw(probabilities(logits, ...), rng)``: one ``rng.random`` uniform per row, the
    inverse of the cumulative distribution (see :func:`draw`). ``rng`` must be a
    ``numpy.random.Generator``; the same seed gives the same ids. ``temperature = 0``
    still uses one uniform per row, and always returns the greedy token.

    >>> z = np.log([[0.1, 0.2, 0.3, 0.4]])
    >>> sample(z, np.random.default_rng(0)), sample(z, np.random.default_rng(0))
    (array([3]), array([3]))
    >>> sample(np.zeros((2, 5)), np.random.default_rng(1), top_k=1)
    array([0, 0])
    >>> sample(z, rng=0)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: rng must be a numpy.random.Generator (np.random.default_rng(seed)), ...
    """
    P = probabilities(logits, temperature=temperature, top_k=top_k, top_p=top_p)
    return draw(P, rng)  # draw checks rng


def greedy(logits):
    """Return the argmax of each row (lowest id on ties), shape ``logits.shape[:-1]``.

    >>> greedy(np.array([[0.0, 3.0, 3.0], [-np.inf, -1.0, -2.0]]))
    array([1, 1])
    """
    z = _as_logits(logits)  # (..., n_vocab)
    return np.argmax(z, axis=-1).astype(np.int64)


# --- generation -----------------------------------------------------------------------


def generate(params, prompt, n_new, *, config, rng, temperature=1.0, top_k=None,
             top_p=None):
    """Return ``prompt`` and ``n_new`` sampled tokens, recomputing the whole window.

    ``prompt`` holds token ids, 1-D ``(t,)`` or 2-D ``(batch, t)`` with ``t >= 1``. Each
    step runs :func:`attncourse.model.model_forward` on the last ``config.T_max`` tokens
    (the whole window recomputed at every step: the quadratic cost that Chapter 10's
    cache removes), samples the next token from the last position's logits with
    :func:`sample` (one uniform per sequence per step) and appends it. The result has
    the prompt's number of axes and ``t + n_new`` tokens per sequence.

    >>> from attncourse.model import init_model
    >>> config = ModelConfig(n_vocab=5, T_max=4, D=4, heads=2, layers=1)
    >>> params = init_model(config)
    >>> out = generate(params, np.array([1, 2]), 6, config=config,
    ...                rng=np.random.default_rng(0))
    >>> out.shape, out[:2]
    ((8,), array([1, 2]))
    >>> generate(params, np.array([[1, 2], [3, 4]]), 3, config=config,
    ...          rng=np.random.default_rng(0), temperature=0).shape
    (2, 5)
    """
    ids = _require_generation(prompt, n_new, config, rng, temperature, top_k, top_p)
    for _ in range(n_new):
        window = ids[..., -config.T_max:]  # (..., <= T_max)
        logits, _ = model_forward(params, window, config=config)  # (..., t, n_vocab)
        new = sample(logits[..., -1, :], rng, temperature=temperature, top_k=top_k,
                     top_p=top_p)  # (...)
        ids = np.concatenate([ids, new[..., None]], axis=-1)
    return ids
