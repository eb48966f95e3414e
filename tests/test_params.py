"""Tests of attncourse.params: parameters nested by layer and their flat, dotted
view."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

from attncourse.layers.embedding import init_embedding
from attncourse.layers.linear import init_linear
from attncourse.layers.multihead import init_multihead
from attncourse.layers.positions import init_positions
from attncourse.params import flatten_params, unflatten_params


def small_model(seed=0):
    """A model's parameters nested by layer, with a list of blocks, unequal sizes."""
    rng = np.random.default_rng(seed)
    return {
        "embed": init_embedding(rng, 7, 4),
        "pos": init_positions(rng, 6, 4),
        "blocks": [
            {
                "attn": init_multihead(rng, 4, heads=2, d=3, r=2),
                "mlp": init_linear(rng, 4, 5, bias=True),
            },
            {
                "attn": init_multihead(rng, 4, heads=2, d=3, r=2),
                "mlp": init_linear(rng, 4, 5, bias=True),
            },
        ],
        "unembed": init_linear(rng, 4, 7),
    }


def assert_same_nesting(a, b):
    """``a`` and ``b`` have the same containers, keys, order and leaves (compared
    exactly)."""
    assert type(a) is type(b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            assert_same_nesting(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same_nesting(x, y)
    else:
        assert_array_equal(a, b)


def test_flatten_gives_every_array_its_dotted_path_in_order():
    params = small_model()
    flat = flatten_params(params)
    assert list(flat)[:2] == ["embed.E", "pos.P"]
    assert list(flat)[2:8] == [
        "blocks.0.attn.W_Q",
        "blocks.0.attn.W_K",
        "blocks.0.attn.W_V",
        "blocks.0.attn.W_O",
        "blocks.0.mlp.W",
        "blocks.0.mlp.b",
    ]
    assert list(flat)[-1] == "unembed.W"
    assert len(flat) == 2 + 2 * 6 + 1
    # a view, not a copy
    assert flat["blocks.1.attn.W_V"] is params["blocks"][1]["attn"]["W_V"]
    assert flat["blocks.0.mlp.b"].shape == (5,)


def test_round_trip_over_a_nested_model():
    params = small_model()
    rebuilt = unflatten_params(flatten_params(params), params)
    assert_same_nesting(rebuilt, params)
    assert flatten_params(rebuilt).keys() == flatten_params(params).keys()
    # unflatten takes its leaves from the flat dict, not from the template
    doubled = {k: 2 * v for k, v in flatten_params(params).items()}
    out = unflatten_params(doubled, params)
    assert_array_equal(
        out["blocks"][1]["mlp"]["W"], 2 * params["blocks"][1]["mlp"]["W"]
    )
    assert out["blocks"][1]["mlp"]["W"] is doubled["blocks.1.mlp.W"]


def test_tuples_stay_tuples_and_leaves_may_be_numbers():
    params = {"pair": (np.ones(2), {"k": 3.0}), "s": 1.5}
    flat = flatten_params(params)
    assert list(flat) == ["pair.0", "pair.1.k", "s"]
    rebuilt = unflatten_params(flat, params)
    assert isinstance(rebuilt["pair"], tuple)
    assert_same_nesting(rebuilt, params)


def test_empty_containers_flatten_to_nothing():
    assert flatten_params({}) == {}
    assert unflatten_params({}, {}) == {}
    assert flatten_params({"loss": {}, "blocks": []}) == {}
    assert unflatten_params({}, {"loss": {}, "blocks": []}) == {
        "loss": {},
        "blocks": [],
    }


def test_names_with_a_dot_are_rejected():
    with pytest.raises(
        ValueError,
        match=r"parameter names may not contain '\.', got 'W.Q' under 'blocks\.0'",
    ):
        flatten_params({"blocks": [{"W.Q": np.ones(2)}]})
    with pytest.raises(ValueError, match=r"got 'a.b' under 'the root'"):
        flatten_params({"a.b": np.ones(2)})
    # control: the same names without the dot flatten fine
    assert list(flatten_params({"blocks": [{"W_Q": np.ones(2)}]})) == ["blocks.0.W_Q"]


def test_unflatten_rejects_missing_and_extra_keys():
    params = small_model()
    flat = flatten_params(params)
    missing = {k: v for k, v in flat.items() if k != "blocks.1.mlp.b"}
    with pytest.raises(
        ValueError,
        match=r"flat parameters lack \['blocks\.1\.mlp\.b'\] and have extra \[\]",
    ):
        unflatten_params(missing, params)
    with pytest.raises(
        ValueError, match=r"lack \[\] and have extra \['blocks\.2\.mlp\.W'\]"
    ):
        unflatten_params({**flat, "blocks.2.mlp.W": np.ones(1)}, params)
    with pytest.raises(
        ValueError, match=r"lack \['embed\.E'\] and have extra \['embed\.U'\]"
    ):
        unflatten_params(
            {
                **{k: v for k, v in flat.items() if k != "embed.E"},
                "embed.U": flat["embed.E"],
            },
            params,
        )


names = st.text(alphabet="abcWQ_0", min_size=1, max_size=3)
leaves = st.integers(1, 3).map(lambda n: np.arange(float(n)))
nested = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.dictionaries(names, children, min_size=1, max_size=3),
        st.lists(children, min_size=1, max_size=3),
    ),
    max_leaves=8,
)


@given(st.dictionaries(names, nested, min_size=1, max_size=3))
def test_round_trip_property(params):
    flat = flatten_params(params)
    assert all(isinstance(v, np.ndarray) for v in flat.values())
    assert len(flat) == len(set(flat))
    assert_same_nesting(unflatten_params(flat, params), params)
