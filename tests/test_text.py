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
)

texts = st.text(alphabet="abcxyz .,!\né", min_size=1, max_size=40)


# --- the tokenizer --------------------------------------------------------------------


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
    with pytest.raises(
        ValueError,
        match=r"character 'z' \(first at position 1\) is not in the vocabulary 'abc'",
    ):
        encode("azb", "abc")
    with pytest.raises(
        ValueError,
        match=r"characters 'q' \(first at position 0\), 'z' \(first at position 2\) "
            r"are not",
    ):
        encode("qaz", "abc")


def test_bad_ids_are_named():
    with pytest.raises(
        ValueError,
        match=r"out of range for a vocabulary of 3 tokens \(valid ids are 0..2\): "
            r"\[-2, 3, 7\]",
    ):
        decode([0, 3, 7, -2, 3], "abc")
    with pytest.raises(ValueError, match="ids must be integers, got dtype float64"):
        decode(np.array([0.0, 1.0]), "abc")
    with pytest.raises(ValueError, match="ids must be integers, got dtype bool"):
        decode(np.array([True]), "abc")
    with pytest.raises(ValueError, match=r"^ids must be 1-D, got shape \(1, 2\)$"):
        decode([[0, 1]], "abc")
    with pytest.raises(ValueError, match=r"^ids must be 1-D, got shape \(1, 0\)$"):
        decode([[]], "abc")


@pytest.mark.parametrize("call", [lambda v: encode("a", v), lambda v: decode([0], v)])
def test_bad_vocabularies_and_texts(call):
    with pytest.raises(ValueError, match=r"repeated: 'a', 'b'$"):
        call("abab")
    with pytest.raises(ValueError, match="^vocabulary must be a non-empty str, got ''"):
        call("")
    with pytest.raises(
        ValueError, match=r"^vocabulary must be a non-empty str, got \['a', 'b'\]$"
    ):
        call(["a", "b"])
    with pytest.raises(ValueError, match="text must be a str, got list"):
        encode(["a"], "a")
    with pytest.raises(ValueError, match="text must be a str, got bytes"):
        build_vocab(b"abc")


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
    assert encode(vocab, vocab).tolist() == list(range(len(vocab)))  # a valid one


# --- the corpus -----------------------------------------------------------------------


def test_deterministic_for_a_seed_and_different_across_seeds():
    assert make_corpus(40, seed=3) == make_corpus(40, seed=3)
    assert make_corpus(40, seed=3) != make_corpus(40, seed=4)


def sentence_pattern():
    words = {c: "|".join(w for w, _ in GRAMMAR[c]) for c in GRAMMAR}
    np_ = (
        rf"(?:{words['determiner']}) (?:(?:{words['adjective']}) )?(?:{words['noun']})"
    )
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
    # 2 noun phrases per sentence; the count of adjectives is binomial(n,
    # ADJECTIVE_PROBABILITY)
    n_sentences = 2000
    adjectives = {w for w, _ in GRAMMAR["adjective"]}
    words = make_corpus(n_sentences, seed=5).replace(".", "").split()
    n = 2 * n_sentences
    count = sum(w in adjectives for w in words)
    p = ADJECTIVE_PROBABILITY
    assert abs(count / n - p) < 5 * np.sqrt(p * (1 - p) / n)  # five standard errors


def test_bad_sizes():
    with pytest.raises(
        ValueError, match="sizes must be positive integers: n_sentences=0"
    ):
        make_corpus(0)
    with pytest.raises(
        ValueError, match="sizes must be positive integers: n_sentences=2.5"
    ):
        make_corpus(2.5)


# --- associative recall ---------------------------------------------------------------

from fractions import Fraction  # noqa: E402
from itertools import permutations, product  # noqa: E402

from attncourse.text import (
    RecallTask,
    recall_answers,
    recall_batch,  # noqa: E402
    recall_batches,
    recall_bigram_ceiling,
    recall_text,
    window_batches,
)


def test_recall_tokens_ids_and_lengths():
    task = RecallTask(n_keys=3, n_values=4, n_pairs=2)
    assert task.n_vocab == 3 * 4 + 3 + 1 + 4 == len(set(task.tokens))
    assert task.tokens[task.pair(2, 3)] == "c3" and task.tokens[task.key(1)] == "b"
    assert task.tokens[task.value(0)] == "0" and task.tokens[task.question] == "?"
    assert task.T == 4


def test_recall_sequences_are_pairs_a_question_and_a_listed_key():
    task = RecallTask(n_keys=6, n_values=5, n_pairs=4)
    ids, targets, counted = recall_batch(task, 300, np.random.default_rng(0))
    assert ids.shape == targets.shape == counted.shape == (300, task.T)
    # the next token, position by position
    assert_array_equal(targets[:, :-1], ids[:, 1:])
    assert counted[:, -1].all() and not counted[:, :-1].any()
    pairs = ids[:, :4]
    keys, values = pairs // 5, pairs % 5
    # distinct
    assert (np.sort(keys, axis=1)[:, 1:] != np.sort(keys, axis=1)[:, :-1]).all()
    assert (ids[:, 4] == task.question).all()
    asked = ids[:, 5] - task.key(0)
    where = keys == asked[:, None]
    assert (where.sum(axis=1) == 1).all()
    assert_array_equal(targets[:, -1], task.value(values[where]))
    assert_array_equal(recall_answers(task, ids), targets[:, -1])


def test_recall_values_keys_and_the_asked_pair_are_uniform():
    task = RecallTask(n_keys=6, n_values=5, n_pairs=3)
    ids, targets, _ = recall_batch(task, 30000, np.random.default_rng(1))
    n = len(ids)
    # Hoeffding + Bonferroni, alpha 1e-6
    margin = np.sqrt(np.log(2 * 30 / 1e-6) / (2 * n))
    answers = np.bincount(targets[:, -1] - task.value(0), minlength=5) / n
    assert np.abs(answers - 1 / 5).max() < margin
    asked = np.bincount(ids[:, -1] - task.key(0), minlength=6) / n
    assert np.abs(asked - 1 / 6).max() < margin
    slot = np.argmax(ids[:, :3] // 5 == (ids[:, -1:] - task.key(0)), axis=1)
    assert np.abs(np.bincount(slot, minlength=3) / n - 1 / 3).max() < margin


def exact_best_bigram(task):
    joint = {}
    orders = list(permutations(range(task.n_keys), task.n_pairs))
    weight = Fraction(1, len(orders) * task.n_values**task.n_pairs * task.n_pairs)
    for keys in orders:
        for values in product(range(task.n_values), repeat=task.n_pairs):
            for asked in range(task.n_pairs):
                cell = (keys[asked], values[asked])
                joint[cell] = joint.get(cell, 0) + weight
    return sum(
        max(joint.get((k, v), 0) for v in range(task.n_values))
        for k in range(task.n_keys)
    )


@pytest.mark.parametrize("sizes", [(2, 2, 1), (3, 2, 2), (4, 3, 3), (3, 4, 2)])
def test_the_bigram_ceiling_is_the_exact_best_bigram_accuracy(sizes):
    task = RecallTask(*sizes)
    assert (
        recall_bigram_ceiling(task) == exact_best_bigram(task) == Fraction(1, sizes[1])
    )


def test_recall_text_reads_the_tokens():
    task = RecallTask(n_keys=4, n_values=3, n_pairs=2)
    ids = np.array([[task.pair(3, 2), task.pair(0, 1), task.question, task.key(0)]])
    assert recall_text(task, ids) == ["d2 a1 ? a"]
    assert recall_text(task, ids[0]) == "d2 a1 ? a"


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: RecallTask(n_keys=27), r"^n_keys must be an integer in \[1, 26\]"),
        (lambda: RecallTask(n_values=11), r"^n_values must be an integer in \[1, 10\]"),
        (lambda: RecallTask(n_values=True), r"^n_values must be an integer in \[1, "),
        (lambda: RecallTask(n_keys=2, n_pairs=3), r"^n_pairs .* in \[1, 2\], got 3$"),
        (lambda: RecallTask(n_pairs=0), r"^n_pairs .* in \[1, 8\], got 0$"),
        (
            lambda: recall_batch("task", 2, np.random.default_rng(0)),
            "task must be a RecallTask",
        ),
        (lambda: recall_batch(RecallTask(), 0, np.random.default_rng(0)), "n=0"),
        (
            lambda: recall_answers(RecallTask(), np.zeros((2, 3), int)),
            r"^ids must have shape \(n, 6\), got shape \(2, 3\)$",
        ),
        (
            lambda: recall_answers(RecallTask(n_pairs=2), np.array([[0, 0, 72, 64]])),
            "each sequence must list n_pairs pairs, with the asked key exactly once",
        ),
        (
            lambda: recall_answers(RecallTask(n_pairs=2), np.array([[72, 0, 72, 64]])),
            "each sequence must list n_pairs pairs, with the asked key exactly once",
        ),
        (lambda: recall_text(RecallTask(), [100]), "100"),
        (lambda: recall_text(RecallTask(), np.zeros((1, 1, 1), int)), "1-D or 2-D"),
        (
            lambda: window_batches(np.arange(3), 3, 2, seed=0),
            r"^ids must be 1-D, longer than T=3, got shape \(3,\)$",
        ),
    ],
)
def test_recall_and_window_input_is_validated(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_batches_are_seeded_per_step():
    task = RecallTask()
    batch = recall_batches(task, 8, seed=4)
    assert_array_equal(batch(2)[0], batch(2)[0])
    assert not np.array_equal(batch(2)[0], batch(3)[0])
    assert not np.array_equal(batch(2)[0], recall_batches(task, 8, seed=5)(2)[0])
    ids = np.arange(50)
    windows = window_batches(ids, 7, 5, seed=0)
    x, y, counted = windows(1)
    assert x.shape == (5, 7) and counted is None
    assert_array_equal(y, x + 1)
    assert_array_equal(windows(1)[0], x)
    assert x.max() < 49  # every window has its next token
