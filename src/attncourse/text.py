"""Text: a character-level tokenizer (vocabulary, text to ids and back) and the course corpus.

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

import numpy as np

from ._validate import require_sizes

__all__ = [
    "build_vocab", "validate_vocab", "validate_ids", "encode", "decode",
    "GRAMMAR", "ADJECTIVE_PROBABILITY", "make_sentence", "make_corpus",
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
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    if text == "":
        raise ValueError("cannot build a vocabulary from empty text")
    return "".join(sorted(set(text)))


def validate_vocab(vocab):
    """Return ``vocab`` unchanged, or raise ``ValueError`` if it is not a string of distinct characters.

    >>> validate_vocab("aba")
    Traceback (most recent call last):
    ...
    ValueError: vocabulary characters must be distinct; repeated: 'a'
    """
    if not isinstance(vocab, str):
        raise ValueError(f"vocabulary must be a str of distinct characters, got {type(vocab).__name__}")
    if vocab == "":
        raise ValueError("vocabulary is empty")
    repeated = sorted({c for c in vocab if vocab.count(c) > 1})
    if repeated:
        raise ValueError("vocabulary characters must be distinct; repeated: " + ", ".join(map(repr, repeated)))
    return vocab


def validate_ids(ids, n_vocab, name="ids"):
    """Return ``ids`` as an int64 array, or raise ``ValueError`` naming the values at fault.

    Valid ids are integers ``0 <= id < n_vocab``; any shape is allowed (an empty array too).

    >>> validate_ids([2, 0, 2], 3)
    array([2, 0, 2])
    >>> validate_ids([1, 5, -1], 3)
    Traceback (most recent call last):
    ...
    ValueError: ids out of range for a vocabulary of 3 tokens (valid ids are 0..2): [-1, 5]
    """
    require_sizes(n_vocab=n_vocab)
    arr = np.asarray(ids)
    if arr.size == 0:
        return arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{name} must be integers, got dtype {arr.dtype}")
    bad = np.unique(arr[(arr < 0) | (arr >= n_vocab)])
    if bad.size:
        shown = ", ".join(str(int(v)) for v in bad[:10]) + (", ..." if bad.size > 10 else "")
        raise ValueError(
            f"{name} out of range for a vocabulary of {n_vocab} tokens "
            f"(valid ids are 0..{n_vocab - 1}): [{shown}]"
        )
    return arr.astype(np.int64)


def encode(text, vocab):
    """Return the token ids of ``text`` as a 1-D int64 array (empty text gives an empty array).

    A character outside the vocabulary is an error that names it and its first position;
    there is no silent "unknown" id.

    >>> encode("cab", "abc")
    array([2, 0, 1])
    >>> encode("cat", "abc")
    Traceback (most recent call last):
    ...
    ValueError: character 't' (first at position 2) is not in the vocabulary 'abc'
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    validate_vocab(vocab)
    index = {c: i for i, c in enumerate(vocab)}
    unknown = [c for c in dict.fromkeys(text) if c not in index]
    if unknown:
        where = ", ".join(f"{c!r} (first at position {text.index(c)})" for c in unknown[:10])
        noun = "character" if len(unknown) == 1 else "characters"
        verb = "is" if len(unknown) == 1 else "are"
        raise ValueError(f"{noun} {where} {verb} not in the vocabulary {vocab!r}")
    return np.array([index[c] for c in text], dtype=np.int64)


def decode(ids, vocab):
    """Return the text whose token ids are ``ids`` (a 1-D sequence of ints).

    >>> decode([2, 0, 1], "abc")
    'cab'
    >>> decode([], "abc")
    ''
    """
    validate_vocab(vocab)
    arr = validate_ids(ids, len(vocab))
    if arr.ndim != 1:
        raise ValueError(f"ids must be 1-D to decode into one text, got shape {arr.shape}")
    return "".join(vocab[i] for i in arr)


# --- the corpus --------------------------------------------------------------------------
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
    """Return ``n_sentences`` sentences from the grammar, joined by spaces, drawn with ``default_rng(seed)``.

    >>> make_corpus(2, seed=0)
    'a big cat hears a bird. the bird sees a tall cat.'
    >>> len(make_corpus(150, seed=0)) > 3000
    True
    """
    require_sizes(n_sentences=n_sentences)
    rng = np.random.default_rng(seed)
    return " ".join(make_sentence(rng) for _ in range(n_sentences))
