import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

from attncourse.tokenizer import build_vocab, check_ids, check_vocab, decode, encode

texts = st.text(alphabet="abcxyz .,!\né", min_size=1, max_size=40)


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
    with pytest.raises(ValueError, match="must be integers, got dtype float64"):
        check_ids(np.array([0.0, 1.0]), 3)
    with pytest.raises(ValueError, match="must be integers, got dtype bool"):
        check_ids(np.array([True]), 3)
    with pytest.raises(ValueError, match="n_vocab must be a positive integer, got 0"):
        check_ids([0], 0)
    with pytest.raises(ValueError, match=r"ids must be 1-D to decode into one text, got shape \(1, 2\)"):
        decode([[0, 1]], "abc")


def test_bad_vocabularies_and_texts():
    with pytest.raises(ValueError, match="repeated: 'a'"):
        check_vocab("aba")
    with pytest.raises(ValueError, match="vocabulary is empty"):
        encode("a", "")
    with pytest.raises(ValueError, match="text must be a str, got list"):
        encode(["a"], "a")
    with pytest.raises(ValueError, match="text must be a str, got bytes"):
        build_vocab(b"abc")


def test_check_ids_keeps_shape():
    ids = check_ids(np.array([[1, 0], [2, 2]], dtype=np.uint8), 3)
    assert ids.dtype == np.int64 and ids.shape == (2, 2)


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
    check_vocab(vocab)
