"""Tests of attncourse.model: the whole model composed of layer pairs (config,
initialisation, forward, the whole backward on every parameter, the loss, the prefix
interface, save/load)."""

import dataclasses
import json
import math
import re

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from attncourse.layers.attention import key_valid_from_lengths
from attncourse.loss import cross_entropy
from attncourse.model import (ModelConfig, count_parameters, init_model, load_model,
                              model_backward, model_forward, model_loss, save_model,
                              spread_params)
from attncourse.params import flatten_params, unflatten_params
from attncourse.kit.gradients import STEPS, TOLERANCE, layer_gradcheck
from attncourse.kit.prefix import prefix_report

# n_vocab = 7, T = 5 < T_max = 6, D = 4, d = 2, MLP width F = 8: all different
SMALL = dict(n_vocab=7, T_max=6, D=4, heads=2, layers=2, ratio=2)
B, T = 2, 5


def case(tied=False, seed=0):
    config = ModelConfig(**SMALL, tied=tied)
    rng = np.random.default_rng(100 + seed)
    ids = rng.integers(0, config.n_vocab, size=(B, T))
    key_valid = key_valid_from_lengths([3, 5], T, side="left")  # sequence 0: 2 pads
    return config, spread_params(config, seed), ids, key_valid


def smallest_layernorm_spread(saved):
    """The smallest spread ``1 / inv_std`` of any row a LayerNorm of the pass saw."""
    norms = [saved["ln_f"]] + [s[n] for s in saved["blocks"] for n in ("ln1", "ln2")]
    return 1.0 / max(float(np.max(norm["inv_std"])) for norm in norms)


# --- the config -----------------------------------------------------------------------

def test_config_defaults_and_head_width():
    config = ModelConfig(n_vocab=11, T_max=9, D=12, heads=3, layers=2)
    assert (config.ratio, config.tied, config.eps, config.approximate_gelu) == (
        4, False, 1e-5, True)
    assert config.d == 4
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.D = 16


@pytest.mark.parametrize("change, message", [
    (dict(D=True), r"sizes must be positive integers: D=True"),
    (dict(n_vocab=0), r"sizes must be positive integers: n_vocab=0"),
    (dict(layers=2.0), r"sizes must be positive integers: layers=2.0"),
    (dict(T_max=-1), r"sizes must be positive integers: T_max=-1"),
    (dict(ratio=0), r"sizes must be positive integers: ratio=0"),
    (dict(D=6, heads=4), r"D=6 must be divisible by heads=4"),
    (dict(tied=1), r"tied must be True or False, got 1"),
    (dict(approximate_gelu="yes"), r"approximate_gelu must be True or False"),
    (dict(eps=0.0), r"eps must be a finite number in \(0, inf\), got 0.0"),
    (dict(eps=float("inf")), r"eps must be a finite number in \(0, inf\), got inf"),
    (dict(eps=True), r"eps must be a finite number in \(0, inf\), got True"),
    (dict(eps="1e-5"), r"eps must be a finite number in \(0, inf\), got '1e-5'"),
])
def test_config_rejects_bad_values(change, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig(**{**SMALL, **change})


# --- initialisation -------------------------------------------------------------------

def test_init_has_the_nesting_and_shapes_of_the_config():
    config = ModelConfig(**SMALL)
    params = init_model(config)
    shapes = {k: v.shape for k, v in flatten_params(params).items()}
    assert shapes["embed.E"] == (7, 4) and shapes["pos.P"] == (6, 4)
    assert shapes["unembed.W"] == (4, 7)
    assert shapes["blocks.1.attn.W_O"] == (4, 4)
    assert shapes["blocks.1.mlp.up.W"] == (4, 8)
    assert len(params["blocks"]) == 2 and sorted(params["ln_f"]) == ["beta", "gamma"]
    tied = init_model(dataclasses.replace(config, tied=True))
    assert "unembed" not in tied
    assert set(flatten_params(params)) - set(flatten_params(tied)) == {"unembed.W"}


def test_init_is_seeded():
    config = ModelConfig(**SMALL)
    a, b = init_model(config, seed=1), init_model(config, seed=1)
    c = init_model(config, seed=2)
    for name, value in flatten_params(a).items():
        assert_array_equal(value, flatten_params(b)[name])
    assert not np.array_equal(a["embed"]["E"], c["embed"]["E"])


def test_init_scheme_gains_one_shifts_and_biases_zero_weights_at_their_spread():
    # L = 8 blocks: residual projections at 0.02 / sqrt(16) = 0.005
    config = ModelConfig(n_vocab=50, T_max=40, D=48, heads=4, layers=8)
    params = init_model(config, seed=3)
    residual = 0.02 / math.sqrt(2 * config.layers)
    for name, value in flatten_params(params).items():
        if value.ndim == 1:  # gains 1; shifts and biases 0, exactly
            want = 1.0 if name.endswith("gamma") else 0.0
            assert_array_equal(value, np.full_like(value, want), err_msg=name)
            continue
        spread = residual if name.endswith(("attn.W_O", "mlp.down.W")) else 0.02
        # the sample std of n >= 1920 normal draws is off by about 1/sqrt(2 n) < 1.7 %
        assert abs(value.std() / spread - 1) < 0.07, name
        assert abs(value.mean()) < 4 * spread / math.sqrt(value.size), name


def test_init_rejects_a_bad_std_and_a_plain_dict():
    config = ModelConfig(**SMALL)
    for std in (0.0, -0.02, float("nan"), True):
        with pytest.raises(ValueError,
                           match=r"std must be a finite number in \(0, inf\)"):
            init_model(config, std=std)
    with pytest.raises(ValueError, match="config must be a ModelConfig, got dict"):
        init_model(SMALL)


def init_case(tied):
    config = ModelConfig(n_vocab=29, T_max=16, D=32, heads=4, layers=2, tied=tied)
    rng = np.random.default_rng(6)
    ids, targets = rng.integers(0, 29, size=(2, 8, 16))  # targets: not from the model
    return config, init_model(config, seed=5), ids, targets


def test_loss_at_initialisation_is_close_to_log_n_vocab():
    # At init the final LayerNorm gives rows x_hat with |x_hat|^2 ~ D, and U has
    # entries N(0, 0.02^2): each logit is ~ N(0, sigma^2), sigma = 0.02 sqrt(D). For
    # targets drawn uniformly and independently of the model, E[-z_y | z] = -mean(z),
    # so loss - ln n has mean E[logsumexp(z) - ln n - mean(z)] ~ sigma^2 / 2 and a
    # standard deviation of about sigma / sqrt(N) over N predictions: the tolerance
    # is sigma^2 / 2 + 4 sigma / sqrt(N).
    config, params, ids, targets = init_case(tied=False)
    sigma, N = 0.02 * math.sqrt(config.D), targets.size
    logits, _ = model_forward(params, ids, config=config)
    # the sample std of 3712 logits; U's own 928 entries are off by about 1/sqrt(2 928)
    assert abs(logits.std() / sigma - 1) < 0.1
    loss, _ = model_loss(params, ids, targets, config=config)
    assert abs(loss - math.log(29)) < sigma**2 / 2 + 4 * sigma / math.sqrt(N)


def test_tied_initialisation_favours_the_current_token_as_predicted():
    # Tied, z_k = x_hat . E_k, and x_hat is E[id] + P[t] normalised (the blocks add
    # little at init): |x_hat| ~ sqrt(D), |E_id| ~ 0.02 sqrt(D), cos ~ 1/sqrt(2) (two
    # independent summands of equal size), so the current token's logit is about
    # c = 0.02 D / sqrt(2); the other logits are ~ N(0, sigma^2) as untied. One logit c
    # above the rest raises the log-sum-exp by about (e^c - 1 - c) / n on top of the
    # untied tolerance.
    config, params, ids, targets = init_case(tied=True)
    sigma, N, n = 0.02 * math.sqrt(config.D), targets.size, config.n_vocab
    c = 0.02 * config.D / math.sqrt(2)
    logits, _ = model_forward(params, ids, config=config)
    current = np.zeros(logits.shape, dtype=bool)
    np.put_along_axis(current, ids[..., None], True, axis=-1)
    assert abs(logits[current].mean() / c - 1) < 0.15
    assert abs(logits[~current].std() / sigma - 1) < 0.1
    loss, _ = model_loss(params, ids, targets, config=config)
    tolerance = sigma**2 / 2 + 4 * sigma / math.sqrt(N) + (math.exp(c) - 1 - c) / n
    assert abs(loss - math.log(n)) < tolerance


# --- forward --------------------------------------------------------------------------

def test_batch_rows_are_independent_and_one_sequence_needs_no_batch_axis():
    config, params, ids, _ = case()
    logits, _ = model_forward(params, ids, config=config)
    assert logits.shape == (B, T, 7)
    for b in range(B):
        alone, _ = model_forward(params, ids[b], config=config)
        assert_allclose(alone, logits[b], rtol=1e-13, atol=1e-14)


def test_tied_logits_are_the_final_states_times_E_transposed():
    config, params, ids, _ = case(tied=True)
    logits, saved = model_forward(params, ids, config=config)
    H = saved["unembed"]["X"]  # the final LayerNorm's output
    E = params["embed"]["E"]
    assert_allclose(logits, H @ E.T, rtol=1e-13, atol=1e-14)  # (B, T, D) x (D, n)


def test_saved_holds_each_layers_saved_dict():
    config, params, ids, key_valid = case()
    _, saved = model_forward(params, ids, config=config, key_valid=key_valid)
    assert sorted(saved) == ["blocks", "embed", "ln_f", "pos", "tied", "unembed"]
    assert len(saved["blocks"]) == 2 and sorted(saved["blocks"][0]) == [
        "attn", "ln1", "ln2", "mlp"]
    assert saved["blocks"][1]["attn"]["A"].shape == (B, 2, T, T)
    assert_array_equal(saved["embed"]["ids"], ids)
    # the padded keys of sequence 0 (positions 0 and 1) get weight exactly 0
    assert np.all(saved["blocks"][0]["attn"]["A"][0, :, 2:, :2] == 0.0)


def test_padded_tokens_change_no_real_logit():
    config, params, ids, key_valid = case()
    other = np.where(key_valid, ids, (ids + 3) % config.n_vocab)
    logits, _ = model_forward(params, ids, config=config, key_valid=key_valid)
    changed, _ = model_forward(params, other, config=config, key_valid=key_valid)
    assert_array_equal(changed[key_valid], logits[key_valid])
    without, _ = model_forward(params, other, config=config)  # control: no key_valid
    assert np.abs(without[key_valid] - logits[key_valid]).max() > 1e-3


@pytest.mark.parametrize("call, message", [
    (lambda c, p: model_forward(p, np.zeros((2, 7), dtype=int), config=c),
     r"ids have T=7 positions, more than config.T_max=6"),
    (lambda c, p: model_forward(p, np.array([[0, 7]]), config=c),
     r"ids out of range for a vocabulary of 7 tokens"),
    (lambda c, p: model_forward(p, np.array([[0.0, 1.0]]), config=c),
     r"ids must be integers, got dtype float64"),
    (lambda c, p: model_forward(p, np.array(3), config=c),
     r"ids must have shape \(\.\.\., T\) with T >= 1, got shape \(\)"),
    (lambda c, p: model_forward(p, np.zeros((2, 3), dtype=int), config=c,
                                key_valid=np.ones((2, 4), dtype=bool)),
     r"key_valid must be a boolean array of the shape of ids, \(2, 3\), got bool of "
     r"shape \(2, 4\)"),
    (lambda c, p: model_forward(p, np.zeros((2, 3), dtype=int), config=c,
                                key_valid=np.ones((2, 3), dtype=int)),
     r"key_valid must be a boolean array"),
    (lambda c, p: model_forward(p, [1, 2], config=SMALL),
     r"config must be a ModelConfig, got dict"),
    (lambda c, p: model_forward([p], [1], config=c),
     r"^model params must be a dict of named arrays, got list$"),
    (lambda c, p: model_forward({"embed": p["embed"]}, [1], config=c),
     r"^model params lack \['blocks'\]; they need \['blocks'\], got keys \['embed'\]$"),
    (lambda c, p: model_forward({k: p[k] for k in ("embed", "pos", "blocks", "ln_f")},
                                [1], config=c),
     r"params do not match the config: missing \['unembed.W'\], extra \[\]"),
    (lambda c, p: model_forward({**p, "blocks": p["blocks"][:1]}, [1], config=c),
     r"params\['blocks'\] must be a list of config.layers=2 blocks, got 1"),
    (lambda c, p: model_forward({**p, "embed": {"E": np.ones((7, 5))}}, [1], config=c),
     r"params: embed.E has shape \(7, 5\), the config needs \(7, 4\)"),
    (lambda c, p: model_forward(p, [1], config=dataclasses.replace(c, tied=True)),
     r"extra \['unembed.W'\] \(a tied model has no 'unembed': Z = H E\^T\)"),
])
def test_forward_rejects_bad_input_naming_it(call, message):
    config = ModelConfig(**SMALL)
    with pytest.raises(ValueError, match=message):
        call(config, init_model(config))


# --- the whole backward, every parameter ----------------------------------------------

@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_the_whole_backward_passes_the_layer_gradcheck_on_every_parameter(tied):
    config, params, ids, key_valid = case(tied)
    _, saved = model_forward(params, ids, config=config, key_valid=key_valid)
    # the test point: no row a LayerNorm normalises is near-constant (such a row
    # makes LayerNorm so curved that the step 1e-5 errs above the tolerance)
    assert smallest_layernorm_spread(saved) > 0.3
    report = layer_gradcheck(model_forward, model_backward, params, ids, config=config,
                             key_valid=key_valid)
    assert report.passed, str(report)
    names = {name for name, _ in report.errors}
    assert names == set(flatten_params(params)) and len(names) == (28 if tied else 29)
    assert ("unembed.W" in names) != tied


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_backward_shapes_unused_positions_and_no_gradient_for_ids(tied):
    config, params, ids, key_valid = case(tied)
    logits, saved = model_forward(params, ids, config=config, key_valid=key_valid)
    dparams, dids = model_backward(params, saved, np.ones_like(logits))
    assert dids is None
    assert {k: v.shape for k, v in flatten_params(dparams).items()} == {
        k: v.shape for k, v in flatten_params(params).items()}
    assert np.all(dparams["pos"]["P"][T:] == 0.0)  # row 5 of P took no part (T = 5)
    assert np.abs(dparams["pos"]["P"][:T]).min() > 0.0
    with pytest.raises(ValueError, match=r"dZ must have the shape of the logits Z, "
                                         r"\(2, 5, 7\), got \(2, 5, 6\)"):
        model_backward(params, saved, np.ones((2, 5, 6)))
    other = init_model(dataclasses.replace(config, tied=not tied))
    with pytest.raises(ValueError, match="params and saved disagree"):
        model_backward(other, saved, np.ones_like(logits))


def test_tied_gradient_is_the_sum_of_the_two_uses():
    config, params, ids, _ = case(tied=True)
    logits, saved = model_forward(params, ids, config=config)
    dZ = np.random.default_rng(3).normal(size=logits.shape)
    dE = model_backward(params, saved, dZ)[0]["embed"]["E"]
    H = saved["unembed"]["X"]
    # Z = H E^T: dE from the unembedding is dZ^T H summed over positions
    # (n, B T) x (B T, D) -> (n, D)
    unembedding = dZ.reshape(-1, 7).T @ H.reshape(-1, 4)
    seen = np.isin(np.arange(7), ids)
    assert seen.any() and not seen.all()
    # a token that is not in the input is used only by the unembedding
    assert_allclose(dE[~seen], unembedding[~seen], rtol=1e-12, atol=1e-14)
    # a token in the input also gets its lookup's gradient, of the same order
    lookup = dE[seen] - unembedding[seen]
    assert np.abs(lookup).min(axis=-1).min() > 1e-3


# --- the loss -------------------------------------------------------------------------

def test_model_loss_gradient_matches_a_directional_central_difference():
    # another witness: (J(theta + h v) - J(theta - h v)) / 2 h against <grad, v>
    config, params, ids, key_valid = case(seed=1)
    targets = np.roll(ids, -1, axis=-1)
    loss, grads = model_loss(params, ids, targets, config=config, key_valid=key_valid)
    flat, flat_grads = flatten_params(params), flatten_params(grads)
    rng = np.random.default_rng(9)
    direction = {k: rng.normal(size=v.shape) for k, v in flat.items()}
    analytic = sum(float(np.sum(flat_grads[k] * direction[k])) for k in flat)

    def J(t):
        moved = unflatten_params({k: flat[k] + t * direction[k] for k in flat}, params)
        return model_loss(moved, ids, targets, config=config, key_valid=key_valid)[0]

    for h in STEPS:
        assert abs((J(h) - J(-h)) / (2 * h) - analytic) < TOLERANCE
    assert abs(analytic) > 1e-2


def test_model_loss_averages_over_real_positions_only():
    config, params, ids, key_valid = case()
    targets = np.roll(ids, -1, axis=-1)
    loss, grads = model_loss(params, ids, targets, config=config, key_valid=key_valid)
    logits, _ = model_forward(params, ids, config=config, key_valid=key_valid)
    assert loss == pytest.approx(cross_entropy(logits[key_valid], targets[key_valid]),
                                 rel=1e-14)
    other = np.where(key_valid, targets, (targets + 1) % 7)  # new targets at the pads
    loss2, grads2 = model_loss(params, ids, other, config=config, key_valid=key_valid)
    assert loss2 == loss
    for name, g in flatten_params(grads).items():
        assert_array_equal(flatten_params(grads2)[name], g)
    unpadded, _ = model_loss(params, ids, targets, config=config)
    assert unpadded == pytest.approx(cross_entropy(
        model_forward(params, ids, config=config)[0], targets), rel=1e-14)


def test_counted_narrows_the_mean_and_the_other_targets_get_no_gradient():
    config, params, ids, key_valid = case()
    targets = np.roll(ids, -1, axis=-1)
    counted = np.zeros(ids.shape, dtype=bool)
    counted[:, -1] = True  # the last position of each sequence only
    loss, grads = model_loss(params, ids, targets, config=config, counted=counted)
    logits, _ = model_forward(params, ids, config=config)
    last = cross_entropy(logits[:, -1], targets[:, -1])
    assert loss == pytest.approx(last, rel=1e-14)
    # change every uncounted target
    other = np.where(counted, targets, (targets + 3) % 7)
    loss2, grads2 = model_loss(params, ids, other, config=config, counted=counted)
    assert loss2 == loss
    for name, g in flatten_params(grads).items():
        assert_array_equal(flatten_params(grads2)[name], g)
    both, _ = model_loss(
        params,
        ids,
        targets,
        config=config,
        key_valid=key_valid,
        counted=key_valid & (np.arange(T) >= 3),
    )
    logits_kv, _ = model_forward(params, ids, config=config, key_valid=key_valid)
    keep = key_valid & (np.arange(T) >= 3)
    assert both == pytest.approx(
        cross_entropy(logits_kv[keep], targets[keep]), rel=1e-14
    )


@pytest.mark.parametrize(
    "counted, message",
    [
        (
            np.ones((2, 5), dtype=int),
            r"counted must be a boolean array of the shape of ids, "
            r"\(2, 5\), got int64 \(2, 5\)",
        ),
        (
            np.ones((2, 4), dtype=bool),
            r"counted must be a boolean array .* got bool \(2, 4\)",
        ),
        (
            np.zeros((2, 5), dtype=bool),
            r"^no position is counted: the mean loss would be empty$",
        ),
    ],
)
def test_counted_is_validated(counted, message):
    config, params, ids, _ = case()
    with pytest.raises(ValueError, match=message):
        model_loss(params, ids, ids, config=config, counted=counted)


def test_model_loss_rejects_targets_of_another_shape():
    config, params, ids, _ = case()
    message = r"targets must have the shape of ids, \(2, 5\), got \(2, 4\)"
    with pytest.raises(ValueError, match=message):
        model_loss(params, ids, ids[:, 1:], config=config)


# --- the prefix interface, end to end -------------------------------------------------


def test_the_model_passes_the_prefix_interface_on_token_ids():
    config, params, ids, _ = case()

    def forward(ids):
        return model_forward(params, ids, config=config)[0]

    other = (ids + 1) % config.n_vocab  # differs at every position
    report = prefix_report(forward, ids, other, position_axis=-1)
    assert report.passed, str(report)

    # fault control: a model fed its targets (the ids shifted by one) reads the future
    def shifted(ids):
        return forward(np.concatenate([ids[..., 1:], ids[..., :1]], axis=-1))

    failures = prefix_report(shifted, ids, other, position_axis=-1).failures
    assert failures and failures[0].startswith("(i)")


# --- counting -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sizes, tied, expected",
    [
        (SMALL, False, 400),
        (SMALL, True, 372),
        # E 66, P 54, 3 blocks of 4 D^2 + (2 F D + F + D) + 4 D, F = 24; ln_f 12, U 66
        (
            dict(n_vocab=11, T_max=9, D=6, heads=3, layers=3),
            False,
            66 + 54 + 3 * (144 + 318 + 24) + 12 + 66,
        ),
    ],
)
def test_count_parameters_counts_every_array(sizes, tied, expected):
    params = init_model(ModelConfig(**sizes, tied=tied))
    assert count_parameters(params) == expected
    arrays = flatten_params(params).values()
    assert count_parameters(params) == sum(v.size for v in arrays)


# --- save and load --------------------------------------------------------------------


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_save_and_load_give_bit_identical_logits(tmp_path, tied):
    config, params, ids, key_valid = case(tied)
    config = dataclasses.replace(config, eps=1e-6, approximate_gelu=False)
    path = tmp_path / "model.npz"
    save_model(path, params, config)
    loaded, loaded_config = load_model(path)
    assert loaded_config == config
    before, _ = model_forward(params, ids, config=config, key_valid=key_valid)
    after, _ = model_forward(loaded, ids, config=loaded_config, key_valid=key_valid)
    assert_array_equal(after, before)
    assert list(flatten_params(loaded)) == list(flatten_params(params))


def write(path, arrays, config):
    """An .npz written by hand: ``arrays`` (dotted names) and the config as JSON."""
    stored = dict(arrays)
    if config is not None:
        stored["config"] = np.array(json.dumps(config))
    with open(path, "wb") as file:
        np.savez(file, **stored)


def test_load_rejects_a_missing_key_a_wrong_shape_and_a_bad_config(tmp_path):
    config = ModelConfig(**SMALL)
    flat = flatten_params(init_model(config))
    fields = dataclasses.asdict(config)
    path = tmp_path / "bad.npz"
    cases = [
        (
            {k: v for k, v in flat.items() if k != "blocks.1.mlp.down.b"},
            fields,
            rf"^{re.escape(str(path))} do not match the config: missing "
            r"\['blocks.1.mlp.down.b'\], extra \[\]$",
        ),
        (
            {**flat, "blocks.2.ln1.gamma": np.ones(4)},
            fields,
            r"missing \[\], extra \['blocks.2.ln1.gamma'\]",
        ),
        (
            {**flat, "pos.P": np.zeros((5, 4))},
            fields,
            rf"^{re.escape(str(path))}: pos.P has shape \(5, 4\), the config needs "
            r"\(6, 4\)$",
        ),
        (
            {**flat, "ln_f.gamma": np.ones(4, dtype=int)},
            fields,
            rf"^{re.escape(str(path))}: ln_f.gamma must hold floats, got int64$",
        ),
        (flat, {**fields, "heads": 3}, r"D=4 must be divisible by heads=3"),
        (flat, {**fields, "width": 4}, r"is not a ModelConfig: .*width"),
        (
            flat,
            None,
            rf"^{re.escape(str(path))} holds no config \(no 'config' entry\)$",
        ),
        (flat, {**fields, "tied": True}, r"missing \[\], extra \['unembed.W'\]"),
    ]
    for arrays, stored_config, message in cases:
        write(path, arrays, stored_config)
        with pytest.raises(ValueError, match=message):
            load_model(path)


def test_load_refuses_pickled_arrays(tmp_path):
    path = tmp_path / "pickled.npz"
    config = ModelConfig(**SMALL)
    flat = flatten_params(init_model(config))
    flat["embed.E"] = np.array([object()] * 28, dtype=object).reshape(7, 4)
    write(path, flat, dataclasses.asdict(config))
    with pytest.raises(ValueError, match="allow_pickle=False"):
        load_model(path)


def test_save_checks_params_against_the_config_and_writes_exactly_that_path(tmp_path):
    config = ModelConfig(**SMALL)
    params = init_model(config)
    with pytest.raises(ValueError, match=r"a tied model has no 'unembed': Z = H E\^T"):
        save_model(tmp_path / "m.npz", params, dataclasses.replace(config, tied=True))
    save_model(tmp_path / "weights", params, config)  # no suffix appended
    assert [p.name for p in tmp_path.iterdir()] == ["weights"]


def test_init_defaults_to_seed_0():
    config = ModelConfig(**SMALL)
    default, seeded = init_model(config), init_model(config, seed=0)
    for name, value in flatten_params(default).items():
        assert_array_equal(value, flatten_params(seeded)[name])


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda c, p: model_forward(
                p, [1], config=dataclasses.replace(c, tied=True)
            ),
            r"^params do not match the config: missing \[\], extra \['unembed.W'\] "
            r"\(a tied model has no 'unembed': Z = H E\^T\)$",
        ),
        (
            lambda c, p: model_forward(
                {**p, "blocks": dict(enumerate(p["blocks"]))}, [1], config=c
            ),
            r"^params\['blocks'\] must be a list of config.layers=2 blocks, got dict$",
        ),
        (
            lambda c, p: model_forward(
                {**p, "pos": {"P": np.ones((5, 4))}}, [1], config=c
            ),
            r"^params: pos.P has shape \(5, 4\), the config needs \(6, 4\)$",
        ),
        (
            lambda c, p: model_forward(
                {**p, "unembed": {"W": np.ones((4, 6))}}, [1], config=c
            ),
            r"^params: unembed.W has shape \(4, 6\), the config needs \(4, 7\)$",
        ),
        (
            lambda c, p: model_forward({**p, "embed": {}}, [1], config=c),
            r"^params do not match the config: missing \['embed.E'\], extra \[\]$",
        ),
        (
            lambda c, p: model_forward(p, np.zeros(7, dtype=int), config=c),
            r"^ids have T=7 positions, more than config.T_max=6$",
        ),
    ],
)
def test_forward_names_each_table_and_count_exactly(call, message):
    config = ModelConfig(**SMALL)
    with pytest.raises(ValueError, match=message):
        call(config, init_model(config))


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_backward_names_the_disagreement_and_a_non_numeric_dZ(tied):
    config = ModelConfig(**SMALL, tied=tied)
    params = init_model(config)
    logits, saved = model_forward(params, [1, 2, 3], config=config)
    other = init_model(dataclasses.replace(config, tied=not tied))
    message = (
        r"^params and saved disagree: the forward pass was tied, params have "
        r"'unembed'$"
        if tied
        else r"^params and saved disagree: the forward pass was untied, params lack "
        r"'unembed'$"
    )
    with pytest.raises(ValueError, match=message):
        model_backward(other, saved, np.ones_like(logits))
    with pytest.raises(ValueError, match="^dZ must be an array of numbers"):
        model_backward(params, saved, np.full(logits.shape, "a"))


@pytest.mark.parametrize(
    "change, message",
    [
        (
            dict(heads=0),
            r"^sizes must be positive integers: heads=0 \(got n_vocab=7, T_max=6, D=4, "
            r"heads=0, layers=2, ratio=2\)$",
        ),
        (
            dict(D=6, heads=4),
            r"^D=6 must be divisible by heads=4: each head gets D // heads features$",
        ),
    ],
)
def test_config_messages_in_full(change, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig(**{**SMALL, **change})


def test_config_eps_reaches_every_layernorm():
    config = ModelConfig(**SMALL, eps=0.5)  # large: each spread visibly changes
    params, ids = spread_params(config), np.array([[1, 2, 3, 4, 5]])
    _, saved = model_forward(params, ids, config=config)
    norms = [saved["ln_f"]] + [s[n] for s in saved["blocks"] for n in ("ln1", "ln2")]
    for norm in norms:
        X = norm["X"]
        expected = 1.0 / np.sqrt(np.var(X, axis=-1, keepdims=True) + 0.5)
        assert_allclose(norm["inv_std"], expected, rtol=1e-13)


def test_config_approximate_gelu_reaches_every_block():
    config = ModelConfig(**SMALL)  # approximate_gelu=True by default
    params, ids = spread_params(config), np.array([[1, 2, 3, 4, 5]])
    tanh, saved = model_forward(params, ids, config=config)
    assert all(s["mlp"]["gelu"]["approximate"] is True for s in saved["blocks"])
    exact, saved = model_forward(
        params, ids, config=dataclasses.replace(config, approximate_gelu=False)
    )
    assert all(s["mlp"]["gelu"]["approximate"] is False for s in saved["blocks"])
    assert np.max(np.abs(tanh - exact)) > 1e-9


def test_tied_backward_names_a_non_numeric_E():
    config = ModelConfig(**SMALL, tied=True)
    params = init_model(config)
    logits, saved = model_forward(params, [1, 2, 3], config=config)
    bad = {**params, "embed": {"E": np.full(params["embed"]["E"].shape, "a")}}
    with pytest.raises(ValueError, match="^E must be an array of numbers"):
        model_backward(bad, saved, np.ones_like(logits))


def test_a_config_of_numpy_integers_saves_as_json_numbers(tmp_path):
    config = ModelConfig(**{k: np.int64(v) for k, v in SMALL.items()})
    params = init_model(config)
    path = tmp_path / "model.npz"
    save_model(path, params, config)
    loaded, loaded_config = load_model(path)
    assert loaded_config == config
    with np.load(path, allow_pickle=False) as data:
        assert json.loads(str(data["config"]))["n_vocab"] == 7


# --- spread_params: the seed, rng and scales -------------------------------------

SPREAD = ModelConfig(n_vocab=7, T_max=5, D=6, heads=2, layers=2, ratio=2)


def test_spread_params_are_init_model_at_std_0_3_moved_by_the_stated_draws():
    # matrices: init_model(seed, std=0.3); E and P: N(0, 1) from rng; gains 1 + 0.1 N;
    # shifts and biases 0 + 0.1 N; the draws in the order of the dotted paths
    base = flatten_params(init_model(SPREAD, seed=4, std=0.3))
    got = flatten_params(spread_params(SPREAD, seed=4))
    assert list(got) == list(base)
    rng = np.random.default_rng(4)
    for path, value in base.items():
        if path in ("embed.E", "pos.P"):
            want = rng.normal(size=value.shape)
        elif value.ndim == 2:
            want = value
        else:
            want = value + 0.1 * rng.normal(size=value.shape)
        assert_array_equal(got[path], want, err_msg=path)
    given = np.random.default_rng(4)  # ... and no other draw: the states agree after
    spread_params(SPREAD, seed=4, rng=given)
    assert given.random() == rng.random()


def test_spread_params_scales_are_those_the_docstring_states():
    config = ModelConfig(n_vocab=300, T_max=200, D=256, heads=4, layers=1, ratio=2)
    flat = flatten_params(spread_params(config, seed=1))
    gains = np.concatenate([flat[p] for p in flat if p.endswith("gamma")])
    shifts = np.concatenate([flat[p] for p in flat if p.endswith(("beta", ".b"))])
    # standard errors: 1 / sqrt(2 n) of a spread, 1 / sqrt(n) of a mean, n >= 768
    for name, x, mean, std in (("E", flat["embed.E"], 0.0, 1.0),
                               ("P", flat["pos.P"], 0.0, 1.0),
                               ("gains", gains, 1.0, 0.1), ("shifts", shifts, 0.0, 0.1),
                               ("W_Q", flat["blocks.0.attn.W_Q"], 0.0, 0.3)):
        assert abs(x.std() / std - 1) < 5 / np.sqrt(2 * x.size), name
        assert abs(x.mean() - mean) < 5 * std / np.sqrt(x.size), name


def test_spread_params_seed_decides_everything_and_rng_replaces_it_for_the_draws():
    a, b = spread_params(SPREAD, seed=2), spread_params(SPREAD, seed=2)
    other = flatten_params(spread_params(SPREAD, seed=3))
    for path, value in flatten_params(a).items():
        assert_array_equal(value, flatten_params(b)[path], err_msg=path)
        assert not np.array_equal(value, other[path]), path
    # rng=None is default_rng(seed); a given rng supplies E, P, gains and biases, while
    # the matrices still come from the seed (init_model(config, seed))
    same = flatten_params(spread_params(SPREAD, seed=2, rng=np.random.default_rng(2)))
    drawn = flatten_params(spread_params(SPREAD, seed=2, rng=np.random.default_rng(9)))
    for path, value in flatten_params(a).items():
        assert_array_equal(same[path], value, err_msg=path)
        if value.ndim == 2 and path not in ("embed.E", "pos.P"):
            assert_array_equal(drawn[path], value, err_msg=path)
        else:
            assert not np.array_equal(drawn[path], value), path
    # the rng given is the one drawn from: it advances, one call after another differs
    rng = np.random.default_rng(5)
    first = flatten_params(spread_params(SPREAD, rng=rng))
    second = flatten_params(spread_params(SPREAD, rng=rng))
    assert not np.array_equal(first["embed.E"], second["embed.E"])


def test_spread_params_default_seed_is_0():
    # the default point of a gradient check is reproducible: seed 0, not another draw
    default = flatten_params(spread_params(SPREAD))
    for seed, same in ((0, True), (1, False)):
        stated = flatten_params(spread_params(SPREAD, seed=seed))
        assert all(np.array_equal(default[p], stated[p]) for p in default) == same
