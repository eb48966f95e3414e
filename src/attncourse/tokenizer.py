"""A character-level tokenizer: a vocabulary, text to token ids, and ids back to text.

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

__all__ = ["build_vocab", "check_vocab", "check_ids", "encode", "decode"]


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


def check_vocab(vocab):
    """Return ``vocab`` unchanged, or raise ``ValueError`` if it is not a string of distinct characters.

    >>> check_vocab("aba")
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


def check_ids(ids, n_vocab, name="ids"):
    """Return ``ids`` as an int64 array, or raise ``ValueError`` naming the values at fault.

    Valid ids are integers ``0 <= id < n_vocab``; any shape is allowed (an empty array too).

    >>> check_ids([2, 0, 2], 3)
    array([2, 0, 2])
    >>> check_ids([1, 5, -1], 3)
    Traceback (most recent call last):
    ...
    ValueError: ids out of range for a vocabulary of 3 tokens (valid ids are 0..2): [-1, 5]
    """
    if isinstance(n_vocab, bool) or not isinstance(n_vocab, (int, np.integer)) or n_vocab < 1:
        raise ValueError(f"n_vocab must be a positive integer, got {n_vocab!r}")
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
    check_vocab(vocab)
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
    check_vocab(vocab)
    arr = check_ids(ids, len(vocab))
    if arr.ndim != 1:
        raise ValueError(f"ids must be 1-D to decode into one text, got shape {arr.shape}")
    return "".join(vocab[i] for i in arr)
