"""Tests of attncourse.text: the character tokenizer and the course corpus."""

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

from attncourse.text import (
    ADJECTIVE_PROBABILITY,
    GRAMMAR,
    build_vocab,
    decode,
    encode,
    make_corpus,
    make_sentence,
    validate_ids,
    validate_vocab,
)

texts = st.text(alphabet="abcxyz .,!\né", min_size=1, max_size=40)


# --- the tokenizer ---------------------------------------------------------------------------


def test_known_encoding():
    vocab = build_vocab("the cat.")
    assert vocab == " .aceht"
    assert_array_equal(encode("cat", vocab), [3, 2, 6])
    assert encode("cat", vocab).dtype == np.int64
    assert decode([3, 2, 6], vocab) == "cat"


def test_empty_text_is_handled_clearly():
    with pytest.raises(ValueError, match="empty text"):
        build_vocab("")
    empty = encode("", "abc")
    assert empty.shape == (0,) and empty.dtype == np.int64
    assert decode(empty, "abc") == ""
    assert decode([], "abc") == ""


def test_unknown_characters_are_named():
    with pytest.raises(ValueError, match=r"character 'z' \(first at position 1\) is not in the vocabulary 'abc'"):
        encode("azb", "abc")
    with pytest.raises(ValueError, match=r"characters 'q' \(first at position 0\), 'z' \(first at position 2\) are not"):
        encode("qaz", "abc")


def test_bad_ids_are_named():
    with pytest.raises(ValueError, match=r"out of range for a vocabulary of 3 tokens \(valid ids are 0..2\): \[-2, 3, 7\]"):
        decode([0, 3, 7, -2, 3], "abc")
    with pytest.raises(ValueError, match="ids must be integers, got dtype float64"):
        validate_ids(np.array([0.0, 1.0]), 3)
    with pytest.raises(ValueError, match="ids must be integers, got dtype bool"):
        validate_ids(np.array([True]), 3)
    with pytest.raises(ValueError, match=r"sizes must be positive integers: n_vocab=0 \(got n_vocab=0\)"):
        validate_ids([0], 0)
    with pytest.raises(ValueError, match=r"ids must be 1-D to decode into one text, got shape \(1, 2\)"):
        decode([[0, 1]], "abc")


def test_validate_ids_names_the_argument_and_lists_at_most_ten_values():
    with pytest.raises(ValueError, match=r"^targets y out of range"):
        validate_ids([5], 3, name="targets y")
    with pytest.raises(ValueError, match=r"targets y must be integers"):
        validate_ids([0.5], 3, name="targets y")
    with pytest.raises(ValueError, match=r"\[3, 4, 5, 6, 7, 8, 9, 10, 11, 12, \.\.\.\]$"):
        validate_ids(np.arange(20), 3)


def test_bad_vocabularies_and_texts():
    with pytest.raises(ValueError, match="repeated: 'a'"):
        validate_vocab("aba")
    with pytest.raises(ValueError, match="vocabulary is empty"):
        encode("a", "")
    with pytest.raises(ValueError, match="vocabulary must be a str of distinct characters, got list"):
        validate_vocab(["a", "b"])
    with pytest.raises(ValueError, match="text must be a str, got list"):
        encode(["a"], "a")
    with pytest.raises(ValueError, match="text must be a str, got bytes"):
        build_vocab(b"abc")


def test_validate_ids_keeps_shape():
    ids = validate_ids(np.array([[1, 0], [2, 2]], dtype=np.uint8), 3)
    assert ids.dtype == np.int64 and ids.shape == (2, 2)
    assert validate_vocab("abc") == "abc"


@given(texts)
def test_round_trip(text):
    vocab = build_vocab(text)
    ids = encode(text, vocab)
    assert decode(ids, vocab) == text
    assert ids.shape == (len(text),)
    assert ids.min() >= 0 and ids.max() < len(vocab)


@given(texts)
def test_vocabulary_is_sorted_distinct_and_order_free(text):
    vocab = build_vocab(text)
    assert list(vocab) == sorted(set(text))
    assert build_vocab(text[::-1]) == vocab  # depends on the set of characters only
    assert validate_vocab(vocab) == vocab


# --- the corpus ------------------------------------------------------------------------------


def test_deterministic_for_a_seed_and_different_across_seeds():
    assert make_corpus(40, seed=3) == make_corpus(40, seed=3)
    assert make_corpus(40, seed=3) != make_corpus(40, seed=4)


def sentence_pattern():
    words = {c: "|".join(w for w, _ in GRAMMAR[c]) for c in GRAMMAR}
    np_ = rf"(?:{words['determiner']}) (?:(?:{words['adjective']}) )?(?:{words['noun']})"
    return re.compile(rf"{np_} (?:{words['verb']}) {np_}\.")


def test_sentences_follow_the_grammar():
    sentence = sentence_pattern()
    text = make_corpus(200, seed=1)
    sentences = text.split(". ")
    assert len(sentences) == 200
    for s in sentences:
        assert sentence.fullmatch(s if s.endswith(".") else s + "."), s


def test_make_sentence_draws_from_the_generator_it_is_given():
    rng_a, rng_b = np.random.default_rng(9), np.random.default_rng(9)
    first = [make_sentence(rng_a) for _ in range(5)]
    assert first == [make_sentence(rng_b) for _ in range(5)]
    assert all(sentence_pattern().fullmatch(s) for s in first)
    assert " ".join(first) == make_corpus(5, seed=9)


def test_grammar_probabilities_sum_to_one():
    for category, options in GRAMMAR.items():
        assert abs(sum(p for _, p in options) - 1.0) < 1e-12, category
    assert 0.0 < ADJECTIVE_PROBABILITY < 1.0


def test_adjective_frequency_matches_its_probability():
    # 2 noun phrases per sentence; the count of adjectives is binomial(n, ADJECTIVE_PROBABILITY)
    n_sentences = 2000
    adjectives = {w for w, _ in GRAMMAR["adjective"]}
    words = make_corpus(n_sentences, seed=5).replace(".", "").split()
    n = 2 * n_sentences
    count = sum(w in adjectives for w in words)
    p = ADJECTIVE_PROBABILITY
    assert abs(count / n - p) < 5 * np.sqrt(p * (1 - p) / n)  # five standard errors


def test_bad_sizes():
    with pytest.raises(ValueError, match="sizes must be positive integers: n_sentences=0"):
        make_corpus(0)
    with pytest.raises(ValueError, match="sizes must be positive integers: n_sentences=2.5"):
        make_corpus(2.5)
