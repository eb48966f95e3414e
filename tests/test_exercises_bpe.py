"""Tests of Chapter 11's checkers, check_bpe_merge_step and check_bpe_encode: the right
answers pass, the typical wrong ones are named with their fix, a stub is reported."""

import contextlib
import io
from collections import Counter

import numpy as np
import pytest

from attncourse.bpe import CHUNK, encode, merge
from attncourse.kit import CheckFailed
from attncourse.kit.exercises import (UNFINISHED, check_bpe_encode,
                                      check_bpe_merge_step)
from attncourse.kit.exercises.bpe import ENCODE_PROPERTIES, MERGE_STEP_PROPERTIES
from attncourse.kit.faults import bpe as fb


def merge_step(count="positions", join=False, tie=min, overlap=False):
    """One merge step, with one chosen defect (the defaults give a correct answer)."""

    def fn(chunks, new):
        seqs = [sum(chunks, [])] if join else chunks
        counts = Counter()
        for ids in seqs:
            pairs = list(zip(ids, ids[1:]))
            counts.update(set(pairs) if count == "chunks" else pairs)
        best = max(counts.values())
        pair = tie(p for p in counts if counts[p] == best)
        step = fb.merge_overlapping if overlap else merge
        return pair, [step(ids, pair, new) for ids in chunks]

    return fn


def first(iterable):
    return next(iter(iterable))


def test_a_right_merge_step_passes():
    assert check_bpe_merge_step(merge_step()) == MERGE_STEP_PROPERTIES


@pytest.mark.parametrize("wrong, prop", [
    (merge_step(count="chunks"), "a pair counted at every position"),
    (merge_step(join=True), "pairs inside a chunk only"),
    (merge_step(tie=max), "a tie goes to the smallest pair"),
    (merge_step(tie=first), "a tie goes to the smallest pair"),
    (merge_step(overlap=True), "merged left to right without overlap"),
    (lambda chunks, new: [(1, 2), chunks], "a pair and the merged chunks"),
    (lambda chunks, new: ((1, 2), chunks[:1]), "a pair and the merged chunks"),
    (lambda chunks, new: ((7, 5), chunks), "the most frequent pair"),
    (lambda chunks, new: ((1, 2), chunks), "merged left to right without overlap"),
])
def test_a_wrong_merge_step_is_named(wrong, prop):
    with pytest.raises(CheckFailed, match=prop):
        check_bpe_merge_step(wrong)


def by_merges(order=lambda merges: merges, chunked=True, step=merge):
    """Encoding merge by merge, with one chosen defect."""

    def fn(text, merges):
        out = []
        for chunk in CHUNK.findall(text) if chunked else [text]:
            ids = list(chunk.encode())
            for pair in order(merges):
                ids = step(ids, pair, 256 + merges.index(pair))
            out += ids
        return out

    return fn


def test_a_right_encode_passes():
    assert check_bpe_encode(by_merges()) == ENCODE_PROPERTIES
    assert check_bpe_encode(encode) == ENCODE_PROPERTIES


@pytest.mark.parametrize("wrong, prop", [
    (by_merges(order=lambda m: m[::-1]), "merges in training order"),
    (fb.encode_out_of_order, "merges in training order"),
    (by_merges(step=fb.merge_overlapping), "a run of one byte"),
    (by_merges(chunked=False), "chunk by chunk"),
    (lambda text, merges: [ord(c) for c in text], "bytes without merges"),
    (lambda text, merges: "ab", "token ids"),
    (lambda text, merges: np.array([0.5]), "token ids"),
    (lambda text, merges: by_merges()(text, merges[:10]), "the package's encode"),
])
def test_a_wrong_encode_is_named(wrong, prop):
    with pytest.raises(CheckFailed, match=prop):
        check_bpe_encode(wrong)


@pytest.mark.parametrize("checker", [check_bpe_merge_step, check_bpe_encode])
def test_a_stub_is_reported_not_raised(checker):
    def my_stub(*args):
        raise NotImplementedError("your code here")

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert checker(my_stub) is None
    assert out.getvalue().strip() == UNFINISHED.format(name="my_stub")


def test_an_error_in_the_learners_code_names_the_property():
    def broken(chunks, new):
        raise KeyError("x")

    with pytest.raises(CheckFailed, match="a pair and the merged chunks.*KeyError"):
        check_bpe_merge_step(broken)
