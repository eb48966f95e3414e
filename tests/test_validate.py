"""Tests of attncourse._validate: the input validators; every message names the argument
at fault."""

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from attncourse._validate import (as_float_array, as_ids, is_int, require_a,
                                  require_broadcast, require_like, require_params,
                                  require_sizes, require_that, shaped)
from attncourse.layers.multihead import init_multihead, multihead_forward, split_heads


# --- as_float_array -------------------------------------------------------------------


def test_as_float_array_converts_integers_and_keeps_float_types():
    out = as_float_array("X", [[1, 2], [3, 4]])
    assert out.dtype == np.float64
    assert_array_equal(out, [[1.0, 2.0], [3.0, 4.0]])
    assert as_float_array("X", np.array([True, False])).dtype == np.float64
    assert as_float_array("X", np.arange(3, dtype=np.uint8)).dtype == np.float64
    x32 = np.ones(3, dtype=np.float32)
    # a float array passes through, dtype and all
    assert as_float_array("X", x32) is x32
    x64 = np.ones((2, 3))
    assert as_float_array("X", x64) is x64
    assert as_float_array("X", np.ones(2, dtype=complex)).dtype == complex
    assert as_float_array("s", 2).shape == ()


@pytest.mark.parametrize("name", ["X", "W_Q", "dloss"])
def test_as_float_array_names_the_argument(name):
    with pytest.raises(
        ValueError, match=rf"^{name} must be an array of numbers, got dtype <U1$"
    ):
        as_float_array(name, ["a"])
    with pytest.raises(
        ValueError, match=rf"^{name} must be an array of numbers, got dtype object$"
    ):
        as_float_array(name, np.array([1.0, None], dtype=object))
    with pytest.raises(ValueError, match=rf"^{name} must be 2-D, got shape \(3,\)$"):
        as_float_array(name, np.ones(3), ndim=2)
    with pytest.raises(
        ValueError, match=rf"^{name} must be at least 3-D, got shape \(2, 2\)$"
    ):
        as_float_array(name, np.ones((2, 2)), min_ndim=3)


def test_as_float_array_shape_requirements_pass_when_met():
    assert as_float_array("X", np.ones((2, 3)), ndim=2).shape == (2, 3)
    assert as_float_array("X", np.ones((2, 3, 4)), min_ndim=2).shape == (2, 3, 4)
    assert as_float_array("X", np.ones((2, 3)), min_ndim=2).shape == (2, 3)


# --- as_ids ---------------------------------------------------------------------------


def test_as_ids_keeps_the_shape_and_returns_int64():
    ids = as_ids(np.array([[1, 0], [2, 2]], dtype=np.uint8), 3)
    assert ids.dtype == np.int64 and ids.shape == (2, 2)
    assert_array_equal(ids, [[1, 0], [2, 2]])
    for empty in ([], np.zeros((2, 0))):  # no ids, whatever their dtype
        assert as_ids(empty, 3).dtype == np.int64
    assert as_ids([], 3, ndim=1).shape == (0,)


def test_as_ids_names_the_argument_and_lists_at_most_ten_values():
    with pytest.raises(ValueError, match=r"^targets y out of range for a vocabulary of "
                       r"3 tokens \(valid ids are 0\.\.2\): \[-1, 5\]$"):
        as_ids([5, 0, -1], 3, name="targets y")
    with pytest.raises(ValueError, match=r"^targets y must be integers, got dtype f"):
        as_ids([0.5], 3, name="targets y")
    with pytest.raises(ValueError, match=r"^ids must be integers, got dtype bool$"):
        as_ids(np.array([True]), 3)
    with pytest.raises(
        ValueError, match=r"\[3, 4, 5, 6, 7, 8, 9, 10, 11, 12, \.\.\.\]$"
    ):
        as_ids(np.arange(20), 3)
    with pytest.raises(
        ValueError,
        match=r"^sizes must be positive integers: n_vocab=0 \(got n_vocab=0\)$",
    ):
        as_ids([0], 0)
    with pytest.raises(ValueError, match=r"^prompt must be 1-D, got shape \(1, 2\)$"):
        as_ids([[0, 1]], 3, name="prompt", ndim=1)


# --- require_sizes --------------------------------------------------------------------


def test_require_sizes_accepts_positive_integers_of_any_integer_type():
    assert require_sizes(T=5, D=7, d=np.int64(3), r=np.uint8(2)) is None
    assert require_sizes() is None


@pytest.mark.parametrize(
    "sizes, wrong",
    [
        (dict(T=0, D=7), "T=0"),
        (dict(T=5, D=-1), "D=-1"),
        (dict(T=2.0, D=7), "T=2.0"),
        (dict(T=5, D=None), "D=None"),
        (dict(T=5, D="7"), "D='7'"),
        (dict(T=True, D=7), "T=True"),
        (dict(T=5, D=np.bool_(True)), f"D={np.bool_(True)!r}"),
        (dict(T=0, D=0), "T=0, D=0"),
    ],
)
def test_require_sizes_names_every_bad_size(sizes, wrong):
    listed = ", ".join(f"{k}={v!r}" for k, v in sizes.items())
    message = f"sizes must be positive integers: {wrong} (got {listed})"
    with pytest.raises(ValueError) as info:
        require_sizes(**sizes)
    assert str(info.value) == message


def test_booleans_are_rejected_even_where_zero_is_allowed():
    with pytest.raises(
        ValueError,
        match=r"^sizes must be non-negative integers: steps=False \(got steps=False\)$",
    ):
        require_sizes(allow_zero=True, steps=False)
    with pytest.raises(
        ValueError,
        match=r"^sizes must be positive integers: heads=True \(got heads=True\)$",
    ):
        require_sizes(heads=True)


def test_allow_zero():
    assert require_sizes(allow_zero=True, T_q=0, T_k=3, query_offset=0) is None
    with pytest.raises(
        ValueError,
        match=r"^sizes must be non-negative integers: T_k=-1 \(got T_q=0, T_k=-1\)$",
    ):
        require_sizes(allow_zero=True, T_q=0, T_k=-1)
    with pytest.raises(
        ValueError,
        match=r"^sizes must be positive integers: T_q=0 \(got T_q=0, T_k=3\)$",
    ):
        require_sizes(T_q=0, T_k=3)  # control: the default does not allow zero


def test_heads_zero_is_rejected_where_heads_are_used():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=r"sizes must be positive integers: heads=0"):
        init_multihead(rng, 4, heads=0, d=2, r=2)
    with pytest.raises(ValueError, match=r"sizes must be positive integers: heads=0"):
        split_heads(np.ones((3, 4)), 0)
    params = init_multihead(rng, 4, heads=2, d=2, r=2)
    with pytest.raises(ValueError, match=r"sizes must be positive integers: heads=0"):
        multihead_forward(params, np.ones((3, 4)), heads=0)


# --- require_params -------------------------------------------------------------------


def test_require_params_accepts_a_dict_with_every_name():
    assert (
        require_params(
            "head", {"W_Q": 1, "W_K": 2, "W_V": 3, "extra": 4}, ("W_Q", "W_K", "W_V")
        )
        is None
    )
    assert require_params("loss", {}, ()) is None


def test_require_params_names_the_layer_and_what_is_missing():
    with pytest.raises(
        ValueError,
        match=r"^head params lack \['W_K', 'W_V'\]; they need \['W_Q', 'W_K', 'W_V'\], "
            r"got keys \['W_Q'\]$",
    ):
        require_params("head", {"W_Q": 1}, ("W_Q", "W_K", "W_V"))
    with pytest.raises(
        ValueError, match=r"^linear params must be a dict of named arrays, got ndarray$"
    ):
        require_params("linear", np.ones((2, 2)), ("W",))
    with pytest.raises(
        ValueError, match=r"^embedding params must be a dict of named arrays, got list$"
    ):
        require_params("embedding", [np.ones((2, 2))], ("E",))


# --- shaped ---------------------------------------------------------------------------


def test_shaped_returns_float_arrays_and_keeps_float_types():
    x32 = np.ones((2, 3), dtype=np.float32)
    Q, K = shaped("Q(..., T, d) K(..., S, d)", x32, [[1, 2, 3]])
    assert Q is x32 and K.dtype == np.float64
    assert shaped("X(T, D)", np.ones((4, 5))).shape == (4, 5)
    ids = np.array([[1, 2]])
    assert shaped("ids(B, T):int", ids) is ids
    assert shaped("X(T, D) mask(T, T)", np.ones((2, 3)), None)[1] is None


@pytest.mark.parametrize("spec, arrays, message", [
    ("X(T, D)", [np.ones(3)], r"^X must have shape \(T, D\), got shape \(3,\)$"),
    ("X(T, D)", [np.ones((1, 2, 3))], r"^X must have shape \(T, D\), got shape"),
    ("Q(..., T, d)", [np.ones(3)], r"^Q must have shape \(\.\.\., T, d\), got shape"),
    ("Q(..., T, d) K(..., S, d)", [np.ones((3, 2)), np.ones((4, 5))],
     r"^K must have shape \(\.\.\., S, d\) with d=2 \(as in Q\), got shape \(4, 5\)$"),
    ("W(D, 3)", [np.ones((2, 4))], r"^W must have shape \(D, 3\), got shape \(2, 4\)$"),
    ("Q(..., T, d) K(..., S, d)", [np.ones((2, 3, 2)), np.ones((4, 5, 2))],
     r"^leading batch dimensions do not broadcast: Q \(2,\), K \(4,\)$"),
    ("ids(T):int", [np.ones(3)], r"^ids must be an array of integers"),
    ("X(T)", [["a"]], r"^X must be an array of numbers, got dtype <U1$"),
    ("X(T) Y(T)", [np.ones(2)], r"names 2 arrays, got 1"),
])
def test_shaped_names_the_argument_the_expected_and_the_actual_shape(
        spec, arrays, message):
    with pytest.raises(ValueError, match=message):
        shaped(spec, *arrays)


def test_shaped_refuses_a_malformed_spec():
    with pytest.raises(ValueError, match="not a shape spec"):
        shaped("X[T, D]", np.ones((2, 2)))


def test_shaped_gives_the_same_verdicts_on_a_signature_seen_before():
    X = np.ones((2, 3))
    for _ in range(2):  # the second call meets a signature that passed
        assert shaped("X(T, D) W(D, E)", X, np.ones((3, 4)))[0] is X
        with pytest.raises(ValueError, match=r"^W must have shape \(D, E\) with D=3"):
            shaped("X(T, D) W(D, E)", X, np.ones((4, 4)))
        assert shaped("X(T, D)", [[1, 2]]).dtype == np.float64  # converted each time
        with pytest.raises(ValueError, match=r"^ids must be an array of integers"):
            shaped("ids(T):int", np.ones(3))


# --- require_that, require_a, require_broadcast, is_int -------------------------------


def test_require_that_formats_its_message_only_when_the_condition_fails():
    class Loud:
        def __format__(self, spec):
            raise AssertionError("formatted although the condition held")

    assert require_that(True, "never shown {}", Loud()) is None
    with pytest.raises(ValueError, match=r"^n must be positive, got -3 \(of 'x'\)$"):
        require_that(False, "n must be positive, got {} (of {!r})", -3, "x")
    with pytest.raises(ValueError, match=r"^params must be \{\}$"):
        require_that({"W": 1} == {}, "params must be {{}}")
    with pytest.raises(ValueError, match=r"^no mask$"):
        require_that([], "no mask")  # an empty sequence is a failed condition


def test_require_a_names_the_argument_the_kind_and_the_type_it_got():
    assert require_a("config", (1,), tuple) is None
    with pytest.raises(ValueError, match=r"^config must be a tuple, got dict$"):
        require_a("config", {}, tuple)
    with pytest.raises(
        ValueError, match=r"^rng must be a numpy.random.Generator \(seeded\), got int$"
    ):
        require_a("rng", 0, np.random.Generator, "a numpy.random.Generator (seeded)")


def test_require_broadcast_returns_the_shape_or_raises_the_message():
    assert require_broadcast([(2, 1), (3,), ()], "never shown") == (2, 3)
    assert require_broadcast([], "never shown") == ()
    with pytest.raises(
        ValueError, match=r"^shapes do not broadcast: \[\(2,\), \(4,\)\]$"
    ):
        require_broadcast([(2,), (4,)], "shapes do not broadcast: {}", [(2,), (4,)])


def test_require_like_converts_nothing_and_names_the_shape_expected():
    ids = np.zeros((2, 5), dtype=np.int64)
    assert require_like("targets", ids, (2, 5), "ids") is ids  # still integers
    message = r"^targets must have the shape of ids, \(2, 5\), got \(5, 2\)$"
    with pytest.raises(ValueError, match=message):
        require_like("targets", ids.T, [2, 5], "ids")


@pytest.mark.parametrize("n, verdict", [
    (3, True), (np.int64(3), True), (np.uint8(0), True), (-1, True),
    (True, False), (np.bool_(False), False), (3.0, False), ("3", False), (None, False),
])
def test_is_int_accepts_integers_and_rejects_booleans(n, verdict):
    assert is_int(n) is verdict
