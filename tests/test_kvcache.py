"""Tests of attncourse.kvcache: prefill is the forward pass, every decode step equals
the full recomputation, cached generation draws the same tokens as ``generate``, the
cache holds 2 L t D numbers, and bad input raises a ValueError naming the problem.

Random models from :func:`attncourse.model.spread_params` (unequal sizes, weights far
from initialisation, so that a wrong position or key changes the logits visibly); the
trained models of Chapter 7 once per process, for the equality the chapter asserts.
"""

import dataclasses

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from attncourse import kvcache
from attncourse.kit.faults import kvcache as fk
from attncourse.kvcache import (BlockCache, KVCache, cache_nbytes, cache_numbers,
                                decode_step, generate_cached, prefill)
from attncourse.layers.attention import key_valid_from_lengths
from attncourse.model import ModelConfig, model_forward, spread_params
from attncourse.sample import generate
from attncourse.train import as_dtype
from attncourse.kit.kvcache import DECODE_TOLERANCE, assert_decoding_equals_recompute

EPS = np.finfo(np.float64).eps
ATOL = 1024 * EPS  # ~2.3e-13: rounding of a few hundred operations, below 1e-12
CONFIG = ModelConfig(n_vocab=11, T_max=9, D=12, heads=3, layers=2, ratio=2)


@pytest.fixture(scope="module")
def model():
    return spread_params(CONFIG, seed=3), CONFIG


@pytest.fixture(scope="module")
def trained():
    """The two trained models of Chapter 7 in float64 (trained once per process)."""
    return fk._trained_models()


def token_ids(shape, seed=0, n_vocab=CONFIG.n_vocab):
    return np.random.default_rng(seed).integers(0, n_vocab, size=shape)


def decode_all(params, config, ids, p, key_valid=None):
    """Prefill ``ids[..., :p]``, decode the rest; yield (t, step logits, recomputed)."""
    kv = None if key_valid is None else key_valid[..., :p]
    logits, cache = prefill(params, ids[..., :p], config=config, key_valid=kv)
    yield p - 1, logits[..., -1, :], model_forward(params, ids[..., :p], config=config,
                                                   key_valid=kv)[0][..., -1, :]
    for t in range(p, ids.shape[-1]):
        logits, cache = decode_step(params, cache, ids[..., t], config=config)
        assert cache.position == t + 1
        kv = None if key_valid is None else key_valid[..., :t + 1]
        full, _ = model_forward(params, ids[..., :t + 1], config=config, key_valid=kv)
        yield t, logits, full[..., -1, :]


# --- prefill and decode_step ---------------------------------------------------------


def test_prefill_is_the_forward_pass_and_keeps_each_blocks_keys_and_values(model):
    params, config = model
    ids = token_ids((2, 5))
    logits, cache = prefill(params, ids, config=config)
    full, saved = model_forward(params, ids, config=config)
    assert_array_equal(logits, full)
    assert isinstance(cache, KVCache) and cache.position == 5
    assert cache.key_valid is None
    assert len(cache.blocks) == config.layers
    for block, s in zip(cache.blocks, saved["blocks"]):
        assert isinstance(block, BlockCache)
        assert block.keys.shape == (2, config.heads, 5, config.d)
        assert block.values.shape == (2, config.heads, 5, config.d)
        assert_array_equal(block.keys, s["attn"]["K"])
        assert_array_equal(block.values, s["attn"]["V"])


@pytest.mark.parametrize("p", [1, 2, 5, CONFIG.T_max - 1])
def test_every_decode_step_equals_the_recomputed_last_row(model, p):
    params, config = model
    ids = token_ids((config.T_max,), seed=p)
    steps = 0
    for t, logits, full in decode_all(params, config, ids, p):
        assert logits.shape == (config.n_vocab,)
        assert_allclose(logits, full, rtol=0, atol=ATOL, err_msg=f"position {t}")
        steps += 1
    assert steps == config.T_max - p + 1


def test_decoding_a_batch_with_two_batch_axes(model):
    params, config = model
    ids = token_ids((2, 3, 7), seed=4)
    for t, logits, full in decode_all(params, config, ids, 3):
        assert logits.shape == (2, 3, config.n_vocab)
        assert_allclose(logits, full, rtol=0, atol=ATOL, err_msg=f"position {t}")


def test_a_left_padded_batch_decodes_as_its_padded_recomputation(model):
    params, config = model
    ids = token_ids((3, config.T_max), seed=5)
    key_valid = np.ones(ids.shape, dtype=bool)
    key_valid[:, :4] = key_valid_from_lengths([4, 1, 3], 4, side="left")
    _, cache = prefill(params, ids[:, :4], config=config, key_valid=key_valid[:, :4])
    assert_array_equal(cache.key_valid, key_valid[:, :4])
    for t, logits, full in decode_all(params, config, ids, 4, key_valid):
        assert_allclose(logits, full, rtol=0, atol=ATOL, err_msg=f"position {t}")
    # the padding matters: without it the steps differ
    _, _, unpadded = list(decode_all(params, config, ids, 4))[-1]
    assert np.max(np.abs(unpadded - full)) > 1e-3


def test_the_padded_tokens_do_not_reach_the_real_ones(model):
    params, config = model
    ids = token_ids((2, 6), seed=6)
    key_valid = np.ones(ids.shape, dtype=bool)
    key_valid[:, :3] = key_valid_from_lengths([3, 1], 3, side="left")
    changed = ids.copy()
    changed[1, :2] = (ids[1, :2] + 1) % config.n_vocab  # the second sequence's padding
    a = [s[1] for s in decode_all(params, config, ids, 3, key_valid)]
    b = [s[1] for s in decode_all(params, config, changed, 3, key_valid)]
    for x, y in zip(a, b):
        assert_allclose(x[1], y[1], rtol=0, atol=ATOL)


def test_the_cache_grows_by_one_position_per_step_and_keeps_the_past(model):
    params, config = model
    ids = token_ids((4,), seed=7)
    _, cache = prefill(params, ids[:3], config=config)
    _, longer = decode_step(params, cache, ids[3], config=config)
    for old, new in zip(cache.blocks, longer.blocks):
        assert new.keys.shape[-2] == old.keys.shape[-2] + 1
        assert_array_equal(new.keys[..., :3, :], old.keys)
        assert_array_equal(new.values[..., :3, :], old.values)
    _, again = decode_step(params, cache, ids[3], config=config)  # the old one intact
    for x, y in zip(again.blocks, longer.blocks):
        assert_array_equal(x.keys, y.keys)


def test_decoding_equals_recomputation_on_the_trained_models(trained):
    for name, (params, config) in trained.items():
        ids = fk._sequences(name, config)
        for p in (1, 3):
            worst = assert_decoding_equals_recompute(prefill, decode_step, params,
                                                     ids[0], p, config=config)
            assert worst <= DECODE_TOLERANCE == 1e-12
        key_valid = np.ones(ids.shape, dtype=bool)
        key_valid[:, :3] = key_valid_from_lengths([3, 1, 2], 3, side="left")
        worst = assert_decoding_equals_recompute(prefill, decode_step, params, ids, 3,
                                                 config=config, key_valid=key_valid)
        assert worst <= 1e-12


# --- generate_cached -----------------------------------------------------------------


SETTINGS = [dict(temperature=0.0), dict(), dict(temperature=0.7), dict(top_k=3),
            dict(top_p=0.8), dict(temperature=1.3, top_k=5, top_p=0.9)]


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: repr(s) or "default")
@pytest.mark.parametrize("prompt_shape", [(1,), (4,), (2, 3)])
def test_generate_cached_draws_the_tokens_of_generate(model, settings, prompt_shape):
    params, config = model
    prompt = token_ids(prompt_shape, seed=8)
    n_new = 2 * config.T_max  # well past the window
    want = generate(params, prompt, n_new, config=config, rng=np.random.default_rng(5),
                    **settings)
    got = generate_cached(params, prompt, n_new, config=config,
                          rng=np.random.default_rng(5), **settings)
    assert got.shape == prompt_shape[:-1] + (prompt_shape[-1] + n_new,)
    assert_array_equal(got, want)


def test_generate_cached_with_a_prompt_longer_than_the_window_and_zero_new(model):
    params, config = model
    prompt = token_ids((config.T_max + 3,), seed=9)
    for n_new in (0, 1, 5):
        want = generate(params, prompt, n_new, config=config,
                        rng=np.random.default_rng(1))
        got = generate_cached(params, prompt, n_new, config=config,
                              rng=np.random.default_rng(1))
        assert_array_equal(got, want)


def test_generate_cached_runs_one_forward_pass_per_token_it_still_needs(model,
                                                                        monkeypatch):
    # n_new tokens need n_new logits: the prompt's pass and n_new - 1 more, no pass for
    # the logits after the last token
    params, config = model
    calls = {"prefill": 0, "decode_step": 0}
    for name in calls:
        original = getattr(kvcache, name)

        def counted(*args, _name=name, _original=original, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(kvcache, name, counted)
    cases = ((2, 4, {"prefill": 1, "decode_step": 3}),  # within the window
             (config.T_max, 3, {"prefill": 3, "decode_step": 0}))  # past it
    for prompt_length, n_new, want in cases:
        calls.update(prefill=0, decode_step=0)
        prompt = token_ids((prompt_length,), seed=10)
        got = generate_cached(params, prompt, n_new, config=config,
                              rng=np.random.default_rng(2))
        assert got.shape == (prompt_length + n_new,) and calls == want


def test_generate_cached_draws_the_tokens_of_generate_from_the_trained_chars(trained):
    params, config = trained["chars"]
    prompt = fk._sequences("chars", config)[:, :5]
    settings = dict(temperature=0.8, top_k=6, top_p=0.95)
    n_new = config.T_max + 8  # past the window
    want = generate(params, prompt, n_new, config=config, rng=np.random.default_rng(0),
                    **settings)
    got = generate_cached(params, prompt, n_new, config=config,
                          rng=np.random.default_rng(0), **settings)
    assert_array_equal(got, want)


# --- the memory of the cache ---------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("config", [
    CONFIG, ModelConfig(n_vocab=5, T_max=7, D=8, heads=4, layers=3, ratio=1)],
    ids=["L2-D12-H3", "L3-D8-H4"])
def test_the_cache_holds_2_L_t_D_numbers_per_sequence(config, dtype):
    params = as_dtype(spread_params(config, seed=1), dtype)
    B, L, D = 2, config.layers, config.D
    ids = token_ids((B, config.T_max), seed=2, n_vocab=config.n_vocab)
    _, cache = prefill(params, ids[:, :3], config=config)
    for t in range(3, config.T_max + 1):
        assert cache.position == t
        arrays = [a for b in cache.blocks for a in (b.keys, b.values)]
        assert all(a.dtype == dtype for a in arrays)
        assert cache_numbers(cache) == B * 2 * L * t * D == sum(a.size for a in arrays)
        itemsize = np.dtype(dtype).itemsize
        assert cache_nbytes(cache) == B * 2 * L * t * D * itemsize
        assert cache_nbytes(cache) == sum(a.nbytes for a in arrays)
        if t < config.T_max:
            _, cache = decode_step(params, cache, ids[:, t], config=config)


# --- bad input -----------------------------------------------------------------------


def test_prefill_rejects_a_bad_config_and_bad_ids(model):
    params, config = model
    with pytest.raises(ValueError, match="config must be a ModelConfig"):
        prefill(params, token_ids((3,)), config=dict(T_max=9))
    with pytest.raises(ValueError, match="more than config.T_max=9"):
        prefill(params, token_ids((10,)), config=config)
    with pytest.raises(ValueError, match="T >= 1"):
        prefill(params, np.zeros((2, 0), dtype=int), config=config)
    with pytest.raises(ValueError, match="key_valid must be a boolean array"):
        prefill(params, token_ids((2, 3)), config=config, key_valid=np.ones((2, 3)))


def test_decode_step_rejects_a_config_that_does_not_fit_the_params(model):
    params, config = model
    _, cache = prefill(params, token_ids((3,)), config=config)
    other = dataclasses.replace(config, D=8, heads=2)
    message = r"embed.E has shape \(11, 12\), the config needs \(11, 8\)"
    with pytest.raises(ValueError, match=message):
        decode_step(params, cache, np.array(1), config=other)
    with pytest.raises(ValueError, match="config must be a ModelConfig"):
        decode_step(params, cache, np.array(1), config=None)


def test_decode_step_rejects_ids_of_the_wrong_shape(model):
    params, config = model
    _, cache = prefill(params, token_ids((2, 3)), config=config)
    with pytest.raises(ValueError, match=r"^decode_step takes one token per sequence: "
                                         r"ids must have the cache's batch shape "
                                         r"\(2,\), got shape \(3,\)$"):
        decode_step(params, cache, np.array([1, 2, 3]), config=config)
    with pytest.raises(ValueError, match=r"one token per sequence.*\(2,\).*\(2, 1\)"):
        decode_step(params, cache, np.array([[1], [2]]), config=config)
    _, single = prefill(params, token_ids((3,)), config=config)
    with pytest.raises(ValueError, match=r"batch shape \(\).*\(1,\)"):
        decode_step(params, single, np.array([1]), config=config)
    with pytest.raises(ValueError, match="ids out of range for a vocabulary of 11"):
        decode_step(params, cache, np.array([1, config.n_vocab]), config=config)


def test_decode_step_rejects_a_full_cache(model):
    params, config = model
    _, cache = prefill(params, token_ids((config.T_max,)), config=config)
    with pytest.raises(ValueError, match=r"^the cache is full: position 9 has no row "
                                         r"in the position table \(config.T_max=9\)$"):
        decode_step(params, cache, np.array(0), config=config)


def test_decode_step_rejects_a_cache_that_is_not_one(model):
    params, config = model
    _, cache = prefill(params, token_ids((3,)), config=config)
    with pytest.raises(ValueError, match="cache must be a KVCache"):
        decode_step(params, {"blocks": cache.blocks}, np.array(0), config=config)
    with pytest.raises(ValueError, match=r"one BlockCache per block.*got 1 blocks"):
        decode_step(params, cache._replace(blocks=cache.blocks[:1]), np.array(0),
                    config=config)
    wrong = cache._replace(position=4)  # the arrays hold 3 positions
    with pytest.raises(ValueError, match=r"^block 0's cached keys must have shape "
                                         r"\(\.\.\., heads, position, d\) = "
                                         r"\(\.\.\., 3, 4, 4\), got \(3, 3, 4\)$"):
        decode_step(params, wrong, np.array(0), config=config)
    short = cache._replace(blocks=(BlockCache(cache.blocks[0].keys,
                                              cache.blocks[0].values[..., :2, :]),
                                   cache.blocks[1]))
    with pytest.raises(ValueError, match="block 0's cached values"):
        decode_step(params, short, np.array(0), config=config)
    message = r"key_valid must have shape .* \(\.\.\., 3\), got \(2,\)"
    with pytest.raises(ValueError, match=message):
        decode_step(params, cache._replace(key_valid=np.ones(2, bool)), np.array(0),
                    config=config)


@pytest.mark.parametrize("prompt, message", [
    (np.zeros((0,), dtype=int), r"prompt must be token ids .* got shape \(0,\)"),
    (np.zeros((1, 2, 3), dtype=int), r"prompt must be .* got shape \(1, 2, 3\)"),
    (np.array([1, 11]), r"^prompt out of range .* \[11\]"),
    (np.array([-1, 2]), r"^prompt out of range .* \[-1\]"),
    (np.array([1.5, 2.0]), "^prompt must be integers"),
], ids=["empty", "3-D", "too large", "negative", "not integers"])
def test_generate_cached_rejects_a_bad_prompt(model, prompt, message):
    params, config = model
    with pytest.raises(ValueError, match=message):
        generate_cached(params, prompt, 3, config=config, rng=np.random.default_rng(0))


def test_generate_cached_rejects_bad_settings(model):
    params, config = model
    prompt, rng = token_ids((3,)), np.random.default_rng(0)
    with pytest.raises(ValueError, match="config must be a ModelConfig"):
        generate_cached(params, prompt, 3, config="small", rng=rng)
    with pytest.raises(ValueError, match="rng must be a numpy.random.Generator"):
        generate_cached(params, prompt, 3, config=config, rng=0)
    with pytest.raises(ValueError, match="temperature"):
        generate_cached(params, prompt, 3, config=config, rng=rng, temperature=-1)
    with pytest.raises(ValueError, match="top_k"):
        generate_cached(params, prompt, 3, config=config, rng=rng, top_k=0)
    with pytest.raises(ValueError, match="n_new"):
        generate_cached(params, prompt, -1, config=config, rng=rng)


# --- every kind of model, every kind of input ----------------------------------------


@pytest.mark.parametrize("changes", [dict(layers=1), dict(tied=True), dict(eps=0.5),
                                     dict(approximate_gelu=True)],
                         ids=["one block", "tied", "eps 0.5", "tanh GELU"])
def test_decoding_equals_recomputation_for_every_kind_of_model(changes):
    config = dataclasses.replace(CONFIG, **changes)
    params = spread_params(config, seed=5)
    ids = token_ids((2, config.T_max), seed=1)
    steps = 0
    for t, logits, full in decode_all(params, config, ids, 2):
        assert_allclose(logits, full, rtol=0, atol=ATOL, err_msg=f"position {t}")
        steps += 1
    assert steps == config.T_max - 1


def test_an_unbatched_left_padded_sequence_decodes_as_its_recomputation(model):
    params, config = model
    ids = token_ids((config.T_max,), seed=4)
    key_valid = key_valid_from_lengths([1], 3, side="left")[0]  # two pads, then real
    assert key_valid.tolist() == [False, False, True]
    key_valid = np.concatenate([key_valid, np.ones(config.T_max - 3, bool)])
    for t, logits, full in decode_all(params, config, ids, 3, key_valid=key_valid):
        assert logits.shape == (config.n_vocab,)
        assert_allclose(logits, full, rtol=0, atol=ATOL, err_msg=f"position {t}")


def test_a_config_or_cache_of_the_wrong_type_is_named(model):
    params, config = model
    ids = token_ids((4,))
    with pytest.raises(ValueError, match="config must be a ModelConfig, got str$"):
        prefill(params, ids, config="x")
    with pytest.raises(ValueError, match=r"config.layers=2\), got str$"):
        decode_step(params, "x", np.array(0), config=config)


@pytest.mark.parametrize("setting", [dict(top_k=0), dict(top_p=0.0)])
def test_generate_cached_checks_its_settings_even_when_it_draws_nothing(model, setting):
    params, config = model
    with pytest.raises(ValueError, match=next(iter(setting))):
        generate_cached(params, token_ids((3,)), 0, config=config,
                        rng=np.random.default_rng(0), **setting)


def test_prefill_rejects_an_integer_key_valid():
    # 0/1 integers are not a mask: prefill (the model's forward pass) refuses them, as
    # it refuses floats, rather than reading 1 as True
    params, config = spread_params(CONFIG, seed=3), CONFIG
    ids = token_ids((2, 3))
    key_valid = np.array([[0, 1, 1], [1, 1, 1]])
    with pytest.raises(ValueError, match=r"key_valid must be a boolean array of the "
                                         r"shape of ids, \(2, 3\), got int64"):
        prefill(params, ids, config=config, key_valid=key_valid)
    logits, cache = prefill(params, ids, config=config, key_valid=key_valid == 1)
    assert cache.key_valid.dtype == np.bool_


@pytest.mark.parametrize("t", [1, 4])
def test_the_blocks_own_layers_with_past_give_the_last_rows_of_the_whole_pass(model, t):
    # decode_step's path: block_forward reading the cached keys and values (past) with
    # its queries at query_offset = t equals the rows t.. of block_forward on everything
    from attncourse.layers.block import block_forward
    params, config = model
    block = params["blocks"][0]
    X = np.random.default_rng(5).normal(size=(2, t + 2, config.D))
    kw = dict(heads=config.heads, eps=config.eps, approximate=config.approximate_gelu)
    Y_all, saved_all = block_forward(block, X, **kw)
    K_all, V_all = saved_all["attn"]["K"], saved_all["attn"]["V"]
    past = BlockCache(K_all[..., :t, :], V_all[..., :t, :])
    Y, saved = block_forward(block, X[:, t:], past=past, query_offset=t, **kw)
    assert_allclose(Y, Y_all[:, t:], rtol=0, atol=ATOL)
    assert_allclose(saved["attn"]["K"], saved_all["attn"]["K"], rtol=0, atol=ATOL)
    assert_allclose(saved["attn"]["V"], saved_all["attn"]["V"], rtol=0, atol=ATOL)
    assert saved["attn"]["A"].shape == (2, config.heads, 2, t + 2)
    with pytest.raises(ValueError, match=rf"query_offset={t + 1} puts the 2 queries"):
        block_forward(block, X[:, t:], past=past, query_offset=t + 1, **kw)

