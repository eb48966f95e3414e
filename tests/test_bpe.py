"""The byte-pair tokenizer and the Tiny Shakespeare corpus (attncourse.bpe)."""

import hashlib
from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from attncourse import bpe
from attncourse.bpe import (CHUNK, decode, encode, heldout_overlap, merge, split_text,
                            train_bpe, vocabulary)
from attncourse.kit.faults import bpe as fb
from attncourse.kit.faults._registry import verdicts

texts = st.text(max_size=60)                        # any Unicode, no lone surrogates
small = st.text(alphabet="ab \n", max_size=40)      # few symbols: many merges, ties
n_merges = st.integers(0, 20)


def by_definition(text, n):
    """Training as defined: recount every pair after each merge; most frequent, the
    smallest pair on a tie."""
    words = [list(c.encode()) for c in CHUNK.findall(text)]
    merges = []
    while len(merges) < n:
        counts = Counter(p for ids in words for p in zip(ids, ids[1:]))
        if not counts:
            break
        pair = min(counts, key=lambda p: (-counts[p], p))
        words = [merge(ids, pair, 256 + len(merges)) for ids in words]
        merges.append(pair)
    return merges


def merge_by_merge(text, merges, merge=merge):
    """Encoding as defined: merge 0, then merge 1, … on each chunk's bytes."""
    out = []
    for chunk in CHUNK.findall(text):
        ids = list(chunk.encode())
        for i, pair in enumerate(merges):
            ids = merge(ids, pair, 256 + i)
        out += ids
    return out


# --- properties -----------------------------------------------------------------------


@given(texts)
def test_the_chunks_cut_the_text_without_losing_a_character(s):
    assert "".join(CHUNK.findall(s)) == s


@given(texts, texts, n_merges)
def test_decode_inverts_encode_for_any_text(train, s, n):
    for merges in (train_bpe(train, n), train_bpe(s, n)):
        ids = encode(s, merges)
        assert ids.dtype == np.int64 and ids.ndim == 1
        assert decode(ids, merges) == s
    assert encode("", []).shape == (0,) and decode([], []) == ""


@given(small, n_merges)
def test_training_is_the_definition_with_the_tie_rule(s, n):
    assert train_bpe(s, n) == by_definition(s, n)


def test_a_tie_goes_to_the_smallest_pair():
    # (b, a), (' ', a) and (a, b) each occur once: the smallest is (32, 97)
    assert train_bpe("ba ab", 1) == [(32, 97)]
    assert train_bpe("ab ab ba", 1) == [(97, 98)]  # most frequent before smallest


@given(texts, small, n_merges)
def test_encode_applies_the_merges_in_training_order(s, train, n):
    merges = train_bpe(train + s, n)
    assert encode(s, merges).tolist() == merge_by_merge(s, merges)


@given(small)
def test_trained_to_the_end_each_chunk_is_one_token(s):
    merges = train_bpe(s, len(s.encode()))
    ids = encode(s, merges)
    assert len(ids) == len(CHUNK.findall(s))
    assert all(i >= 256 or len(c.encode()) == 1 for i, c in zip(ids, CHUNK.findall(s)))


def test_text_made_of_merged_tokens_encodes_to_them():
    merges = train_bpe("low lower lowest", 3)
    assert [t.decode() for t in vocabulary(merges)[256:]] == ["lo", "low", " low"]
    assert encode(" low low lo", merges).tolist() == [258, 258, 32, 256]


@given(small, n_merges, n_merges)
def test_training_is_deterministic_and_a_shorter_one_is_a_prefix(s, k, n):
    assert train_bpe(s, k + n) == train_bpe(s, k + n)
    assert train_bpe(s, k + n)[:k] == train_bpe(s, k)


def test_a_merge_does_not_overlap_itself():
    assert merge([97] * 3, (97, 97), 256) == [256, 97]
    assert merge([97] * 4, (97, 97), 256) == [256, 256]
    merges = train_bpe("aaa", 1)
    assert encode("aaa", merges).tolist() == [256, 97]


def test_each_token_is_the_bytes_of_its_pair():
    merges = train_bpe("the cat, the hat; the end", 12)
    vocab = vocabulary(merges)
    assert len(vocab) == 256 + len(merges) and vocab[:256] == [bytes([i]) for i in
                                                               range(256)]
    for i, (a, b) in enumerate(merges):
        assert vocab[256 + i] == vocab[a] + vocab[b]


def test_bytes_that_are_not_utf8_decode_to_the_replacement_character():
    assert decode([0xC3], []) == "\ufffd"
    assert decode([0xC3, 0xA9], []) == "é"


# --- bad input ------------------------------------------------------------------------


@pytest.mark.parametrize("call, message", [
    (lambda: train_bpe(b"abc", 1), "text must be a str, got bytes"),
    (lambda: train_bpe("abc", -1), r"n_merges must be an integer in \[0, inf\)"),
    (lambda: train_bpe("abc", True), "n_merges must be an integer"),
    (lambda: encode("a\ud800b", []), "lone surrogate '\\\\ud800' at position 1"),
    (lambda: encode("ab", "ab"), "merges must be a list of pairs, got str"),
    (lambda: encode("ab", [(97, 98, 99)]), r"pair of token ids, got \(97, 98, 99\)"),
    (lambda: encode("ab", [(97, -1)]), "pair of token ids"),
    (lambda: encode("ab", [(97, 256)]), r"merge 0 is \(97, 256\), but only tokens "
                                        r"0\.\.255 exist"),
    (lambda: vocabulary([(97, 98), (97, 98)]), r"merge 1 repeats merge 0"),
    (lambda: decode([300], [(97, 98)]), r"valid ids are 0\.\.256\): \[300\]"),
    (lambda: decode([[97]], []), r"ids must be 1-D, got shape \(1, 1\)"),
    (lambda: decode([97.0], []), "ids must be integers"),
    (lambda: merge([97], (97,), 256), r"pair of token ids, got \(97,\)"),
    (lambda: split_text("abc", 0), r"fraction must be a finite number in \(0, 1\)"),
    (lambda: heldout_overlap("abc", None), "text must be a str, got NoneType"),
])
def test_bad_input_is_refused_with_a_clear_message(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# --- the corpus and the split ---------------------------------------------------------


def test_the_corpus_is_the_tiny_shakespeare_and_a_damaged_copy_is_refused(
        monkeypatch, tmp_path):
    text = bpe.shakespeare()
    assert len(text) == 1_115_394 and text.count("\n") == 40_000
    assert hashlib.sha256(text.encode()).hexdigest() == bpe.SHA256
    damaged = tmp_path / "tinyshakespeare.txt"
    damaged.write_bytes(text.replace("Romeo", "Romea", 1).encode())
    monkeypatch.setattr(bpe, "CORPUS", damaged)
    with pytest.raises(ValueError, match="has SHA-256 [0-9a-f]{64}, expected 86c4e6"):
        bpe.shakespeare()


def test_the_split_is_nanogpts_and_its_overlap_is_counted():
    text = bpe.shakespeare()
    train, held_out = split_text(text)
    n = int(0.9 * len(text))
    assert (len(train), len(held_out)) == (n, len(text) - n) == (1_003_854, 111_540)
    assert train + held_out == text
    # 581 of the 3,536 non-empty held-out lines are, verbatim, a line of the training
    # text (563 of them a speaker's name, such as "ROMEO:")
    assert heldout_overlap(train, held_out) == (581, 3536)


def test_the_first_merges_learnt_on_shakespeare():
    train, _ = split_text(bpe.shakespeare())
    first = [t.decode() for t in vocabulary(train_bpe(train, 10))[256:]]
    assert first == [" t", "he", " a", "ou", " s", " m", "in", " w", "re", "ha"]


# --- fault controls -------------------------------------------------------------------


def test_every_bpe_fault_is_caught_as_the_registry_states():
    rows = verdicts(fb.FAULTS, fb.CHECKS)
    assert rows and all(expected == caught for _, _, expected, caught in rows)


def test_the_faults_break_the_property_each_exists_for():
    merges = [(97, 98), (256, 99), (98, 99)]        # ab, abc, bc
    # out of order: the same text back, but not the tokens of the merges in order
    assert fb.encode_out_of_order("abc", merges).tolist() != merge_by_merge(
        "abc", merges)
    assert decode(fb.encode_out_of_order("abc", merges), merges) == "abc"
    # overlapping: aaa read as aa, aa spells five a's
    wrong = merge_by_merge("aaa", [(97, 97)], merge=fb.merge_overlapping)
    assert decode(wrong, [(97, 97)]) == "aaaaa"
    # per token: right on ASCII, not the inverse once a character spans two tokens
    assert fb.decode_per_token(encode("ab c", merges), merges) == "ab c"
    assert fb.decode_per_token(encode("é", []), []) == "\ufffd\ufffd"
