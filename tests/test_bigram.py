"""Tests of attncourse.bigram: counts, the conditional entropy, the model composed of
layer pairs, training."""

import collections
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

from attncourse.bigram import (
    bigram_counts,
    bigram_loss_and_grads,
    bigram_pairs,
    bigram_probabilities,
    conditional_entropy,
    init_bigram,
    train_bigram,
)
from attncourse.params import flatten_params
from attncourse.text import build_vocab, encode, make_corpus
from attncourse.kit.gradients import layer_gradcheck

EPS = np.finfo(np.float64).eps
MARGIN = 0.01  # nats, fixed before training: final training loss within H + MARGIN


def entropy_by_counting(text):
    """H(next | current) from Python counters over character pairs: shares no code with
    the package."""
    pairs = collections.Counter(zip(text, text[1:]))
    first = collections.Counter(a for a, _ in zip(text, text[1:]))
    n = sum(pairs.values())
    return -sum(c / n * np.log(c / first[a]) for (a, _), c in pairs.items())


def test_counts_match_a_python_counter():
    text = make_corpus(30, seed=2)
    vocab = build_vocab(text)
    C = bigram_counts(encode(text, vocab), len(vocab))
    pairs = collections.Counter(zip(text, text[1:]))
    assert C.sum() == len(text) - 1
    for (a, b), c in pairs.items():
        assert C[vocab.index(a), vocab.index(b)] == c
    assert_allclose(conditional_entropy(C), entropy_by_counting(text), rtol=1e-12)


def test_entropy_of_known_tables():
    assert conditional_entropy(np.array([[0, 5], [5, 0]])) == 0.0  # deterministic
    # uniform
    assert_allclose(conditional_entropy(np.full((4, 4), 3)), np.log(4), rtol=4 * EPS)
    assert_allclose(
        conditional_entropy(np.array([[1, 3], [0, 0]])),
        -(0.25 * np.log(0.25) + 0.75 * np.log(0.75)),
        rtol=4 * EPS,
    )


def test_training_reaches_the_conditional_entropy():
    text = make_corpus(150, seed=0)
    vocab = build_vocab(text)
    ids = encode(text, vocab)
    H = entropy_by_counting(text)
    params, losses = train_bigram(ids, len(vocab), D=8, steps=400, lr=2.0, seed=0)
    # a small initialisation starts near uniform
    assert abs(losses[0] - np.log(len(vocab))) < 0.01
    assert H <= losses[-1] <= H + MARGIN
    # plain gradient descent at this rate decreases every step
    assert np.all(np.diff(losses) < 0)
    P = bigram_probabilities(params)
    assert_allclose(P.sum(axis=1), 1.0, rtol=0, atol=16 * EPS)


def test_training_is_deterministic_for_a_seed():
    ids = encode(make_corpus(10, seed=1), build_vocab(make_corpus(10, seed=1)))
    n = int(ids.max()) + 1
    a = train_bigram(ids, n, D=3, steps=5, seed=4)
    b = train_bigram(ids, n, D=3, steps=5, seed=4)
    assert_array_equal(a[1], b[1])
    for name, value in flatten_params(a[0]).items():
        assert_array_equal(value, flatten_params(b[0])[name])
    c = train_bigram(ids, n, D=3, steps=5, seed=5)  # control: another seed, another run
    assert not np.array_equal(a[1], c[1])


def bigram_forward(params, x, *, targets):
    """The bigram model as a pair: ``loss, saved`` from ids ``x``; the backward scales
    the gradients."""
    loss, grads = bigram_loss_and_grads(params, x, targets)
    return loss, grads


def bigram_backward(params, grads, dloss):
    return {
        layer: {k: float(dloss) * g for k, g in grads[layer].items()} for layer in grads
    }, None


def test_gradients_match_finite_differences():
    rng = np.random.default_rng(10)
    n_vocab, D = 6, 4
    ids = rng.integers(0, n_vocab, size=25)
    x, y = bigram_pairs(ids)
    params = init_bigram(n_vocab, D, seed=3, scale=1.0)
    loss, grads = bigram_loss_and_grads(params, x, y)
    assert {k: g.shape for k, g in flatten_params(grads).items()} == {
        "embed.E": (6, 4),
        "unembed.W": (4, 6),
    }
    report = layer_gradcheck(bigram_forward, bigram_backward, params, x, targets=y)
    assert report.passed, report
    assert {name for name, _ in report.errors} == {"embed.E", "unembed.W"}


def test_gradients_with_the_layers_swapped_are_caught():
    # fault control: the embedding gradient handed to the unembedding and back is not
    # the gradient
    rng = np.random.default_rng(11)
    ids = rng.integers(0, 5, size=30)
    x, y = bigram_pairs(ids)
    params = init_bigram(5, 5, seed=2, scale=1.0)

    def swapped(params, grads, dloss):
        good, _ = bigram_backward(params, grads, dloss)
        return {
            "embed": {"E": good["unembed"]["W"]},
            "unembed": {"W": good["embed"]["E"]},
        }, None

    assert not layer_gradcheck(bigram_forward, swapped, params, x, targets=y).passed


def test_bad_input():
    with pytest.raises(
        ValueError, match=r"at least 2 ids to form pairs, got shape \(1,\)"
    ):
        bigram_pairs([3])
    with pytest.raises(
        ValueError, match=r"out of range for a vocabulary of 3 tokens.*\[3\]"
    ):
        bigram_counts([0, 3], 3)
    with pytest.raises(
        ValueError,
        match=r"^C must have shape \(n_vocab, n_vocab\) with n_vocab=2 \(as in C\), "
            r"got shape \(2, 3\)$",
    ):
        conditional_entropy(np.ones((2, 3)))
    with pytest.raises(ValueError, match="^counts must be finite and non-negative$"):
        conditional_entropy(np.array([[1, -1], [0, 1]]))
    with pytest.raises(ValueError, match="^counts must be finite and non-negative$"):
        conditional_entropy(np.array([[1, np.inf], [0, 1]]))
    with pytest.raises(ValueError, match="all zero"):
        conditional_entropy(np.zeros((2, 2)))
    with pytest.raises(
        ValueError, match=r"sizes must be positive integers: D=0 \(got n_vocab=3, D=0\)"
    ):
        init_bigram(3, 0)
    with pytest.raises(
        ValueError,
        match=r"^U must have shape \(D, n_vocab\) with D=2 \(as in E\), got shape "
            r"\(3, 2\)$",
    ):
        bigram_probabilities(
            {"embed": {"E": np.ones((3, 2))}, "unembed": {"W": np.ones((3, 2))}}
        )
    with pytest.raises(ValueError, match=r"bigram params lack \['unembed'\]"):
        bigram_probabilities({"embed": {"E": np.ones((3, 2))}, "U": np.ones((2, 3))})
    for lr in (-1.0, 0, np.inf, True):
        message = f"the learning rate lr must be a finite number in (0, inf), got {lr}"
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            train_bigram([0, 1, 0], 2, lr=lr)
    with pytest.raises(
        ValueError,
        match=r"sizes must be non-negative integers: steps=-1 \(got steps=-1\)",
    ):
        train_bigram([0, 1, 0], 2, steps=-1)


@given(st.lists(st.integers(0, 4), min_size=2, max_size=40))
def test_entropy_bounds_and_minimality(seq):
    ids = np.array(seq)
    C = bigram_counts(ids, 5)
    H = conditional_entropy(C)
    assert -1e-15 <= H <= np.log(5) + 1e-12
    # the count-based conditional is the best bigram table: any other table scores worse
    # smoothed: every row sums to one
    q_table = (C + 0.5) / (C.sum(axis=1, keepdims=True) + 2.5)
    x, y = bigram_pairs(ids)
    assert np.mean(-np.log(q_table[x, y])) >= H - 1e-12
