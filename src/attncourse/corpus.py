"""A small English corpus the course writes itself: sentences drawn from a tiny probabilistic grammar.

``make_corpus(n_sentences, seed)`` is deterministic: the same arguments give the same text,
with no download. Each sentence is ``determiner [adjective] noun verb determiner [adjective] noun.``
and sentences are separated by single spaces.

>>> make_corpus(2, seed=0)
'a big cat hears a bird. the bird sees a tall cat.'
"""

import numpy as np

__all__ = ["GRAMMAR", "ADJECTIVE_PROBABILITY", "make_sentence", "make_corpus"]

GRAMMAR = {
    "determiner": (("the", 0.6), ("a", 0.4)),
    "adjective": (("big", 0.3), ("red", 0.3), ("tall", 0.4)),
    "noun": (("cat", 0.4), ("dog", 0.3), ("bird", 0.2), ("fish", 0.1)),
    "verb": (("sees", 0.4), ("eats", 0.3), ("hears", 0.3)),
}
ADJECTIVE_PROBABILITY = 0.4  # chance that a noun phrase carries an adjective


def _pick(rng, category):
    words, probs = zip(*GRAMMAR[category])
    return words[rng.choice(len(words), p=np.array(probs))]


def _noun_phrase(rng):
    words = [_pick(rng, "determiner")]
    if rng.random() < ADJECTIVE_PROBABILITY:
        words.append(_pick(rng, "adjective"))
    words.append(_pick(rng, "noun"))
    return words


def make_sentence(rng):
    """Return one sentence drawn with the generator ``rng``.

    >>> make_sentence(np.random.default_rng(0))
    'a big cat hears a bird.'
    """
    return " ".join(_noun_phrase(rng) + [_pick(rng, "verb")] + _noun_phrase(rng)) + "."


def make_corpus(n_sentences=150, seed=0):
    """Return ``n_sentences`` sentences from the grammar, joined by spaces, drawn with ``default_rng(seed)``.

    >>> len(make_corpus(150, seed=0)) > 3000
    True
    """
    if isinstance(n_sentences, bool) or not isinstance(n_sentences, (int, np.integer)) or n_sentences < 1:
        raise ValueError(f"n_sentences must be a positive integer, got {n_sentences!r}")
    rng = np.random.default_rng(seed)
    return " ".join(make_sentence(rng) for _ in range(n_sentences))
