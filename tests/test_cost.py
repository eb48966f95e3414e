"""Tests of attncourse.kit.cost: the counting model against a reference that counts with
loops."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose

from attncourse.kit.cost import (
    AttentionCost,
    attention_cost,
    counted_head_forward,
    counted_model_flops,
    model_flops_per_token,
    model_parameter_count,
)
from attncourse.kit.examples import random_head
from attncourse.layers.head import head_forward
from attncourse.model import ModelConfig, count_parameters, init_model, model_forward


def test_formula_values():
    c = attention_cost(T=5, D=7, d=3, r=4)
    assert c == AttentionCost(
        projections=5 * 7 * (2 * 3 + 4), scores=25 * 3, output=25 * 4, weights_stored=25
    )
    assert c.multiply_adds == 350 + 75 + 100


@pytest.mark.parametrize(
    "sizes, shown",
    [
        (dict(T=0, D=2, d=2, r=2), "T=0"),
        (dict(T=2, D=2, d=-1, r=2), "d=-1"),
        (dict(T=2.0, D=2, d=2, r=2), "T=2.0"),
    ],
)
def test_formula_rejects_bad_sizes(sizes, shown):
    with pytest.raises(ValueError, match=f"sizes must be positive integers.*{shown}"):
        attention_cost(**sizes)


@given(
    st.integers(1, 5),
    st.integers(1, 5),
    st.integers(1, 4),
    st.integers(1, 4),
    st.integers(0, 1000),
)
def test_counted_reference_matches_the_formula_and_the_head(T, D, d, r, seed):
    h = random_head(seed=seed, T=T, D=D, d=d, r=r)
    O, A, counted = counted_head_forward(h.X, h.W_Q, h.W_K, h.W_V)
    assert counted == attention_cost(T, D, d, r)
    O_ref, saved = head_forward(h.params, h.X)
    A_ref = saved["A"]
    assert_allclose(O, O_ref, rtol=1e-12, atol=1e-12)
    assert_allclose(A, A_ref, rtol=1e-12, atol=1e-12)


def test_quadratic_terms_scale_with_T_squared():
    c1, c2 = attention_cost(100, 64, 16, 16), attention_cost(200, 64, 16, 16)
    assert (
        c2.scores == 4 * c1.scores
        and c2.output == 4 * c1.output
        and c2.weights_stored == 4 * c1.weights_stored
    )
    assert c2.projections == 2 * c1.projections


def test_counted_reference_rejects_batches_and_bad_shapes():
    h = random_head(seed=0, T=3, D=4, d=2, r=2)
    with pytest.raises(ValueError, match=r"2-D X \(T, D\), got shape \(2, 3, 4\)"):
        counted_head_forward(np.stack([h.X, h.X]), h.W_Q, h.W_K, h.W_V)
    with pytest.raises(ValueError, match=r"W_Q must have shape \(D, d\) with D=4"):
        counted_head_forward(h.X, h.W_Q.T, h.W_K, h.W_V)


# --- the whole model (Chapter 6) ------------------------------------------------------

CONFIGS = [
    dict(n_vocab=7, T_max=6, D=4, heads=2, layers=2, ratio=2),
    dict(n_vocab=7, T_max=6, D=4, heads=2, layers=2, ratio=2, tied=True),
    dict(n_vocab=11, T_max=9, D=6, heads=3, layers=3),
    dict(n_vocab=5, T_max=12, D=10, heads=5, layers=1, ratio=3, tied=True),
]


@pytest.mark.parametrize("sizes", CONFIGS)
def test_parameter_formula_equals_the_count_of_the_arrays(sizes):
    config = ModelConfig(**sizes)
    assert model_parameter_count(config) == count_parameters(init_model(config))


def test_parameter_formula_pieces():
    config = ModelConfig(n_vocab=11, T_max=9, D=6, heads=3, layers=3)
    D, F = 6, 24
    block = 4 * D * D + (2 * F * D + F + D) + 4 * D
    assert model_parameter_count(config) == 11 * D + 9 * D + 3 * block + 2 * D + D * 11
    tied = ModelConfig(n_vocab=11, T_max=9, D=6, heads=3, layers=3, tied=True)
    assert model_parameter_count(config) - model_parameter_count(tied) == D * 11


@pytest.mark.parametrize("sizes", CONFIGS)
@pytest.mark.parametrize("shape", [(3,), (2, 3), (2, 1, 5)])
def test_flop_formula_equals_the_counted_pass(sizes, shape):
    config = ModelConfig(**sizes)
    params = init_model(config, seed=1)
    ids = np.random.default_rng(2).integers(0, config.n_vocab, size=shape)
    _, saved = model_forward(params, ids, config=config)
    counted = counted_model_flops(params, saved)
    assert counted == model_flops_per_token(config, T=shape[-1])
    assert counted.total == counted.matmul + counted.attention


@pytest.mark.parametrize("sizes", CONFIGS)
def test_matmul_flops_are_twice_the_parameters_that_multiply(sizes):
    config = ModelConfig(**sizes)
    params = init_model(config)
    D, L, F = config.D, config.layers, config.ratio * config.D
    lookup = 0 if config.tied else config.n_vocab * D  # a lookup, not a product
    positions = config.T_max * D  # added, not multiplied
    not_multiplied = lookup + positions + L * (F + D + 4 * D) + 2 * D  # biases, norms
    flops = model_flops_per_token(config, T=config.T_max)
    assert flops.matmul == 2 * (count_parameters(params) - not_multiplied)


def test_attention_flops_grow_linearly_with_T_per_token():
    config = ModelConfig(**CONFIGS[2])
    one, nine = model_flops_per_token(config, 1), model_flops_per_token(config, 9)
    assert nine.matmul == one.matmul and nine.attention == 9 * one.attention
    assert one.attention == 4 * config.layers * config.D


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda c: model_flops_per_token(c, T=7), r"T=7 exceeds the model's T_max=6"),
        (
            lambda c: model_flops_per_token(c, T=0),
            r"sizes must be positive integers: T=0",
        ),
        (
            lambda c: model_parameter_count(object()),
            r"sizes must be positive integers: n_vocab=None",
        ),
    ],
)
def test_counting_rejects_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call(ModelConfig(**CONFIGS[0]))


@pytest.mark.parametrize("sizes", CONFIGS)
def test_a_counted_decode_step_costs_one_position_against_t_plus_one_keys(sizes):
    from attncourse.kit.cost import counted_decode_flops
    from attncourse.kvcache import decode_step, prefill

    config = ModelConfig(**sizes)
    params = init_model(config, seed=3)
    ids = np.random.default_rng(3).integers(0, config.n_vocab, size=(2, config.T_max))
    _, cache = prefill(params, ids[:, :2], config=config)
    for t in range(2, config.T_max):  # the step at position t reads t + 1 keys
        logits, longer, flops = counted_decode_flops(params, cache, ids[:, t],
                                                     config=config)
        want_logits, want_cache = decode_step(params, cache, ids[:, t], config=config)
        assert np.array_equal(logits, want_logits)  # the step itself, unchanged
        assert longer.position == want_cache.position == t + 1
        assert flops == model_flops_per_token(config, T=t + 1)._replace(
            matmul=model_flops_per_token(config, T=1).matmul)
        cache = longer


def test_counted_decode_flops_reads_the_step_not_the_cache():
    # fault control: a step whose attention reads only the new key (query_offset left
    # at 0 reads key 0; here the past is dropped) is counted as what it computed
    from attncourse import kvcache
    from attncourse.kit.cost import counted_decode_flops

    config = ModelConfig(**CONFIGS[2])
    params = init_model(config, seed=4)
    _, cache = kvcache.prefill(params, np.array([1, 2, 3, 4]), config=config)
    original = kvcache.block_forward

    def forgetful(*args, past=None, **kwargs):  # attends to the new position only
        return original(*args, past=None, **kwargs | {"query_offset": 0})

    kvcache.block_forward = forgetful
    try:
        with pytest.raises(ValueError):  # its cache is too short for decode_step's
            kvcache.decode_step(params, kvcache.decode_step(
                params, cache, np.array(5), config=config)[1], np.array(6),
                config=config)
        _, _, flops = counted_decode_flops(params, cache, np.array(5), config=config)
    finally:
        kvcache.block_forward = original
    assert flops.attention == model_flops_per_token(config, T=1).attention
    assert kvcache.block_forward is original
