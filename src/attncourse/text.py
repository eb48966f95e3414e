"""Text: a character-level tokenizer, the course corpus and the associative-recall task.

The vocabulary is a string of distinct characters; the id of a character is its index
in that string, so ``vocab[i]`` decodes id ``i`` and ``len(vocab)`` is ``n_vocab``.

>>> vocab = build_vocab("hello")
>>> vocab, len(vocab)
('ehlo', 4)
>>> encode("hello", vocab)
array([1, 0, 2, 2, 3])
>>> decode(encode("hello", vocab), vocab)
'hello'
"""

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ._validate import as_ids, as_number, require_a, require_sizes, require_that, shaped

__all__ = [
    "build_vocab", "encode", "decode",
    "GRAMMAR", "ADJECTIVE_PROBABILITY", "make_sentence", "make_corpus",
    "RecallTask", "recall_text", "recall_batch", "recall_batches", "recall_answers",
    "recall_bigram_ceiling", "window_batches",
]


def build_vocab(text):
    """Return the distinct characters of ``text``, sorted, as one string.

    Sorting makes the vocabulary (and so every id) depend only on the set of characters,
    not on the order in which they first appear. Empty text has no vocabulary.

    >>> build_vocab("banana!")
    '!abn'
    >>> build_vocab("")
    Traceback (most recent call last):
    ...
    ValueError: cannot build a vocabulary from empty text
    """
    require_that(_as_text(text), "cannot build a vocabulary from empty text")
    return "".join(sorted(set(text)))


def _as_text(text):
    """Return ``text``, or raise ``ValueError`` unless it is a str."""
    require_a("text", text, str)
    return text


def _as_vocab(vocab):
    """Return ``vocab``, or raise ``ValueError`` unless it is a non-empty str of
    distinct characters.

    >>> _as_vocab("aba")
    Traceback (most recent call last):
    ...
    ValueError: vocabulary characters must be distinct; repeated: 'a'
    """
    require_that(isinstance(vocab, str) and vocab, "vocabulary must be a non-empty "
                 "str, got {!r}", vocab)
    repeated = sorted({c for c in vocab if vocab.count(c) > 1})
    require_that(not repeated, "vocabulary characters must be distinct; repeated: {}",
                 ", ".join(map(repr, repeated)))
    return vocab


def encode(text, vocab):
    """Return the token ids of ``text`` as a 1-D int64 array (empty text gives an empty
    array).

    A character outside the vocabulary is an error that names it and its first position;
    there is no silent "unknown" id.

    >>> encode("cab", "abc")
    array([2, 0, 1])
    >>> encode("cat", "abc")
    Traceback (most recent call last):
    ...
    ValueError: character 't' (first at position 2) is not in the vocabulary 'abc'
    """
    _as_text(text)
    _as_vocab(vocab)
    index = {c: i for i, c in enumerate(vocab)}  # character -> id
    unknown = [c for c in dict.fromkeys(text) if c not in index]
    if unknown:
        where = ", ".join(f"{c!r} (first at position {text.index(c)})"
                          for c in unknown[:10])
        noun, verb = ("character", "is") if len(unknown) == 1 else ("characters", "are")
        raise ValueError(f"{noun} {where} {verb} not in the vocabulary {vocab!r}")
    return np.array([index[c] for c in text], dtype=np.int64)


def decode(ids, vocab):
    """Return the text whose token ids are ``ids`` (a 1-D sequence of ints).

    >>> decode([2, 0, 1], "abc")
    'cab'
    >>> decode([], "abc")
    ''
    """
    ids = as_ids(ids, len(_as_vocab(vocab)), ndim=1)
    return "".join(vocab[i] for i in ids)


# --- the corpus -----------------------------------------------------------------------
# A small English corpus the course writes itself, with no download: sentences
# ``determiner [adjective] noun verb determiner [adjective] noun.`` drawn from a tiny
# probabilistic grammar and separated by single spaces.

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
    """Return ``n_sentences`` sentences from the grammar, joined by spaces, drawn with
    ``default_rng(seed)``.

    >>> make_corpus(2, seed=0)
    'a big cat hears a bird. the bird sees a tall cat.'
    >>> len(make_corpus(150, seed=0)) > 3000
    True
    """
    require_sizes(n_sentences=n_sentences)
    rng = np.random.default_rng(seed)
    return " ".join(make_sentence(rng) for _ in range(n_sentences))


# --- associative recall ---------------------------------------------------------------
# A sequence lists key->value pairs, then a question mark and one of its keys:
# "a3 c7 f1 ? c" asks for the value of c, here 7. Each pair is one token (like a word),
# so the answer is one attention hop away: find the pair whose key matches. Keys are
# distinct within a sequence; values are drawn independently and uniformly. The answer
# depends on content earlier in the sequence, not on the previous token: that is what a
# bigram model cannot use.

KEYS = "abcdefghijklmnopqrstuvwxyz"
VALUES = "0123456789"
QUESTION = "?"


@dataclass(frozen=True)
class RecallTask:
    """The sizes of the recall task: ``n_pairs`` pairs of ``n_keys`` keys, ``n_values``
    values.

    The vocabulary (``tokens``) is every pair (``"a0"`` …), every key alone (asked),
    the question mark and every value alone (answered). A sequence has
    ``T = n_pairs + 2`` tokens; its answer is the token that follows the last one.

    >>> task = RecallTask(n_keys=3, n_values=2, n_pairs=2)
    >>> task.tokens, task.T
    (('a0', 'a1', 'b0', 'b1', 'c0', 'c1', 'a', 'b', 'c', '?', '0', '1'), 4)
    >>> RecallTask(n_keys=2, n_values=3, n_pairs=3)  # 3 distinct keys of 2?
    Traceback (most recent call last):
    ...
    ValueError: n_pairs must be an integer in [1, 2], got 3
    """

    n_keys: int = 8
    n_values: int = 8
    n_pairs: int = 4

    def __post_init__(self):
        as_number("n_keys", self.n_keys, f"[1, {len(KEYS)}]", integer=True)
        as_number("n_values", self.n_values, f"[1, {len(VALUES)}]", integer=True)
        # the keys of a sequence are distinct: n_pairs of them need n_keys >= n_pairs
        as_number("n_pairs", self.n_pairs, f"[1, {self.n_keys}]", integer=True)

    @property
    def tokens(self):
        """The name of each token id: the pairs, the keys, ``"?"``, the values."""
        keys, values = KEYS[: self.n_keys], VALUES[: self.n_values]
        return (
            tuple(k + v for k in keys for v in values)
            + tuple(keys)
            + (QUESTION,)
            + tuple(values)
        )

    @property
    def n_vocab(self):
        """The number of token ids."""
        return len(self.tokens)

    @property
    def T(self):
        """The length of a sequence: the pairs, the question mark and the asked key."""
        return self.n_pairs + 2

    def pair(self, key, value):
        """The id of the pair token ``key``->``value`` (both counted from 0)."""
        return key * self.n_values + value

    def key(self, key):
        """The id of the key token ``key`` alone (asked after the question mark)."""
        return self.n_keys * self.n_values + key

    def value(self, value):
        """The id of the value token ``value`` alone (the answer)."""
        return self.n_keys * self.n_values + self.n_keys + 1 + value

    @property
    def question(self):
        """The id of the question mark."""
        return self.n_keys * self.n_values + self.n_keys


def _as_task(task):
    """Return ``task``, or raise ``ValueError`` unless it is a :class:`RecallTask`."""
    require_a("task", task, RecallTask)
    return task


def recall_text(task, ids):
    """Return the sequences ``ids`` (1-D or 2-D) as text, tokens separated by spaces.

    >>> task = RecallTask(n_keys=3, n_values=2, n_pairs=2)
    >>> ids = [task.pair(2, 1), task.pair(0, 0), task.question, task.key(2)]
    >>> recall_text(task, ids)
    'c1 a0 ? c'
    """
    ids = as_ids(ids, _as_task(task).n_vocab)
    require_that(ids.ndim in (1, 2), "ids must be 1-D or 2-D, got shape {}", ids.shape)
    if ids.ndim == 2:
        return [recall_text(task, row) for row in ids]
    return " ".join(task.tokens[i] for i in ids)


def recall_batch(task, n, rng):
    """Return ``ids, targets, counted``: ``n`` recall sequences drawn with ``rng``.

    ``ids`` is ``(n, T)``; ``targets[:, t]`` is the token after ``ids[:, t]`` (the
    answer after the last one); ``counted`` marks the one position that is scored, the
    last. The other targets are the next tokens of the sequence, never scored.

    >>> task = RecallTask(n_keys=3, n_values=2, n_pairs=2)
    >>> ids, targets, counted = recall_batch(task, 2, np.random.default_rng(0))
    >>> recall_text(task, ids), recall_text(task, targets[:, -1])
    (['c1 b1 ? b', 'a1 b1 ? b'], '1 1')
    >>> counted[0]
    array([False, False, False,  True])
    """
    _as_task(task)
    require_sizes(n=n)
    P = task.n_pairs
    # distinct keys per row
    keys = np.argsort(rng.random((n, task.n_keys)), axis=1)[:, :P]
    values = rng.integers(0, task.n_values, size=(n, P))
    asked = rng.integers(0, P, size=n)
    rows = np.arange(n)
    sequence = np.empty((n, task.T + 1), dtype=np.int64)
    sequence[:, :P] = task.pair(keys, values)
    sequence[:, P] = task.question
    sequence[:, P + 1] = task.key(keys[rows, asked])
    sequence[:, P + 2] = task.value(values[rows, asked])  # the answer
    counted = np.zeros((n, task.T), dtype=bool)
    counted[:, -1] = True
    return sequence[:, :-1], sequence[:, 1:], counted


def recall_answers(task, ids):
    """Return the answer (a value token id) of each sequence, read off the sequence
    itself.

    >>> task = RecallTask(n_keys=4, n_values=3, n_pairs=2)
    >>> ids, targets, _ = recall_batch(task, 5, np.random.default_rng(1))
    >>> bool((recall_answers(task, ids) == targets[:, -1]).all())
    True
    """
    ids = as_ids(shaped(f"ids(n, {_as_task(task).T}):int", ids), task.n_vocab)
    pairs = ids[:, : task.n_pairs]  # (n, n_pairs)
    # (n, n_pairs): True where the pair holds the key asked
    match = pairs // task.n_values == ids[:, -1:] - task.key(0)
    require_that((pairs < task.key(0)).all() and (match.sum(axis=1) == 1).all(), "each "
                 "sequence must list n_pairs pairs, with the asked key exactly once")
    return task.value(pairs[match] % task.n_values)


def recall_bigram_ceiling(task):
    """Return the best expected accuracy of any bigram model on the answer:
    ``1/n_values``.

    A bigram model sees only the asked key. Values are drawn independently of keys, so
    given the key every value is equally likely: whatever the model predicts, it is
    right with probability ``1/n_values``.

    >>> recall_bigram_ceiling(RecallTask(n_values=8))
    Fraction(1, 8)
    """
    _as_task(task)
    return Fraction(1, task.n_values)


def recall_batches(task, size, seed):
    """Return ``batch(step) -> (ids, targets, counted)`` with ``size`` fresh sequences
    per step.

    Step ``s`` draws with ``default_rng([seed, s])``: the data of a step does not depend
    on which steps ran before.

    >>> batch = recall_batches(RecallTask(), 4, seed=0)
    >>> bool((batch(3)[0] == batch(3)[0]).all()), batch(3)[0].shape
    (True, (4, 6))
    """
    require_sizes(size=size)
    return lambda step: recall_batch(task, size, np.random.default_rng([seed, step]))


def window_batches(ids, T, size, seed):
    """Return ``batch(step) -> (ids, targets, None)``: ``size`` random windows of ``T``
    tokens.

    Each window of ``ids`` (1-D) is paired with the same window shifted by one token;
    step ``s`` draws its start positions with ``default_rng([seed, s])``.

    >>> batch = window_batches(np.arange(10), 3, 2, seed=0)
    >>> x, y, counted = batch(1)
    >>> bool((y == x + 1).all()), x.shape, counted
    (True, (2, 3), None)
    """
    require_sizes(T=T, size=size)
    ids = np.asarray(ids)
    require_that(ids.ndim == 1 and ids.size > T, "ids must be 1-D, longer than T={}, "
                 "got shape {}", T, ids.shape)

    def batch(step):
        start = np.random.default_rng([seed, step]).integers(0, ids.size - T, size=size)
        window = start[:, None] + np.arange(T)  # (size, T)
        return ids[window], ids[window + 1], None

    return batch
