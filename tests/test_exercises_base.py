"""Tests of the learner checkers' shared helpers (attncourse.kit.exercises._base): a
crash names the call with its arguments, a forgotten ``return`` is named as such."""

import numpy as np
import pytest

from attncourse.kit import exercises as ex
from attncourse.kit.exercises._base import _array, _call, _describe_call
from attncourse.kit.failed import CheckFailed
from attncourse.layers.attention import causal_attention
from attncourse.layers.multihead import merge_heads, split_heads

OLD_CRASH_FIX = "make the function run on these inputs"  # named neither call nor args


def failure(checker, *fns):
    with pytest.raises(CheckFailed) as info:
        checker(*fns)
    return info.value


# --- a crash names the call, with its arguments ---------------------------------------


def test_a_call_is_described_by_parameter_names_shapes_and_small_values():
    def my_top_k(logits, k):
        return logits

    assert _describe_call(my_top_k, (np.zeros(7),), {"k": 10}) == (
        "my_top_k(logits (7,), k=10)"
    )
    assert _describe_call(my_top_k, (np.zeros((3, 7)), np.int64(2)), {}) == (
        "my_top_k(logits (3, 7), k=2)"
    )
    # a lambda is "fn"; *args unnamed; an integer or boolean array shows its dtype
    described = _describe_call(
        lambda *a, **kw: a, (np.zeros((2, 3), int), True), {"mask": np.eye(2) > 0}
    )
    assert described == "fn((2, 3) int64, True, mask (2, 2) bool)"
    # a dict by its first entries, a function by its name
    grads = {"W": np.zeros((4, 3)), "b": np.zeros(3)}

    def dropout(P):
        return P

    assert _describe_call(lambda grads, dropout: 0, (grads, dropout), {}) == (
        "fn(grads {'W': (4, 3), 'b': (3,)}, dropout=<function dropout>)"
    )


def _top_k_crashing_past_n(logits, k):
    """A top-k that fails for k > n: np.argpartition's kth must be < n."""
    idx = np.argpartition(-logits, k - 1, axis=-1)[..., :k]
    z = np.exp(logits - logits.max(axis=-1, keepdims=True))
    P = np.zeros_like(logits)
    np.put_along_axis(P, idx, np.take_along_axis(z, idx, axis=-1), axis=-1)
    return P / P.sum(axis=-1, keepdims=True)


def test_a_crash_names_the_failing_call_with_its_arguments():
    # the learner's top-k runs for k = 1, 3, 6, 7 and crashes at k = 10 > n = 7
    error = failure(ex.check_top_k, _top_k_crashing_past_n)
    assert error.property == "returns probabilities"
    assert error.detail.startswith(
        "calling _top_k_crashing_past_n(logits (3, 7), k=10) raised ValueError: "
    )
    assert isinstance(error.__cause__, ValueError)  # its traceback: the learner's lines
    assert OLD_CRASH_FIX not in str(error) and "inputs of shapes" not in error.detail


def test_a_crash_names_keyword_arguments_too():
    def my_attention(query, key, value, query_offset=0, dropout=None):
        if dropout is not None:
            raise TypeError("dropout is not supported")
        return causal_attention(query, key, value)

    error = failure(ex.check_causal_attention, my_attention)
    assert error.property == "dropout contract"
    assert error.detail == (
        "calling my_attention(query (5, 3), key (5, 3), value (5, 4), "
        "dropout=<function dropout>) raised TypeError: dropout is not supported"
    )
    assert "make my_attention accept these arguments" in error.fix


def test_the_guarded_call_passes_results_and_unfinished_stubs_through():
    assert _call(lambda x, k=0: x + k, "p", 1, k=2) == 3

    def stub(x):
        raise NotImplementedError("your code here")

    with pytest.raises(NotImplementedError):
        _call(stub, "p", 1)


# --- a forgotten return is named ------------------------------------------------------


def test_a_function_without_return_is_named_not_reported_as_shape_empty():
    def my_top_k(logits, k):
        z = np.exp(logits - logits.max(axis=-1, keepdims=True))
        z / z.sum(axis=-1, keepdims=True)  # the result is computed, not returned

    error = failure(ex.check_top_k, my_top_k)
    assert str(error).startswith(
        "returns probabilities: my_top_k(logits (3, 7), k=1) returned None — did you "
        "forget `return`?"
    )
    assert "shape ()" not in str(error)

    def my_one_hot(ids, n_vocab):
        np.eye(n_vocab)[ids]

    error = failure(ex.check_one_hot, my_one_hot)
    assert "returned None — did you forget `return`?" in error.detail
    assert "got ()" not in error.detail  # what it said before


def test_none_inside_a_result_is_named_too():
    def pair_with_none(query, key, value, query_offset=0, dropout=None):
        return None, causal_attention(query, key, value)[1]

    error = failure(ex.check_causal_attention, pair_with_none)
    assert error.detail == "got None instead of an array — did you forget `return`?"
    # a list of None is no array of numbers (with a float dtype it would become NaN)
    with pytest.raises(CheckFailed, match=r"not an array of numbers \(it holds "):
        _array([None, 1.0], "p", dtype=np.float64)
    np.testing.assert_array_equal(_array([1, 2], "p", dtype=np.float64), [1.0, 2.0])


def _none(*args, **kwargs):
    return None


@pytest.mark.parametrize(
    "name", [name for name in ex.__all__ if name.startswith("check_")])
def test_every_checker_names_a_forgotten_return(name):
    checker = getattr(ex, name)
    if name == "check_split_merge":
        for fns in ((_none, merge_heads), (split_heads, _none)):
            assert "did you forget `return`?" in failure(checker, *fns).detail
        return
    assert "did you forget `return`?" in failure(checker, _none).detail


# --- right answers keep their verdicts ------------------------------------------------


def test_right_answers_still_pass():
    from attncourse.sample import probabilities

    assert ex.check_top_k(lambda z, k: probabilities(z, top_k=k)) == ex.TOP_K_PROPERTIES
    assert ex.check_causal_attention(causal_attention)[-1] == "offset"
    assert ex.check_split_merge(split_heads, merge_heads)
