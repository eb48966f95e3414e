"""Tests of attncourse.verify.exercises: every learner checker passes a right answer and names
the property a wrong one fails, with the likely fix, also under ``python -O``."""

import ast
import json
import math
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose

import attncourse as ac
from attncourse.cost import model_parameter_count
from attncourse.faults import attention as fa
from attncourse.faults import embedding as fe
from attncourse.faults import loss as fl
from attncourse.faults import block as fb
from attncourse.faults import layernorm as fln
from attncourse.layers.attention import causal_attention, causal_mask, combine_masks, key_padding_mask
from attncourse.layers.embedding import embedding_backward, embedding_forward, one_hot
from attncourse.layers.block import residual_backward
from attncourse.layers.layernorm import layernorm_backward
from attncourse.loss import cross_entropy, cross_entropy_backward, cross_entropy_forward
from attncourse.model import count_parameters, init_model
from attncourse.softmax import softmax, softmax_jacobian
from attncourse.verify import CheckFailed
from attncourse.verify import exercises as ex
from attncourse.verify.exercises import (
    check_attention_mask,
    check_causal_attention,
    check_cross_entropy,
    check_embedding_backward,
    check_one_hot,
    check_softmax_jacobian,
)

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "chapters" / "04_causality_heads_positions.ipynb"
VERIFY = ROOT / "src" / "attncourse" / "verify"


def failure(checker, fn, **kwargs):
    """The CheckFailed a checker raises for fn; fail the test if it raises none."""
    with pytest.raises(CheckFailed) as info:
        checker(fn, **kwargs)
    assert info.value.fix, "every learner-checker failure suggests a fix"
    return info.value


# --- the rules every checker follows -------------------------------------------------------------

def test_no_bare_assert_in_the_verification_package():
    # a bare assert disappears under python -O; every check raises CheckFailed explicitly
    for path in sorted(VERIFY.glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        asserts = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Assert)]
        assert asserts == [], f"{path.name} has bare asserts at lines {asserts}"


ZERO_STUBS = """
import sys
import numpy as np
from attncourse.verify import CheckFailed
from attncourse.verify import exercises as ex

assert False, "not stripped"  # python -O strips this line; the checkers must still work
print("optimize", sys.flags.optimize)
stubs = {
    "check_one_hot": lambda ids, n: np.zeros(np.shape(ids) + (n,)),
    "check_embedding_backward": lambda dX, ids, n: np.zeros((n, np.shape(dX)[-1])),
    "check_softmax_jacobian": lambda z: np.zeros((len(z), len(z))),
    "check_cross_entropy": lambda Z, y: (0.0, np.zeros(np.shape(Z))),
    "check_causal_attention": lambda q, k, v, query_offset=0, dropout=None: (
        np.zeros(q.shape[:-1] + v.shape[-1:]), np.zeros(q.shape[:-1] + k.shape[-2:-1])),
    "check_attention_mask": lambda T, kv: np.zeros((len(kv), T, T), dtype=bool),
    "check_layernorm_backward": lambda dY, x_hat, inv_std, gamma: np.zeros(np.shape(dY)),
    "check_block_residual": lambda dY, d_sublayer: np.zeros(np.shape(dY)),
    "check_parameter_count": lambda config: 0,
}
for name, stub in stubs.items():
    try:
        getattr(ex, name)(stub)
    except CheckFailed as e:
        print(name, "rejected:", e.property)
    else:
        print(name, "ACCEPTED")
"""


def test_stubs_returning_zeros_are_rejected_under_python_O():
    result = subprocess.run([sys.executable, "-O", "-c", ZERO_STUBS], capture_output=True, text=True,
                            cwd=ROOT, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "optimize 1",
        "check_one_hot rejected: one 1 per vector",
        "check_embedding_backward rejected: a token seen once gets its gradient row",
        "check_softmax_jacobian rejected: matches central differences of softmax",
        "check_cross_entropy rejected: loss is the mean of -log p_y",
        "check_causal_attention rejected: rows summing to one",
        "check_attention_mask rejected: a real query reads its own key",
        "check_layernorm_backward rejected: matches central differences of LayerNorm",
        "check_block_residual rejected: the identity path is added",
        "check_parameter_count rejected: the position table",
    ]


def unfinished(*args, **kwargs):
    raise NotImplementedError("your code here")


@pytest.mark.parametrize("checker", [check_one_hot, check_embedding_backward, check_softmax_jacobian,
                                     check_cross_entropy, check_causal_attention, check_attention_mask])
def test_a_stub_still_raising_not_implemented_error_is_passed_through(checker):
    with pytest.raises(NotImplementedError, match="your code here"):
        checker(unfinished)


@pytest.mark.parametrize("checker, fn, property", [
    (check_one_hot, lambda ids, n: 1 / 0, "shape"),
    (check_embedding_backward, lambda dX, ids, n: dX[ids], "shape"),
    (check_softmax_jacobian, lambda z: z.missing, "shape (n, n)"),
    (check_cross_entropy, lambda Z, y: Z[y, y, y], "loss is a scalar"),
    (check_causal_attention, lambda q, k, v, query_offset=0, dropout=None: q @ k, "shape"),
    (check_attention_mask, lambda T, kv: kv[T + 10], "shape and type"),
])
def test_any_other_exception_is_reported_as_the_property_being_checked(checker, fn, property):
    error = failure(checker, fn)
    assert error.property == property
    assert "raised" in error.detail and error.__cause__ is not None


def test_a_result_that_is_not_an_array_of_numbers_is_named():
    error = failure(check_one_hot, lambda ids, n: [[1, 2], [3]])
    assert error.property == "shape" and "not an array of numbers" in error.detail
    error = failure(check_cross_entropy, lambda Z, y: 0.0)
    assert error.property == "loss is a scalar" and "pair (loss, dZ)" in error.detail


# --- Chapter 1: one-hot vectors and the embedding backward ----------------------------------------

def package_embedding_backward(dX, ids, n_vocab):
    """The package's layer pair, through the learner's signature fn(dX, ids, n_vocab) -> dE."""
    params = {"E": np.zeros((n_vocab, np.shape(dX)[-1]))}
    _, saved = embedding_forward(params, ids)
    return embedding_backward(params, saved, dX)[0]["E"]


def test_one_hot_and_embedding_checkers_pass_the_reference_and_name_failures():
    assert check_one_hot(one_hot) == ex.ONE_HOT_PROPERTIES
    assert len(check_one_hot(one_hot)) == 5
    assert len(check_embedding_backward(package_embedding_backward)) == 5
    with pytest.raises(CheckFailed, match="^shape"):
        check_one_hot(lambda ids, n: one_hot(ids, n)[..., :-1])
    with pytest.raises(CheckFailed, match="^the 1 sits at the id"):
        check_one_hot(lambda ids, n: one_hot((np.asarray(ids) + 1) % n, n))
    with pytest.raises(CheckFailed, match="^rejects ids out of range"):
        check_one_hot(lambda ids, n: np.eye(n + 1)[np.asarray(ids)][..., :n])
    with pytest.raises(CheckFailed, match="^entries are 0 or 1"):
        check_one_hot(lambda ids, n: 2 * one_hot(ids, n) - one_hot((np.asarray(ids) + 1) % n, n))
    with pytest.raises(CheckFailed, match="^shape"):
        check_embedding_backward(lambda dX, ids, n: package_embedding_backward(dX, ids, n).T)
    with pytest.raises(CheckFailed, match="^batched ids"):
        check_embedding_backward(lambda dX, ids, n: package_embedding_backward(
            dX[..., 0, :] if dX.ndim == 3 else dX, ids[..., 0] if ids.ndim == 2 else ids, n))


def test_one_hot_must_reject_a_negative_id():
    # numpy reads id -1 as the last token: a one-hot that checks only the upper bound passes it
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
    error = failure(check_one_hot, lambda ids, n: np.eye(n)[ids])  # IndexError, not ValueError
    assert error.property == "rejects ids out of range"
    assert error.detail == "id 6 with n_vocab=6 raised IndexError, not ValueError"


@pytest.mark.parametrize("fault, property", [
    (fe.embedding_backward_overwrite, "repeated tokens add their gradients"),
    (fe.embedding_backward_fancy_iadd, "repeated tokens add their gradients"),
])
def test_embedding_checker_catches_the_planted_faults(fault, property):
    error = failure(check_embedding_backward, fe._learner_signature(fault))
    assert error.property == property
    assert "np.add.at" in error.fix


def test_embedding_checker_says_when_the_gradient_is_off_by_a_sign():
    error = failure(check_embedding_backward, lambda dX, ids, n: -package_embedding_backward(dX, ids, n))
    assert error.property == "a token seen once gets its gradient row"
    assert "off by a sign" in error.detail


def test_embedding_checker_wants_exact_zero_rows_for_unused_tokens():
    def leaky(dX, ids, n):
        dE = package_embedding_backward(dX, ids, n)
        return dE + 1e-300  # every row non-zero
    assert failure(check_embedding_backward, leaky).property == "unused tokens get zero rows"


def test_embedding_checker_names_a_wrong_single_row():
    def wrong_row(dX, ids, n):
        dE = package_embedding_backward(dX, ids, n)
        dE[1] *= 2.0
        return dE
    assert failure(check_embedding_backward, wrong_row).property == "a token seen once gets its gradient row"


# --- Chapter 2: the softmax Jacobian and cross-entropy ---------------------------------------------

def test_softmax_jacobian_checker_passes_the_reference_and_names_failures():
    assert len(check_softmax_jacobian(softmax_jacobian)) == 5
    numerator_only = lambda z: np.diag(softmax(z))  # noqa: E731
    with pytest.raises(CheckFailed, match="^rows sum to zero"):
        check_softmax_jacobian(numerator_only)
    with pytest.raises(CheckFailed, match="^shape"):
        check_softmax_jacobian(lambda z: softmax(z))
    with pytest.raises(CheckFailed, match="^matches central differences"):
        check_softmax_jacobian(lambda z: 2 * softmax_jacobian(z))
    naive = lambda z: (lambda p: np.diag(p) - np.outer(p, p))(np.exp(z) / np.exp(z).sum())  # noqa: E731
    with np.errstate(all="ignore"), pytest.raises(CheckFailed, match="^finite for extreme logits"):
        check_softmax_jacobian(naive)


def test_softmax_jacobian_checker_names_asymmetry_and_a_sign():
    asymmetric = lambda z: softmax_jacobian(z) + np.triu(np.ones((len(z), len(z))), 1) * 1e-3  # noqa: E731
    assert failure(check_softmax_jacobian, asymmetric).property == "symmetric"
    error = failure(check_softmax_jacobian, lambda z: -softmax_jacobian(z))
    assert error.property == "matches central differences of softmax"
    assert "off by a sign" in error.detail
    error = failure(check_softmax_jacobian, lambda z: 2 * softmax_jacobian(z))
    assert "off by a sign" not in error.detail


def test_softmax_jacobian_checker_wants_zeros_for_a_saturated_softmax():
    def tiny_residue(z):  # symmetric, rows sum to zero, but not 0 when the softmax saturates
        n = len(z)
        return softmax_jacobian(z) + (np.max(np.abs(z)) > 100) * 1e-200 * (np.eye(n) - 1.0 / n)
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
        check_cross_entropy(lambda Z, y: (np.full(len(y), cross_entropy(Z, y)), dZ(Z, y)))


def test_cross_entropy_checker_says_off_by_a_sign_and_summed_instead_of_mean():
    wrong_sign = lambda Z, y: (cross_entropy(Z, y), fl.cross_entropy_backward_wrong_sign(  # noqa: E731
        {}, cross_entropy_forward({}, Z, targets=y)[1], 1.0)[1])
    error = failure(check_cross_entropy, wrong_sign)
    assert error.property == "gradient matches central differences of the loss"
    assert "off by a sign" in error.detail and "p - onehot(y)" in error.fix
    summed = lambda Z, y: (cross_entropy(Z, y), fl.cross_entropy_backward_sum(  # noqa: E731
        {}, cross_entropy_forward({}, Z, targets=y)[1], 1.0)[1])
    error = failure(check_cross_entropy, summed)
    assert "B = 4 times the gradient of the mean" in error.detail and "divide" in error.fix
    other = lambda Z, y: (cross_entropy(Z, y), 0.5 * reference_cross_entropy(Z, y)[1])  # noqa: E731
    error = failure(check_cross_entropy, other)
    assert "off by a sign" not in error.detail and "sign and the 1/B" in error.fix


def test_an_overflowing_loss_suggests_log_sum_exp():
    naive = lambda Z, y: (fl.cross_entropy_naive(Z, y), reference_cross_entropy(Z, y)[1])  # noqa: E731
    with np.errstate(all="ignore"):
        error = failure(check_cross_entropy, naive)
    assert error.property == "finite for extreme logits"
    assert "log-sum-exp" in error.fix and "logsumexp" in error.fix

    def max_subtracted_only(Z, y):  # subtracts the maximum, then takes log of the probability
        Z = np.asarray(Z, dtype=float)
        p = softmax(Z)
        return float(np.mean(-np.log(p[np.arange(len(y)), y]))), reference_cross_entropy(Z, y)[1]

    with np.errstate(all="ignore"):
        error = failure(check_cross_entropy, max_subtracted_only)
    assert error.property == "finite for extreme logits" and "(the loss overflows)" in error.detail
    assert "subtracting the maximum alone" in error.fix

    def wrong_but_finite(Z, y):  # finite at extreme logits, but not the right value
        loss, dZ = reference_cross_entropy(Z, y)
        return (loss if np.max(np.abs(Z)) < 100 else 0.0), dZ
    error = failure(check_cross_entropy, wrong_but_finite)
    assert error.property == "finite for extreme logits" and "average to 1000" in error.detail


# --- Chapter 3: causal_attention ------------------------------------------------------------------

PROPERTIES = ["shape", "rows summing to one", "causality", "scaling", "dropout contract", "offset"]


def make(mask="before", scale=True, renormalise=True, swap=False, dropout_mode="output", offset="raise",
         transpose="swapaxes", neg=-np.inf, output_factor=1.0):
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
    assert check_causal_attention(make(mask="after", renormalise=True)) == PROPERTIES  # mathematically the same
    assert check_causal_attention(make(neg=-1e4)) == PROPERTIES  # exp(-1e4) is exactly 0 in float64


@pytest.mark.parametrize("broken, prop", [
    (make(swap=True), "shape"),
    (make(transpose="T"), "shape"),                          # .T also reverses the batch axes
    (lambda q, k, v, query_offset=0, dropout=None: make()(q, k, v)[0], "shape"),
    (make(mask="after", renormalise=False), "rows summing to one"),
    (make(mask="none"), "causality"),
    (make(neg=-100.0), "causality"),                         # leaks a weight of about e^-100
    (make(scale=False), "scaling"),
    (make(scale="by_d"), "scaling"),
    (make(output_factor=2.0), "scaling"),
    (make(dropout_mode="returned"), "dropout contract"),
    (make(dropout_mode="ignored"), "dropout contract"),
    (make(dropout_mode="twice"), "dropout contract"),
    (make(dropout_mode="on scores"), "dropout contract"),
    (make(dropout_mode="result unused"), "dropout contract"),
    (lambda q, k, v, query_offset=0: make()(q, k, v, query_offset), "dropout contract"),  # no dropout argument
    (make(offset="ignore"), "offset"),
    (make(offset="valueerror"), "offset"),
])
def test_each_broken_variant_fails_with_the_right_property(broken, prop):
    with pytest.raises(CheckFailed) as info:
        check_causal_attention(broken)
    message = str(info.value)
    assert message.startswith(prop + ":"), message
    assert info.value.property == prop and info.value.fix
    assert prop in PROPERTIES


@pytest.mark.parametrize("broken, words", [
    (make(scale=False), "without the 1/sqrt(d) factor"),
    (make(scale="by_d"), "differ from the softmax"),
    (make(output_factor=2.0), "output must equal probabilities @ value"),
    (make(dropout_mode="returned"), "undropped"),
    (make(dropout_mode="ignored"), "called exactly once, it was called 0 times"),
    (make(dropout_mode="twice"), "called 2 times"),
    (make(dropout_mode="on scores"), "applied to the (masked, scaled) probabilities"),
    (make(dropout_mode="result unused"), "output must be dropout(probabilities) @ value"),
    (make(offset="ignore"), "it returned a result"),
    (make(offset="valueerror"), "it raised ValueError: no offsets"),
    (make(neg=-100.0), "gives weight"),
    (make(mask="after", renormalise=False), "sums to"),
    (make(swap=True), "expected output (5, 4) and probabilities (5, 5), got (5, 5) and (5, 4)"),
    (make(transpose="T"), "(2, 5, 3), (2, 5, 3), (2, 5, 4) raised ValueError"),
    (lambda q, k, v, query_offset=0, dropout=None: tuple(x.reshape(-1, x.shape[-1]) for x in make()(q, k, v)),
     "with a batch dimension"),  # flattens the batch axis into the positions
])
def test_each_broken_variant_gets_its_own_detail(broken, words):
    assert words in str(failure(check_causal_attention, broken))


def test_a_query_that_sees_no_key_is_named():
    # the >= mask hides the diagonal: query 0 has no key left
    with np.errstate(invalid="ignore"):  # -inf - (-inf) in row 0
        error = failure(check_causal_attention, make(mask="geq"))
    assert error.property == "rows summing to one"
    assert error.detail.startswith("query 0 sees no key: its row of probabilities is NaN")
    assert "nan at (0, 0)" not in str(error) and "j > i" in error.fix

    def geq_zero_rows(query, key, value, query_offset=0, dropout=None):
        if query_offset != 0:
            raise NotImplementedError
        O, A = fa.causal_attention_geq(query, key, value)  # softmax gives the empty row weight 0
        return (O if dropout is None else dropout(A) @ value), A

    error = failure(check_causal_attention, geq_zero_rows)
    assert error.detail.startswith("query 0 sees no key: its row of probabilities is all zero")


def test_a_mask_applied_after_the_softmax_changes_earlier_outputs():
    # the weights of future keys are zeroed and the rows renormalised ... except the denominator
    # of row i is then right, so only a variant that keeps the future in the output is caught here
    def future_in_the_output(query, key, value, query_offset=0, dropout=None):
        if query_offset != 0:
            raise NotImplementedError
        P = causal_attention(query, key, value)[1]
        everything = ac.attention_forward(query, key, value)[0]  # reads the future
        return everything if dropout is None else dropout(P) @ value, P

    error = failure(check_causal_attention, future_in_the_output)
    assert error.property == "causality" and "changed when only keys and values" in error.detail


@given(st.integers(0, 2**32 - 1))
def test_checker_is_stable_over_seeds(seed):
    assert check_causal_attention(causal_attention, seed=seed) == PROPERTIES
    with pytest.raises(CheckFailed, match="^causality:"):
        check_causal_attention(make(mask="none"), seed=seed)


def test_the_correct_variant_agrees_with_the_package():
    # the checker's own reference agrees with the package's causal attention
    rng = np.random.default_rng(7)
    q, k, v = rng.standard_normal((5, 3)), rng.standard_normal((5, 3)), rng.standard_normal((5, 4))
    out, P = causal_attention(q, k, v)
    out2, P2 = make()(q, k, v)
    assert_allclose(out2, out, rtol=1e-12, atol=1e-12)
    assert_allclose(P2, P, rtol=1e-12, atol=1e-12)


def test_the_planted_causal_faults_fail_the_checker():
    for fault, prop in ((fa.causal_attention_geq, "rows summing to one"),
                        (fa.causal_attention_mask_after_softmax, "rows summing to one")):
        def attend(query, key, value, query_offset=0, dropout=None, fault=fault):
            if query_offset != 0:
                raise NotImplementedError
            O, A = fault(query, key, value)
            return (O if dropout is None else dropout(A) @ value), A
        assert failure(check_causal_attention, attend).property == prop


# --- Chapter 4: the combined mask ------------------------------------------------------------------

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
    assert verdict(lambda T, kv: combined(T, kv)) == "check_attention_mask: all 5 properties hold"


@pytest.mark.parametrize(
    "mask_fn, first_words",
    [
        (lambda T, kv: reference_mask(T, kv)[:, :, :-1], "shape and type"),
        (lambda T, kv: reference_mask(T, kv).astype(int), "shape and type"),
        (lambda T, kv: reference_mask(T, kv)[0], "shape and type"),
        (lambda T, kv: np.broadcast_to(kv[:, None, :], (len(kv), T, T)), "no query reads a future key"),
        (lambda T, kv: combine_masks(fa.causal_mask_geq(T, T), kv[:, None, :]), "a real query reads its own key"),
        (lambda T, kv: np.tril(np.ones((T, T), dtype=bool)) & kv[:, :, None], "padded keys are hidden"),
        (lambda T, kv: np.broadcast_to(np.tril(np.ones((T, T), dtype=bool)), (len(kv), T, T)),
         "padded keys are hidden"),
        (lambda T, kv: np.eye(T, dtype=bool) & kv[:, None, :], "real past keys stay visible"),
        (lambda T, kv: np.zeros((len(kv), T, T), dtype=bool), "a real query reads its own key"),
    ],
)
def test_mask_checker_names_the_failed_property(mask_fn, first_words):
    assert verdict(mask_fn).startswith(first_words)


def test_mask_checker_message_shows_the_key_valid_batch_it_used():
    message = verdict(lambda T, kv: np.tril(np.ones((T, T), dtype=bool)) & kv[:, :, None])
    assert message.startswith("padded keys are hidden from every query: query 2 of sequence 0 may read padded "
                              "key 0 (key_valid = [[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]])")
    assert "key_valid[:, None, :]" in message  # the likely fix


# The probe batches, in order: left padding with an all-padding sequence, right padding, an
# irregular pattern. A mask wrong on one of them only is caught there, and the message shows it.
CASES = ex._mask_cases(0)


def shown(case):
    return f"(key_valid = {case.astype(int).tolist()})"


def test_the_probe_batches_are_the_documented_ones():
    assert [c.shape for c in CASES] == [(3, 5), (2, 6), (3, 7)]
    assert not CASES[0][2].any()  # a sequence of padding only
    assert CASES[1][0].tolist() == [True, True, False, False, False, False]  # padding last
    irregular = [row for row in CASES[2] if 0 < row.sum() < len(row)]
    assert any(np.any(np.diff(row.astype(int)) > 0) and np.any(np.diff(row.astype(int)) < 0)
               for row in irregular)  # not padding at one end


def test_a_mask_wrong_only_for_a_sequence_of_padding_is_caught_on_the_first_batch():
    def reads_itself_when_empty(T, kv):
        return reference_mask(T, kv) | (np.eye(T, dtype=bool) & ~kv.any(axis=-1)[:, None, None])
    message = verdict(reads_itself_when_empty)
    assert message.startswith("padded keys are hidden from every query: query 0 of sequence 2")
    assert shown(CASES[0]) in message


def test_a_mask_that_assumes_left_padding_is_caught_on_the_second_batch():
    def assumes_left_padding(T, kv):
        lengths = kv.sum(axis=-1)
        return reference_mask(T, ac.layers.attention.key_valid_from_lengths(lengths, T, side="left"))
    message = verdict(assumes_left_padding)
    assert shown(CASES[1]) in message and shown(CASES[0]) not in message


def test_a_mask_that_assumes_padding_at_one_end_is_caught_on_the_third_batch():
    def padding_at_one_end(T, kv):
        lengths = kv.sum(axis=-1)
        sides = ["left" if row[-1] else "right" for row in kv]
        rebuilt = np.array([ac.layers.attention.key_valid_from_lengths([n], T, side=s)[0]
                            for n, s in zip(lengths, sides)])
        return reference_mask(T, rebuilt)
    message = verdict(padding_at_one_end)
    assert shown(CASES[2]) in message


def test_a_mask_with_a_fixed_length_is_caught_on_the_second_batch():
    message = verdict(lambda T, kv: reference_mask(5, kv[:, :5]))
    assert message.startswith("shape and type") or shown(CASES[1]) in message
    assert shown(CASES[1]) in message


def test_the_mask_checker_gets_a_copy_of_key_valid():
    def scribbles(T, kv):
        visible = reference_mask(T, kv)
        kv[:] = True  # a careless learner overwrites its input
        return visible
    assert verdict(scribbles) == "check_attention_mask: all 5 properties hold"


def test_the_chapter_solution_passes_the_mask_checker():
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    solution = next(
        "".join(c["source"]) for c in cells
        if c["cell_type"] == "markdown" and "```{solution} ex-ch4-mask" in "".join(c["source"])
    )
    code = re.search(r"```python\n(.*?)```", solution, re.S).group(1)
    namespace = {"np": np, "ac": ac, "verify": ac.verify}
    exec(code, namespace)  # defines my_attention_mask and prints the checker's verdict
    assert verdict(namespace["my_attention_mask"]) == "check_attention_mask: all 5 properties hold"


# --- Chapter 5: the LayerNorm backward and the residual -------------------------------

def package_layernorm_dx(dY, x_hat, inv_std, gamma):
    """The package's backward, as the learner's signature (X: read for its shape)."""
    params = {"gamma": gamma, "beta": np.zeros_like(gamma)}
    saved = {"X": x_hat, "x_hat": x_hat, "inv_std": inv_std}
    return layernorm_backward(params, saved, dY)[1]


def compact_dx(dY, x_hat, inv_std, gamma, *, mean_term=True, variance_term=True,
               gain=True):
    """The compact formula, with each of its parts optional (wrong answers drop one)."""
    g = dY * gamma if gain else dY
    dX = g
    if mean_term:
        dX = dX - g.mean(axis=-1, keepdims=True)
    if variance_term:
        dX = dX - x_hat * np.mean(g * x_hat, axis=-1, keepdims=True)
    return dX * inv_std


def test_layernorm_checker_passes_the_package_and_the_compact_formula():
    properties = ("shape", "rows of dX sum to zero", "dX orthogonal to x_hat",
                  "matches central differences of LayerNorm")
    assert ex.check_layernorm_backward(package_layernorm_dx) == properties
    assert ex.check_layernorm_backward(compact_dx) == properties
    for seed in range(3):
        assert ex.check_layernorm_backward(compact_dx, seed=seed) == properties


@pytest.mark.parametrize("wrong, property, words", [
    (lambda dY, x_hat, s, gamma: compact_dx(dY, x_hat, s, gamma)[..., :-1], "shape",
     "expected the shape of dY, (2, 3, 5)"),
    (lambda dY, x_hat, s, gamma: compact_dx(dY, x_hat, s, gamma).reshape(-1, 5),
     "shape", "got (6, 5)"),
    (lambda *a: compact_dx(*a, mean_term=False), "rows of dX sum to zero",
     "subtract the row mean of g"),
    (lambda *a: compact_dx(*a, variance_term=False), "dX orthogonal to x_hat",
     "x_hat * mean(g * x_hat)"),
    (lambda *a: compact_dx(*a, gain=False), "matches central differences of LayerNorm",
     "g = dY * gamma"),
    (lambda dY, x_hat, s, gamma: compact_dx(dY, x_hat, 1.0, gamma),
     "matches central differences of LayerNorm", "inv_std"),
])
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
            (fln.layernorm_backward_no_variance_term, "dX orthogonal to x_hat")):
        error = failure(ex.check_layernorm_backward, as_learner(backward))
        assert error.property == property


def test_block_residual_checker_passes_the_package():
    assert ex.check_block_residual(residual_backward) == (
        "shape", "the identity path is added", "the identity path is added once",
        "the sublayer path is added", "matches central differences of y = x + f(x)")
    assert ex.check_block_residual(lambda dY, d_sublayer: d_sublayer + dY, seed=3)


@pytest.mark.parametrize("wrong, property, words", [
    (lambda dY, d: (dY + d).T, "shape", "expected the shape of x, (4, 3), got (3, 4)"),
    (fb.residual_backward_dropped, "the identity path is added",
     "only the sublayer path reaches x"),
    (fb.residual_backward_doubled, "the identity path is added once", "counted twice"),
    (lambda dY, d: 0.5 * dY + d, "the identity path is added once", "differs from dY"),
    (lambda dY, d: np.asarray(dY, dtype=float), "the sublayer path is added",
     "fn(0, d_sublayer) differs from d_sublayer"),
    (lambda dY, d: dY + d + dY * d, "matches central differences of y = x + f(x)",
     "sum the two paths and nothing else"),
])
def test_block_residual_checker_names_the_failed_property(wrong, property, words):
    error = failure(ex.check_block_residual, wrong)
    assert error.property == property
    assert words in str(error)


@pytest.mark.parametrize("checker",
                         [ex.check_layernorm_backward, ex.check_block_residual],
                         ids=lambda c: c.__name__)
def test_the_chapter_5_checkers_pass_a_stub_through_and_name_other_exceptions(checker):
    with pytest.raises(NotImplementedError, match="your code here"):
        checker(unfinished)
    error = failure(checker, lambda *args: args[0].missing)
    assert error.property == "shape" and "raised AttributeError" in error.detail
    assert error.__cause__ is not None


# --- Chapter 6: the parameter count --------------------------------------------------

def without(*terms):
    """A parameter count that leaves out the named terms (each a plausible slip)."""
    def fn(config):
        n, D, L, F = config.n_vocab, config.D, config.layers, config.ratio * config.D
        removed = {"positions": config.T_max * D, "mlp biases": L * (F + D),
                   "block norms": L * 4 * D, "final norm": 2 * D,
                   "unembedding": 0 if config.tied else D * n,
                   "tied twice": -D * n if config.tied else 0,
                   "ratio 4": L * (2 * D * F + F) - L * (2 * D * 4 * D + 4 * D),
                   "W_O": L * D * D,
                   # (D, d) per matrix instead of (D, H d)
                   "heads": L * 4 * D * (D - config.d)}
        return model_parameter_count(config) - sum(removed[t] for t in terms)
    return fn


def test_parameter_count_checker_passes_the_closed_form():
    properties = ex.check_parameter_count(model_parameter_count)
    assert properties == ex.PARAMETER_COUNT_PROPERTIES
    assert len(ex.PARAMETER_COUNT_PROPERTIES) == 8
    # the learner may count the arrays of a fresh model instead
    assert ex.check_parameter_count(lambda c: count_parameters(init_model(c)))


@pytest.mark.parametrize("terms, property, words", [
    (("positions",), "the position table", "add the learned positions P"),
    (("unembedding",), "the token table and the unembedding", "add the unembedding U"),
    (("tied twice",), "tied: one table", "count E once"),
    (("heads",), "independent of the number of heads", "H d = H r = D"),
    (("mlp biases",), "one block", "add the MLP biases"),
    (("block norms",), "one block", "add the two LayerNorms of each block"),
    (("block norms", "final norm"), "one block", "add the two LayerNorms"),
    (("W_O",), "one block", "W_O"),
    (("ratio 4",), "the MLP width", "use config.ratio"),
    (("final norm",), "the total", "add the final LayerNorm"),
])
def test_parameter_count_checker_names_each_forgotten_term(terms, property, words):
    error = failure(ex.check_parameter_count, without(*terms))
    assert error.property == property
    assert words in str(error)


def test_parameter_count_checker_wants_a_whole_number():
    for wrong in (lambda c: float(model_parameter_count(c)), lambda c: True,
                  lambda c: np.array([model_parameter_count(c)])):
        error = failure(ex.check_parameter_count, wrong)
        assert error.property == "a whole number" and "return an int" in error.fix
    assert ex.check_parameter_count(lambda c: np.int64(model_parameter_count(c)))


def test_parameter_count_checker_passes_a_stub_through_and_names_other_exceptions():
    with pytest.raises(NotImplementedError, match="your code here"):
        ex.check_parameter_count(unfinished)
    error = failure(ex.check_parameter_count, lambda config: config.vocabulary)
    assert error.property == "a whole number"
    assert "raised AttributeError" in error.detail


# --- check_tied_gradient -----------------------------------------------------------------------

def _tied_loss(params, ids, targets, *, config, keep="both"):
    import dataclasses

    from attncourse.model import model_loss
    untied = dataclasses.replace(config, tied=False)
    as_untied = dict(params, unembed={"W": params["embed"]["E"].T})
    loss, grads = model_loss(as_untied, ids, targets, config=untied)
    dU = grads.pop("unembed")["W"]  # (D, n_vocab)
    lookup = grads["embed"]["E"]
    grads["embed"] = {"E": {"both": lookup + dU.T, "lookup": lookup, "unembedding": dU.T}[keep]}
    return loss, grads


def test_check_tied_gradient_accepts_the_reference():
    from attncourse.verify.exercises import TIED_GRADIENT_PROPERTIES, check_tied_gradient
    assert check_tied_gradient(_tied_loss) == TIED_GRADIENT_PROPERTIES
    assert ac.verify.check_tied_gradient is check_tied_gradient


@pytest.mark.parametrize("keep, fix", [("lookup", "add the unembedding's gradient"),
                                       ("unembedding", "add the lookup's gradient")])
def test_check_tied_gradient_rejects_one_use_only(keep, fix):
    from attncourse.verify.exercises import check_tied_gradient
    with pytest.raises(CheckFailed) as info:
        check_tied_gradient(lambda *args, **kw: _tied_loss(*args, **kw, keep=keep))
    assert info.value.property == "the tied table: both uses, added"
    assert fix in info.value.fix


def test_check_tied_gradient_rejects_a_leftover_unembed_and_a_wrong_loss():
    from attncourse.verify.exercises import check_tied_gradient

    def leftover(params, ids, targets, *, config):
        loss, grads = _tied_loss(params, ids, targets, config=config)
        return loss, dict(grads, unembed={"W": params["embed"]["E"].T})

    with pytest.raises(CheckFailed) as info:
        check_tied_gradient(leftover)
    assert info.value.property == "the nesting of params"
    with pytest.raises(CheckFailed) as info:
        check_tied_gradient(lambda *a, **kw: (0.0, _tied_loss(*a, **kw)[1]))
    assert info.value.property == "the tied loss"


def test_check_tied_gradient_passes_not_implemented_through():
    from attncourse.verify.exercises import check_tied_gradient

    def stub(params, ids, targets, *, config):
        raise NotImplementedError("your code here")

    with pytest.raises(NotImplementedError):
        check_tied_gradient(stub)
