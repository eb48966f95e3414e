"""A bigram next-token model ``p(next | current) = softmax(E[current] U)``, trained by
plain gradient descent.

The model composes the layer pairs of Chapters 1 and 2: an embedding lookup ``E``, the
unembedding ``U (D, n_vocab)`` (a linear layer) and the mean cross-entropy. Its
parameters nest by layer: ``{"embed": {"E": E}, "unembed": {"W": U}}``. The best any
bigram model can do on a text is its conditional entropy
``H = -sum_ab (C_ab / N) log(C_ab / C_a)``, computed from the counts ``C`` alone by
:func:`conditional_entropy`.

>>> ids = np.array([0, 1, 0, 1, 0, 1])
>>> conditional_entropy(bigram_counts(ids, 2))  # "0 then 1, 1 then 0": predictable
0.0
"""

import numpy as np

from ._validate import (as_ids, as_number, as_params, require_sizes, require_that,
                        shaped)
from .layers.embedding import embedding_backward, embedding_forward
from .layers.linear import linear_backward, linear_forward
from .loss import cross_entropy_backward, cross_entropy_forward
from .softmax import softmax

__all__ = [
    "bigram_pairs",
    "bigram_counts",
    "conditional_entropy",
    "init_bigram",
    "bigram_loss_and_grads",
    "bigram_probabilities",
    "train_bigram",
]


def bigram_pairs(ids):
    """Return ``(x, y)``: each token of a 1-D id sequence and the token that follows it.

    >>> bigram_pairs([3, 1, 2])
    (array([3, 1]), array([1, 2]))
    """
    ids = np.asarray(ids)
    require_that(ids.ndim == 1 and ids.size >= 2, "need a 1-D sequence of at least 2 "
                 "ids to form pairs, got shape {}", ids.shape)
    return ids[:-1], ids[1:]  # x_t = ids[t], y_t = ids[t + 1]


def bigram_counts(ids, n_vocab):
    """Return ``C`` with ``C[a, b]`` = how often token ``b`` directly follows token
    ``a``.

    >>> bigram_counts([0, 1, 1, 0], 2)
    array([[0, 1],
           [1, 1]])
    """
    ids = as_ids(ids, n_vocab)
    x, y = bigram_pairs(ids)
    C = np.zeros((n_vocab, n_vocab), dtype=np.int64)
    np.add.at(C, (x, y), 1)  # C[x_t, y_t] += 1 for every pair
    return C


def conditional_entropy(C):
    """Return ``H(next | current)`` in nats for a matrix of bigram counts ``C``.

    Pairs that never occur contribute nothing (``0 log 0 = 0``); rows with no count are
    ignored.

    >>> h = conditional_entropy(np.array([[1, 1], [2, 2]]))
    >>> round(h, 12) == round(float(np.log(2)), 12)
    True
    """
    C = shaped("C(n_vocab, n_vocab)", np.asarray(C, dtype=np.float64))
    require_that(np.isfinite(C).all() and (C >= 0).all(), "counts must be finite and "
                 "non-negative")
    N = C.sum()
    require_that(N != 0, "counts are all zero: the entropy of no data is undefined")
    row = C.sum(axis=1, keepdims=True)  # C_a
    seen = C > 0
    # C_ab / C_a where C_ab > 0
    cond = np.where(seen, C, 1.0) / np.where(row > 0, row, 1.0)
    # + 0.0 turns -0.0 into 0.0
    return float(-np.sum(np.where(seen, C * np.log(cond), 0.0)) / N) + 0.0


def init_bigram(n_vocab, D, seed=0, scale=0.1):
    """Return ``{"embed": {"E": (n_vocab, D)}, "unembed": {"W": (D, n_vocab)}}``,
    entries ``N(0, scale^2)``.

    Drawn from ``default_rng(seed)``.

    >>> params = init_bigram(5, 3)
    >>> params["embed"]["E"].shape, params["unembed"]["W"].shape
    ((5, 3), (3, 5))
    """
    require_sizes(n_vocab=n_vocab, D=D)
    rng = np.random.default_rng(seed)
    return {
        "embed": {"E": rng.normal(0.0, scale, size=(n_vocab, D))},
        "unembed": {"W": rng.normal(0.0, scale, size=(D, n_vocab))},
    }


def _as_tables(params):
    """Return ``E (n_vocab, D)`` and ``U (D, n_vocab)``, or raise ``ValueError``."""
    E, U = as_params("bigram", params, "embed.E unembed.W")
    return shaped("E(n_vocab, D) U(D, n_vocab)", E, U)


def bigram_loss_and_grads(params, x, y):
    """Return ``(loss, grads)``: the mean cross-entropy of predicting ``y`` from ``x``,
    and the gradients.

    ``grads`` has the nesting of ``params``.

    >>> params = init_bigram(4, 3)
    >>> loss, grads = bigram_loss_and_grads(params, np.array([0, 1]), np.array([1, 2]))
    >>> E, W = grads["embed"]["E"], grads["unembed"]["W"]
    >>> bool(abs(loss - np.log(4)) < 0.05), E.shape, W.shape
    (True, (4, 3), (3, 4))
    """
    _as_tables(params)
    X, saved_embed = embedding_forward(params["embed"], x)  # (B, D): row b is E[x_b]
    # (B, D) x (D, n_vocab) -> (B, n_vocab)
    Z, saved_unembed = linear_forward(params["unembed"], X)
    loss, saved_loss = cross_entropy_forward({}, Z, targets=y)
    _, dZ = cross_entropy_backward({}, saved_loss, 1.0)  # (p - onehot(y)) / B
    d_unembed, dX = linear_backward(params["unembed"], saved_unembed, dZ)
    # scatter-add: repeated tokens sum
    d_embed, _ = embedding_backward(params["embed"], saved_embed, dX)
    return loss, {"embed": d_embed, "unembed": d_unembed}


def bigram_probabilities(params):
    """Return the model's table
    ``P[a, b] = p(next = b | current = a) = softmax(E U)[a, b]``.

    >>> bigram_probabilities(init_bigram(3, 2)).sum(axis=1).round(12)
    array([1., 1., 1.])
    """
    E, U = _as_tables(params)
    return softmax(E @ U)  # (n_vocab, D) x (D, n_vocab) -> (n_vocab, n_vocab)


def train_bigram(ids, n_vocab, D=8, steps=400, lr=2.0, seed=0):
    """Train a bigram model on the id sequence by full-batch gradient descent; return
    ``(params, losses)``.

    ``losses[s]`` is the training loss before step ``s``; ``losses[steps]`` is the final
    loss. Deterministic: the only randomness is the initialisation, drawn from
    ``default_rng(seed)``.

    >>> params, losses = train_bigram(np.array([0, 1] * 20), 2, D=3, steps=50, lr=2.0)
    >>> bool(losses[-1] < 0.05 < np.log(2) - 0.01 < losses[0])
    True
    """
    ids = as_ids(ids, n_vocab)
    x, y = bigram_pairs(ids)
    require_sizes(allow_zero=True, steps=steps)
    as_number("the learning rate lr", lr, "(0, inf)")
    params = init_bigram(n_vocab, D, seed=seed)
    losses = np.empty(steps + 1)
    for s in range(steps + 1):
        loss, grads = bigram_loss_and_grads(params, x, y)
        losses[s] = loss
        if s < steps:
            params = {
                layer: {
                    k: params[layer][k] - lr * grads[layer][k] for k in params[layer]
                }
                for layer in params
            }  # a new dict each step
    return params, losses
