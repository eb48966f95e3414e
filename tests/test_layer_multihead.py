"""Tests of attncourse.layers.multihead: causal multi-head attention with W_O
(split/merge, forward against the loop reference, backward, initialisation)."""

import difflib
import inspect

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

from attncourse.kit.faults import multihead as fmh
from attncourse.kit.faults.multihead import (
    multihead_backward_no_transpose,
    multihead_backward_reversed,
)
from attncourse.layers import multihead as mh
from attncourse.layers.attention import (
    causal_attention,
    causal_mask,
    combine_masks,
    key_padding_mask,
    key_valid_from_lengths,
)
from attncourse.kit.examples import multihead_reference
from attncourse.kit.gradients import layer_gradcheck
from strategies import matrices

EPS = np.finfo(np.float64).eps


def make_case(seed=0, B=2, T=5, D=7, H=2, d=3, r=2, D_out=None, lengths=None):
    rng = np.random.default_rng(seed)
    params = mh.init_multihead(rng, D, heads=H, d=d, r=r, D_out=D_out)
    X = rng.normal(size=(B, T, D)) if B else rng.normal(size=(T, D))
    key_valid = (
        None if lengths is None else key_valid_from_lengths(lengths, T, side="left")
    )
    return rng, params, X, key_valid


def check(params, X, heads, key_valid, G, backward=mh.multihead_backward):
    return layer_gradcheck(
        mh.multihead_forward,
        backward,
        params,
        X,
        dy=G,
        heads=heads,
        key_valid=key_valid,
    )


def test_split_gives_each_head_its_block_of_columns():
    Y = np.arange(2 * 3 * 8).reshape(2, 3, 8)  # B=2, T=3, H w = 8
    heads = mh.split_heads(Y, 4)
    assert heads.shape == (2, 4, 3, 2)
    for h in range(4):
        assert_array_equal(heads[:, h], Y[..., 2 * h : 2 * h + 2])


def test_merge_is_the_inverse_of_split():
    rng = np.random.default_rng(0)
    Y = rng.normal(size=(2, 3, 5, 12))
    for H in (1, 2, 3, 4, 6):
        assert_array_equal(mh.merge_heads(mh.split_heads(Y, H)), Y)
    O = rng.normal(size=(2, 4, 5, 3))
    assert_array_equal(mh.split_heads(mh.merge_heads(O), 4), O)


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: mh.split_heads(np.ones((3, 7)), 2),
            r"^cannot split Y of shape \(3, 7\) into 2 equal heads: Y must have shape "
            r"\(\.\.\., T, H w\)$",
        ),
        (
            lambda: mh.split_heads(np.ones((2, 3, 7)), 2),
            r"^cannot split Y of shape \(2, 3, 7\) into 2 equal heads",
        ),
        (
            lambda: mh.split_heads(np.ones((3, 4)), 0),
            r"sizes must be positive integers: heads=0",
        ),
        (
            lambda: mh.split_heads(np.ones((3, 4)), True),
            r"sizes must be positive integers: heads=True",
        ),
        (
            lambda: mh.split_heads(np.ones(4), 2),
            r"^cannot split Y of shape \(4,\) into 2 equal heads",
        ),
        (
            lambda: mh.merge_heads(np.ones((3, 4))),
            r"^O must have shape \(\.\.\., H, T, w\), got shape \(3, 4\)$",
        ),
    ],
)
def test_split_and_merge_reject_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_init_multihead_shapes():
    params = mh.init_multihead(
        np.random.default_rng(0), D=5, heads=3, d=2, r=4, D_out=6
    )
    assert {n: W.shape for n, W in params.items()} == {
        "W_Q": (5, 6),
        "W_K": (5, 6),
        "W_V": (5, 12),
        "W_O": (12, 6),
    }
    params = mh.init_multihead(np.random.default_rng(0), D=5, heads=3, d=2, r=4)
    assert params["W_O"].shape == (12, 5)  # D_out defaults to D


def test_init_multihead_spread_is_one_over_sqrt_fan_in():
    # fan-in is D for the three projections and H r for W_O; sizes chosen so that D, H
    # r, H d and D_out all differ, so a spread taken from the wrong size is off by a
    # factor of at least 1.4
    D, H, d, r, D_out = 96, 4, 10, 6, 50
    params = mh.init_multihead(
        np.random.default_rng(40), D, heads=H, d=d, r=r, D_out=D_out
    )
    fan_in = {"W_Q": D, "W_K": D, "W_V": D, "W_O": H * r}
    for name, W in params.items():
        n = W.size
        # five standard errors of a sample standard deviation
        tolerance = 5 / np.sqrt(2 * (n - 1))
        assert abs(W.std() * np.sqrt(fan_in[name]) - 1) < tolerance, name
        assert abs(W.mean()) < 5 / np.sqrt(fan_in[name] * n), name
    assert not np.allclose(params["W_Q"], params["W_K"])  # independent draws
    again = mh.init_multihead(
        np.random.default_rng(40), D, heads=H, d=d, r=r, D_out=D_out
    )
    for name in params:
        assert_array_equal(again[name], params[name])


@pytest.mark.parametrize(
    "sizes, shown",
    [
        (dict(D=0, heads=2, d=3, r=2), "D=0"),
        (dict(D=4, heads=0, d=3, r=2), "heads=0"),
        (dict(D=4, heads=2, d=3, r=2, D_out=-1), "D_out=-1"),
        (dict(D=4, heads=2, d=True, r=2), "d=True"),
        (dict(D=4, heads=2, d=3, r=0), "r=0"),
    ],
)
def test_init_multihead_rejects_bad_sizes(sizes, shown):
    with pytest.raises(ValueError, match=f"sizes must be positive integers: {shown}"):
        mh.init_multihead(np.random.default_rng(0), **sizes)


@pytest.mark.parametrize(
    "B, H, lengths", [(2, 2, None), (2, 3, [2, 5]), (0, 2, None), (3, 1, [0, 3, 5])]
)
def test_forward_matches_the_loop_reference(B, H, lengths):
    _, params, X, key_valid = make_case(
        B=B, H=H, lengths=lengths if B else None, D_out=4
    )
    Y, saved = mh.multihead_forward(params, X, heads=H, key_valid=key_valid)
    assert Y.shape == X.shape[:-1] + (4,)
    assert saved["A"].shape == X.shape[:-2] + (H, 5, 5)
    assert_allclose(
        Y,
        multihead_reference(params, X, heads=H, key_valid=key_valid),
        rtol=1e-13,
        atol=1e-15,
    )


def test_batched_equals_one_sequence_at_a_time():
    _, params, X, key_valid = make_case(B=3, H=2, lengths=[1, 5, 3])
    Y, _ = mh.multihead_forward(params, X, heads=2, key_valid=key_valid)
    for b in range(3):
        Y_b, _ = mh.multihead_forward(params, X[b], heads=2, key_valid=key_valid[b])
        assert_allclose(Y[b], Y_b, rtol=1e-14, atol=1e-15)


def test_one_head_with_identity_output_is_the_causal_head():
    rng, params, X, _ = make_case(H=1, d=3, r=2)
    params["W_O"] = np.eye(2)
    O, _ = causal_attention(X @ params["W_Q"], X @ params["W_K"], X @ params["W_V"])
    assert_allclose(
        mh.multihead_forward(params, X, heads=1)[0], O, rtol=1e-14, atol=1e-15
    )


def test_masked_weights_are_exact_zeros_in_every_head():
    _, params, X, key_valid = make_case(B=2, H=3, lengths=[2, 5])
    Y, saved = mh.multihead_forward(params, X, heads=3, key_valid=key_valid)
    visible = combine_masks(
        causal_mask(5, 5), key_padding_mask(key_valid[:, None, :], 5)
    )
    hidden = ~np.broadcast_to(visible, saved["A"].shape)
    assert np.all(saved["A"][hidden] == 0.0)
    assert np.all(Y[0, :2] == 0.0)  # the empty rows of sequence 0


def test_heads_do_not_interact_before_the_output_projection():
    _, params, X, _ = make_case(H=2, d=3, r=2)
    _, saved = mh.multihead_forward(params, X, heads=2)
    for name, cols in (
        ("W_Q", slice(3, 6)),
        ("W_K", slice(3, 6)),
        ("W_V", slice(2, 4)),
    ):
        changed = {n: W.copy() for n, W in params.items()}
        changed[name][:, cols] += 0.5  # head 1's columns only
        _, saved_changed = mh.multihead_forward(changed, X, heads=2)
        # head 0's block: unchanged
        assert_array_equal(saved_changed["C"][..., :2], saved["C"][..., :2])
        assert not np.allclose(saved_changed["C"][..., 2:], saved["C"][..., 2:])


@pytest.mark.parametrize(
    "B, T, D, H, d, r, D_out, lengths",
    [
        (2, 5, 7, 2, 3, 2, 7, [3, 5]),
        (0, 4, 5, 3, 2, 1, 6, None),
        (3, 3, 4, 2, 1, 3, 2, [0, 3, 1]),
    ],
)
def test_gradients_match_finite_differences(B, T, D, H, d, r, D_out, lengths):
    rng, params, X, key_valid = make_case(
        seed=B + T, B=B, T=T, D=D, H=H, d=d, r=r, D_out=D_out, lengths=lengths
    )
    G = rng.normal(size=X.shape[:-1] + (D_out,))
    report = check(params, X, H, key_valid, G)
    assert report.passed, report
    assert {name for name, _ in report.errors} == {"W_Q", "W_K", "W_V", "W_O", "x"}


@pytest.mark.parametrize(
    "backward", [multihead_backward_reversed, multihead_backward_no_transpose]
)
def test_a_backward_with_the_wrong_split_is_caught(backward):
    # fault control: the same forward with a backward that splits dC wrongly; dW_O is
    # still right
    rng, params, X, key_valid = make_case(seed=3, B=2, H=2, lengths=[3, 5])
    G = rng.normal(size=X.shape[:-1] + (7,))
    report = check(params, X, 2, key_valid, G, backward=backward)
    assert not report.passed
    assert {
        name for (name, _), err in report.errors.items() if err >= report.tolerance
    } == {"W_Q", "W_K", "W_V", "x"}


def _body(function):
    """The lines of ``function`` after its docstring."""
    lines = inspect.getsource(function).splitlines()
    closing = [i for i, line in enumerate(lines) if line.rstrip().endswith('"""')]
    return lines[closing[-1] + 1 :] if closing else lines[1:]


@pytest.mark.parametrize(
    "name, core, n_changed",
    [
        # one mistake made at both reshapes (the split and the merge)
        ("multihead_forward_no_transpose", mh.multihead_forward, 2),
        ("multihead_backward_no_transpose", mh.multihead_backward, 2),
        ("multihead_forward_reversed", mh.multihead_forward, 1),
        ("multihead_backward_reversed", mh.multihead_backward, 1),
    ],
)
def test_each_fault_is_a_copy_of_the_layer_with_the_faulty_lines_marked(
    name, core, n_changed
):
    # a planted mistake is a copy of the function with its line changed, marked, and
    # never a callable injected into the core
    fault = getattr(fmh, name)
    ndiff = list(difflib.ndiff(_body(core), _body(fault)))
    removed = [line for line in ndiff if line.startswith("- ")]
    added = [line for line in ndiff if line.startswith("+ ")]
    assert len(removed) == len(added) == n_changed, (removed, added)
    assert all("the fault" in line for line in added), added
    assert list(inspect.signature(fault).parameters) == list(
        inspect.signature(core).parameters
    )
    assert list(inspect.signature(mh.multihead_forward).parameters) == [
        "params", "X", "heads", "key_valid", "past", "query_offset"
    ]  # no split or merge to swap
    assert list(inspect.signature(mh.multihead_backward).parameters) == [
        "params", "saved", "dY"
    ]


@pytest.mark.parametrize(
    "forward", [mh.multihead_forward, fmh.multihead_forward_reversed]
)
def test_the_cached_path_reads_the_past_keys_and_values_first(forward):
    # the layer and its copies keep the past= / query_offset= path: the last 2
    # positions against the 3 cached ones equal the rows of the whole pass (the
    # reversed order is wrong at each position alike, so it caches like the layer)
    _, params, X, _ = make_case(B=2, T=5, H=2)
    _, saved = forward(params, X[:, :3], heads=2)
    past = (saved["K"], saved["V"])
    Y, _ = forward(params, X[:, 3:], heads=2, past=past, query_offset=3)
    assert_allclose(Y, forward(params, X, heads=2)[0][:, 3:], rtol=1e-13, atol=1e-15)


def test_padded_positions_get_exactly_zero_input_gradient():
    rng, params, X, key_valid = make_case(B=2, H=2, lengths=[2, 4])
    Y, saved = mh.multihead_forward(params, X, heads=2, key_valid=key_valid)
    dparams, dX = mh.multihead_backward(params, saved, rng.normal(size=Y.shape))
    assert np.all(dX[~key_valid] == 0.0)
    assert np.all(np.abs(dX[key_valid]).sum(-1) > 0.0)
    assert set(dparams) == set(params) and all(
        dparams[n].shape == params[n].shape for n in params
    )


def test_weight_gradients_are_summed_over_the_batch():
    rng, params, X, _ = make_case(B=3, H=2)
    G = rng.normal(size=(3, 5, 7))
    _, saved = mh.multihead_forward(params, X, heads=2)
    dparams, _ = mh.multihead_backward(params, saved, G)
    total = {n: 0.0 for n in params}
    for b in range(3):
        _, saved_b = mh.multihead_forward(params, X[b], heads=2)
        for n, g in mh.multihead_backward(params, saved_b, G[b])[0].items():
            total[n] = total[n] + g
    for n in params:
        assert_allclose(dparams[n], total[n], rtol=1e-12, atol=1e-14)


@settings(max_examples=12)
@given(
    st.data(),
    st.integers(1, 2),
    st.integers(1, 4),
    st.integers(1, 4),
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(1, 3),
)
def test_forward_and_gradients_property(data, B, T, D, H, d, r):
    W = {
        "W_Q": data.draw(matrices((D, H * d), scale=1.0)),
        "W_K": data.draw(matrices((D, H * d), scale=1.0)),
        "W_V": data.draw(matrices((D, H * r), scale=1.0)),
        "W_O": data.draw(matrices((H * r, D), scale=1.0)),
    }
    X = data.draw(matrices((B, T, D), scale=1.0))
    G = data.draw(matrices((B, T, D), scale=1.0))
    lengths = data.draw(st.lists(st.integers(0, T), min_size=B, max_size=B))
    key_valid = key_valid_from_lengths(lengths, T, side="left")
    Y, _ = mh.multihead_forward(W, X, heads=H, key_valid=key_valid)
    assert_allclose(
        Y,
        multihead_reference(W, X, heads=H, key_valid=key_valid),
        rtol=1e-12,
        atol=1e-13,
    )
    report = check(W, X, H, key_valid, G)
    assert report.passed, report


@pytest.mark.parametrize(
    "change, heads, message",
    [
        (
            {"W_Q": np.ones((7, 5)), "W_K": np.ones((7, 5))},
            2,
            r"W_Q has shape \(7, 5\): its 5 columns do not split into 2 heads",
        ),
        (
            {"W_V": np.ones((7, 5)), "W_O": np.ones((5, 7))},
            2,
            r"W_V has shape \(7, 5\): its 5 columns do not split into 2 heads",
        ),
        (
            {"W_K": np.ones((7, 4))},
            2,
            r"^W_K must have shape \(D, Hd\) with Hd=6 \(as in W_Q\), got shape "
            r"\(7, 4\)$",
        ),
        (
            {"W_O": np.ones((3, 7))},
            2,
            r"^W_O must have shape \(Hr, D_out\) with Hr=4 \(as in W_V\), got shape "
            r"\(3, 7\)$",
        ),
        (
            {"W_Q": np.ones((6, 6))},
            2,
            r"^W_Q must have shape \(D, Hd\) with D=7 \(as in X\), got shape "
            r"\(6, 6\)$",
        ),
        (
            {"W_K": np.ones((6, 6))},
            2,
            r"^W_K must have shape \(D, Hd\) with D=7 \(as in X\), got shape "
            r"\(6, 6\)$",
        ),
        (
            {"W_V": np.ones((6, 4))},
            2,
            r"^W_V must have shape \(D, Hr\) with D=7 \(as in X\), got shape "
            r"\(6, 4\)$",
        ),
        ({"W_O": np.ones(4)}, 2, r"^W_O must have shape \(Hr, D_out\), got shape \(4,"),
        (
            {"W_K": np.full((7, 6), "a")},
            2,
            r"^W_K must be an array of numbers, got dtype <U1",
        ),
        ({}, 0, r"sizes must be positive integers: heads=0 \(got heads=0\)"),
        ({}, 2.0, r"sizes must be positive integers: heads=2.0 \(got heads=2.0\)"),
    ],
)
def test_bad_parameters_are_named(change, heads, message):
    _, params, X, _ = make_case()
    with pytest.raises(ValueError, match=message):
        mh.multihead_forward({**params, **change}, X, heads=heads)
    with pytest.raises(ValueError, match=message):
        multihead_reference({**params, **change}, X, heads=heads)


def test_other_bad_input_is_named():
    _, params, X, _ = make_case()
    with pytest.raises(ValueError, match=r"multihead params lack \['W_O'\]"):
        mh.multihead_forward({n: params[n] for n in ("W_Q", "W_K", "W_V")}, X, heads=2)
    Y, saved = mh.multihead_forward(params, X, heads=2)
    with pytest.raises(ValueError, match=r"multihead params lack \['W_O'\]"):
        mh.multihead_backward({n: params[n] for n in ("W_Q", "W_K", "W_V")}, saved, Y)
    with pytest.raises(
        ValueError, match=r"^X must have shape \(\.\.\., T, D\), got shape \(7,\)$"
    ):
        mh.multihead_forward(params, X[0, 0], heads=2)
    with pytest.raises(
        ValueError, match=r"^X must be an array of numbers, got dtype <U1"
    ):
        mh.multihead_forward(params, np.full((5, 7), "a"), heads=2)
    with pytest.raises(
        ValueError,
        match=r"key_valid must have shape \(\.\.\., T_k\) with T_k=5 keys, got shape "
            r"\(2, 4\)",
    ):
        mh.multihead_forward(params, X, heads=2, key_valid=np.ones((2, 4), dtype=bool))
    with pytest.raises(
        ValueError, match=r"key_valid has shape \(3, 5\); .* batch shape \(2,\)"
    ):
        mh.multihead_forward(params, X, heads=2, key_valid=np.ones((3, 5), dtype=bool))
    _, saved = mh.multihead_forward(params, X, heads=2)
    with pytest.raises(
        ValueError,
        match=r"dY must have the shape of the output Y, \(2, 5, 7\), got \(2, 5, 4\)",
    ):
        mh.multihead_backward(params, saved, np.ones((2, 5, 4)))
    with pytest.raises(
        ValueError, match=r"^dY must be an array of numbers, got dtype <U1"
    ):
        mh.multihead_backward(params, saved, np.full((2, 5, 7), "a"))
    with pytest.raises(
        ValueError, match=r"^W_V must be an array of numbers, got dtype <U1"
    ):
        mh.multihead_backward(
            {**params, "W_V": np.full((7, 4), "a")}, saved, np.ones((2, 5, 7))
        )
