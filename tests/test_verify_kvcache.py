"""Tests of attncourse.kit.kvcache: the equality of incremental decoding with full
recomputation passes the package's cache, catches each planted fault (on a small random
model, where the registry's own checks use the trained ones), names the step, and
rejects its own bad arguments with a ValueError."""

import difflib
import inspect

import numpy as np
import pytest

from attncourse.kit.faults import kvcache as fk
from attncourse.kvcache import decode_step, prefill
from attncourse.layers.attention import key_valid_from_lengths
from attncourse.model import ModelConfig, spread_params
from attncourse.kit import CheckFailed
from attncourse.kit.kvcache import (DECODE_TOLERANCE, PROPERTY,
                                       assert_decoding_equals_recompute)

CONFIG = ModelConfig(n_vocab=13, T_max=8, D=10, heads=2, layers=2, ratio=3)
PARAMS = spread_params(CONFIG, seed=11)
IDS = np.random.default_rng(4).integers(0, CONFIG.n_vocab, size=(3, CONFIG.T_max))
KEY_VALID = np.ones(IDS.shape, dtype=bool)
KEY_VALID[:, :3] = key_valid_from_lengths([3, 1, 2], 3, side="left")


def check(pair, ids=IDS[0], prompt_length=2, **kwargs):
    return assert_decoding_equals_recompute(*pair, PARAMS, ids, prompt_length,
                                            config=CONFIG, **kwargs)


def test_the_tolerance_is_fixed_before_any_check():
    assert DECODE_TOLERANCE == 1e-12


@pytest.mark.parametrize("p", [1, 2, CONFIG.T_max])
def test_the_package_cache_passes_and_the_worst_difference_is_returned(p):
    worst = check((prefill, decode_step), prompt_length=p)
    assert 0 <= worst <= DECODE_TOLERANCE
    padded = check((prefill, decode_step), IDS, 3, key_valid=KEY_VALID)
    assert padded <= DECODE_TOLERANCE


@pytest.mark.parametrize("fault", fk.FAULTS, ids=lambda f: f.name)
def test_each_fault_is_caught_on_a_padded_batch(fault):
    with pytest.raises(CheckFailed) as info:
        check(fault.function, IDS, 3, key_valid=KEY_VALID)
    assert info.value.property == PROPERTY
    assert "decode step at position" in info.value.detail


@pytest.mark.parametrize("name", ["decode_step_position_not_offset",
                                  "decode_step_offset_off_by_one",
                                  "decode_step_mask_ignores_offset"])
def test_the_attention_and_position_faults_are_caught_by_the_first_step(name):
    fault = next(f for f in fk.FAULTS if f.name == name)
    with pytest.raises(CheckFailed, match=r"decode step at position 2 \(prompt of 2\)"):
        check(fault.function, steps=1)


def _body(function):
    """The lines of ``function`` after its docstring."""
    lines = inspect.getsource(function).splitlines()
    closing = [i for i, line in enumerate(lines) if line.rstrip().endswith('"""')]
    return lines[closing[-1] + 1:] if closing else lines[1:]


@pytest.mark.parametrize("name", ["decode_step_position_not_offset",
                                  "decode_step_values_not_kept",
                                  "decode_step_offset_off_by_one",
                                  "decode_step_mask_ignores_offset"])
def test_each_decode_fault_is_a_copy_of_decode_step_with_one_line_wrong(name):
    # a planted mistake is a copy of the function with one line changed, marked, and
    # never a callable injected into the core
    ndiff = difflib.ndiff(_body(decode_step), _body(getattr(fk, name)))
    changed = [line for line in ndiff if line[:2] in ("- ", "+ ")]
    assert len(changed) == 2, changed
    removed, added = changed
    assert removed.startswith("- ") and added.startswith("+ ")
    assert "the fault" in added
    assert fk.CORRECT["cache pair"] == (prefill, decode_step)
    assert [p for p in inspect.signature(decode_step).parameters] == [
        "params", "cache", "ids", "config"]  # no step to swap


def test_values_not_kept_needs_a_second_step_and_then_names_what_raised():
    pair = (prefill, fk.decode_step_values_not_kept)
    assert check(pair, steps=1) <= DECODE_TOLERANCE  # blind to it after one step
    message = "position 3.*raised ValueError.*values"
    with pytest.raises(CheckFailed, match=message) as info:
        check(pair, steps=2)
    assert isinstance(info.value.__cause__, ValueError)


def test_a_shared_cache_is_invisible_to_a_single_sequence():
    pair = (fk.prefill_shared_cache, decode_step)
    assert check(pair) <= DECODE_TOLERANCE
    with pytest.raises(CheckFailed, match="decode step at position 3"):
        check(pair, IDS, 3, key_valid=KEY_VALID)


def test_a_difference_above_the_tolerance_is_caught_and_the_tolerance_is_used():
    def noisy_step(params, cache, ids, *, config):
        logits, cache = decode_step(params, cache, ids, config=config)
        return logits + 1e-11, cache

    with pytest.raises(CheckFailed, match=r"by 1\.0\de-11 \(> 1e-12\)"):
        check((prefill, noisy_step))
    worst = check((prefill, noisy_step), tolerance=1e-10)
    assert worst == pytest.approx(1e-11, rel=0.1)


def test_a_wrong_prefill_and_a_wrong_shape_are_named():
    def prefill_last_only(params, ids, *, config, key_valid=None):
        logits, cache = prefill(params, ids, config=config, key_valid=key_valid)
        return logits[..., -1, :], cache

    with pytest.raises(CheckFailed, match=r"prefill of 2 tokens: logits of shape"):
        check((prefill_last_only, decode_step))

    def nan_prefill(params, ids, *, config, key_valid=None):
        logits, cache = prefill(params, ids, config=config, key_valid=key_valid)
        return np.full_like(logits, np.nan), cache

    with pytest.raises(CheckFailed, match="prefill of 2 tokens: the logits differ"):
        check((nan_prefill, decode_step))


def test_a_pair_that_crashes_is_reported_as_a_failure_of_its_step():
    def broken_step(params, cache, ids, *, config):
        raise IndexError("no such key")

    with pytest.raises(CheckFailed, match="position 2.*raised IndexError: no such key"):
        check((prefill, broken_step))


@pytest.mark.parametrize("p", [0, CONFIG.T_max + 1, -1])
def test_a_prompt_length_outside_the_ids_is_a_value_error(p):
    with pytest.raises(ValueError, match=rf"prompt_length must lie in 1\.\.8, got {p}"):
        check((prefill, decode_step), prompt_length=p)


def test_padding_after_the_prompt_is_a_value_error():
    key_valid = KEY_VALID.copy()
    key_valid[1, 5] = False
    with pytest.raises(ValueError, match="the padding must lie in the prompt"):
        check((prefill, decode_step), IDS, 3, key_valid=key_valid)
