"""Checkers of Chapter 11's exercises on byte-pair encoding: one merge step of training,
and encoding with a given list of merges."""

from collections import Counter

import numpy as np

from ...bpe import CHUNK, decode, encode, merge, train_bpe
from ..failed import CheckFailed
from ._base import _call, reports_unfinished

__all__ = [
    "MERGE_STEP_PROPERTIES",
    "check_bpe_merge_step",
    "ENCODE_PROPERTIES",
    "check_bpe_encode",
]

SAMPLE = ("ROMEO:\nBut, soft! what light through yonder window breaks?\n"
          "It is the east, and Juliet is the sun.\n")
UNICODE = "Ça va? Déjà vu — naïve façade, 東京, Ελλάδα 🙂🙂.\n"


def _ids_list(value, property, where):
    """The learner's token ids as a list of ints, or CheckFailed."""
    try:
        ids = [int(i) for i in value]
        if any(i != j for i, j in zip(ids, value)):
            raise ValueError
    except (TypeError, ValueError):
        raise CheckFailed(property, f"{where} returned {value!r:.60}, not token ids",
                          "return a list (or 1-D array) of integer token ids") from None
    return ids


MERGE_STEP_PROPERTIES = (
    "a pair and the merged chunks",
    "the most frequent pair",
    "a pair counted at every position",
    "pairs inside a chunk only",
    "a tie goes to the smallest pair",
    "merged left to right without overlap",
    "the merges of training",
)


def _reference_step(chunks, new):
    counts = Counter(p for ids in chunks for p in zip(ids, ids[1:]))
    pair = min(counts, key=lambda p: (-counts[p], p))
    return pair, [merge(ids, pair, new) for ids in chunks]


def _step(fn, property, chunks, new):
    got = _call(fn, property, [list(c) for c in chunks], new)
    if not (isinstance(got, tuple) and len(got) == 2):
        raise CheckFailed("a pair and the merged chunks",
                          f"fn(chunks, {new}) returned {got!r:.60}",
                          "return a tuple (pair, merged_chunks)")
    pair, merged = got
    try:
        pair = tuple(int(x) for x in pair)
        merged = [_ids_list(ids, "a pair and the merged chunks", "a merged chunk")
                  for ids in merged]
    except (TypeError, ValueError):
        raise CheckFailed("a pair and the merged chunks",
                          f"fn(chunks, {new}) returned {got!r:.60}",
                          "the pair is two ids, the chunks lists of ids") from None
    if len(pair) != 2 or len(merged) != len(chunks):
        raise CheckFailed("a pair and the merged chunks",
                          f"got the pair {pair} and {len(merged)} chunks for "
                          f"{len(chunks)}", "one pair; one merged list per chunk")
    return pair, merged


def _expect(fn, property, chunks, new, fix):
    want_pair, want = _reference_step(chunks, new)
    pair, merged = _step(fn, property, chunks, new)
    if pair != want_pair:
        raise CheckFailed(property, f"for the chunks {chunks} you chose {pair}, the "
                          f"step chooses {want_pair}", fix)
    if merged != want:
        raise CheckFailed("merged left to right without overlap",
                          f"{chunks} merged by {pair} into {new} gave {merged}, "
                          f"expected {want}", "replace each occurrence of the pair, "
                          "left to right; after a match skip both tokens")


@reports_unfinished
def check_bpe_merge_step(fn):
    """Check a learner's ``fn(chunks, new) -> (pair, merged)``: one step of training.

    ``chunks`` is a list of lists of token ids (a chunk that occurs twice is listed
    twice). ``pair`` must be the adjacent pair occurring most often, counted at every
    position inside each chunk (never across two chunks), a tie going to the smallest
    pair; ``merged`` is every chunk with that pair replaced by ``new``, left to right,
    without overlap. Returns :data:`MERGE_STEP_PROPERTIES`; raises
    :class:`~attncourse.kit.failed.CheckFailed` naming the first that fails.
    """
    _step(fn, "a pair and the merged chunks", [[1, 2, 3], [1, 2]], 300)
    _expect(fn, "the most frequent pair", [[5, 1, 2], [1, 2, 7], [7, 5]], 260,
            "count every adjacent pair over all chunks and take the largest count")
    _expect(fn, "a pair counted at every position", [[9, 9, 9], [1, 2]], 256,
            "count (9, 9) in 9 9 9 twice: at positions 0 and 1")
    _expect(fn, "pairs inside a chunk only", [[5, 7], [7, 5], [7, 5]], 256,
            "count the pairs of each chunk alone; never join the end of one chunk "
            "to the start of the next")
    _expect(fn, "a tie goes to the smallest pair", [[8, 3], [2, 9], [2, 4]], 256,
            "among the pairs with the largest count take the smallest (a, b): "
            "min over (-count, pair)")
    _expect(fn, "merged left to right without overlap", [[97, 97, 97, 97, 97]], 256,
            "after a match skip both tokens: 97 97 97 becomes 256 97")
    chunks = [list(c.encode()) for c in CHUNK.findall(SAMPLE * 2)]
    for i, want_pair in enumerate(train_bpe(SAMPLE * 2, 12)):
        pair, chunks = _step(fn, "the merges of training", chunks, 256 + i)
        if pair != want_pair:
            raise CheckFailed("the merges of training",
                              f"step {i} on a passage of Romeo and Juliet chose "
                              f"{pair}, train_bpe chooses {want_pair}",
                              "count the pairs afresh on the merged chunks each step")
    return MERGE_STEP_PROPERTIES


ENCODE_PROPERTIES = (
    "token ids",
    "bytes without merges",
    "a run of one byte",
    "merges in training order",
    "chunk by chunk",
    "the package's encode",
    "round trip",
)


def _encode(fn, property, text, merges):
    got = _call(fn, property, text, [tuple(p) for p in merges])
    return _ids_list(got, "token ids", f"fn({text[:20]!r}, merges)")


def _expect_ids(fn, property, text, merges, fix):
    got, want = _encode(fn, property, text, merges), encode(text, merges).tolist()
    if got != want:
        raise CheckFailed(property, f"{text[:24]!r} with the merges {merges[:4]}… "
                          f"encodes to {got[:10]}, expected {want[:10]}", fix)


@reports_unfinished
def check_bpe_encode(fn):
    """Check a learner's ``fn(text, merges)``: the token ids of ``text`` (a list or a
    1-D array of ints), its UTF-8 bytes cut into chunks by
    :data:`attncourse.bpe.CHUNK`, each chunk's merges applied in training order (merge
    ``i`` makes token ``256 + i``). Returns :data:`ENCODE_PROPERTIES`; raises
    :class:`~attncourse.kit.failed.CheckFailed` naming the first that fails.
    """
    _encode(fn, "token ids", "ab", [])
    _expect_ids(fn, "bytes without merges", "héllo 東", [],
                "with no merges a text is its UTF-8 bytes: list(text.encode())")
    _expect_ids(fn, "a run of one byte", "aaa aaaa", [(97, 97)],
                "merge left to right without overlap: aaa is 256 97")
    order = [(97, 98), (256, 99), (98, 99)]         # ab, abc, bc
    _expect_ids(fn, "merges in training order", "abc", order,
                "apply merge 0 everywhere, then merge 1, …: 'abc' is ab, then abc")
    _expect_ids(fn, "merges in training order", "bcabc", order,
                "apply merge 0 everywhere, then merge 1, …")
    _expect_ids(fn, "chunk by chunk", "ab, b a", [(98, 32), (44, 32)],
                "cut the text into chunks with CHUNK.findall(text) and merge inside "
                "each: no token spans two chunks")
    merges = train_bpe(SAMPLE * 3, 60)
    for text in (SAMPLE, UNICODE, "the sun, the east, the window"):
        _expect_ids(fn, "the package's encode", text, merges,
                    "apply every merge, in training order, to each chunk's bytes")
    back = decode(np.array(_encode(fn, "round trip", UNICODE, merges)), merges)
    if back != UNICODE:
        raise CheckFailed("round trip", f"{UNICODE[:12]!r} decodes to {back[:12]!r}",
                          "encode the UTF-8 bytes, not the characters")
    return ENCODE_PROPERTIES
