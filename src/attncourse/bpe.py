"""Byte-pair encoding: a tokenizer learnt from text, and the Tiny Shakespeare corpus.

A token is a byte string. The vocabulary starts from the 256 byte values (token ``i`` is
the byte ``i``), so every string has an encoding: its UTF-8 bytes. Training repeatedly
finds the most frequent adjacent pair of tokens ``(a, b)`` and merges it into a new
token, ``256``, ``257``, … in training order; the merges, a list of pairs, are the whole
tokenizer. Encoding applies them in that order; decoding joins the tokens' bytes.

Text is first cut into chunks (:data:`CHUNK`): a word with at most one leading space, a
run of punctuation with at most one leading space, or a run of whitespace. Pairs are
counted and merged inside a chunk, never across two, so a token never spans a word
boundary and each distinct chunk is counted (and encoded) once.

>>> merges = train_bpe("low lower lowest", 3)
>>> merges                       # (l, o) -> 256, (256, w) -> 257, (' ', 257) -> 258
[(108, 111), (256, 119), (32, 257)]
>>> [token.decode() for token in vocabulary(merges)[256:]]
['lo', 'low', ' low']
>>> encode("lowly", merges)      # 'low', 'l', 'y'
array([257, 108, 121])
>>> decode(encode("lowly", merges), merges)
'lowly'
"""

import hashlib
import re
from collections import Counter, defaultdict
from importlib import resources

import numpy as np

from ._validate import as_ids, as_number, is_int, require_a, require_that

__all__ = [
    "CHUNK", "SHA256", "shakespeare", "split_text", "heldout_overlap",
    "train_bpe", "merge", "encode", "decode", "vocabulary",
]

CHUNK = re.compile(r" ?\w+| ?[^\w\s]+|\s+(?!\S)|\s+")
"""The chunks of a text: a word (letters, digits, ``_``) or a run of punctuation, each
with at most one leading space, or a run of whitespace (the last space of a run before a
word goes with the word). Every character is in exactly one chunk, in order."""

SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
"""The SHA-256 digest of ``tinyshakespeare.txt``, the package's copy of the corpus."""

CORPUS = resources.files("attncourse") / "data" / "tinyshakespeare.txt"


def shakespeare():
    """Return the Tiny Shakespeare corpus (1,115,394 characters), read from the
    package's data; ``ValueError`` if the file's SHA-256 is not :data:`SHA256`.

    >>> text = shakespeare()
    >>> len(text), text[:14]
    (1115394, 'First Citizen:')
    """
    data = CORPUS.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    require_that(digest == SHA256, "the corpus {} has SHA-256 {}, expected {}: the "
                 "copy is damaged; reinstall attncourse", CORPUS, digest, SHA256)
    return data.decode("utf-8")


def split_text(text, fraction=0.9):
    """Return ``train, held_out``: the first ``int(fraction * len(text))`` characters
    and the rest (nanoGPT's split: the last 10 % held out, no shuffling).

    >>> split_text("abcdefghij")
    ('abcdefghi', 'j')
    >>> split_text("abc", fraction=1.0)
    Traceback (most recent call last):
    ...
    ValueError: fraction must be a finite number in (0, 1), got 1.0
    """
    text, fraction = _as_text(text), as_number("fraction", fraction, "(0, 1)")
    n = int(fraction * len(text))
    return text[:n], text[n:]


def heldout_overlap(train, held_out):
    """Return ``found, lines``: how many of the ``lines`` non-empty lines of
    ``held_out`` are, verbatim, a line of ``train``.

    Lines are cut at ``"\\n"`` and compared whole, whitespace included; a repeated line
    is counted each time it occurs. A line cut by the split counts as a line.

    >>> heldout_overlap("ROMEO:\\nO, she doth teach\\n", "JULIET:\\n\\nROMEO:\\n")
    (1, 2)
    """
    train, held_out = _as_text(train), _as_text(held_out)
    seen = set(train.split("\n"))
    lines = [line for line in held_out.split("\n") if line]
    return sum(line in seen for line in lines), len(lines)


def train_bpe(text, n_merges):
    """Return the ``n_merges`` merges learnt from ``text``, a list of pairs ``(a, b)``:
    merge ``i`` makes token ``256 + i`` from the adjacent tokens ``a, b``.

    Each merge takes the most frequent adjacent pair over the chunks of ``text``;
    a tie goes to the smallest pair ``(a, b)`` (smallest ``a``, then smallest ``b``).
    A pair is counted at every position it occurs, so ``aaa`` counts ``(a, a)`` twice.
    Training stops early, with fewer merges, when every chunk is a single token. The
    first ``k`` merges of a longer training are the merges of training ``k``.

    >>> train_bpe("abab ab", 2)  # (a, b) 3 times; then a tie, (256, 256) or (32, 256)
    [(97, 98), (32, 256)]
    >>> train_bpe("aaa", 5)
    [(97, 97), (256, 97)]
    """
    text, n_merges = _as_text(text), as_number("n_merges", n_merges, "[0, inf)",
                                               integer=True)
    chunks = Counter(CHUNK.findall(text))           # distinct chunk -> occurrences
    freq = list(chunks.values())
    words = [list(chunk.encode("utf-8")) for chunk in chunks]   # each chunk's tokens
    counts, where = Counter(), defaultdict(set)     # pair -> count, chunks with it
    for w, ids in enumerate(words):
        for pair in zip(ids, ids[1:]):
            counts[pair] += freq[w]
            where[pair].add(w)
    merges = []
    while len(merges) < n_merges and counts:
        best = max(counts.values())
        pair = min(p for p, count in counts.items() if count == best)  # the tie rule
        new = 256 + len(merges)
        for w in where.pop(pair):                   # recount only the chunks it changes
            old, words[w] = words[w], merge(words[w], pair, new)
            for p in zip(old, old[1:]):
                counts[p] -= freq[w]
                if counts[p] == 0:
                    del counts[p]
            for p in zip(words[w], words[w][1:]):
                counts[p] += freq[w]
                where[p].add(w)
        merges.append(pair)
    return merges


def merge(ids, pair, new):
    """Return the list ``ids`` with each occurrence of ``pair``, left to right and
    non-overlapping, replaced by the token ``new``.

    >>> merge([97, 97, 97], (97, 97), 256)      # aaa -> aa, a
    [256, 97]
    >>> merge([1, 2, 3, 1, 2], (1, 2), 300)
    [300, 3, 300]
    """
    ids, (a, b) = list(ids), _as_pair(pair)
    out, i = [], 0
    while i < len(ids):
        if ids[i] == a and i + 1 < len(ids) and ids[i + 1] == b:
            out.append(new)
            i += 2                                  # both tokens of the pair are used
        else:
            out.append(ids[i])
            i += 1
    return out


def encode(text, merges):
    """Return the token ids of ``text`` (a 1-D int64 array): its UTF-8 bytes, chunk by
    chunk, with the ``merges`` applied in training order.

    Applying merge 0, then merge 1, … is the same as applying, again and again, the
    earliest-trained merge among the chunk's adjacent pairs: a merge made later can
    only create pairs that were trained later still.

    >>> merges = [(97, 98), (256, 99), (98, 99)]  # ab, abc, bc
    >>> encode("abc", merges), encode("bc", merges)
    (array([257]), array([258]))
    """
    text, merges = _as_text(text), _as_merges(merges)
    rank = {pair: i for i, pair in enumerate(merges)}   # pair -> its place in training
    chunks = CHUNK.findall(text)
    tokens = {}                                     # distinct chunk -> its token ids
    for chunk in set(chunks):
        ids = list(chunk.encode("utf-8"))
        while len(ids) > 1:
            # the adjacent pair trained earliest
            pair = min(zip(ids, ids[1:]), key=lambda p: rank.get(p, len(rank)))
            if pair not in rank:
                break
            ids = merge(ids, pair, 256 + rank[pair])
        tokens[chunk] = ids
    return np.array([i for chunk in chunks for i in tokens[chunk]], dtype=np.int64)


def decode(ids, merges):
    """Return the text of the token ids ``ids`` (1-D): their bytes joined, read as
    UTF-8; bytes that are not valid UTF-8 (ids not made by :func:`encode`) become
    ``"\\ufffd"``.

    >>> decode([257, 32, 256], [(97, 98), (256, 99)])
    'abc ab'
    >>> decode([0xC3, 0xA9], []), decode([0xC3], [])   # é is two bytes
    ('é', '\\ufffd')
    """
    vocab = vocabulary(merges)
    ids = as_ids(ids, len(vocab), ndim=1)
    return b"".join(vocab[i] for i in ids).decode("utf-8", errors="replace")


def vocabulary(merges):
    """Return the bytes of every token: ``vocabulary(merges)[i]`` is token ``i``, for
    ``256 + len(merges)`` tokens.

    >>> vocabulary([(104, 105), (256, 33)])[256:]
    [b'hi', b'hi!']
    """
    vocab = [bytes([i]) for i in range(256)]
    for a, b in _as_merges(merges):
        vocab.append(vocab[a] + vocab[b])           # token 256 + i: its pair's bytes
    return vocab


# --- validation -----------------------------------------------------------------------


def _as_text(text):
    """Return ``text`` if it is a str UTF-8 can encode, or raise ``ValueError``.

    >>> _as_text("a\\ud800")
    Traceback (most recent call last):
    ...
    ValueError: text holds a lone surrogate '\\ud800' at position 1, which UTF-8 cannot
    encode
    """
    require_a("text", text, str)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"text holds a lone surrogate {text[e.start]!r} at position "
                         f"{e.start}, which UTF-8 cannot encode") from None
    return text


def _as_pair(pair):
    """Return ``pair`` as a tuple of two non-negative ints, or raise ``ValueError``."""
    pair = tuple(pair)
    require_that(len(pair) == 2 and all(is_int(x) and x >= 0 for x in pair), "a merge "
                 "must be a pair of token ids, got {!r}", pair)
    return int(pair[0]), int(pair[1])


def _as_merges(merges):
    """Return ``merges`` as a list of pairs, or raise ``ValueError``: merge ``i`` must
    join two tokens that exist before it (ids below ``256 + i``), and no pair twice.

    >>> _as_merges([(97, 98), (97, 257)])
    Traceback (most recent call last):
    ...
    ValueError: merge 1 is (97, 257), but only tokens 0..256 exist before it
    >>> _as_merges([(97, 98), (97, 98)])
    Traceback (most recent call last):
    ...
    ValueError: merge 1 repeats merge 0, (97, 98)
    """
    require_that(hasattr(merges, "__iter__") and not isinstance(merges, (str, bytes)),
                 "merges must be a list of pairs, got {}", type(merges).__name__)
    pairs, first = [], {}
    for i, pair in enumerate(merges):
        pairs.append(pair := _as_pair(pair))
        require_that(max(pair) < 256 + i, "merge {} is {}, but only tokens 0..{} exist "
                     "before it", i, pair, 255 + i)
        require_that(first.setdefault(pair, i) == i, "merge {} repeats merge {}, {}", i,
                     first[pair], pair)
    return pairs
