"""Tests of attncourse.kit.exercises: every learner checker passes a right answer and
names the property a wrong one fails, with the likely fix; no checker uses a bare
``assert``, so they hold under ``python -O``."""

import ast
import contextlib
import io
import json
import math
import pathlib
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import attncourse as ac
from attncourse import kit
from attncourse.kit.cost import model_parameter_count
from attncourse.kit.faults import attention as fa
from attncourse.kit.faults import embedding as fe
from attncourse.kit.faults import loss as fl
from attncourse.kit.faults import block as fb
from attncourse.kit.faults import layernorm as fln
from attncourse.layers.attention import (
    causal_attention,
    causal_mask,
    combine_masks,
    key_padding_mask,
)
from attncourse.layers.embedding import embedding_backward, embedding_forward, one_hot
from attncourse.layers.block import residual_backward
from attncourse.layers.layernorm import layernorm_backward
from attncourse.loss import cross_entropy, cross_entropy_backward, cross_entropy_forward
from attncourse.model import count_parameters, init_model
from attncourse.softmax import softmax, softmax_jacobian
from attncourse.kit import CheckFailed
from attncourse.kit import exercises as ex
from attncourse.kit.exercises import (
    check_attention_mask,
    check_causal_attention,
    check_cross_entropy,
    check_embedding_backward,
    check_one_hot,
    check_softmax_jacobian,
)
from attncourse.kit.exercises.attention import _mask_cases
from attncourse.kit.exercises.kvcache import _real_caches

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "chapters" / "04_causality_heads_positions.ipynb"
VERIFY = ROOT / "src" / "attncourse" / "kit"


def failure(checker, fn, **kwargs):
    """The CheckFailed a checker raises for fn; fail the test if it raises none."""
    with pytest.raises(CheckFailed) as info:
        checker(fn, **kwargs)
    assert info.value.fix, "every learner-checker failure suggests a fix"
    return info.value


# --- the rules every checker follows --------------------------------------------------


def test_no_bare_assert_in_the_verification_package():
    # a bare assert disappears under python -O; every check raises CheckFailed
    # explicitly. The learner checkers are a package: its modules are searched too
    paths = sorted(VERIFY.rglob("*.py"))
    assert VERIFY / "exercises" / "_base.py" in paths
    for path in paths:
        tree = ast.parse(path.read_text(), filename=str(path))
        asserts = [
            node.lineno for node in ast.walk(tree) if isinstance(node, ast.Assert)
        ]
        where = path.relative_to(VERIFY)
        assert asserts == [], f"{where} has bare asserts at lines {asserts}"


# A stub that returns zeros (or another plausible placeholder) fails a named property.
WRONG_PLACEHOLDERS = [
    (
        "check_one_hot",
        lambda ids, n: np.zeros(np.shape(ids) + (n,)),
        "one 1 per vector",
    ),
    (
        "check_embedding_backward",
        lambda dX, ids, n: np.zeros((n, np.shape(dX)[-1])),
        "a token seen once gets its gradient row",
    ),
    (
        "check_softmax_jacobian",
        lambda z: np.zeros((len(z), len(z))),
        "matches central differences of softmax",
    ),
    (
        "check_cross_entropy",
        lambda Z, y: (0.0, np.zeros(np.shape(Z))),
        "loss is the mean of -log p_y",
    ),
    (
        "check_causal_attention",
        lambda q, k, v, query_offset=0, dropout=None: (
            np.zeros(q.shape[:-1] + v.shape[-1:]),
            np.zeros(q.shape[:-1] + k.shape[-2:-1]),
        ),
        "rows summing to one",
    ),
    (
        "check_attention_mask",
        lambda T, kv: np.zeros((len(kv), T, T), dtype=bool),
        "a real query reads its own key",
    ),
    (
        "check_layernorm_backward",
        lambda dY, x_hat, inv_std, gamma: np.zeros(np.shape(dY)),
        "matches central differences of LayerNorm",
    ),
    (
        "check_block_residual",
        lambda dY, d_sublayer: np.zeros(np.shape(dY)),
        "the identity path is added",
    ),
    ("check_parameter_count", lambda config: 0, "the position table"),
    ("check_clip_by_global_norm", lambda grads, max_norm: (grads, 0.0), "the norm"),
    ("check_merge_states", lambda a, b: b, "merged halves equal the whole"),
    (
        "check_head_backward",
        lambda X, Wq, Wk, Wv, G: {
            n: np.zeros((1,)) for n in ("dQ", "dK", "dV", "dW_Q", "dW_K", "dW_V", "dX")
        },
        "returns the seven gradients",
    ),
    ("check_positions_backward", lambda dY, T: (0, 0), "shapes"),
    (
        "check_query_offset",
        lambda q, k, v, query_offset=0, dropout=None: causal_attention(
            q, k, v, max(query_offset, 0)
        ),
        "bad offsets raise ValueError",
    ),
    (
        "check_cache_memory",
        lambda L, H, D, t, b: 0,
        "equals the nbytes of a real cache",
    ),
]


@pytest.mark.parametrize(
    "name, placeholder, property",
    WRONG_PLACEHOLDERS,
    ids=[name for name, *_ in WRONG_PLACEHOLDERS],
)
def test_a_placeholder_answer_fails_a_named_property(name, placeholder, property):
    assert failure(getattr(ex, name), placeholder).property == property


def test_split_heads_returning_its_input_fails_the_shape():
    with pytest.raises(CheckFailed) as info:
        ex.check_split_merge(lambda Y, h: Y, merge_heads)
    assert info.value.property == "split: shape"


def unfinished(*args, **kwargs):
    raise NotImplementedError("your code here")


def assert_reported_unfinished(checker, *fns, name="unfinished"):
    """A stub is reported in one printed line and the checker returns None: no
    exception."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        result = checker(*fns)
    assert result is None
    assert printed.getvalue() == ex.UNFINISHED.format(name=name) + "\n"
    assert printed.getvalue().startswith(f"Exercise not done yet: {name} raises ")


LEARNER_CHECKERS = [name for name in ex.__all__ if name.startswith("check_")]


@pytest.mark.parametrize("name", LEARNER_CHECKERS)
def test_every_learner_checker_reports_a_stub_in_one_line(name):
    checker = getattr(ex, name)
    n_args = 2 if name == "check_split_merge" else 1
    assert_reported_unfinished(checker, *[unfinished] * n_args)


def test_the_notice_names_the_function_that_raised():
    def my_merge_heads(O):
        raise NotImplementedError("your code here")

    def my_top_k(logits, k):
        return my_helper(logits, k)

    def my_helper(logits, k):
        raise NotImplementedError

    assert_reported_unfinished(
        ex.check_split_merge, split_heads, my_merge_heads, name="my_merge_heads"
    )
    assert_reported_unfinished(ex.check_top_k, my_top_k, name="my_helper")


def test_a_finished_answer_prints_nothing_and_its_offset_refusal_is_no_stub():
    # Chapter 3's contract: query_offset != 0 raises NotImplementedError; that is an
    # answer, not an unfinished exercise
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        result = check_causal_attention(causal_attention)
    assert result[-1] == "offset" and printed.getvalue() == ""


@pytest.mark.parametrize(
    "checker, fn, property",
    [
        (check_one_hot, lambda ids, n: 1 / 0, "shape"),
        (check_embedding_backward, lambda dX, ids, n: dX[ids], "shape"),
        (check_softmax_jacobian, lambda z: z.missing, "shape (n, n)"),
        (check_cross_entropy, lambda Z, y: Z[y, y, y], "loss is a scalar"),
        (
            check_causal_attention,
            lambda q, k, v, query_offset=0, dropout=None: q @ k,
            "shape",
        ),
        (check_attention_mask, lambda T, kv: kv[T + 10], "shape and type"),
        (ex.check_layernorm_backward, lambda *args: args[0].missing, "shape"),
        (ex.check_block_residual, lambda *args: args[0].missing, "shape"),
        (ex.check_parameter_count, lambda config: config.vocabulary, "a whole number"),
    ],
)
def test_any_other_exception_is_reported_as_the_property_being_checked(
    checker, fn, property
):
    error = failure(checker, fn)
    assert error.property == property
    assert error.__cause__ is not None
    assert f"raised {type(error.__cause__).__name__}" in error.detail


def test_a_result_that_is_not_an_array_of_numbers_is_named():
    error = failure(check_one_hot, lambda ids, n: [[1, 2], [3]])
    assert error.property == "shape" and "not an array of numbers" in error.detail
    error = failure(check_cross_entropy, lambda Z, y: 0.0)
    assert error.property == "loss is a scalar" and "pair (loss, dZ)" in error.detail


# --- Chapter 1: one-hot vectors and the embedding backward ----------------------------


def package_embedding_backward(dX, ids, n_vocab):
    """The package's layer pair, through the learner's signature fn(dX, ids, n_vocab) ->
    dE."""
    params = {"E": np.zeros((n_vocab, np.shape(dX)[-1]))}
    _, saved = embedding_forward(params, ids)
    return embedding_backward(params, saved, dX)[0]["E"]


def test_one_hot_and_embedding_checkers_pass_the_reference_and_name_failures():
    assert check_one_hot(one_hot) == ex.ONE_HOT_PROPERTIES
    assert len(check_one_hot(one_hot)) == 7
    assert len(check_embedding_backward(package_embedding_backward)) == 6
    with pytest.raises(CheckFailed, match="^shape"):
        check_one_hot(lambda ids, n: one_hot(ids, n)[..., :-1])
    with pytest.raises(CheckFailed, match="^the 1 sits at the id"):
        check_one_hot(lambda ids, n: one_hot((np.asarray(ids) + 1) % n, n))
    with pytest.raises(CheckFailed, match="^rejects ids out of range"):
        check_one_hot(lambda ids, n: np.eye(n + 1)[np.asarray(ids)][..., :n])
    with pytest.raises(CheckFailed, match="^entries are 0 or 1"):
        check_one_hot(
            lambda ids, n: 2 * one_hot(ids, n) - one_hot((np.asarray(ids) + 1) % n, n)
        )
    with pytest.raises(CheckFailed, match="^shape"):
        check_embedding_backward(
            lambda dX, ids, n: package_embedding_backward(dX, ids, n).T
        )
    with pytest.raises(CheckFailed, match="^batched ids"):
        check_embedding_backward(
            lambda dX, ids, n: package_embedding_backward(
                dX[..., 0, :] if dX.ndim == 3 else dX,
                ids[..., 0] if ids.ndim == 2 else ids,
                n,
            )
        )


def test_one_hot_must_be_a_float_array():
    """Chapter 1 asks for a float array: an integer or boolean one-hot is named."""
    for dtype in (int, bool):
        error = failure(check_one_hot, lambda i, n, t=dtype: one_hot(i, n).astype(t))
        assert error.property == "a float array"
        assert f"dtype {np.dtype(dtype)}" in error.detail and "astype" in error.fix
    assert check_one_hot(lambda ids, n: one_hot(ids, n).astype(np.float32))


def test_one_hot_and_embedding_checkers_want_their_inputs_unchanged():
    def clobbers_ids(ids, n_vocab):
        out = one_hot(ids, n_vocab)
        ids[...] = 0
        return out

    def scales_dX(dX, ids, n_vocab):
        dE = package_embedding_backward(dX, ids, n_vocab)
        dX *= 2.0
        return dE

    error = failure(check_one_hot, clobbers_ids)
    assert error.property == "inputs unchanged" and "ids" in error.detail
    error = failure(check_embedding_backward, scales_dX)
    assert error.property == "inputs unchanged" and "the dX" in error.detail


def test_one_hot_must_reject_a_negative_id():
    # numpy reads id -1 as the last token: a one-hot that checks only the upper bound
    # passes it
    def upper_bound_only(ids, n_vocab):
        ids = np.asarray(ids)
        if np.any(ids >= n_vocab):
            raise ValueError("id too large")
        return np.eye(n_vocab)[ids]

    assert upper_bound_only([-1], 6)[0, 5] == 1.0  # the silent mistake
    error = failure(check_one_hot, upper_bound_only)
    assert error.property == "rejects ids out of range"
    assert "id -1 with n_vocab=6 raised no ValueError" in error.detail
    assert "last token" in error.detail and "negative ids included" in error.fix


def test_one_hot_must_reject_a_too_large_id_with_value_error():
    # IndexError, not ValueError
    error = failure(check_one_hot, lambda ids, n: np.eye(n)[ids])
    assert error.property == "rejects ids out of range"
    assert error.detail == "id 6 with n_vocab=6 raised IndexError, not ValueError"


@pytest.mark.parametrize(
    "fault, property",
    [
        (fe.embedding_backward_overwrite, "repeated tokens add their gradients"),
        (fe.embedding_backward_fancy_iadd, "repeated tokens add their gradients"),
    ],
)
def test_embedding_checker_catches_the_planted_faults(fault, property):
    error = failure(check_embedding_backward, fe._learner_signature(fault))
    assert error.property == property
    assert "np.add.at" in error.fix


def test_embedding_checker_says_when_the_gradient_is_off_by_a_sign():
    error = failure(
        check_embedding_backward,
        lambda dX, ids, n: -package_embedding_backward(dX, ids, n),
    )
    assert error.property == "a token seen once gets its gradient row"
    assert "off by a sign" in error.detail


def test_embedding_checker_wants_exact_zero_rows_for_unused_tokens():
    def leaky(dX, ids, n):
        dE = package_embedding_backward(dX, ids, n)
        return dE + 1e-300  # every row non-zero

    assert (
        failure(check_embedding_backward, leaky).property
        == "unused tokens get zero rows"
    )


def test_embedding_checker_names_a_wrong_single_row():
    def wrong_row(dX, ids, n):
        dE = package_embedding_backward(dX, ids, n)
        dE[1] *= 2.0
        return dE

    assert (
        failure(check_embedding_backward, wrong_row).property
        == "a token seen once gets its gradient row"
    )


# --- Chapter 2: the softmax Jacobian and cross-entropy --------------------------------


def test_softmax_jacobian_checker_passes_the_reference_and_names_failures():
    assert len(check_softmax_jacobian(softmax_jacobian)) == 5
    numerator_only = lambda z: np.diag(softmax(z))  # noqa: E731
    with pytest.raises(CheckFailed, match="^rows sum to zero"):
        check_softmax_jacobian(numerator_only)
    with pytest.raises(CheckFailed, match="^shape"):
        check_softmax_jacobian(lambda z: softmax(z))
    with pytest.raises(CheckFailed, match="^matches central differences"):
        check_softmax_jacobian(lambda z: 2 * softmax_jacobian(z))
    naive = lambda z: (lambda p: np.diag(p) - np.outer(p, p))(
        np.exp(z) / np.exp(z).sum()
    )  # noqa: E731
    with (
        np.errstate(all="ignore"),
        pytest.raises(CheckFailed, match="^finite for extreme logits"),
    ):
        check_softmax_jacobian(naive)


def test_softmax_jacobian_checker_names_asymmetry_and_a_sign():
    asymmetric = lambda z: (
        softmax_jacobian(z) + np.triu(np.ones((len(z), len(z))), 1) * 1e-3
    )  # noqa: E731
    assert failure(check_softmax_jacobian, asymmetric).property == "symmetric"
    error = failure(check_softmax_jacobian, lambda z: -softmax_jacobian(z))
    assert error.property == "matches central differences of softmax"
    assert "off by a sign" in error.detail
    error = failure(check_softmax_jacobian, lambda z: 2 * softmax_jacobian(z))
    assert "off by a sign" not in error.detail


def test_softmax_jacobian_checker_wants_zeros_for_a_saturated_softmax():
    # symmetric, rows sum to zero, but not 0 when the softmax saturates
    def tiny_residue(z):
        n = len(z)
        return softmax_jacobian(z) + (np.max(np.abs(z)) > 100) * 1e-200 * (
            np.eye(n) - 1.0 / n
        )

    error = failure(check_softmax_jacobian, tiny_residue)
    assert error.property == "finite for extreme logits" and "saturated" in error.detail


def reference_cross_entropy(Z, y):
    loss, saved = cross_entropy_forward({}, Z, targets=y)
    return loss, cross_entropy_backward({}, saved, 1.0)[1]


def test_cross_entropy_checker_passes_the_reference_and_names_failures():
    assert len(check_cross_entropy(reference_cross_entropy)) == 7
    dZ = lambda Z, y: reference_cross_entropy(Z, y)[1]  # noqa: E731
    with pytest.raises(CheckFailed, match="^loss is the mean of -log p_y"):
        check_cross_entropy(lambda Z, y: (cross_entropy(Z, y) + 1.0, dZ(Z, y)))
    with pytest.raises(CheckFailed, match="^mean over the batch"):
        check_cross_entropy(lambda Z, y: (cross_entropy(Z, y) * y.size / 4, dZ(Z, y)))
    with pytest.raises(CheckFailed, match="^gradient has the shape of Z"):
        check_cross_entropy(lambda Z, y: (cross_entropy(Z, y), dZ(Z, y).T))
    with pytest.raises(CheckFailed, match="^gradient rows sum to zero"):
        check_cross_entropy(lambda Z, y: (cross_entropy(Z, y), softmax(Z) / y.size))
    with pytest.raises(CheckFailed, match="^gradient matches central differences"):
        check_cross_entropy(lambda Z, y: (cross_entropy(Z, y), -dZ(Z, y)))
    with pytest.raises(CheckFailed, match="^loss is a scalar"):
        check_cross_entropy(
            lambda Z, y: (np.full(len(y), cross_entropy(Z, y)), dZ(Z, y))
        )


def test_cross_entropy_checker_says_off_by_a_sign_and_summed_instead_of_mean():
    wrong_sign = lambda Z, y: (
        cross_entropy(Z, y),
        fl.cross_entropy_backward_wrong_sign(  # noqa: E731
            {}, cross_entropy_forward({}, Z, targets=y)[1], 1.0
        )[1],
    )
    error = failure(check_cross_entropy, wrong_sign)
    assert error.property == "gradient matches central differences of the loss"
    assert "off by a sign" in error.detail and "p - onehot(y)" in error.fix
    summed = lambda Z, y: (
        cross_entropy(Z, y),
        fl.cross_entropy_backward_sum(  # noqa: E731
            {}, cross_entropy_forward({}, Z, targets=y)[1], 1.0
        )[1],
    )
    error = failure(check_cross_entropy, summed)
    assert (
        "B = 4 times the gradient of the mean" in error.detail and "divide" in error.fix
    )
    other = lambda Z, y: (  # noqa: E731
        cross_entropy(Z, y),
        0.5 * reference_cross_entropy(Z, y)[1],
    )
    error = failure(check_cross_entropy, other)
    assert "off by a sign" not in error.detail and "sign and the 1/B" in error.fix


def test_an_overflowing_loss_suggests_log_sum_exp():
    naive = lambda Z, y: (
        fl.cross_entropy_naive(Z, y),
        reference_cross_entropy(Z, y)[1],
    )  # noqa: E731
    with np.errstate(all="ignore"):
        error = failure(check_cross_entropy, naive)
    assert error.property == "finite for extreme logits"
    assert "log-sum-exp" in error.fix and "logsumexp" in error.fix

    # subtracts the maximum, then takes log of the probability
    def max_subtracted_only(Z, y):
        Z = np.asarray(Z, dtype=float)
        p = softmax(Z)
        return float(
            np.mean(-np.log(p[np.arange(len(y)), y]))
        ), reference_cross_entropy(Z, y)[1]

    with np.errstate(all="ignore"):
        error = failure(check_cross_entropy, max_subtracted_only)
    assert (
        error.property == "finite for extreme logits"
        and "(the loss overflows)" in error.detail
    )
    assert "subtracting the maximum alone" in error.fix

    def wrong_but_finite(Z, y):  # finite at extreme logits, but not the right value
        loss, dZ = reference_cross_entropy(Z, y)
        return (loss if np.max(np.abs(Z)) < 100 else 0.0), dZ

    error = failure(check_cross_entropy, wrong_but_finite)
    assert (
        error.property == "finite for extreme logits"
        and "average to 1000" in error.detail
    )


# --- Chapter 3: causal_attention ------------------------------------------------------

PROPERTIES = [
    "shape",
    "rows summing to one",
    "causality",
    "scaling",
    "dropout contract",
    "offset",
]


def make(
    mask="before",
    scale=True,
    renormalise=True,
    swap=False,
    dropout_mode="output",
    offset="raise",
    transpose="swapaxes",
    neg=-np.inf,
    output_factor=1.0,
):
    """Build a causal_attention with one chosen defect (defaults give a correct one)."""

    def fn(query, key, value, query_offset=0, dropout=None):
        if query_offset != 0:
            if offset == "raise":
                raise NotImplementedError("Chapter 10")
            if offset == "valueerror":
                raise ValueError("no offsets")
        d = query.shape[-1]
        key_T = np.swapaxes(key, -1, -2) if transpose == "swapaxes" else key.T
        S = query @ key_T  # (..., T, d) x (..., d, T) -> (..., T, T)
        if scale is True:
            S = S / math.sqrt(d)
        elif scale == "by_d":
            S = S / d
        T_q, T_k = S.shape[-2:]
        future = np.arange(T_k)[None, :] > np.arange(T_q)[:, None]
        if mask == "geq":
            future = np.arange(T_k)[None, :] >= np.arange(T_q)[:, None]
        if mask in ("before", "geq"):
            S = np.where(future, neg, S)
        P = np.exp(S - S.max(axis=-1, keepdims=True))
        P = P / P.sum(axis=-1, keepdims=True)
        if mask == "after":
            P = np.where(future, 0.0, P)
            if renormalise:
                P = P / P.sum(axis=-1, keepdims=True)
        used = P
        if dropout is not None:
            if dropout_mode == "output":
                used = dropout(P)
            elif dropout_mode == "returned":
                P = used = dropout(P)
            elif dropout_mode == "twice":
                dropout(P)
                used = dropout(P)
            elif dropout_mode == "ignored":
                used = P
            elif dropout_mode == "on scores":
                dropout(S)
                used = P
            elif dropout_mode == "result unused":
                dropout(P)
        out = output_factor * (used @ value)  # (..., T, T) x (..., T, r) -> (..., T, r)
        return (P, out) if swap else (out, P)

    return fn


def test_reference_and_a_correct_variant_pass():
    assert check_causal_attention(causal_attention) == PROPERTIES
    assert check_causal_attention(make()) == PROPERTIES
    # mathematically the same
    assert check_causal_attention(make(mask="after", renormalise=True)) == PROPERTIES
    # fills far below every score, even the scores near -7e4 the checker tries
    assert check_causal_attention(make(neg=-1e9)) == PROPERTIES
    assert check_causal_attention(make(neg=np.finfo(float).min)) == PROPERTIES


def test_a_finite_fill_above_large_scores_fails_causality():
    """exp(-1e4) is 0 for scores near 0, but scores near -7e4 put a -1e4 fill on top."""
    error = failure(check_causal_attention, make(neg=-1e4))
    assert error.property == "causality"
    assert "a finite fill such as -1e4" in error.detail and "-6.93e+04" in error.detail
    assert "boolean visible mask" in error.fix and "inf" not in error.fix


def test_causal_attention_and_query_offset_want_their_inputs_unchanged():
    def scales_query(query, key, value, query_offset=0, dropout=None):
        result = causal_attention(query, key, value, query_offset)
        query *= 2.0
        return result if dropout is None else (dropout(result[1]) @ value, result[1])

    error = failure(check_causal_attention, scales_query)
    assert error.property == "inputs unchanged" and "the query" in error.detail
    error = failure(ex.check_query_offset, scales_query)
    assert error.property == "inputs unchanged" and "the query" in error.detail


@pytest.mark.parametrize(
    "broken, prop",
    [
        (make(swap=True), "shape"),
        # .T also reverses the batch axes
        (make(transpose="T"), "shape"),
        (lambda q, k, v, query_offset=0, dropout=None: make()(q, k, v)[0], "shape"),
        (make(mask="after", renormalise=False), "rows summing to one"),
        (make(mask="none"), "causality"),
        # leaks a weight of about e^-100
        (make(neg=-100.0), "causality"),
        (make(scale=False), "scaling"),
        (make(scale="by_d"), "scaling"),
        (make(output_factor=2.0), "scaling"),
        (make(dropout_mode="returned"), "dropout contract"),
        (make(dropout_mode="ignored"), "dropout contract"),
        (make(dropout_mode="twice"), "dropout contract"),
        (make(dropout_mode="on scores"), "dropout contract"),
        (make(dropout_mode="result unused"), "dropout contract"),
        # no dropout argument
        (
            lambda q, k, v, query_offset=0: make()(q, k, v, query_offset),
            "dropout contract",
        ),
        (make(offset="ignore"), "offset"),
        (make(offset="valueerror"), "offset"),
    ],
)
def test_each_broken_variant_fails_with_the_right_property(broken, prop):
    with pytest.raises(CheckFailed) as info:
        check_causal_attention(broken)
    message = str(info.value)
    assert message.startswith(prop + ":"), message
    assert info.value.property == prop and info.value.fix
    assert prop in PROPERTIES


@pytest.mark.parametrize(
    "broken, words",
    [
        (make(scale=False), "without the 1/sqrt(d) factor"),
        (make(scale="by_d"), "differ from the softmax"),
        (make(output_factor=2.0), "output must equal probabilities @ value"),
        (make(dropout_mode="returned"), "undropped"),
        (make(dropout_mode="ignored"), "called exactly once, it was called 0 times"),
        (make(dropout_mode="twice"), "called 2 times"),
        (
            make(dropout_mode="on scores"),
            "applied to the (masked, scaled) probabilities",
        ),
        (
            make(dropout_mode="result unused"),
            "output must be dropout(probabilities) @ value",
        ),
        (make(offset="ignore"), "returned a result that is not the last 3 rows"),
        (make(offset="valueerror"), "raised ValueError: no offsets"),
        (make(neg=-100.0), "gives weight"),
        (make(mask="after", renormalise=False), "sums to"),
        (
            make(swap=True),
            "expected output (5, 4) and probabilities (5, 5), got (5, 5) and (5, 4)",
        ),
        (
            make(transpose="T"),
            "fn(query (2, 5, 3), key (2, 5, 3), value (2, 5, 4)) raised ValueError",
        ),
        (
            lambda q, k, v, query_offset=0, dropout=None: tuple(
                x.reshape(-1, x.shape[-1]) for x in make()(q, k, v)
            ),
            "with a batch dimension",
        ),  # flattens the batch axis into the positions
    ],
)
def test_each_broken_variant_gets_its_own_detail(broken, words):
    assert words in str(failure(check_causal_attention, broken))


def test_a_query_that_sees_no_key_is_named():
    # the >= mask hides the diagonal: query 0 has no key left
    with np.errstate(invalid="ignore"):  # -inf - (-inf) in row 0
        error = failure(check_causal_attention, make(mask="geq"))
    assert error.property == "rows summing to one"
    assert error.detail.startswith(
        "query 0 sees no key: its row of probabilities is NaN"
    )
    assert "nan at (0, 0)" not in str(error) and "j > i" in error.fix

    def geq_zero_rows(query, key, value, query_offset=0, dropout=None):
        if query_offset != 0:
            raise NotImplementedError
        # softmax gives the empty row weight 0
        O, A = fa.causal_attention_geq(query, key, value)
        return (O if dropout is None else dropout(A) @ value), A

    error = failure(check_causal_attention, geq_zero_rows)
    assert error.detail.startswith(
        "query 0 sees no key: its row of probabilities is all zero"
    )


def test_a_mask_applied_after_the_softmax_changes_earlier_outputs():
    # the weights of future keys are zeroed and the rows renormalised ... except the
    # denominator of row i is then right, so only a variant that keeps the future in the
    # output is caught here
    def future_in_the_output(query, key, value, query_offset=0, dropout=None):
        if query_offset != 0:
            raise NotImplementedError
        P = causal_attention(query, key, value)[1]
        everything = ac.attention_forward(query, key, value)[0]  # reads the future
        return everything if dropout is None else dropout(P) @ value, P

    error = failure(check_causal_attention, future_in_the_output)
    assert (
        error.property == "causality"
        and "changed when only keys and values" in error.detail
    )


@given(st.integers(0, 2**32 - 1))
def test_checker_is_stable_over_seeds(seed):
    assert check_causal_attention(causal_attention, seed=seed) == PROPERTIES
    with pytest.raises(CheckFailed, match="^causality:"):
        check_causal_attention(make(mask="none"), seed=seed)


def test_the_planted_causal_faults_fail_the_checker():
    for fault, prop in (
        (fa.causal_attention_geq, "rows summing to one"),
        (fa.causal_attention_mask_after_softmax, "rows summing to one"),
    ):

        def attend(query, key, value, query_offset=0, dropout=None, fault=fault):
            if query_offset != 0:
                raise NotImplementedError
            O, A = fault(query, key, value)
            return (O if dropout is None else dropout(A) @ value), A

        assert failure(check_causal_attention, attend).property == prop


# --- Chapter 4: the combined mask -----------------------------------------------------


def reference_mask(T, key_valid):
    return np.tril(np.ones((T, T), dtype=bool)) & key_valid[:, None, :]


def combined(T, key_valid):
    return combine_masks(causal_mask(T, T), key_padding_mask(key_valid, T))


def verdict(mask_fn):
    try:
        return check_attention_mask(mask_fn)
    except CheckFailed as err:
        return str(err)


def test_mask_checker_accepts_correct_masks():
    assert verdict(reference_mask) == "check_attention_mask: all 5 properties hold"
    assert (
        verdict(lambda T, kv: combined(T, kv))
        == "check_attention_mask: all 5 properties hold"
    )


@pytest.mark.parametrize(
    "mask_fn, first_words",
    [
        (lambda T, kv: reference_mask(T, kv)[:, :, :-1], "shape and type"),
        (lambda T, kv: reference_mask(T, kv).astype(int), "shape and type"),
        (lambda T, kv: reference_mask(T, kv)[0], "shape and type"),
        (
            lambda T, kv: np.broadcast_to(kv[:, None, :], (len(kv), T, T)),
            "no query reads a future key",
        ),
        (
            lambda T, kv: combine_masks(fa.causal_mask_geq(T, T), kv[:, None, :]),
            "a real query reads its own key",
        ),
        (
            lambda T, kv: np.tril(np.ones((T, T), dtype=bool)) & kv[:, :, None],
            "padded keys are hidden",
        ),
        (
            lambda T, kv: np.broadcast_to(
                np.tril(np.ones((T, T), dtype=bool)), (len(kv), T, T)
            ),
            "padded keys are hidden",
        ),
        (
            lambda T, kv: np.eye(T, dtype=bool) & kv[:, None, :],
            "real past keys stay visible",
        ),
        (
            lambda T, kv: np.zeros((len(kv), T, T), dtype=bool),
            "a real query reads its own key",
        ),
    ],
)
def test_mask_checker_names_the_failed_property(mask_fn, first_words):
    assert verdict(mask_fn).startswith(first_words)


def test_mask_checker_message_shows_the_key_valid_batch_it_used():
    message = verdict(
        lambda T, kv: np.tril(np.ones((T, T), dtype=bool)) & kv[:, :, None]
    )
    assert message.startswith(
        "padded keys are hidden from every query: query 2 of sequence 0 may read "
        "padded key 0 (key_valid = [[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]])"
    )
    assert "key_valid[:, None, :]" in message  # the likely fix


# The probe batches, in order: left padding with an all-padding sequence, right padding,
# an irregular pattern. A mask wrong on one of them only is caught there, and the
# message shows it.
CASES = _mask_cases(0)


def shown(case):
    return f"(key_valid = {case.astype(int).tolist()})"


def test_a_mask_wrong_only_for_a_sequence_of_padding_is_caught_on_the_first_batch():
    def reads_itself_when_empty(T, kv):
        return reference_mask(T, kv) | (
            np.eye(T, dtype=bool) & ~kv.any(axis=-1)[:, None, None]
        )

    message = verdict(reads_itself_when_empty)
    assert message.startswith(
        "padded keys are hidden from every query: query 0 of sequence 2"
    )
    assert shown(CASES[0]) in message


def test_a_mask_that_assumes_left_padding_is_caught_on_the_second_batch():
    def assumes_left_padding(T, kv):
        lengths = kv.sum(axis=-1)
        return reference_mask(
            T, ac.layers.attention.key_valid_from_lengths(lengths, T, side="left")
        )

    message = verdict(assumes_left_padding)
    assert shown(CASES[1]) in message and shown(CASES[0]) not in message


def test_a_mask_that_assumes_padding_at_one_end_is_caught_on_the_third_batch():
    def padding_at_one_end(T, kv):
        lengths = kv.sum(axis=-1)
        sides = ["left" if row[-1] else "right" for row in kv]
        rebuilt = np.array(
            [
                ac.layers.attention.key_valid_from_lengths([n], T, side=s)[0]
                for n, s in zip(lengths, sides)
            ]
        )
        return reference_mask(T, rebuilt)

    message = verdict(padding_at_one_end)
    assert shown(CASES[2]) in message


def test_a_mask_with_a_fixed_length_is_caught_on_the_second_batch():
    message = verdict(lambda T, kv: reference_mask(5, kv[:, :5]))
    assert shown(CASES[1]) in message


def test_the_mask_checker_names_a_function_that_writes_into_key_valid():
    def scribbles(T, kv):
        visible = reference_mask(T, kv)
        kv[:] = True  # a careless learner overwrites its input
        return visible

    error = failure(check_attention_mask, scribbles)
    assert error.property == "inputs unchanged" and "key_valid" in error.detail


def test_the_chapter_solution_passes_the_mask_checker():
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    solution = next(
        "".join(c["source"])
        for c in cells
        if c["cell_type"] == "markdown"
        and "```{solution} ex-ch4-mask" in "".join(c["source"])
    )
    code = re.search(r"```python\n(.*?)```", solution, re.S).group(1)
    namespace = {"np": np, "ac": ac, "kit": kit}
    exec(code, namespace)  # defines my_attention_mask and prints the checker's verdict
    assert (
        verdict(namespace["my_attention_mask"])
        == "check_attention_mask: all 5 properties hold"
    )


# --- Chapter 5: the LayerNorm backward and the residual -------------------------------


def package_layernorm_dx(dY, x_hat, inv_std, gamma):
    """The package's backward, as the learner's signature (X: read for its shape)."""
    params = {"gamma": gamma, "beta": np.zeros_like(gamma)}
    saved = {"X": x_hat, "x_hat": x_hat, "inv_std": inv_std}
    return layernorm_backward(params, saved, dY)[1]


def compact_dx(
    dY, x_hat, inv_std, gamma, *, mean_term=True, variance_term=True, gain=True
):
    """The compact formula, with each of its parts optional (wrong answers drop one)."""
    g = dY * gamma if gain else dY
    dX = g
    if mean_term:
        dX = dX - g.mean(axis=-1, keepdims=True)
    if variance_term:
        dX = dX - x_hat * np.mean(g * x_hat, axis=-1, keepdims=True)
    return dX * inv_std


def test_layernorm_checker_passes_the_package_and_the_compact_formula():
    properties = (
        "shape",
        "rows of dX sum to zero",
        "dX orthogonal to x_hat",
        "matches central differences of LayerNorm",
    )
    assert ex.check_layernorm_backward(package_layernorm_dx) == properties
    assert ex.check_layernorm_backward(compact_dx) == properties
    for seed in range(3):
        assert ex.check_layernorm_backward(compact_dx, seed=seed) == properties


@pytest.mark.parametrize(
    "wrong, property, words",
    [
        (
            lambda dY, x_hat, s, gamma: compact_dx(dY, x_hat, s, gamma)[..., :-1],
            "shape",
            "expected the shape of dY, (2, 3, 5)",
        ),
        (
            lambda dY, x_hat, s, gamma: compact_dx(dY, x_hat, s, gamma).reshape(-1, 5),
            "shape",
            "got (6, 5)",
        ),
        (
            lambda *a: compact_dx(*a, mean_term=False),
            "rows of dX sum to zero",
            "subtract the row mean of g",
        ),
        (
            lambda *a: compact_dx(*a, variance_term=False),
            "dX orthogonal to x_hat",
            "x_hat * mean(g * x_hat)",
        ),
        (
            lambda *a: compact_dx(*a, gain=False),
            "matches central differences of LayerNorm",
            "g = dY * gamma",
        ),
        (
            lambda dY, x_hat, s, gamma: compact_dx(dY, x_hat, 1.0, gamma),
            "matches central differences of LayerNorm",
            "inv_std",
        ),
    ],
)
def test_layernorm_checker_names_the_failed_property(wrong, property, words):
    error = failure(ex.check_layernorm_backward, wrong)
    assert error.property == property
    assert words in str(error)


def test_layernorm_checker_rejects_the_planted_backward_faults():
    def as_learner(backward):
        def fn(dY, x_hat, inv_std, gamma):
            params = {"gamma": gamma, "beta": np.zeros_like(gamma)}
            saved = {"X": x_hat, "x_hat": x_hat, "inv_std": inv_std}
            return backward(params, saved, dY)[1]

        return fn

    for backward, property in (
        (fln.layernorm_backward_no_mean_term, "rows of dX sum to zero"),
        (fln.layernorm_backward_no_variance_term, "dX orthogonal to x_hat"),
    ):
        error = failure(ex.check_layernorm_backward, as_learner(backward))
        assert error.property == property


def test_block_residual_checker_passes_the_package():
    assert ex.check_block_residual(residual_backward) == (
        "shape",
        "inputs unchanged",
        "the identity path is added",
        "the identity path is added once",
        "the sublayer path is added",
        "matches central differences of y = x + f(x)",
    )
    assert ex.check_block_residual(lambda dY, d_sublayer: d_sublayer + dY, seed=3)


@pytest.mark.parametrize(
    "wrong, property, words",
    [
        (
            lambda dY, d: (dY + d).T,
            "shape",
            "expected the shape of x, (4, 3), got (3, 4)",
        ),
        (
            fb.residual_backward_dropped,
            "the identity path is added",
            "only the sublayer path reaches x",
        ),
        (
            fb.residual_backward_doubled,
            "the identity path is added once",
            "counted twice",
        ),
        (
            lambda dY, d: 0.5 * dY + d,
            "the identity path is added once",
            "differs from dY",
        ),
        (
            lambda dY, d: np.asarray(dY, dtype=float),
            "the sublayer path is added",
            "fn(0, d_sublayer) differs from d_sublayer",
        ),
        (
            lambda dY, d: dY + d + dY * d,
            "matches central differences of y = x + f(x)",
            "sum the two paths and nothing else",
        ),
    ],
)
def test_block_residual_checker_names_the_failed_property(wrong, property, words):
    error = failure(ex.check_block_residual, wrong)
    assert error.property == property
    assert words in str(error)


# --- Chapter 6: the parameter count --------------------------------------------------


def without(*terms):
    """A parameter count that leaves out the named terms (each a plausible slip)."""

    def fn(config):
        n, D, L, F = config.n_vocab, config.D, config.layers, config.ratio * config.D
        removed = {
            "positions": config.T_max * D,
            "mlp biases": L * (F + D),
            "block norms": L * 4 * D,
            "final norm": 2 * D,
            "unembedding": 0 if config.tied else D * n,
            "tied twice": -D * n if config.tied else 0,
            "ratio 4": L * (2 * D * F + F) - L * (2 * D * 4 * D + 4 * D),
            "W_O": L * D * D,
            # (D, d) per matrix instead of (D, H d)
            "heads": L * 4 * D * (D - config.d),
        }
        return model_parameter_count(config) - sum(removed[t] for t in terms)

    return fn


def test_parameter_count_checker_passes_the_closed_form():
    properties = ex.check_parameter_count(model_parameter_count)
    assert properties == ex.PARAMETER_COUNT_PROPERTIES
    assert len(ex.PARAMETER_COUNT_PROPERTIES) == 8
    # the learner may count the arrays of a fresh model instead
    assert ex.check_parameter_count(lambda c: count_parameters(init_model(c)))


@pytest.mark.parametrize(
    "terms, property, words",
    [
        (("positions",), "the position table", "add the learned positions P"),
        (
            ("unembedding",),
            "the token table and the unembedding",
            "add the unembedding U",
        ),
        (("tied twice",), "tied: one table", "count E once"),
        (("heads",), "independent of the number of heads", "H d = H r = D"),
        (("mlp biases",), "one block", "add the MLP biases"),
        (("block norms",), "one block", "add the two LayerNorms of each block"),
        (("block norms", "final norm"), "one block", "add the two LayerNorms"),
        (("W_O",), "one block", "W_O"),
        (("ratio 4",), "the MLP width", "use config.ratio"),
        (("final norm",), "the total", "add the final LayerNorm"),
    ],
)
def test_parameter_count_checker_names_each_forgotten_term(terms, property, words):
    error = failure(ex.check_parameter_count, without(*terms))
    assert error.property == property
    assert words in str(error)


def test_parameter_count_checker_wants_a_whole_number():
    for wrong in (
        lambda c: float(model_parameter_count(c)),
        lambda c: True,
        lambda c: np.array([model_parameter_count(c)]),
    ):
        error = failure(ex.check_parameter_count, wrong)
        assert error.property == "a whole number" and "return an int" in error.fix
    assert ex.check_parameter_count(lambda c: np.int64(model_parameter_count(c)))


# --- check_tied_gradient --------------------------------------------------------------


def _tied_loss(params, ids, targets, *, config, keep="both"):
    import dataclasses

    from attncourse.model import model_loss

    untied = dataclasses.replace(config, tied=False)
    as_untied = dict(params, unembed={"W": params["embed"]["E"].T})
    loss, grads = model_loss(as_untied, ids, targets, config=untied)
    dU = grads.pop("unembed")["W"]  # (D, n_vocab)
    lookup = grads["embed"]["E"]
    grads["embed"] = {
        "E": {"both": lookup + dU.T, "lookup": lookup, "unembedding": dU.T}[keep]
    }
    return loss, grads


def test_check_tied_gradient_accepts_the_reference():
    from attncourse.kit.exercises import (
        TIED_GRADIENT_PROPERTIES,
        check_tied_gradient,
    )

    assert check_tied_gradient(_tied_loss) == TIED_GRADIENT_PROPERTIES


@pytest.mark.parametrize(
    "keep, fix",
    [
        ("lookup", "add the unembedding's gradient"),
        ("unembedding", "add the lookup's gradient"),
    ],
)
def test_check_tied_gradient_rejects_one_use_only(keep, fix):
    from attncourse.kit.exercises import check_tied_gradient

    with pytest.raises(CheckFailed) as info:
        check_tied_gradient(lambda *args, **kw: _tied_loss(*args, **kw, keep=keep))
    assert info.value.property == "the tied table: both uses, added"
    assert fix in info.value.fix


def test_check_tied_gradient_rejects_a_leftover_unembed_and_a_wrong_loss():
    from attncourse.kit.exercises import check_tied_gradient

    def leftover(params, ids, targets, *, config):
        loss, grads = _tied_loss(params, ids, targets, config=config)
        return loss, dict(grads, unembed={"W": params["embed"]["E"].T})

    with pytest.raises(CheckFailed) as info:
        check_tied_gradient(leftover)
    assert info.value.property == "the nesting of params"
    with pytest.raises(CheckFailed) as info:
        check_tied_gradient(lambda *a, **kw: (0.0, _tied_loss(*a, **kw)[1]))
    assert info.value.property == "the tied loss"


# --- check_top_k ----------------------------------------------------------------------


def _top_k_reference(logits, k):
    from attncourse.sample import probabilities

    return probabilities(logits, top_k=k)


def _top_k_not_renormalised(logits, k):
    P = _top_k_reference(logits, k)
    return np.where(P > 0, softmax(logits), 0.0)


def _top_k_threshold(logits, k):  # keeps all tokens tied with the k-th: too many
    kth = np.sort(logits, axis=-1)[..., -min(k, logits.shape[-1])][..., None]
    z = np.where(logits >= kth, logits, -np.inf)
    return softmax(z)


def _top_k_smallest(logits, k):  # the k least probable instead of the k most
    return _top_k_reference(-logits, k)


def _top_k_uniform(logits, k):  # the right tokens, equal weights
    kept = _top_k_reference(logits, k) > 0
    return kept / kept.sum(axis=-1, keepdims=True)


def _top_k_in_place(logits, k):
    P = _top_k_reference(logits, k)
    logits[P == 0] = -np.inf  # changes the caller's logits
    return P


@pytest.mark.parametrize(
    "fn, prop",
    [
        (lambda logits, k: np.zeros_like(logits), "keeps exactly k"),
        (_top_k_not_renormalised, "renormalised"),
        (_top_k_threshold, "ties: the lowest token id"),
        (_top_k_smallest, "the k most probable"),
        (_top_k_uniform, "in proportion to the softmax"),
        (_top_k_in_place, "input untouched"),
        (
            lambda logits, k: _top_k_reference(logits, k)[:, :-1],
            "returns probabilities",
        ),
        (lambda logits, k: _top_k_reference(logits, k)[0], "returns probabilities"),
        (
            lambda logits, k: _top_k_reference(logits, k) * np.nan,
            "returns probabilities",
        ),
        (lambda logits: logits, "returns probabilities"),  # the wrong signature
    ],
    ids=[
        "zeros",
        "not renormalised",
        "threshold",
        "smallest",
        "uniform",
        "in place",
        "short rows",
        "one row",
        "nan",
        "one argument",
    ],
)
def test_check_top_k_names_the_failed_property(fn, prop):
    from attncourse.kit.exercises import check_top_k

    with pytest.raises(CheckFailed) as info:
        check_top_k(fn)
    assert info.value.property == prop
    assert info.value.fix


def _top_k_argpartition(logits, k):
    """The k largest by np.argpartition: right on distinct logits, no order at ties."""
    k = min(k, logits.shape[-1])
    top = np.argpartition(-logits, k - 1, axis=-1)[..., :k]
    keep = np.zeros(logits.shape, dtype=bool)
    np.put_along_axis(keep, top, True, axis=-1)
    return softmax(np.where(keep, logits, -np.inf))


def test_check_top_k_tries_random_tied_rows_against_the_tie_rule():
    from attncourse.kit.exercises import check_top_k
    from attncourse.kit.exercises import sample as ex_sample

    error = failure(check_top_k, _top_k_argpartition)
    assert error.property == "ties: the lowest token id"
    assert "random rows with tied logits" in error.detail
    assert "argpartition" in error.fix and "kind='stable'" in error.fix
    # the one fixed tied row alone lets it through: the random rows are what catch it
    quiet = []
    original = ex_sample._random_ties
    ex_sample._random_ties = quiet.append
    try:
        assert check_top_k(_top_k_argpartition) == ex_sample.TOP_K_PROPERTIES
    finally:
        ex_sample._random_ties = original
    assert quiet == [_top_k_argpartition]


def test_check_top_k_accepts_the_reference_and_a_softmax_over_the_kept_logits():
    from attncourse.kit.exercises import TOP_K_PROPERTIES, check_top_k

    def learner(logits, k):  # another correct route: mask the logits, then softmax
        order = np.argsort(-logits, axis=-1, kind="stable")
        keep = np.zeros(logits.shape, dtype=bool)
        np.put_along_axis(keep, order[..., :k], True, axis=-1)
        return softmax(np.where(keep, logits, -np.inf))

    assert check_top_k(_top_k_reference) == TOP_K_PROPERTIES
    assert check_top_k(learner) == TOP_K_PROPERTIES


# --- Chapter 7: check_adamw_step ------------------------------------------------------


def _learner_adamw(params, grads, state, *, lr, betas, eps, weight_decay, mistake=None):
    """A learner's AdamW on a flat dict, with one optional mistake."""
    (b1, b2), t = betas, state["step"] + 1
    new, m, v = {}, {}, {}
    for k, p in params.items():
        g = grads[k] + (weight_decay * p if mistake == "l2" and p.ndim >= 2 else 0)
        m[k] = b1 * state["m"][k] + (1 - b1) * g
        v[k] = b2 * state["v"][k] + (1 - b2) * g * g
        if mistake == "v is g^2":
            v[k] = g * g
        m_hat = m[k] if mistake == "m uncorrected" else m[k] / (1 - b1**t)
        v_hat = v[k] / (1 - b2**t)
        if mistake == "eps inside":
            update = m_hat / np.sqrt(v_hat + eps)
        else:
            update = m_hat / (np.sqrt(v_hat) + eps)
        decays = {"l2": False, "no decay": False, "all": True}.get(mistake, p.ndim >= 2)
        new[k] = p - lr * (update + (weight_decay * p if decays else 0))
    return new, {"step": t, "m": m, "v": v}


def test_check_adamw_step_accepts_the_package_and_a_flat_loop():
    from attncourse.optim import adamw_step

    assert ex.check_adamw_step(adamw_step) == ex.ADAMW_STEP_PROPERTIES
    assert ex.check_adamw_step(_learner_adamw, seed=3) == ex.ADAMW_STEP_PROPERTIES


@pytest.mark.parametrize(
    "mistake, property, words",
    [
        ("m uncorrected", "bias correction", "uses m without the bias correction"),
        ("eps inside", "bias correction", "differs from p - lr m_hat"),
        ("v is g^2", "moment update", "after step 1, v differs"),
        ("l2", "decoupled weight decay", "the decay went into the gradient"),
        ("no decay", "decoupled weight decay", "moves W by a term"),
        ("all", "which parameters decay", "the bias b (1-D) is decayed"),
    ],
)
def test_check_adamw_step_names_each_planted_mistake(mistake, property, words):
    error = failure(
        ex.check_adamw_step, lambda *a, **kw: _learner_adamw(*a, **kw, mistake=mistake)
    )
    assert error.property == property
    assert words in error.detail


def test_check_adamw_step_names_in_place_updates_and_the_faults_of_the_registry():
    from attncourse.kit.faults import optim as fo

    error = failure(ex.check_adamw_step, fo.adamw_in_place)
    assert error.property == "purity" and error.detail.endswith("params and state")
    for fault, property in (
        ("adamw_no_bias_correction", "bias correction"),
        ("adamw_l2_in_gradient", "decoupled weight decay"),
        ("adamw_decays_gains", "which parameters decay"),
    ):
        assert failure(ex.check_adamw_step, getattr(fo, fault)).property == property


def test_check_adamw_step_catches_a_stub_returning_zeros():
    def zeros(params, grads, state, **hyper):
        z = {k: np.zeros_like(p) for k, p in params.items()}
        return z, {"step": state["step"] + 1, "m": z, "v": z}

    assert failure(ex.check_adamw_step, zeros).property == "moment update"
    error = failure(ex.check_adamw_step, lambda params, grads, state, **kw: params)
    assert error.property == "returns (params, state)"


def test_check_adamw_step_reports_a_stub_and_names_other_exceptions():
    assert_reported_unfinished(ex.check_adamw_step, unfinished)
    error = failure(ex.check_adamw_step, lambda params, grads, state, **kw: state.t)
    assert error.property == "returns (params, state)"
    assert "raised AttributeError" in error.detail and error.__cause__ is not None


# --- Chapter 7: check_clip_by_global_norm ---------------------------------------------


def _learner_clip(grads, max_norm, mistake=None):
    """A learner's clipping by the global norm, with one optional mistake."""
    from attncourse.params import flatten_params, unflatten_params

    flat = flatten_params(grads)
    norm = math.sqrt(sum(float(np.sum(g * g)) for g in flat.values()))
    if mistake == "first array only":
        norm = math.sqrt(float(np.sum(next(iter(flat.values())) ** 2)))
    scale = min(1.0, max_norm / norm) if norm > 0 else 1.0
    if mistake == "clips always":  # the eps of PyTorch, but no clamp to 1
        scale = max_norm / (norm + 1e-6)
    elif mistake == "no min":
        scale = max_norm / norm
    if mistake == "per tensor":
        out = {}
        for k, g in flat.items():
            own = math.sqrt(float(np.sum(g * g)))
            out[k] = g * (min(1.0, max_norm / own) if own > 0 else 1.0)
    elif mistake == "nan on zero":
        out = {k: g / norm * min(norm, max_norm) for k, g in flat.items()}
    elif mistake == "in place":
        for g in flat.values():
            g *= scale
        return grads, norm
    else:
        out = {k: g * scale for k, g in flat.items()}
    return unflatten_params(out, grads), norm


def _torch_style_clip(grads, max_norm):
    """Right: PyTorch's clip_coef = max_norm / (norm + 1e-6), clamped to 1."""
    from attncourse.params import flatten_params, unflatten_params

    flat = flatten_params(grads)
    norm = float(np.sqrt(sum(np.sum(g**2) for g in flat.values())))
    coef = min(max_norm / (norm + 1e-6), 1.0)
    return unflatten_params({k: g * coef for k, g in flat.items()}, grads), norm


def test_check_clip_by_global_norm_accepts_the_package_and_a_torch_style_clip():
    from attncourse.optim import clip_by_global_norm

    properties = ex.CLIP_BY_GLOBAL_NORM_PROPERTIES
    assert properties == (
        "returns (grads, norm)",
        "the norm",
        "one factor for all arrays",
        "clipped norm equals max_norm",
        "small gradients unchanged",
        "input untouched",
        "zero gradient",
    )
    assert ex.check_clip_by_global_norm(clip_by_global_norm) == properties
    assert ex.check_clip_by_global_norm(clip_by_global_norm, seed=5) == properties
    assert ex.check_clip_by_global_norm(_learner_clip, seed=2) == properties
    assert ex.check_clip_by_global_norm(_torch_style_clip) == properties


@pytest.mark.parametrize(
    "mistake, property, words",
    [
        (
            "per tensor",
            "one factor for all arrays",
            "each array was clipped to its own",
        ),
        ("first array only", "the norm", "the norm of the first array, 'embed', only"),
        ("clips always", "small gradients unchanged", "come back scaled by 2"),
        ("no min", "small gradients unchanged", "come back scaled by 2"),
        ("in place", "input untouched", "modified the grads it was given"),
        ("nan on zero", "zero gradient", "NaN entries"),
    ],
)
def test_check_clip_by_global_norm_names_each_planted_mistake(mistake, property, words):
    error = failure(
        ex.check_clip_by_global_norm,
        lambda grads, max_norm: _learner_clip(grads, max_norm, mistake),
    )
    assert error.property == property
    assert words in error.detail


def test_check_clip_by_global_norm_catches_stubs_returning_zeros():
    from attncourse.params import flatten_params, unflatten_params

    def zeros(grads, max_norm, norm=None):
        flat = flatten_params(grads)
        z = {k: np.zeros_like(g) for k, g in flat.items()}
        if norm is None:
            norm = float(np.sqrt(sum(np.sum(g * g) for g in flat.values())))
        return unflatten_params(z, grads), norm

    error = failure(ex.check_clip_by_global_norm, lambda g, m: zeros(g, m, norm=0.0))
    assert error.property == "the norm"
    error = failure(ex.check_clip_by_global_norm, zeros)
    assert error.property == "one factor for all arrays"
    assert "all zeros" in error.detail


def test_check_clip_by_global_norm_names_the_registry_fault_and_a_wrong_result():
    from attncourse.kit.faults import optim as fo
    from attncourse.params import flatten_params

    error = failure(ex.check_clip_by_global_norm, fo.clip_per_tensor)
    assert error.property == "one factor for all arrays"
    for fn in (
        lambda grads, max_norm: grads,
        lambda grads, max_norm: (flatten_params(grads), 1.0),
        lambda grads, max_norm: (grads, np.ones(2)),
    ):
        assert (
            failure(ex.check_clip_by_global_norm, fn).property
            == "returns (grads, norm)"
        )


def test_check_clip_by_global_norm_names_other_exceptions():
    error = failure(ex.check_clip_by_global_norm, lambda grads, max_norm: grads.norm)
    assert error.property == "returns (grads, norm)"
    assert "raised AttributeError" in error.detail and error.__cause__ is not None


# --- Chapter 8: check_top_p -----------------------------------------------------------

from functools import partial  # noqa: E402  (this section's own imports)

from attncourse.kit.faults import sample as fsample  # noqa: E402


def _top_p_reference(logits, p):
    from attncourse.sample import probabilities

    return probabilities(logits, top_p=p)


def _top_p_learner(logits, p, *, order="stable", strict=False, extra=0):
    """A learner's top-p: rank, running sum, keep a prefix; mistakes on request."""
    q = softmax(logits)
    ranked = (
        np.argsort(q, axis=-1)[..., ::-1]
        if order == "reversed"
        else np.argsort(-q, axis=-1, kind="stable")
    )
    running = np.cumsum(np.take_along_axis(q, ranked, axis=-1), axis=-1)
    n_keep = np.sum(running < p, axis=-1, keepdims=True) + (0 if strict else 1) + extra
    keep = np.zeros(q.shape, dtype=bool)
    np.put_along_axis(keep, ranked, np.arange(q.shape[-1]) < n_keep, axis=-1)
    kept = np.where(keep, q, 0.0)
    with np.errstate(invalid="ignore"):  # strict: a row with nothing kept is 0 / 0
        return kept / kept.sum(axis=-1, keepdims=True)


def _top_p_in_place(logits, p):
    P = _top_p_reference(logits, p)
    logits[P == 0] = -np.inf  # changes the caller's logits
    return P


@pytest.mark.parametrize(
    "fn, prop, words",
    [
        (
            lambda logits, p: np.zeros_like(logits),
            "most probable always kept",
            "probability 0",
        ),
        (
            lambda logits, p: fsample.top_p_off_by_one(logits, top_p=p),
            "smallest prefix reaching p",
            "the token that crosses p was dropped",
        ),
        (partial(_top_p_learner, strict=True), "most probable always kept", "NaN"),
        (
            partial(_top_p_learner, extra=1),
            "smallest prefix reaching p",
            "already sum to >= p",
        ),
        (
            lambda logits, p: _top_p_reference(-logits, p),
            "most probable always kept",
            "most probable token",
        ),
        (
            lambda logits, p: np.where(
                _top_p_reference(logits, p) > 0, softmax(logits), 0.0
            ),
            "renormalised",
            "rows sum to",
        ),
        (
            lambda logits, p: (
                (_top_p_reference(logits, p) > 0)
                / (_top_p_reference(logits, p) > 0).sum(axis=-1, keepdims=True)
            ),
            "in proportion to the softmax",
            "differ by up to",
        ),
        (
            partial(_top_p_learner, order="reversed"),
            "ties: the lowest token id",
            "keep tokens [2, 4]",
        ),
        (_top_p_in_place, "input untouched", "changed the logits"),
        (
            lambda logits, p: _top_p_reference(logits, p)[:, :-1],
            "returns probabilities",
            "returned shape (3, 6)",
        ),
        (lambda logits: logits, "returns probabilities", "raised TypeError"),
    ],
    ids=[
        "zeros",
        "off by one",
        "strict: nothing kept",
        "one too many",
        "least probable",
        "not renormalised",
        "uniform",
        "reversed ties",
        "in place",
        "short rows",
        "one argument",
    ],
)
def test_check_top_p_names_the_failed_property(fn, prop, words):
    error = failure(ex.check_top_p, fn)
    assert error.property == prop
    assert words in error.detail


def test_check_top_p_accepts_the_reference_a_learner_and_a_softmax_over_the_kept():
    def over_the_kept(logits, p):  # another correct route: mask the logits, softmax
        return softmax(np.where(_top_p_reference(logits, p) > 0, logits, -np.inf))

    for fn in (_top_p_reference, _top_p_learner, over_the_kept):
        assert ex.check_top_p(fn) == ex.TOP_P_PROPERTIES
    assert kit.check_top_p is ex.check_top_p  # the chapter imports it from the kit


# --- Chapter 9: merging two softmax states; the tile loop -----------------------------

# this section's own imports
from attncourse.kit.faults import tiled as ftiled  # noqa: E402
from attncourse.tiled import (
    causal_tiles,
    empty_state,
    finish_state,  # noqa: E402
    merge_states,
    tile_state,
    tiled_attention_forward,
)


def _merge_overflowing(a, b):  # rescales through exp(m_a) and exp(m_b) themselves
    (m_a, l_a, o_a), (m_b, l_b, o_b) = a, b
    m = np.maximum(m_a, m_b)
    scale = np.exp(-np.where(np.isfinite(m), m, 0.0))  # empty rows stay empty
    ea, eb = np.exp(m_a), np.exp(m_b)
    return (
        m,
        (ea * l_a + eb * l_b) * scale,
        (ea[:, None] * o_a + eb[:, None] * o_b) * scale[:, None],
    )


def _merge_first_is_special(a, b):  # rescales b to a's maximum only
    (m_a, l_a, o_a), (m_b, l_b, o_b) = a, b
    beta = np.exp(m_b - m_a)
    return m_a, l_a + beta * l_b, o_a + beta[:, None] * o_b


@pytest.mark.parametrize(
    "fn, prop",
    [
        (lambda a, b: a, "merged halves equal the whole"),
        (lambda a, b: (a[0], a[1]), "returns (m, l, o)"),
        (lambda a, b: (a[0][:2], a[1], a[2]), "returns (m, l, o)"),
        (ftiled.merge_states_without_rescale, "rescales the old output"),
        (ftiled.merge_states_unguarded, "empty rows stay empty"),
        (_merge_overflowing, "no overflow"),
        (lambda a, b: 1 / 0, "merged halves equal the whole"),
    ],
    ids=[
        "first only",
        "pair",
        "short m",
        "no rescale",
        "unguarded",
        "overflow",
        "crash",
    ],
)
def test_check_merge_states_names_the_failed_property(fn, prop):
    with np.errstate(all="ignore"):
        error = failure(ex.check_merge_states, fn)
    assert error.property == prop


def test_check_merge_states_catches_a_merge_whose_first_part_is_special():
    # right whenever the first part holds the larger maximum; the test that raises it
    with np.errstate(all="ignore"):
        error = failure(ex.check_merge_states, _merge_first_is_special)
    assert error.property in (
        "merged halves equal the whole",
        "rescales the old output",
    )


def test_check_merge_states_accepts_the_package_and_a_tuple_learner():
    def learner(a, b):
        m = np.maximum(a[0], b[0])
        shift = np.where(np.isfinite(m), m, 0.0)
        wa, wb = np.exp(a[0] - shift), np.exp(b[0] - shift)
        return m, wa * a[1] + wb * b[1], wa[:, None] * a[2] + wb[:, None] * b[2]

    for fn in (merge_states, learner):
        assert ex.check_merge_states(fn) == ex.MERGE_STATES_PROPERTIES


def _tile_loop(Q, K, V, block, tiles=causal_tiles, mask=True):
    """A learner's tile loop from the package's state functions."""
    T, r = Q.shape[0], V.shape[1]
    O = np.zeros((T, r))
    for i0 in range(0, T, block):
        i1 = min(i0 + block, T)
        state = empty_state((i1 - i0,), r)
        for t in (t for t in tiles(T, T, block, block) if t.i0 == i0):
            S = Q[i0:i1] @ K[t.j0 : t.j1].T / math.sqrt(Q.shape[1])  # (bq, d) x (d, bk)
            visible = (
                (np.arange(t.j0, t.j1)[None, :] <= np.arange(i0, i1)[:, None])
                if mask
                else None
            )
            state = merge_states(state, tile_state(S, V[t.j0 : t.j1], visible))
        O[i0:i1] = finish_state(state)[0]
    return O


def _dense(Q, K, V, block):
    return causal_attention(Q, K, V)[0]


def _last_tile_dropped(Q, K, V, block):
    T = (Q.shape[0] // block) * block or Q.shape[0]  # the smaller last tile left out
    O = np.zeros((Q.shape[0], V.shape[1]))
    O[:T] = _tile_loop(Q[:T], K[:T], V[:T], block)
    return O


@pytest.mark.parametrize(
    "fn, prop",
    [
        (
            lambda Q, K, V, block: _tile_loop(
                Q, K, V, block, ftiled.causal_tiles_one_block_early
            ),
            "one tile",
        ),
        (lambda Q, K, V, block: _tile_loop(Q, K, V, block, mask=False), "one tile"),
        (_last_tile_dropped, "tiles that do not divide T"),
        (_dense, "never stores T x T"),
        (lambda Q, K, V, block: _tile_loop(Q, K, V, block)[:, :2], "shape"),
        (lambda Q, K, V, block: Q @ K, "one tile"),
    ],
    ids=["one block early", "no mask", "last tile dropped", "dense", "shape", "crash"],
)
def test_check_tile_loop_names_the_failed_property(fn, prop):
    assert failure(ex.check_tile_loop, fn).property == prop


def _every_tile(Q, K, V, block):
    """Right output, but every tile visited: those above the diagonal fully masked."""
    return _tile_loop(
        Q, K, V, block, tiles=lambda *a: causal_tiles(*a, causal=False), mask=True
    )


def test_check_tile_loop_counts_the_tiles_above_the_diagonal():
    error = failure(ex.check_tile_loop, _every_tile)
    assert error.property == "skips the tiles above the diagonal"
    assert "tile_state 9 times" in error.detail and "only 6 of the 9" in error.detail
    assert "j0 <= i1 - 1" in error.fix


def test_check_tile_loop_counts_merges_when_tile_state_is_the_learners_own():
    def own_tile_state(S, V, visible, package=tile_state):
        return package(S, V, visible)  # called by its own name: not counted

    def every_tile_own_state(Q, K, V, block):
        T, r = Q.shape[0], V.shape[1]
        O = np.zeros((T, r))
        for i0 in range(0, T, block):
            i1 = min(i0 + block, T)
            state = empty_state((i1 - i0,), r)
            for j0 in range(0, T, block):
                j1 = min(j0 + block, T)
                S = Q[i0:i1] @ K[j0:j1].T / math.sqrt(Q.shape[1])  # (bq, d) x (d, bk)
                visible = np.arange(j0, j1)[None, :] <= np.arange(i0, i1)[:, None]
                state = merge_states(state, own_tile_state(S, V[j0:j1], visible))
            O[i0:i1] = finish_state(state)[0]
        return O

    error = failure(ex.check_tile_loop, every_tile_own_state)
    assert error.property == "skips the tiles above the diagonal"
    assert "merge_states 9 times" in error.detail
    # the names are restored after the check
    from attncourse import tiled as package_tiled

    for name in ("tile_state", "merge_states"):
        assert globals()[name] is getattr(package_tiled, name)


def test_tile_loop_and_merge_checkers_want_their_inputs_unchanged():
    def shifts_V(Q, K, V, block):
        O = _tile_loop(Q, K, V, block)
        V -= V.mean()
        return O

    def rescales_a(a, b):
        merged = merge_states(a, b)
        a[2][...] = 0.0
        return merged

    error = failure(ex.check_tile_loop, shifts_V)
    assert error.property == "inputs unchanged" and "the V" in error.detail
    error = failure(ex.check_merge_states, rescales_a)
    assert error.property == "inputs unchanged" and "state a" in error.detail


def test_check_tile_loop_accepts_a_learner_and_the_package():
    def package(Q, K, V, block):
        return tiled_attention_forward(
            Q, K, V, causal=True, block_q=block, block_k=block, workers=1
        )[0]

    for fn in (_tile_loop, package):
        assert ex.check_tile_loop(fn) == ex.TILE_LOOP_PROPERTIES


# --- Chapter 3: the whole head, backward; Chapter 4: split/merge and positions --------

# this section's own imports
from attncourse.kit.faults import multihead as fmh  # noqa: E402
from attncourse.kit.faults import positions as fpos  # noqa: E402
from attncourse.layers.attention import (  # noqa: E402
    attention_backward,
    attention_forward,
)
from attncourse.layers.head import head_backward, head_forward  # noqa: E402
from attncourse.layers.multihead import merge_heads, split_heads  # noqa: E402
from attncourse.layers.positions import (  # noqa: E402
    positions_backward,
    positions_forward,
)


def _head_grads(attention_bwd=attention_backward):
    """A learner's whole-head backward from the package, with a chosen attention
    backward."""

    def fn(X, W_Q, W_K, W_V, G):
        Q, K, V = X @ W_Q, X @ W_K, X @ W_V
        dQ, dK, dV = attention_bwd(attention_forward(Q, K, V)[1], G)
        return {
            "dQ": dQ,
            "dK": dK,
            "dV": dV,
            "dW_Q": X.T @ dQ,
            "dW_K": X.T @ dK,
            "dW_V": X.T @ dV,
            "dX": dQ @ W_Q.T + dK @ W_K.T + dV @ W_V.T,
        }

    return fn


def _head_with(name, change):
    """The right gradients with one of them replaced by
    ``change(grads, X, W_Q, W_K, W_V, G)``."""

    def fn(*args):
        grads = _head_grads()(*args)
        return {**grads, name: change(grads, *args)}

    return fn


def _dV_without_transpose(g, X, W_Q, W_K, W_V, G):
    return attention_forward(X @ W_Q, X @ W_K, X @ W_V)[1].A @ G  # A G, not A^T G


def _head_zeros(X, W_Q, W_K, W_V, G):
    shapes = {
        "dQ": (X.shape[0], W_Q.shape[1]),
        "dK": (X.shape[0], W_K.shape[1]),
        "dV": (X.shape[0], W_V.shape[1]),
        "dW_Q": W_Q.shape,
        "dW_K": W_K.shape,
        "dW_V": W_V.shape,
        "dX": X.shape,
    }
    return {name: np.zeros(shape) for name, shape in shapes.items()}


def test_check_head_backward_accepts_the_package_layer_pair():
    def package(X, W_Q, W_K, W_V, G):
        params = {"W_Q": W_Q, "W_K": W_K, "W_V": W_V}
        _, saved = head_forward(params, X)
        dparams, dX = head_backward(params, saved, G)
        _, attention = attention_forward(saved["Q"], saved["K"], saved["V"])
        dQ, dK, dV = attention_backward(attention, G)
        return {
            "dQ": dQ,
            "dK": dK,
            "dV": dV,
            "dX": dX,
            **{"d" + name: g for name, g in dparams.items()},
        }

    for fn in (package, _head_grads()):
        assert ex.check_head_backward(fn) == ex.HEAD_BACKWARD_PROPERTIES
        assert ex.check_head_backward(fn, seed=3) == ex.HEAD_BACKWARD_PROPERTIES


@pytest.mark.parametrize(
    "fn, prop, fix",
    [
        (_head_with("dV", _dV_without_transpose), "dV", "transpose A"),
        (_head_grads(fa.attention_backward_numerator_only), "dQ", "both softmax paths"),
        (_head_grads(fa.attention_backward_unscaled), "dQ", "divide by sqrt(d)"),
        (
            _head_with("dK", lambda g, X, Wq, Wk, Wv, G: np.sqrt(3) * g["dK"]),
            "dK",
            "divide by sqrt(d)",
        ),
        (_head_grads(fa.attention_backward_missing_transpose), "dK", "transpose dS"),
        (_head_with("dW_Q", lambda g, X, *a: 2 * X.T @ g["dQ"]), "dW_Q", "X^T dQ"),
        (_head_with("dW_K", lambda g, X, *a: X.T @ g["dQ"]), "dW_K", "not X^T dQ"),
        (_head_with("dW_V", lambda g, X, *a: X.T @ g["dV"] + 1e-3), "dW_V", "X^T dV"),
        (
            _head_with("dX", lambda g, X, Wq, Wk, Wv, G: g["dV"] @ Wv.T),
            "dX",
            "only the value branch",
        ),
        (
            _head_with("dX", lambda g, X, Wq, Wk, Wv, G: g["dQ"] @ Wq.T),
            "dX",
            "only the query branch",
        ),
        (
            _head_with(
                "dX", lambda g, X, Wq, Wk, Wv, G: g["dQ"] @ Wq.T + g["dV"] @ Wv.T
            ),
            "dX",
            "misses the key branch",
        ),
        (_head_zeros, "dV", "A^T G"),
        (
            _head_with("dW_V", lambda g, *a: g["dW_V"].T),
            "returns the seven gradients",
            "shape of W_V",
        ),
        (lambda *a: (np.zeros(3),) * 7, "returns the seven gradients", "return {"),
        (
            lambda X, *a: X @ X.T @ "crash",
            "returns the seven gradients",
            "make fn accept these arguments",
        ),
    ],
    ids=[
        "dV no transpose",
        "numerator-only",
        "unscaled",
        "dK unscaled",
        "dK no transpose",
        "dW_Q doubled",
        "dW_K from dQ",
        "dW_V shifted",
        "dX last branch",
        "dX first branch",
        "dX two branches",
        "zeros",
        "dW_V transposed",
        "tuple",
        "crash",
    ],
)
def test_check_head_backward_names_the_wrong_gradient(fn, prop, fix):
    error = failure(ex.check_head_backward, fn)
    assert error.property == prop
    assert fix in error.fix


def _split_merge_learner():
    def split(Y, heads):
        *lead, T, width = Y.shape
        return np.swapaxes(Y.reshape(*lead, T, heads, width // heads), -3, -2)

    def merge(O):
        *lead, H, T, w = O.shape
        return np.swapaxes(O, -3, -2).reshape(*lead, T, H * w)

    return split, merge


def test_check_split_merge_accepts_the_package_and_a_learner():
    for split, merge in ((split_heads, merge_heads), _split_merge_learner()):
        assert ex.check_split_merge(split, merge) == ex.SPLIT_MERGE_PROPERTIES
    assert_reported_unfinished(ex.check_split_merge, unfinished, merge_heads)
    assert_reported_unfinished(ex.check_split_merge, split_heads, unfinished)


@pytest.mark.parametrize(
    "split, merge, prop, fix",
    [
        (
            fmh.split_heads_no_transpose,
            merge_heads,
            "split: head h takes columns h w .. (h+1) w - 1",
            "cuts across positions",
        ),
        (
            fmh.split_heads_reversed,
            merge_heads,
            "split: head h takes columns h w .. (h+1) w - 1",
            "keep the heads in order",
        ),
        (
            split_heads,
            fmh.merge_heads_no_transpose,
            "merge: head h fills columns h w .. (h+1) w - 1",
            "a reshape alone mixes positions",
        ),
        (
            split_heads,
            fmh.merge_heads_reversed,
            "merge: head h fills columns h w .. (h+1) w - 1",
            "columns h*w:(h+1)*w",
        ),
        (
            lambda Y, heads: np.zeros(
                Y.shape[:-2] + (heads, Y.shape[-2], Y.shape[-1] // heads)
            ),
            merge_heads,
            "split: head h takes columns h w .. (h+1) w - 1",
            "Y[..., t, h*w",
        ),
        (
            lambda Y, heads: Y.reshape(*Y.shape[:-1], heads, -1),
            merge_heads,
            "split: shape",
            "swap the axes T and H",
        ),
        (
            split_heads,
            lambda O: O.reshape(*O.shape[:-2], -1),
            "merge: shape",
            "reshape to (..., T, H w)",
        ),
        (
            split_heads,
            lambda O: np.zeros(O.shape[:-3] + (O.shape[-2], O.shape[-3] * O.shape[-1])),
            "merge: head h fills columns h w .. (h+1) w - 1",
            "columns h*w:(h+1)*w",
        ),
        (
            lambda Y, heads: Y[None] @ "crash",
            merge_heads,
            "split: shape",
            "make fn accept these arguments",
        ),
    ],
    ids=[
        "split no transpose",
        "split reversed",
        "merge no transpose",
        "merge reversed",
        "split zeros",
        "split shape",
        "merge shape",
        "merge zeros",
        "crash",
    ],
)
def test_check_split_merge_names_the_failed_property(split, merge, prop, fix):
    with pytest.raises(CheckFailed) as info:
        ex.check_split_merge(split, merge)
    assert info.value.property == prop
    assert fix in info.value.fix


def _positions_learner(dY, T_max):
    params = {"P": np.zeros((T_max, dY.shape[-1]))}
    _, saved = positions_forward(params, np.zeros_like(dY))
    dparams, dX = positions_backward(params, saved, dY)
    return dparams["P"], dX


def _positions_overwrite(dY, T_max):
    params = {"P": np.zeros((T_max, dY.shape[-1]))}
    _, saved = positions_forward(params, np.zeros_like(dY))
    dparams, dX = fpos.positions_backward_overwrite(params, saved, dY)
    return dparams["P"], dX


def _positions_rows_filled(dY, T_max):
    dP, dX = _positions_learner(dY, T_max)
    dP[dY.shape[-2] :] = 1.0  # rows that took no part
    return dP, dX


def _positions_batch_of_three_only(dY, T_max):
    dP = np.zeros((T_max, dY.shape[-1]))
    dP[: dY.shape[-2]] = dY.sum(axis=0)  # right for (B, T, D) only
    return dP, dY


def test_check_positions_backward_accepts_the_package():
    assert (
        ex.check_positions_backward(_positions_learner)
        == ex.POSITIONS_BACKWARD_PROPERTIES
    )


@pytest.mark.parametrize(
    "fn, prop, fix",
    [
        (_positions_overwrite, "rows 0..T-1: summed over the batch", "overwrote dP"),
        (
            lambda dY, T_max: (_positions_learner(dY, T_max)[0] / dY.shape[0], dY),
            "rows 0..T-1: summed over the batch",
            "do not average",
        ),
        (
            lambda dY, T_max: (np.zeros((T_max, dY.shape[-1])), np.zeros_like(dY)),
            "rows 0..T-1: summed over the batch",
            "sum over the batch of dY",
        ),
        (_positions_rows_filled, "rows T..T_max-1: zero", "fill rows 0..T-1 only"),
        (
            lambda dY, T_max: (_positions_learner(dY, T_max)[0], 2 * dY),
            "dX = dY",
            "passes to X unchanged",
        ),
        (
            _positions_batch_of_three_only,
            "any number of batch axes",
            "every axis but the last",
        ),
        (
            lambda dY, T_max: _positions_learner(dY, T_max)[0],
            "returns (dP, dX)",
            "return dP, dX",
        ),
        (lambda dY, T_max: (dY.sum(axis=0), dY), "shapes", "shape of P"),
        (
            lambda dY, T_max: dY @ "crash",
            "returns (dP, dX)",
            "make fn accept these arguments",
        ),
    ],
    ids=[
        "overwrite",
        "mean",
        "zeros",
        "unused rows",
        "dX doubled",
        "batch axes",
        "dP only",
        "dP of T rows",
        "crash",
    ],
)
def test_check_positions_backward_names_the_failed_property(fn, prop, fix):
    error = failure(ex.check_positions_backward, fn)
    assert error.property == prop
    assert fix in error.fix


# --- Chapter 10: the query offset; the memory of the key/value cache ------------------


def _offset_attention(
    query,
    key,
    value,
    query_offset=0,
    dropout=None,
    *,
    shift=None,
    check=True,
    fill=-np.inf,
    transpose="swapaxes",
):
    """A learner's causal attention with the offset; the keywords plant mistakes."""
    T_q, T_k = query.shape[-2], key.shape[-2]
    if check and not (0 <= query_offset and query_offset + T_q <= T_k):
        raise ValueError(f"bad query_offset {query_offset}")
    kT = np.swapaxes(key, -1, -2) if transpose == "swapaxes" else key.T
    S = query @ kT / math.sqrt(query.shape[-1])  # (..., T_q, d) x (..., d, T_k)
    shift = query_offset if shift is None else shift(query_offset, T_q, T_k)
    visible = np.arange(T_k)[None, :] <= shift + np.arange(T_q)[:, None]
    S = np.where(visible, S, fill)
    P = np.exp(S - S.max(axis=-1, keepdims=True))
    P = P / P.sum(axis=-1, keepdims=True)
    weights = P if dropout is None else dropout(P)
    return weights @ value, P  # (..., T_q, T_k) x (..., T_k, r)


def _offset_variant(**planted):
    def fn(query, key, value, query_offset=0, dropout=None):
        return _offset_attention(query, key, value, query_offset, dropout, **planted)

    return fn


def _only_negative_rejected(query, key, value, query_offset=0, dropout=None):
    if query_offset < 0:
        raise ValueError("negative")
    return _offset_attention(query, key, value, query_offset, dropout, check=False)


def _asserted_offset(query, key, value, query_offset=0, dropout=None):
    if query_offset < 0 or query_offset + query.shape[-2] > key.shape[-2]:
        raise AssertionError("bad offset")
    return _offset_attention(query, key, value, query_offset, dropout)


@pytest.mark.parametrize(
    "fn, prop, fix",
    [
        (
            _offset_variant(shift=lambda o, T_q, T_k: 0),
            "offset alignment",
            "the offset was ignored",
        ),
        (
            _offset_variant(shift=lambda o, T_q, T_k: max(o - 1, 0)),
            "offset alignment",
            "one key short",
        ),
        (
            _offset_variant(shift=lambda o, T_q, T_k: T_k - T_q),
            "causality with offset",
            "T_k - T_q",
        ),
        (
            _offset_variant(shift=lambda o, T_q, T_k: o + 1),
            "causality with offset",
            "one key too wide",
        ),
        (
            _offset_variant(shift=lambda o, T_q, T_k: T_k if o else 0),
            "causality with offset",
            "hide the keys j > query_offset + i",
        ),
        (_offset_variant(fill=-30.0), "causality with offset", "boolean visible mask"),
        (_offset_variant(transpose="T"), "equality with recompute", ""),
        (
            _offset_variant(check=False),
            "bad offsets raise ValueError",
            "raise ValueError",
        ),
        (
            _only_negative_rejected,
            "bad offsets raise ValueError",
            "query_offset + T_q <= T_k",
        ),
        (_asserted_offset, "bad offsets raise ValueError", "raise ValueError"),
        (
            lambda q, k, v, query_offset=0, dropout=None: causal_attention(q, k, v)[1],
            "offset alignment",
            "return",
        ),
    ],
    ids=[
        "ignored",
        "one short",
        "T_k - T_q",
        "one too wide",
        "no mask",
        "finite mask",
        "key.T",
        "no check",
        "negative only",
        "assert",
        "not a pair",
    ],
)
def test_check_query_offset_names_the_failed_property(fn, prop, fix):
    with np.errstate(all="ignore"):
        error = failure(ex.check_query_offset, fn)
    assert error.property == prop
    assert fix in error.fix


def test_check_query_offset_catches_a_single_query_that_reads_every_key():
    def decode_reads_all(query, key, value, query_offset=0, dropout=None):
        if query.shape[-2] == 1:  # "a decode step reads the whole cache"
            return _offset_attention(query, key, value, key.shape[-2] - 1, check=False)
        return _offset_attention(query, key, value, query_offset)

    error = failure(ex.check_query_offset, decode_reads_all)
    assert error.property == "causality with offset"
    assert "query 0 (position 1)" in error.detail


def test_check_query_offset_accepts_the_package_and_a_learner():
    assert ex.check_query_offset(causal_attention) == ex.QUERY_OFFSET_PROPERTIES
    assert ex.check_query_offset(_offset_variant()) == ex.QUERY_OFFSET_PROPERTIES
    assert ex.QUERY_OFFSET_PROPERTIES == (
        "inputs unchanged",
        "causality with offset",
        "offset alignment",
        "equality with recompute",
        "bad offsets raise ValueError",
    )


def test_check_query_offset_reports_chapter_3s_answer_as_unfinished():
    def chapter_3(query, key, value, query_offset=0, dropout=None):
        if query_offset != 0:
            raise NotImplementedError("query_offset comes in Chapter 10")
        return causal_attention(query, key, value, dropout=dropout)

    assert_reported_unfinished(ex.check_query_offset, chapter_3, name="chapter_3")
    assert check_causal_attention(chapter_3)[-1] == "offset"


def _cache_bytes(L, H, D, t, b):
    return 2 * L * t * D * b


def _cache_bytes_from_arrays(L, H, D, t, b):
    dtype = {4: np.float32, 8: np.float64}[b]
    keys = np.zeros((H, t, D // H), dtype=dtype)
    return L * 2 * keys.nbytes


@pytest.mark.parametrize(
    "fn, prop",
    [
        (lambda L, H, D, t, b: L * t * D * b, "keys and values both counted"),
        (lambda L, H, D, t, b: 2 * t * D * b, "every block counted"),
        (lambda L, H, D, t, b: 2 * L * t * (D // H) * b, "every head counted"),
        (lambda L, H, D, t, b: 2 * L * H * t * D * b, "a head is D / H wide"),
        (lambda L, H, D, t, b: 2 * L * t * D, "bytes per number"),
        (lambda L, H, D, t, b: 2 * L * t * t * D * b, "proportional to t"),
        (lambda L, H, D, t, b: 2 * L * (t + 1) * D * b, "proportional to t"),
        (lambda L, H, D, t, b: 2 * L * t * D * 8, "equals the nbytes of a real cache"),
        (lambda L, H, D, t, b: 2 * L * t * D * b / 7, "a whole number of bytes"),
        (lambda L, H, D, t, b: str(2 * L * t * D * b), "a whole number of bytes"),
        (lambda L, H, D, t, b: None, "a whole number of bytes"),
        (lambda L, H, D, t, b: 1 / 0, "a whole number of bytes"),
    ],
    ids=[
        "keys only",
        "one block",
        "one head",
        "H D per head",
        "numbers",
        "t squared",
        "t + 1",
        "float64 always",
        "fraction",
        "string",
        "None",
        "crash",
    ],
)
def test_check_cache_memory_names_the_failed_property(fn, prop):
    assert failure(ex.check_cache_memory, fn).property == prop


def test_check_cache_memory_accepts_the_formula_and_a_count_of_arrays():
    for fn in (
        _cache_bytes,
        _cache_bytes_from_arrays,
        lambda L, H, D, t, b: np.int64(2) * L * t * D * b,
    ):
        assert ex.check_cache_memory(fn) == ex.CACHE_MEMORY_PROPERTIES


def test_check_cache_memory_wants_an_int_not_a_whole_float():
    """The exercise asks for an int: 384.0 (D / H somewhere) is named."""
    for fn in (
        lambda L, H, D, t, b: float(2 * L * t * D * b),
        lambda L, H, D, t, b: 2 * L * t * H * (D / H) * b,
        lambda L, H, D, t, b: np.float64(2 * L * t * D * b),
    ):
        error = failure(ex.check_cache_memory, fn)
        assert error.property == "a whole number of bytes"
        assert "returned 384.0, a float" in error.detail and "D // H" in error.fix


def test_check_cache_memory_compares_with_real_caches():
    from attncourse.kvcache import cache_nbytes, prefill
    from attncourse.model import ModelConfig, init_model

    cases = _real_caches()
    for L, H, D, b, t, want in cases:
        assert want == _cache_bytes(L, H, D, t, b)
    config = ModelConfig(n_vocab=5, T_max=6, D=8, heads=4, layers=3, ratio=1)
    _, cache = prefill(init_model(config), np.zeros((2, 4), dtype=int), config=config)
    assert (3, 4, 8, 8, 4, cache_nbytes(cache) // 2) in cases


# --- the layout: one module per subject, each checker defined once and listed ---------

import importlib  # noqa: E402  (this section's own imports)
import pkgutil  # noqa: E402


def test_every_checker_is_defined_once_listed_exported_and_wrapped():
    homes = [
        (name, module)
        for info in pkgutil.iter_modules(ex.__path__, ex.__name__ + ".")
        for module in [importlib.import_module(info.name)]
        for name, value in vars(module).items()
        if name.startswith("check_")
        and getattr(value, "__module__", None) == module.__name__
    ]
    defined = sorted(name for name, _ in homes)
    assert len(defined) == len(set(defined)), "a checker is defined twice"
    assert defined == sorted(LEARNER_CHECKERS) and len(defined) >= 21
    for name, module in homes:
        checker = getattr(ex, name)
        assert checker is getattr(module, name), f"{name}: another object exported"
        assert checker.reports_unfinished and callable(checker.__wrapped__), name
    exported = [name for name in kit.__all__ if name.startswith("check_")]
    assert all(getattr(kit, name) is getattr(ex, name) for name in exported)
    assert all(not name.startswith("_") for name in ex.__all__)  # no helper exported
