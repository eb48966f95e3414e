"""Tests of check_decode_step (Chapter 10's exercise: one decode step written from the
layer functions): the right answer passes, the typical wrong ones are named with their
fix."""

import contextlib
import io

import numpy as np
import pytest

from attncourse.kit import CheckFailed
from attncourse.kit.exercises import UNFINISHED
from attncourse.kit.exercises.kvcache import DECODE_STEP_PROPERTIES, check_decode_step
from attncourse.kit.faults import kvcache as fk
from attncourse.kvcache import BlockCache, KVCache, decode_step
from attncourse.layers.block import block_forward
from attncourse.layers.embedding import embedding_forward
from attncourse.layers.layernorm import layernorm_forward
from attncourse.layers.linear import linear_forward


def scratch(offset=lambda t: t, keep="saved", position=True, copy_back=False,
            advance=1):
    """A decode step from the layer functions, with one chosen defect (the defaults
    give a correct answer)."""

    def fn(params, cache, ids, *, config):
        t = cache.position
        X, _ = embedding_forward(params["embed"], ids[..., None])  # (..., 1, D)
        X = X + params["pos"]["P"][t if position else 0]
        blocks = []
        for block, past in zip(params["blocks"], cache.blocks):
            X, saved = block_forward(block, X, heads=config.heads, eps=config.eps,
                                     approximate=config.approximate_gelu, past=past,
                                     query_offset=offset(t))  # (..., 1, D)
            K, V = saved["attn"]["K"], saved["attn"]["V"]  # (..., H, t + 1, d)
            if keep == "old":
                K, V = past
            elif keep == "twice":
                K = np.concatenate([past.keys, K], axis=-2)
                V = np.concatenate([past.values, V], axis=-2)
            elif keep == "keys only":
                V = past.values
            if copy_back:
                past.keys[...] = 0.0
            blocks.append(BlockCache(K, V))
        H, _ = layernorm_forward(params["ln_f"], X, eps=config.eps)
        W = params["embed"]["E"].T if config.tied else params["unembed"]["W"]
        Z, _ = linear_forward({"W": W}, H)  # (..., 1, n_vocab)
        return Z[..., 0, :], KVCache(tuple(blocks), t + advance)

    return fn


def failure(fn):
    with pytest.raises(CheckFailed) as info:
        check_decode_step(fn)
    return info.value


@pytest.mark.parametrize("right", [scratch(), decode_step], ids=["scratch", "package"])
def test_a_right_decode_step_passes(right):
    assert check_decode_step(right) == DECODE_STEP_PROPERTIES


@pytest.mark.parametrize(
    "fn, prop, said",
    [
        (scratch(offset=lambda t: 0), "logits equal recomputation",
         "forgot the query offset"),
        (scratch(offset=lambda t: t - 1), "logits equal recomputation",
         "query_offset one short"),
        (scratch(position=False), "logits equal recomputation", "P[0], not P[t]"),
        (scratch(keep="old"), "keys and values appended once", "(not appended)"),
        (scratch(keep="twice"), "keys and values appended once", "(appended twice)"),
        (scratch(keep="keys only"), "keys and values appended once",
         "values have 3 positions"),
        (scratch(copy_back=True), "the given cache left unchanged", "in place"),
        (scratch(advance=0), "position advanced by one", "position 3, not 4"),
        (fk.decode_step_values_not_kept, "keys and values appended once",
         "not appended"),
        (lambda params, cache, ids, *, config: decode_step(
            params, cache, ids, config=config)[0], "returns (logits, cache)",
         "not a pair"),
    ],
    ids=["offset 0", "offset t - 1", "position row 0", "not appended",
         "appended twice", "values not kept", "cache written in place",
         "position not advanced", "planted values not kept", "logits only"],
)
def test_a_wrong_decode_step_is_named(fn, prop, said):
    error = failure(fn)
    assert error.property == prop
    assert said in error.detail


def test_a_step_that_crashes_or_returns_nothing_is_named():
    def crashes(params, cache, ids, *, config):
        return params[10**9]

    error = failure(crashes)
    assert error.property == "logits equal recomputation"
    assert "raised KeyError" in error.detail
    assert "crashes(params {" in error.detail and "ids=2" in error.detail
    forgot = failure(lambda params, cache, ids, *, config: None)
    assert "returned None — did you forget `return`?" in forgot.detail


def test_a_step_right_for_one_sequence_only_fails_the_batch():
    def first_sequence_only(params, cache, ids, *, config):
        logits, new = decode_step(params, cache, ids, config=config)
        if np.ndim(ids) == 1:  # a batch: every sequence gets the first one's logits
            logits = np.broadcast_to(logits[:1], logits.shape)
        return logits, new

    assert failure(first_sequence_only).property == "a batch of sequences"


def test_a_step_right_once_fails_several_steps():
    calls = []

    def once(params, cache, ids, *, config):
        calls.append(1)
        logits, new = decode_step(params, cache, ids, config=config)
        return (logits if len(calls) == 1 else logits + 1e-6), new

    assert failure(once).property == "several steps in a row"


def test_an_unfinished_decode_step_is_reported_in_one_line():
    def my_decode_step(params, cache, ids, *, config):
        raise NotImplementedError("your code here")

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert check_decode_step(my_decode_step) is None
    assert printed.getvalue() == UNFINISHED.format(name="my_decode_step") + "\n"


def test_a_step_that_writes_into_its_parameters_or_ids_is_named():
    right = scratch()

    def scales_the_embedding(params, cache, ids, *, config):
        out = right(params, cache, ids, config=config)
        params["embed"]["E"] *= 1.0 + 1e-9
        return out

    def zeroes_the_ids(params, cache, ids, *, config):
        out = right(params, cache, ids, config=config)
        if np.ndim(ids):  # the batch of two: an array of ids
            ids[...] = 0
        return out

    error = failure(scales_the_embedding)
    assert error.property == "inputs unchanged"
    assert "params['embed']['E']" in error.detail and error.fix
    error = failure(zeroes_the_ids)
    assert error.property == "inputs unchanged" and "the ids" in error.detail
