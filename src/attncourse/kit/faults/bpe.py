"""Planted mistakes in :mod:`attncourse.bpe`, with their registry.

An encoder that applies the merges out of training order, a merge that overlaps itself
(``aaa`` with the merge ``(a, a)`` read as ``aa, aa``), and a decoder that reads each
token's bytes as UTF-8 on their own, so it is not the inverse of the encoder once a
character's bytes fall in two tokens. Each is a copy of the package function with the
one line wrong. :data:`FAULTS` says which of :data:`CHECKS` catch each one;
:data:`CORRECT` holds the package functions every check must pass.

>>> merges = [(97, 98), (256, 99), (98, 99)]      # ab, abc, bc
>>> encode("abc", merges), encode_out_of_order("abc", merges)
(array([257]), array([ 97, 258]))
"""

import numpy as np

from ..._validate import as_ids
from ...bpe import CHUNK, _as_merges, _as_pair, _as_text
from ...bpe import decode, encode, merge, train_bpe, vocabulary
from ..failed import CheckFailed
from ._registry import Check, Fault

__all__ = [
    "FAULTS",
    "CHECKS",
    "CORRECT",
    "BUILDING_BLOCKS",
    "encode_out_of_order",
    "merge_overlapping",
    "decode_per_token",
]


def encode_out_of_order(text, merges):
    """FAULT: applies the latest-trained merge present first, not the earliest.

    It still round-trips (every token's bytes are its pair's), but the tokens differ
    from those of the merges applied in training order.

    >>> encode_out_of_order("abc", [(97, 98), (98, 99)])   # a, bc instead of ab, c
    array([ 97, 257])
    """
    text, merges = _as_text(text), _as_merges(merges)
    rank = {pair: i for i, pair in enumerate(merges)}   # pair -> its place in training
    chunks = CHUNK.findall(text)
    tokens = {}                                     # distinct chunk -> its token ids
    for chunk in set(chunks):
        ids = list(chunk.encode("utf-8"))
        while len(ids) > 1:
            # the fault: the adjacent pair trained latest
            pair = max(zip(ids, ids[1:]), key=lambda p: rank.get(p, -1))
            if pair not in rank:
                break
            ids = merge(ids, pair, 256 + rank[pair])
        tokens[chunk] = ids
    return np.array([i for chunk in chunks for i in tokens[chunk]], dtype=np.int64)


def merge_overlapping(ids, pair, new):
    """FAULT: after a match, steps one token instead of two: the pair overlaps itself.

    >>> merge_overlapping([97, 97, 97], (97, 97), 256)   # aa, aa, a: five a's
    [256, 256, 97]
    """
    ids, (a, b) = list(ids), _as_pair(pair)
    out, i = [], 0
    while i < len(ids):
        if ids[i] == a and i + 1 < len(ids) and ids[i + 1] == b:
            out.append(new)
            i += 1                                  # the fault: the second token reused
        else:
            out.append(ids[i])
            i += 1
    return out


def decode_per_token(ids, merges):
    """FAULT: reads each token's bytes as UTF-8 alone, then joins the strings.

    Right while every token holds whole characters (ASCII text); a character whose
    bytes fall in two tokens becomes two replacement characters.

    >>> decode_per_token([0xC3, 0xA9], [])             # the two bytes of é
    '\\ufffd\\ufffd'
    """
    vocab = vocabulary(merges)
    ids = as_ids(ids, len(vocab), ndim=1)
    return "".join(vocab[i].decode("utf-8", errors="replace") for i in ids)


# --- the registry ---------------------------------------------------------------------

SAMPLE = "That which we call a rose\nBy any other name would smell as sweet.\n"
UNICODE = "Ça va? Déjà vu — naïve façade, 東京, Ελλάδα, emoji 🙂🙂.\n"


def _in_training_order(encode):
    """Encoding equals merge 0, then merge 1, … applied to every chunk's bytes."""
    trained = train_bpe(SAMPLE * 3, 40)
    for text, merges in (("abc", [(97, 98), (256, 99), (98, 99)]),
                         (SAMPLE, trained)):
        want = []
        for chunk in CHUNK.findall(text):
            ids = list(chunk.encode("utf-8"))
            for i, pair in enumerate(merges):
                ids = merge(ids, pair, 256 + i)
            want += ids
        got = [int(i) for i in encode(text, merges)]
        if got != want:
            raise CheckFailed("merges in training order",
                              f"{text[:20]!r} encodes to {got[:8]}…, merge by merge "
                              f"it is {want[:8]}…",
                              fix="apply the earliest-trained merge present first")


def _runs(merge):
    """A run of one byte is merged left to right without overlap: aaa -> aa, a."""
    for n, want in ((2, [256]), (3, [256, 97]), (4, [256, 256]), (5, [256, 256, 97])):
        got = merge([97] * n, (97, 97), 256)
        if got != want:
            raise CheckFailed("a run of one byte",
                              f"{'a' * n} merged by (a, a) gives {got}, not {want}",
                              fix="after a match, skip both tokens of the pair")


def _keeps_the_bytes(merge):
    """Merging never changes the bytes the tokens spell."""
    vocab = vocabulary([(97, 97), (256, 98)])
    for text in ("aaab", "abaaaab", "baaaaa"):
        ids = list(text.encode())
        for pair, new in (((97, 97), 256), ((256, 98), 257)):
            ids = merge(ids, pair, new)
        spelt = b"".join(vocab[i] for i in ids)
        if spelt != text.encode():
            raise CheckFailed("merging keeps the bytes",
                              f"{text!r} merged spells {spelt!r}",
                              fix="a pair is replaced once, its tokens used once")


def _round_trip(decode):
    """``decode(encode(s)) == s`` on text with accents, CJK and emoji."""
    for n_merges in (0, 30):
        merges = train_bpe(SAMPLE + UNICODE, n_merges)
        back = decode(encode(UNICODE, merges), merges)
        if back != UNICODE:
            raise CheckFailed("round trip on Unicode text",
                              f"with {n_merges} merges {UNICODE[:12]!r} decodes to "
                              f"{back[:12]!r}",
                              fix="join all the tokens' bytes, then read them as UTF-8")


CHECKS = {c.name: c for c in (
    Check("merges in training order", "encode", _in_training_order),
    Check("a run of one byte", "merge", _runs),
    Check("merging keeps the bytes", "merge", _keeps_the_bytes),
    Check("round trip on Unicode text", "decode", _round_trip),
)}
"""Check name -> :class:`~attncourse.kit.faults.Check`."""

FAULTS = (
    Fault("encode_out_of_order",
          "applies the latest-trained merge present first: other tokens, same text",
          encode_out_of_order, "encode",
          caught_by=("merges in training order",)),
    Fault("merge_overlapping",
          "steps one token after a match: aaa with (a, a) becomes aa, aa",
          merge_overlapping, "merge",
          caught_by=("a run of one byte", "merging keeps the bytes")),
    Fault("decode_per_token",
          "reads each token as UTF-8 alone: a character split over tokens is lost",
          decode_per_token, "decode",
          caught_by=("round trip on Unicode text",)),
)
"""The planted mistakes: the checks that catch each one, and those blind to it."""

CORRECT = {"encode": encode, "merge": merge, "decode": decode}
"""Role -> the package function: every check must pass it."""

BUILDING_BLOCKS = {}
"""Public functions that are not faults themselves -> the fault they are part of."""
