"""Tests of attncourse.train: the training loop (determinism, divergence, checkpoints,
progress lines, the learning-rate schedule and clipping it applies)."""

import math

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from attncourse.model import ModelConfig, init_model, load_model, model_loss
from attncourse.optim import adamw_init, adamw_step, clip_by_global_norm, lr_at
from attncourse.params import flatten_params
from attncourse.train import TrainingDiverged, as_dtype, train

CONFIG = ModelConfig(n_vocab=5, T_max=4, D=6, heads=2, layers=1, ratio=2)


def batch(step):  # a seeded batch per step: the data does not depend on the call order
    ids = np.random.default_rng([3, step]).integers(0, 5, size=(3, 4))
    return ids, (ids + 1) % 5, None


def params64():
    return init_model(CONFIG, seed=1)


def test_the_same_call_gives_the_same_curve_and_parameters():
    a, ha = train(params64(), batch, config=CONFIG, steps=12, lr=1e-2, lines=0)
    b, hb = train(params64(), batch, config=CONFIG, steps=12, lr=1e-2, lines=0)
    assert_array_equal(ha["loss"], hb["loss"])
    for name, x in flatten_params(a).items():
        assert_array_equal(flatten_params(b)[name], x)
    other, _ = train(
        init_model(CONFIG, seed=2), batch, config=CONFIG, steps=12, lr=1e-2, lines=0
    )
    assert not np.array_equal(
        flatten_params(other)["embed.E"], flatten_params(a)["embed.E"]
    )


def test_each_step_is_model_loss_clipping_and_adamw_at_the_scheduled_rate():
    settings = dict(
        steps=5,
        lr=3e-2,
        warmup=2,
        betas=(0.8, 0.95),
        eps=1e-7,
        weight_decay=0.1,
        clip=0.5,
    )
    got, history = train(params64(), batch, config=CONFIG, lines=0, **settings)
    params, state = params64(), adamw_init(params64())
    for step in range(1, 6):
        ids, targets, _ = batch(step)
        loss, grads = model_loss(params, ids, targets, config=CONFIG)
        assert history["loss"][step - 1] == loss
        grads, norm = clip_by_global_norm(grads, 0.5)
        assert history["grad_norm"][step - 1] == norm
        rate = lr_at(step, lr=3e-2, warmup=2, total=5)
        assert history["lr"][step - 1] == rate
        params, state = adamw_step(
            params, grads, state, lr=rate, betas=(0.8, 0.95), eps=1e-7, weight_decay=0.1
        )
    for name, x in flatten_params(params).items():
        assert_array_equal(flatten_params(got)[name], x)
    assert_array_equal(history["step"], np.arange(1, 6))


def test_training_lowers_the_loss_and_keeps_float32():
    params, history = train(
        as_dtype(params64(), np.float32),
        batch,
        config=CONFIG,
        steps=60,
        lr=2e-2,
        lines=0,
    )
    assert history["loss"][-5:].mean() < 0.5 * history["loss"][:5].mean()
    assert all(x.dtype == np.float32 for x in flatten_params(params).values())


def test_counted_positions_reach_the_loss():
    def last_only(step):
        ids, targets, _ = batch(step)
        counted = np.zeros(ids.shape, dtype=bool)
        counted[:, -1] = True
        return ids, targets, counted

    _, history = train(params64(), last_only, config=CONFIG, steps=1, lr=1e-3, lines=0)
    ids, targets, counted = last_only(1)
    loss, _ = model_loss(params64(), ids, targets, config=CONFIG, counted=counted)
    assert history["loss"][0] == loss


def test_divergence_names_the_step_and_bad_input_is_not_called_divergence():
    with pytest.raises(
        TrainingDiverged,
        match=r"the loss is nan at step 2 \(the "
        r"learning rate was .*\): lower it",
    ):
        train(params64(), batch, config=CONFIG, steps=4, lr=1e200, lines=0)
    assert issubclass(TrainingDiverged, ValueError)

    def bad(step):
        ids, targets, _ = batch(step)
        return ids, targets + 5, None  # targets out of the vocabulary

    with pytest.raises(ValueError) as info:
        train(params64(), bad, config=CONFIG, steps=2, lr=1e-3, lines=0)
    assert not isinstance(info.value, TrainingDiverged)


def test_a_nan_parameter_stops_training_at_step_1():
    params = params64()
    params["blocks"][0]["ln1"]["gamma"][0] = np.nan
    with pytest.raises(TrainingDiverged, match="at step 1 "):
        train(params, batch, config=CONFIG, steps=3, lr=1e-3, lines=0)


def test_evaluation_and_checkpoints_every_few_steps(tmp_path):
    seen = []

    def evaluate(params):
        seen.append(flatten_params(params)["embed.E"].copy())
        return {"mean E": float(np.mean(seen[-1]))}

    path = tmp_path / "model.npz"
    params, history = train(
        params64(),
        batch,
        config=CONFIG,
        steps=7,
        lr=1e-2,
        evaluate=evaluate,
        every=3,
        checkpoint=path,
        lines=0,
    )
    assert [step for step, _ in history["eval"]] == [3, 6, 7]
    assert_array_equal(seen[-1], params["embed"]["E"])
    loaded, config = load_model(path)
    assert config == CONFIG
    for name, x in flatten_params(params).items():
        # the last step's parameters
        assert_array_equal(flatten_params(loaded)[name], x)


def test_progress_prints_the_number_of_lines_asked_for(capsys):
    train(params64(), batch, config=CONFIG, steps=9, lr=1e-2, lines=3)
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in out] == ["1/9", "5/9", "9/9"]
    train(params64(), batch, config=CONFIG, steps=9, lr=1e-2, lines=0)
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(steps=0), r"^steps must be an integer in \[1, inf\), got 0$"),
        (dict(steps=2.0), r"^steps must be an integer in \[1, inf\), got 2.0$"),
        (dict(every=0), r"^every must be None or an integer in \[1, inf\), got 0$"),
        (dict(lines=-1), r"^lines must be an integer in \[0, inf\), got -1$"),
        (dict(lr=-1.0), "lr"),
    ],
)
def test_bad_settings_are_refused(change, message):
    settings = dict(steps=2, lr=1e-3, lines=0) | change
    with pytest.raises(ValueError, match=message):
        train(params64(), batch, config=CONFIG, **settings)


def test_batch_must_return_three_things():
    with pytest.raises(
        ValueError,
        match=r"batch\(step\) must return \(ids, targets, "
        r"counted\)",
    ):
        train(
            params64(),
            lambda step: batch(step)[:2],
            config=CONFIG,
            steps=1,
            lr=1e-3,
            lines=0,
        )


def test_as_dtype_copies_and_casts_every_array():
    params = params64()
    cast = as_dtype(params, np.float32)
    assert all(x.dtype == np.float32 for x in flatten_params(cast).values())
    cast["embed"]["E"][0, 0] = 123.0
    assert params["embed"]["E"][0, 0] != 123.0
    assert math.isclose(float(as_dtype(cast, np.float64)["embed"]["E"][0, 0]), 123.0)


def test_the_result_does_not_depend_on_the_blas_threads_around_it():
    from threadpoolctl import threadpool_info, threadpool_limits

    reference, _ = train(params64(), batch, config=CONFIG, steps=6, lr=1e-2, lines=0)
    with threadpool_limits(limits=2, user_api="blas"):
        other, _ = train(params64(), batch, config=CONFIG, steps=6, lr=1e-2, lines=0)
        outside = [
            pool["num_threads"]
            for pool in threadpool_info()
            if pool["user_api"] == "blas"
        ]
    for name, x in flatten_params(reference).items():
        assert_array_equal(flatten_params(other)[name], x)
    assert all(n <= 2 for n in outside)  # the loop's own limit was lifted on return
