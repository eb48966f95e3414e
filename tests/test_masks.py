"""Key-padding masks, their combination with the causal mask, and causal_attention(key_valid=...)."""

import json
import pathlib
import re
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

import attncourse as ac
from attncourse import faults_ch4 as faults
from strategies import matrices

EPS = np.finfo(np.float64).eps
NOTEBOOK = pathlib.Path(__file__).resolve().parents[1] / "chapters" / "04_causality_heads_positions.ipynb"


def combined(T, key_valid):
    return ac.combine_masks(ac.causal_mask(T, T), ac.key_padding_mask(key_valid, T))


def random_qkv(rng, B=2, T=6, d=3, r=2):
    return rng.normal(size=(B, T, d)), rng.normal(size=(B, T, d)), rng.normal(size=(B, T, r))


def test_key_valid_from_lengths_left_and_right():
    assert_array_equal(ac.key_valid_from_lengths([2, 0, 4], 4), [[1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]])
    assert_array_equal(ac.key_valid_from_lengths([2, 0, 4], 4, side="left"), [[0, 0, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1]])
    assert ac.key_valid_from_lengths([1], 3).dtype == np.bool_


@pytest.mark.parametrize(
    "lengths, T, side, message",
    [
        ([5], 4, "right", r"every length must lie in \[0, T=4\], got \[5\]"),
        ([-1], 4, "right", r"every length must lie in \[0, T=4\], got \[-1\]"),
        ([[1, 2]], 4, "right", r"lengths must be a 1-D array of integers, got shape \(1, 2\)"),
        ([1.5], 4, "right", r"lengths must be a 1-D array of integers, got shape \(1,\) and dtype float64"),
        ([1], 4, "middle", r"side must be 'left' or 'right', got 'middle'"),
    ],
)
def test_key_valid_from_lengths_rejects_bad_input(lengths, T, side, message):
    with pytest.raises(ValueError, match=message):
        ac.key_valid_from_lengths(lengths, T, side=side)


def test_key_padding_mask_hides_columns_not_rows():
    key_valid = np.array([[False, True, True], [True, True, False]])
    mask = ac.key_padding_mask(key_valid, 3)
    assert mask.shape == (2, 1, 3)
    full = np.broadcast_to(mask, (2, 3, 3))
    for b in range(2):
        for i in range(3):
            assert_array_equal(full[b, i], key_valid[b])  # every query row sees the same keys


@pytest.mark.parametrize(
    "key_valid, T_k, batch, message",
    [
        (np.array([1, 0, 1]), 3, None, r"key_valid must be a boolean array, got dtype int64"),
        (np.ones((2, 4), dtype=bool), 3, None, r"key_valid must have shape \(\.\.\., T_k\) with T_k=3 keys, got shape \(2, 4\)"),
        (np.array(True), 1, None, r"got shape \(\)"),
        (np.ones((3, 5), dtype=bool), 5, (2,), r"key_valid has shape \(3, 5\); its leading dimensions must broadcast to the batch shape \(2,\)"),
        (np.ones((2, 5), dtype=bool), 5, (), r"must broadcast to the batch shape \(\)"),
    ],
)
def test_key_padding_mask_rejects_bad_input(key_valid, T_k, batch, message):
    with pytest.raises(ValueError, match=message):
        ac.key_padding_mask(key_valid, T_k, batch)


def test_combine_masks():
    a = np.array([[True, False], [True, True]])
    b = np.array([[False, True]])
    assert_array_equal(ac.combine_masks(a, b), [[False, False], [False, True]])
    assert_array_equal(ac.combine_masks(a), a)
    with pytest.raises(ValueError, match="at least one mask"):
        ac.combine_masks()
    with pytest.raises(ValueError, match=r"mask 1 must be boolean, got dtype int64"):
        ac.combine_masks(a, np.array([1, 0]))
    with pytest.raises(ValueError, match=r"masks do not broadcast: shapes \[\(2, 2\), \(3,\)\]"):
        ac.combine_masks(a, np.ones(3, dtype=bool))


def test_causal_attention_with_key_valid_equals_attention_with_the_combined_mask():
    rng = np.random.default_rng(0)
    Q, K, V = random_qkv(rng)
    key_valid = ac.key_valid_from_lengths([3, 6], 6, side="left")
    O, A = ac.causal_attention(Q, K, V, key_valid=key_valid)
    O_ref, A_ref = ac.attention_forward(Q, K, V, visible=combined(6, key_valid))
    assert_array_equal(O, O_ref)
    assert_array_equal(A, A_ref)
    # without key_valid nothing changes
    assert_array_equal(ac.causal_attention(Q, K, V)[1], ac.causal_attention(Q, K, V, key_valid=np.ones((2, 6), bool))[1])


def test_padded_keys_get_exactly_zero_weight_and_gradient_and_empty_rows_are_zero():
    rng = np.random.default_rng(1)
    Q, K, V = random_qkv(rng, B=3, T=5, d=4, r=2)
    key_valid = ac.key_valid_from_lengths([2, 5, 0], 5, side="left")
    visible = combined(5, key_valid)
    G = rng.normal(size=(3, 5, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(all="raise"):
            O, A = ac.causal_attention(Q, K, V, key_valid=key_valid)
            dQ, dK, dV = ac.attention_backward(Q, K, V, G, visible)
    empty = ~visible.any(axis=-1)
    assert empty.sum() == 3 + 0 + 5  # sequence 0: queries 0-2; sequence 2: all
    assert np.all(A[~visible] == 0.0)
    assert np.all(A[empty] == 0.0) and np.all(O[empty] == 0.0)
    assert_allclose(A[~empty].sum(axis=-1), 1.0, rtol=0, atol=5 * EPS)
    assert np.all(dQ[empty] == 0.0)
    assert np.all(dK[~key_valid] == 0.0) and np.all(dV[~key_valid] == 0.0)
    assert np.all(dK[2] == 0.0) and np.all(dV[2] == 0.0)  # a sequence of padding only: no gradient at all
    report = ac.gradcheck(
        lambda Q, K, V: float(np.sum(ac.causal_attention(Q, K, V, key_valid=key_valid)[0] * G)),
        {"Q": Q, "K": K, "V": V}, {"Q": dQ, "K": dK, "V": dV},
    )
    assert report.passed, report


def test_key_valid_broadcasts_over_heads():
    rng = np.random.default_rng(2)
    B, H, T = 2, 3, 4
    Q, K, V = (rng.normal(size=(B, H, T, w)) for w in (2, 2, 5))
    key_valid = ac.key_valid_from_lengths([1, 4], T, side="left")
    O, A = ac.causal_attention(Q, K, V, key_valid=key_valid[:, None, :])
    for h in range(H):
        O_h, A_h = ac.causal_attention(Q[:, h], K[:, h], V[:, h], key_valid=key_valid)
        assert_array_equal(A[:, h], A_h)
        assert_allclose(O[:, h], O_h, rtol=1e-15, atol=0)


def test_causal_attention_rejects_a_key_valid_of_the_wrong_shape():
    Q, K, V = random_qkv(np.random.default_rng(3), B=2, T=4)
    with pytest.raises(ValueError, match=r"key_valid must have shape \(\.\.\., T_k\) with T_k=4 keys, got shape \(2, 5\)"):
        ac.causal_attention(Q, K, V, key_valid=np.ones((2, 5), dtype=bool))
    with pytest.raises(ValueError, match=r"key_valid has shape \(3, 4\); its leading dimensions must broadcast to the batch shape \(2,\)"):
        ac.causal_attention(Q, K, V, key_valid=np.ones((3, 4), dtype=bool))
    with pytest.raises(ValueError, match=r"key_valid must be a boolean array"):
        ac.causal_attention(Q, K, V, key_valid=np.ones((2, 4)))


def test_real_outputs_ignore_the_content_of_padding():
    rng = np.random.default_rng(4)
    Q, K, V = random_qkv(rng, B=2, T=6, d=3, r=4)
    key_valid = ac.key_valid_from_lengths([4, 2], 6, side="left")
    O, _ = ac.causal_attention(Q, K, V, key_valid=key_valid)
    K2 = np.where(key_valid[..., None], K, 50.0 * rng.normal(size=K.shape))
    V2 = np.where(key_valid[..., None], V, 50.0 * rng.normal(size=V.shape))
    O2, _ = ac.causal_attention(Q, K2, V2, key_valid=key_valid)
    assert_array_equal(O2[key_valid], O[key_valid])


@given(st.data(), st.integers(1, 3), st.integers(1, 6), st.integers(1, 4), st.integers(1, 4), st.sampled_from(["left", "right"]))
def test_masked_attention_properties(data, B, T, d, r, side):
    lengths = data.draw(st.lists(st.integers(0, T), min_size=B, max_size=B))
    key_valid = ac.key_valid_from_lengths(lengths, T, side=side)
    visible = combined(T, key_valid)
    Q = data.draw(matrices((B, T, d)))
    K = data.draw(matrices((B, T, d)))
    V = data.draw(matrices((B, T, r)))
    G = data.draw(matrices((B, T, r)))
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        O, A = ac.causal_attention(Q, K, V, key_valid=key_valid)
        dQ, dK, dV = ac.attention_backward(Q, K, V, G, visible)
    empty = ~visible.any(axis=-1)
    assert all(np.all(np.isfinite(x)) for x in (O, A, dQ, dK, dV))
    assert np.all(A[~visible] == 0.0)
    assert np.all(O[empty] == 0.0) and np.all(dQ[empty] == 0.0)
    assert np.all(dK[~key_valid] == 0.0) and np.all(dV[~key_valid] == 0.0)
    assert_allclose(A[~empty].sum(axis=-1), 1.0, rtol=0, atol=8 * T * EPS)


# --- the exercise checker --------------------------------------------------------------------


def reference_mask(T, key_valid):
    return np.tril(np.ones((T, T), dtype=bool)) & key_valid[:, None, :]


def verdict(mask_fn):
    try:
        return ac.check_attention_mask(mask_fn)
    except AssertionError as err:
        return str(err)


def test_checker_accepts_correct_masks():
    assert verdict(reference_mask) == "check_attention_mask: all 5 properties hold"
    assert verdict(lambda T, kv: combined(T, kv)) == "check_attention_mask: all 5 properties hold"


@pytest.mark.parametrize(
    "mask_fn, first_words",
    [
        (lambda T, kv: reference_mask(T, kv)[:, :, :-1], "shape and type"),
        (lambda T, kv: reference_mask(T, kv).astype(int), "shape and type"),
        (lambda T, kv: reference_mask(T, kv)[0], "shape and type"),
        (lambda T, kv: np.broadcast_to(kv[:, None, :], (len(kv), T, T)), "no query reads a future key"),
        (lambda T, kv: ac.combine_masks(faults.causal_mask_geq(T, T), kv[:, None, :]), "a real query reads its own key"),
        (lambda T, kv: np.tril(np.ones((T, T), dtype=bool)) & kv[:, :, None], "padded keys are hidden"),
        (lambda T, kv: np.broadcast_to(np.tril(np.ones((T, T), dtype=bool)), (len(kv), T, T)), "padded keys are hidden"),
        (lambda T, kv: np.eye(T, dtype=bool) & kv[:, None, :], "real past keys stay visible"),
        (lambda T, kv: np.zeros((len(kv), T, T), dtype=bool), "a real query reads its own key"),
    ],
)
def test_checker_names_the_failed_property(mask_fn, first_words):
    assert verdict(mask_fn).startswith(first_words)


def test_checker_passes_the_stub_error_through():
    def stub(T, key_valid):
        raise NotImplementedError("your code here")

    with pytest.raises(NotImplementedError):
        ac.check_attention_mask(stub)


def test_the_chapter_solution_passes_the_checker():
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    solution = next(
        "".join(c["source"]) for c in cells
        if c["cell_type"] == "markdown" and "```{solution} ex-ch4-mask" in "".join(c["source"])
    )
    code = re.search(r"```python\n(.*?)```", solution, re.S).group(1)
    namespace = {"np": np, "ac": ac}
    exec(code, namespace)  # defines my_attention_mask and prints the checker's verdict
    assert verdict(namespace["my_attention_mask"]) == "check_attention_mask: all 5 properties hold"
