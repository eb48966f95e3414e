import re

import pytest

from attncourse.corpus import GRAMMAR, make_corpus


def test_deterministic_for_a_seed_and_different_across_seeds():
    assert make_corpus(40, seed=3) == make_corpus(40, seed=3)
    assert make_corpus(40, seed=3) != make_corpus(40, seed=4)


def test_sentences_follow_the_grammar():
    words = {c: "|".join(w for w, _ in GRAMMAR[c]) for c in GRAMMAR}
    np_ = rf"(?:{words['determiner']}) (?:(?:{words['adjective']}) )?(?:{words['noun']})"
    sentence = re.compile(rf"{np_} (?:{words['verb']}) {np_}\.")
    text = make_corpus(200, seed=1)
    sentences = text.split(". ")
    assert len(sentences) == 200
    for s in sentences:
        assert sentence.fullmatch(s if s.endswith(".") else s + "."), s


def test_grammar_probabilities_sum_to_one():
    for category, options in GRAMMAR.items():
        assert abs(sum(p for _, p in options) - 1.0) < 1e-12, category


def test_bad_sizes():
    with pytest.raises(ValueError, match="n_sentences must be a positive integer, got 0"):
        make_corpus(0)
    with pytest.raises(ValueError, match="n_sentences must be a positive integer, got 2.5"):
        make_corpus(2.5)
