"""Fault controls: every registered fault against every check that claims to catch it.

Each module of ``attncourse.kit.faults`` holds a registry: ``FAULTS`` (what each planted
mistake gets wrong, the checks that must catch it, the checks blind to it), ``CHECKS``
and ``CORRECT`` (the package functions every check must pass). The first tests run the
whole registry; the tests after them keep the exact wrong values the faults produce.
"""

import importlib
import inspect
import math
import pkgutil
import re
import warnings

import numpy as np
import pytest
from hypothesis import given
from numpy.testing import assert_allclose, assert_array_equal

import attncourse.kit.faults as faults
from attncourse.kit.examples import example1, random_head
from attncourse.kit.faults import attention as fa
from attncourse.kit.faults import embedding as fe
from attncourse.kit.faults import head as fh
from attncourse.kit.faults import linear as fl
from attncourse.kit.faults import loss as floss
from attncourse.kit.faults import multihead as fm
from attncourse.kit.faults import positions as fp
from attncourse.kit.faults import softmax as fs
from attncourse.layers.attention import (attention_backward, attention_forward,
                                         causal_attention, causal_mask, combine_masks,
                                         key_padding_mask, key_valid_from_lengths)
from attncourse.layers.embedding import embedding_backward, embedding_forward
from attncourse.layers.head import head_backward, head_forward, project
from attncourse.layers.linear import linear_forward
from attncourse.layers.multihead import init_multihead, merge_heads, split_heads
from attncourse.layers.positions import (init_positions, positions_backward,
                                         positions_forward)
from attncourse.loss import cross_entropy, cross_entropy_backward, cross_entropy_forward
from attncourse.softmax import softmax, softmax_backward
from attncourse.kit import CheckFailed
from attncourse.kit.conformance import causal_failures, padding_failures
from attncourse.kit.gradients import (STEPS, TOLERANCE, gradcheck, layer_gradcheck,
                                         numerical_gradient, qkv_gradcheck)
from attncourse.kit.properties import assert_rows_sum_to_one, assert_rows_sum_to_zero
from strategies import matrices

TIGHT = 64 * np.finfo(np.float64).eps

MODULES = tuple(
    importlib.import_module(f"attncourse.kit.faults.{info.name}")
    for info in pkgutil.iter_modules(faults.__path__) if not info.name.startswith("_")
)
REGISTRY = ("FAULTS", "CHECKS", "CORRECT", "BUILDING_BLOCKS")


def short(module):
    return module.__name__.rsplit(".", 1)[-1]


def stated_pairs():
    for module in MODULES:
        for fault in module.FAULTS:
            for names, expected in ((fault.caught_by, True), (fault.blind, False)):
                for name in names:
                    yield pytest.param(module, fault, name, expected,
                                       id=f"{short(module)}:{fault.name}:{name}")


def all_checks():
    for module in MODULES:
        for check in module.CHECKS.values():
            yield pytest.param(module, check, id=f"{short(module)}:{check.name}")


def planted(function):
    """The members of a fault's ``function`` that live in a faults module."""
    members = function if isinstance(function, tuple) else (function,)
    return [f for f in members if f.__module__.startswith("attncourse.kit.faults.")]


# --- the registry ---------------------------------------------------------------------


@pytest.mark.parametrize("module, fault, check, expected", list(stated_pairs()))
def test_every_stated_verdict_holds(module, fault, check, expected):
    check = module.CHECKS[check]
    assert check.takes == fault.imitates
    if expected:
        with pytest.raises(CheckFailed):
            check.run(fault.function)
    else:
        assert check.run(fault.function) is None  # blind: the fault passes this check


def stated_verdicts(module):
    """The rows of ``faults.verdicts`` as the registry states them: (fault, check,
    stated, caught) with caught == stated, which test_every_stated_verdict_holds
    proves."""
    return [(fault.name, name, expected, expected) for fault in module.FAULTS
            for names, expected in ((fault.caught_by, True), (fault.blind, False))
            for name in names]


@pytest.mark.parametrize("module, check", list(all_checks()))
def test_every_check_passes_the_correct_implementation(module, check):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(over="raise", invalid="raise", divide="raise"):  # no NaN, inf
            assert check.run(module.CORRECT[check.takes]) is None


def test_every_faults_module_is_exported_and_has_a_registry():
    exported = {n for n in faults.__all__ if inspect.ismodule(getattr(faults, n))}
    assert {short(m) for m in MODULES} == exported
    for module in MODULES:
        for name in REGISTRY:
            assert name in module.__all__, (short(module), name)


@pytest.mark.parametrize("module", MODULES, ids=short)
def test_the_registry_is_complete_and_consistent(module):
    names = [fault.name for fault in module.FAULTS]
    assert len(names) == len(set(names))
    for key, check in module.CHECKS.items():
        assert key == check.name
        assert check.takes in module.CORRECT
    for fault in module.FAULTS:
        assert fault.caught_by, f"{fault.name} has no check that catches it"
        stated = fault.caught_by + fault.blind
        assert len(stated) == len(set(stated)), fault.name
        assert fault.imitates in module.CORRECT
        for name in stated:
            assert name in module.CHECKS, (fault.name, name)
            assert module.CHECKS[name].takes == fault.imitates, (fault.name, name)
        assert fault.wrong, fault.name
        assert planted(fault.function), f"{fault.name} plants no function of faults/"
    # a check seen to fail on no fault would make its blind spots say nothing
    catching = {name for fault in module.FAULTS for name in fault.caught_by}
    assert set(module.CHECKS) == catching


def test_fault_names_are_unique_across_modules():
    names = [fault.name for module in MODULES for fault in module.FAULTS]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("module", MODULES, ids=short)
def test_every_public_function_is_a_fault_or_a_building_block_of_one(module):
    functions = {name for name in module.__all__ if name not in REGISTRY}
    assert all(inspect.isfunction(getattr(module, name)) for name in functions)
    as_faults = {f.__name__ for fault in module.FAULTS for f in planted(fault.function)
                 if f.__module__ == module.__name__}
    assert functions == as_faults | set(module.BUILDING_BLOCKS)
    assert not as_faults & set(module.BUILDING_BLOCKS)
    everywhere = {fault.name: fault for m in MODULES for fault in m.FAULTS}
    for block, fault_name in module.BUILDING_BLOCKS.items():
        users = planted(everywhere[fault_name].function)
        assert any(block in inspect.getsource(f) for f in users), (block, fault_name)


@pytest.mark.parametrize("module", MODULES, ids=short)
def test_every_fault_has_the_signature_of_the_function_it_imitates(module):
    same = {"query": "Q", "key": "K", "value": "V"}  # causal_attention's Q, K, V

    def parameters(f):
        items = inspect.signature(f).parameters.items()
        return [(same.get(name, name), p) for name, p in items]

    for fault in module.FAULTS:
        correct = module.CORRECT[fault.imitates]
        pairs = zip(fault.function, correct) if isinstance(correct, tuple) else [
            (fault.function, correct)]
        for wrong, right in pairs:
            wrong_names = [name for name, _ in parameters(wrong)]
            right_params = parameters(right)
            required = [n for n, p in right_params
                        if p.default is inspect.Parameter.empty]
            assert wrong_names[: len(required)] == required, fault.name
            assert set(wrong_names) <= {n for n, _ in right_params}, fault.name


@pytest.mark.parametrize("module", MODULES, ids=short)
def test_the_table_lists_every_verdict_in_lines_of_at_most_88_characters(module):
    rows = stated_verdicts(module)
    # the stated verdicts are those a fresh run gives (shown on a quick module)
    if module is fa:
        assert rows == faults.verdicts(module.FAULTS, module.CHECKS)
    lines = faults.table(module.FAULTS, module.CHECKS, rows=rows).splitlines()
    assert len(lines) == 1 + len(rows)
    assert all(len(line) <= 88 for line in lines)
    # each verdict itself is asserted by test_every_stated_verdict_holds; this test
    # checks how the table prints them
    for line, (fault, check, _, caught) in zip(lines[1:], rows):
        assert line.split()[0] == fault and check in line
        assert line.endswith("caught" if caught else "passes: blind to it")


def test_a_wrong_registry_entry_is_reported():
    fault = fm.FAULTS[0]  # blind to the layer gradcheck
    flipped = fault._replace(caught_by=fault.caught_by + fault.blind, blind=())
    assert [row[3] for row in faults.verdicts([flipped], fm.CHECKS)] == [True, False]
    assert "(registry says caught)" in faults.table([flipped], fm.CHECKS)
    rows = faults.verdicts([flipped], fm.CHECKS)
    assert (faults.table([flipped], fm.CHECKS, rows=rows)
            == faults.table([flipped], fm.CHECKS))
    with pytest.raises(ValueError, match="names the check 'no such check'"):
        faults.verdicts([fault._replace(blind=("no such check",))], fm.CHECKS)
    with pytest.raises(ValueError, match="takes 'attention_forward'"):
        faults.verdicts([fault._replace(caught_by=("Example 1 forward",))], fa.CHECKS)


def test_a_check_that_crashes_has_not_caught_anything():
    check = fa.CHECKS["rows of A sum to one"]
    fault = fa.FAULTS[1]._replace(caught_by=(check.name,), blind=())
    with pytest.raises(ValueError):  # the missing transpose cannot run (5, 3) x (5, 3)
        faults.verdicts([fault], fa.CHECKS)


@pytest.mark.parametrize("module, fault, check, message", [
    (fa, "attention_scores_missing_transpose", "transpose check",
     r"^transpose: .*the transpose of K is missing"),
    (fa, "attention_forward_missing_transpose", "shapes on the random head",
     r"^shapes on the random head: Q \(5, 3\), K \(5, 3\), V \(5, 4\) raised"),
    (fa, "attention_forward_columnwise", "rows of A sum to one", "^rows summing"),
    (fs, "softmax_columnwise", "rows sum to one", "^rows summing to one"),
    (fs, "softmax_backward_numerator_only", "dS rows sum to zero",
     "^rows of dS summing to zero"),
    (fs, "softmax_without_max_subtraction", "extreme scores finite",
     "^rows summing to one: A holds a non-finite weight"),
    (fh, "head_backward_last_branch", "layer gradcheck", r"on x \(h=1e-05\)"),
    (fe, "embedding_backward_overwrite", "learner checker",
     "repeated tokens add their gradients"),
    (fe, "embedding_backward_fancy_iadd", "learner checker",
     "repeated tokens add their gradients"),
    (floss, "cross_entropy_naive", "learner checker (loss)",
     "finite for extreme logits"),
    (floss, "cross_entropy_backward_wrong_sign", "learner checker (dZ)",
     "gradient matches central differences"),
    (floss, "cross_entropy_backward_sum", "learner checker (dZ)",
     "gradient matches central differences"),
    (fl, "linear_backward_transposed", "layer gradcheck",
     r"^gradient shapes: gradient for W has shape \(7, 3\), input has \(3, 7\)"),
    (fl, "linear_backward_transposed", "gradcheck, square W", r"on W \(h=1e-05\)"),
    (fp, "positions_after_attention", "earlier positions reach t",
     r"output at t = 1 does not depend on the rows P\[:1\]"),
])
def test_a_caught_fault_is_named_by_the_failed_property(module, fault, check, message):
    fault = next(f for f in module.FAULTS if f.name == fault)
    with pytest.raises(CheckFailed) as failure:
        module.CHECKS[check].run(fault.function)
    assert re.search(message, str(failure.value)), str(failure.value)


def test_example1_closed_forms_are_the_exact_values():
    sy = pytest.importorskip("attncourse.kit.symbolic")
    ex = sy.example1()
    Q, K, V = (sy.product(ex["X"], ex[W]) for W in ("W_Q", "W_K", "W_V"))
    S = sy.scores(Q, K)
    A = sy.softmax_rows(S)

    def J(Q, K, V):
        return sy.pairing(sy.weighted_sum(sy.softmax_rows(sy.scores(Q, K)), V), ex["G"])

    exact = {
        "S": S, "A": A, "O": sy.weighted_sum(A, V),
        "dQ": sy.gradient_at(lambda F: J(F, K, V), Q, "Q"),
        "dK": sy.gradient_at(lambda F: J(Q, F, V), K, "K"),
        "dV": sy.gradient_at(lambda F: J(Q, K, F), V, "V"),
        "dX": sy.gradient_at(
            lambda F: sy.head_objective(F, ex["W_Q"], ex["W_K"], ex["W_V"], ex["G"]),
            ex["X"], "X"),
    }
    values = fa._example1_values()
    for name, M in exact.items():
        assert_allclose(values[name], sy.to_float(M), rtol=1e-14, atol=1e-15,
                        err_msg=name)
    assert not values["dX"].flags.writeable


# --- 1. missing transpose -------------------------------------------------------------


def qkv(seed=0, **sizes):
    h = random_head(seed=seed, **sizes)
    return (*project(h.X, h.W_Q, h.W_K, h.W_V), h.G)


def test_missing_transpose_in_scores_is_exactly_invisible_on_example1():
    ex = example1()  # the reason the transpose check exists: K = I is symmetric
    Q, K, V = project(ex.X, ex.W_Q, ex.W_K, ex.W_V)
    assert_allclose(fa.attention_forward_missing_transpose(Q, K, V)[1].A,
                    attention_forward(Q, K, V)[1].A, rtol=0, atol=0)


def test_missing_transpose_in_scores_changes_the_weights_when_K_is_not_symmetric():
    Q, K, V, _ = qkv(4, T=3, D=5, d=3, r=2)  # d == T_k, so the product runs
    assert not np.allclose(K, K.T)
    A_bad = fa.attention_forward_missing_transpose(Q, K, V)[1].A
    assert np.abs(A_bad - attention_forward(Q, K, V)[1].A).max() > 1e-3


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_missing_transpose_in_dK_leaves_dQ_right(seed):
    Q, K, V, G = qkv(seed)
    assert qkv_gradcheck(attention_backward, Q, K, V, G).passed
    report = qkv_gradcheck(fa.attention_backward_missing_transpose, Q, K, V, G)
    assert report.errors[("K", 1e-5)] > 1e-3 and report.errors[("Q", 1e-5)] < 1e-7


# --- 2. column-wise normalisation -----------------------------------------------------


def test_columnwise_normalises_the_other_axis():
    Q, K, V, _ = qkv()
    A_bad = fa.attention_forward_columnwise(Q, K, V)[1].A
    assert_allclose(A_bad.sum(axis=-2), 1.0, rtol=TIGHT)


@given(matrices((3, 5), scale=4.0))
def test_columnwise_softmax_fails_the_row_check_on_non_square_scores(S):
    # 3 queries x 5 keys: columns sum to one, so the rows sum to 5/3 on average
    with pytest.raises(CheckFailed, match="rows summing to one"):
        assert_rows_sum_to_one(fs.softmax_columnwise(S))


# --- 3. numerator-only softmax backward -----------------------------------------------


def test_numerator_only_leaves_the_row_means_in_dS_on_example1():
    values = fa._example1_values()
    dS_bad = fs.softmax_backward_numerator_only(values["A"], values["dA"])
    assert_allclose(dS_bad.sum(axis=-1), [1.5, 6.0])  # the denominator path's share
    with pytest.raises(CheckFailed, match="rows of dS summing to zero"):
        assert_rows_sum_to_zero(dS_bad)
    dS = softmax_backward(values["A"], values["dA"])
    assert_allclose(dS, values["dS"], rtol=TIGHT)


@given(matrices((4, 6), scale=3.0), matrices((4, 6), scale=3.0))
def test_numerator_only_differs_from_correct_by_the_row_mean(S, dA):
    A = softmax(S)
    row_mean = np.sum(A * dA, axis=-1, keepdims=True)
    assert_allclose(fs.softmax_backward_numerator_only(A, dA) - softmax_backward(A, dA),
                    A * row_mean, rtol=1e-12, atol=1e-12)


def test_numerator_only_rejects_mismatched_shapes():
    message = r"^dA must have the shape of A, \(2, 3\), got \(3, 2\)$"
    with pytest.raises(ValueError, match=message):
        fs.softmax_backward_numerator_only(np.ones((2, 3)), np.ones((3, 2)))


# --- 4. dropped 1/sqrt(d) -------------------------------------------------------------


def test_unscaled_forward_is_attention_with_queries_scaled_by_sqrt_d():
    ex = example1()
    Q, K, V = project(ex.X, ex.W_Q, ex.W_K, ex.W_V)
    A_bad = fa.attention_forward_unscaled(Q, K, V)[1].A
    A_scaled_Q = attention_forward(Q * math.sqrt(2), K, V)[1].A
    assert_allclose(A_bad, A_scaled_Q, rtol=TIGHT, atol=TIGHT)


def test_unscaled_backward_is_off_by_sqrt_d():
    Q, K, V, G = qkv(2)
    _, saved = attention_forward(Q, K, V)
    dQ, dK, dV = attention_backward(saved, G)
    bad = fa.attention_backward_unscaled(saved, G)
    d = Q.shape[-1]
    assert_allclose(bad[0], math.sqrt(d) * dQ, rtol=1e-12, atol=1e-14)
    assert_allclose(bad[1], math.sqrt(d) * dK, rtol=1e-12, atol=1e-14)
    assert_allclose(bad[2], dV, rtol=0, atol=0)


def test_unscaled_throughout_is_the_correct_backward_at_sqrt_d_times_Q():
    Q, K, V, G = qkv(5)
    c = math.sqrt(Q.shape[-1])
    dQ, dK, dV = attention_backward(attention_forward(c * Q, K, V)[1], G)
    bads = fa.attention_backward_unscaled_throughout(attention_forward(Q, K, V)[1], G)
    for bad, good in zip(bads, (c * dQ, dK, dV)):
        assert_allclose(bad, good, rtol=1e-12, atol=1e-14)


def test_unscaled_throughout_rejects_a_G_of_the_wrong_shape():
    Q, K, V, G = qkv(0)
    message = r"G must have the shape of O = A V, \(5, 4\), got \(4, 5\)"
    with pytest.raises(ValueError, match=message):
        fa.attention_backward_unscaled_throughout(attention_forward(Q, K, V)[1], G.T)


def test_saturated_weights_hide_the_unscaled_and_transposed_backward():
    # fault control of the test point itself: saturation makes the gradient check blind
    Q, K, V, G = qkv(0, scale=40.0)
    for backward in (fa.attention_backward_unscaled,
                     fa.attention_backward_missing_transpose):
        assert qkv_gradcheck(backward, Q, K, V, G).passed


# --- 5. dX keeps only the last branch -------------------------------------------------


def test_last_branch_dX_is_the_value_branch():
    h = random_head(seed=3, T=4, D=6, d=2, r=5)
    _, saved = head_forward(h.params, h.X)
    (bad, bad_dX), (good, _) = (fh.head_backward_last_branch(h.params, saved, h.G),
                                head_backward(h.params, saved, h.G))
    for name in good:
        assert_allclose(bad[name], good[name], rtol=0, atol=0)
    Q, K, V = project(h.X, h.W_Q, h.W_K, h.W_V)
    dV = attention_backward(attention_forward(Q, K, V)[1], h.G)[2]
    # (T, r) x (r, D) -> (T, D)
    assert_allclose(bad_dX, dV @ h.W_V.T, rtol=1e-12, atol=1e-14)


# --- numerical faults: no max subtraction ---------------------------------------------


@given(matrices((3, 4), scale=20.0))
def test_no_max_subtraction_agrees_on_mild_scores(S):
    # the fault is purely numerical: on mild scores it is the softmax
    assert_allclose(fs.softmax_without_max_subtraction(S), softmax(S),
                    rtol=1e-12, atol=1e-300)


def test_naive_softmax_and_log_fail_at_extreme_logits_and_agree_at_moderate_ones():
    Z = np.array([[1000.0, -1000.0, 0.0]])
    with np.errstate(over="ignore", invalid="ignore"):
        assert np.isnan(fs.softmax_without_max_subtraction(Z)).any()
    assert np.all(np.isfinite(softmax(Z)))
    assert not np.isfinite(floss.cross_entropy_naive(Z, np.array([0])))  # inf / inf
    Z_small = np.array([[0.0, -1000.0]])
    assert not np.isfinite(floss.cross_entropy_naive(Z_small, np.array([1])))  # log 0
    assert cross_entropy(Z_small, np.array([1])) == 1000.0
    Zm, y = np.random.default_rng(13).normal(size=(3, 4)), np.array([0, 1, 2])
    assert abs(floss.cross_entropy_naive(Zm, y) - cross_entropy(Zm, y)) < 1e-12


# --- Chapters 1 and 2: embedding, loss, linear ----------------------------------------


@pytest.mark.parametrize("fault", [fe.embedding_backward_overwrite,
                                   fe.embedding_backward_fancy_iadd])
def test_embedding_faults_are_far_off_and_need_a_repeated_token(fault):
    E = np.random.default_rng(11).normal(size=(6, 4))
    ids = np.array([1, 4, 1, 0, 4, 4, 2])
    assert layer_gradcheck(embedding_forward, fault, {"E": E}, ids).worst > 1e-2
    # without repeated ids the fault is invisible: the check needs a repeated token
    distinct = np.array([3, 0, 5])
    _, saved = embedding_forward({"E": E}, distinct)
    dX = np.random.default_rng(14).normal(size=(3, 4))
    assert np.array_equal(fault({"E": E}, saved, dX)[0]["E"],
                          embedding_backward({"E": E}, saved, dX)[0]["E"])
    assert layer_gradcheck(embedding_forward, fault, {"E": E}, distinct).passed


@pytest.mark.parametrize("fault", [floss.cross_entropy_backward_wrong_sign,
                                   floss.cross_entropy_backward_sum])
def test_sign_and_reduction_faults_keep_rows_summing_to_zero(fault):
    rng = np.random.default_rng(12)
    Z, y = rng.normal(size=(5, 7)), rng.integers(0, 7, size=5)
    loss, saved = cross_entropy_forward({}, Z, targets=y)
    dZ = fault({}, saved, 1.0)[1]
    assert_rows_sum_to_zero(dZ)  # that check alone would miss both
    report = gradcheck(lambda Z: cross_entropy(Z, y), {"Z": Z}, {"Z": dZ})
    assert report.worst > 1e-3


def test_sum_fault_equals_the_gradient_for_a_batch_of_one():
    rng = np.random.default_rng(12)
    Z, y = rng.normal(size=(1, 7)), np.array([3])
    _, saved = cross_entropy_forward({}, Z, targets=y)
    assert_allclose(floss.cross_entropy_backward_sum({}, saved, 1.0)[1],
                    cross_entropy_backward({}, saved, 1.0)[1], rtol=0, atol=0)


def test_transposed_linear_gradient_is_far_off_for_a_square_W():
    rng = np.random.default_rng(5)
    params, X = {"W": rng.normal(size=(5, 5))}, rng.normal(size=(4, 5))
    report = layer_gradcheck(linear_forward, fl.linear_backward_transposed, params, X)
    assert report.worst > 1e-3


# --- Chapter 4: causality and padding -------------------------------------------------


@pytest.fixture
def batch():
    rng = np.random.default_rng(0)
    B, T, d, r = 2, 6, 3, 2
    Q, K = rng.normal(size=(B, T, d)), rng.normal(size=(B, T, d))
    return Q, K, rng.normal(size=(B, T, r))


def test_geq_mask_hides_the_diagonal_and_fails_two_properties(batch):
    assert not np.any(np.diag(fa.causal_mask_geq(4, 4)))
    assert causal_failures(fa.causal_attention_geq, *batch) == [
        "every row sums to one", "every position reads itself"]


def test_mask_after_softmax_fails_the_row_sums_only(batch):
    assert causal_failures(fa.causal_attention_mask_after_softmax, *batch) == [
        "every row sums to one"]


def test_padding_on_queries_fails_both_padding_properties(batch):
    key_valid = key_valid_from_lengths([4, 6], 6, side="left")
    assert padding_failures(fa.causal_attention_query_padding, *batch, key_valid) == [
        "padded keys get weight exactly 0", "real outputs ignore the padding"]


def test_naive_minus_inf_gives_nan_in_both_passes_and_only_for_empty_rows(batch):
    Q, K, V = batch
    T = Q.shape[-2]
    key_valid = key_valid_from_lengths([4, 6], T, side="left")
    visible = combine_masks(causal_mask(T, T), key_padding_mask(key_valid, T))
    empty = ~visible.any(axis=-1)
    G = np.ones((2, T, 2))
    with np.errstate(all="ignore"):
        O, saved = fa.naive_masked_attention_forward(Q, K, V, visible)
        dQ, dK, dV = attention_backward(saved, G)  # the planted pair's backward
    assert_array_equal(np.isnan(O).any(axis=-1), empty)
    assert np.isnan(dK[0]).all() and np.isnan(dV[0]).all()
    assert np.isnan(dQ[empty]).all()
    # where no row is empty, the naive version agrees with the package, in both passes
    O_ok, A_ok = causal_attention(Q, K, V, key_valid=key_valid)
    assert_allclose(O[1], O_ok[1], rtol=1e-14, atol=1e-15)
    package_grads = attention_backward(attention_forward(Q, K, V, visible)[1], G)
    for naive, package in zip((dQ, dK, dV), package_grads):
        assert_allclose(naive[1], package[1], rtol=1e-13, atol=1e-15)
    assert all(np.all(np.isfinite(x)) for x in (O_ok, A_ok))
    with pytest.raises(FloatingPointError, match="invalid value"):
        with np.errstate(invalid="raise"):
            fa.naive_masked_attention_forward(Q, K, V, visible)
    with pytest.warns(RuntimeWarning, match="invalid value"):
        fa.naive_masked_attention_forward(Q, K, V, visible)


def test_naive_minus_inf_equals_the_package_when_no_row_is_empty(batch):
    Q, K, V = batch
    causal = causal_mask(6, 6)
    O, saved = fa.naive_masked_attention_forward(Q, K, V, causal)
    O_ok, saved_ok = attention_forward(Q, K, V, causal)
    assert_allclose(saved.A, saved_ok.A, rtol=1e-14, atol=0)
    assert_allclose(O, O_ok, rtol=1e-14, atol=1e-15)
    def naive(Q, K, V):
        return fa.naive_masked_attention_forward(Q, K, V, causal)

    def naive_weights(Q, K, V):
        O, saved = naive(Q, K, V)
        return O, saved.A

    assert causal_failures(naive_weights, Q, K, V) == []
    G = np.random.default_rng(1).normal(size=(2, 6, 2))
    assert qkv_gradcheck(attention_backward, Q, K, V, G, forward=naive).passed


def test_no_warning_from_the_package_where_the_fault_warns(batch):
    Q, K, V = batch
    key_valid = key_valid_from_lengths([0, 6], 6, side="left")  # sequence 0: padding
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(all="raise"):
            O, A = causal_attention(Q, K, V, key_valid=key_valid)
    assert np.all(O[0] == 0.0) and np.all(A[0] == 0.0)


# --- Chapter 4: heads and positions ---------------------------------------------------


def test_wrong_split_and_merge_are_inverses_of_each_other_but_not_the_right_ones():
    Y = np.arange(2 * 3 * 4.0).reshape(2, 3, 4)
    split = fm.split_heads_no_transpose(Y, 2)
    assert_array_equal(fm.merge_heads_no_transpose(split), Y)
    assert_array_equal(fm.merge_heads_reversed(fm.split_heads_reversed(Y, 2)), Y)
    assert not np.array_equal(fm.split_heads_no_transpose(Y, 2), split_heads(Y, 2))
    assert not np.array_equal(fm.merge_heads_reversed(split_heads(Y, 2)), Y)
    assert_array_equal(merge_heads(split_heads(Y, 2)), Y)


def test_positions_after_attention_leave_earlier_rows_without_any_influence():
    rng = np.random.default_rng(1)
    params = init_multihead(rng, 7, heads=2, d=3, r=2)
    X = rng.normal(size=(2, 5, 7))
    P = init_positions(np.random.default_rng(2), 8, 7)["P"]
    after = lambda P: fp.positions_after_attention(params, {"P": P}, X, 2)  # noqa: E731
    g = np.random.default_rng(0).normal(size=7)
    for t in (1, 3, 4):
        f = lambda P, t=t: float(np.sum(after(P)[..., t, :] * g))  # noqa: E731
        assert np.abs(numerical_gradient(f, P, STEPS[0])[:t]).max() == 0.0
    before = fp.CORRECT["positions then attention"](params, {"P": P}, X, 2)
    assert before.shape == after(P).shape  # same interface, different wiring
    assert np.abs(before - after(P)).max() > TOLERANCE


def test_overwritten_dP_is_right_for_a_single_sequence():
    rng = np.random.default_rng(3)
    params = init_positions(rng, 6, 7)
    X = rng.normal(size=(5, 7))  # one sequence: nothing to sum, nothing lost
    _, saved = positions_forward(params, X)
    dY = rng.normal(size=(5, 7))
    assert_allclose(fp.positions_backward_overwrite(params, saved, dY)[0]["P"],
                    positions_backward(params, saved, dY)[0]["P"], rtol=0, atol=0)
    fault = fp.positions_backward_overwrite
    assert layer_gradcheck(positions_forward, fault, params, X).passed
