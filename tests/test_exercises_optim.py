"""The training-loop checker of Chapter 7: right answers pass, typical wrong ones are
named."""

import pytest

from attncourse.kit.exercises import optim as ex
from attncourse.kit.failed import CheckFailed
from attncourse.model import model_loss
from attncourse.optim import adamw_init, adamw_step, clip_by_global_norm, lr_at
from attncourse.train import train


def loop(params, batch, *, config, steps, lr, warmup, clip, weight_decay, betas):
    state, losses = adamw_init(params), []
    for step in range(1, steps + 1):
        ids, targets, counted = batch(step)
        loss, grads = model_loss(params, ids, targets, config=config, counted=counted)
        grads, _ = clip_by_global_norm(grads, clip)
        rate = lr_at(step, lr=lr, warmup=warmup, total=steps)
        params, state = adamw_step(params, grads, state, lr=rate, betas=betas,
                                   weight_decay=weight_decay)
        losses.append(loss)
    return params, losses


def package(params, batch, **settings):
    trained, history = train(params, batch, lines=0, **settings)
    return trained, history["loss"]


def test_a_written_loop_and_the_package_pass():
    assert ex.check_training_loop(loop) == ex.TRAINING_LOOP_PROPERTIES
    assert ex.check_training_loop(package) == ex.TRAINING_LOOP_PROPERTIES


def test_the_case_clips_at_every_step():
    config, params, batch = ex._loop_case()
    ids, targets, _ = batch(1)
    _, grads = model_loss(params, ids, targets, config=config)
    assert clip_by_global_norm(grads, ex._LOOP["clip"])[1] > 2 * ex._LOOP["clip"]


def clip_after_step(params, batch, *, config, steps, lr, warmup, clip, weight_decay,
                    betas):
    state, losses = adamw_init(params), []
    for step in range(1, steps + 1):
        ids, targets, _ = batch(step)
        loss, grads = model_loss(params, ids, targets, config=config)
        rate = lr_at(step, lr=lr, warmup=warmup, total=steps)
        params, state = adamw_step(params, grads, state, lr=rate, betas=betas,
                                   weight_decay=weight_decay)
        grads, _ = clip_by_global_norm(grads, clip)  # too late
        losses.append(loss)
    return params, losses


def state_reset(params, batch, *, config, steps, lr, warmup, clip, weight_decay,
                betas):
    losses = []
    for step in range(1, steps + 1):
        ids, targets, _ = batch(step)
        loss, grads = model_loss(params, ids, targets, config=config)
        grads, _ = clip_by_global_norm(grads, clip)
        rate = lr_at(step, lr=lr, warmup=warmup, total=steps)
        params, _ = adamw_step(params, grads, adamw_init(params), lr=rate,
                               betas=betas, weight_decay=weight_decay)
        losses.append(loss)
    return params, losses


def _constant(params, batch, *, config, steps, lr, clip, weight_decay, betas):
    state, losses = adamw_init(params), []
    for step in range(1, steps + 1):
        ids, targets, _ = batch(step)
        loss, grads = model_loss(params, ids, targets, config=config)
        grads, _ = clip_by_global_norm(grads, clip)
        params, state = adamw_step(params, grads, state, lr=lr, betas=betas,
                                   weight_decay=weight_decay)
        losses.append(loss)
    return params, losses


@pytest.mark.parametrize("wrong, words", [
    (clip_after_step, "before adamw_step"),
    (state_reset, "create the AdamW state once"),
    (_constant, "lr_at(s"),
])
def test_typical_mistakes_are_named(wrong, words):
    def learner(params, batch, **settings):
        settings.pop("warmup") if wrong is _constant else None
        return wrong(params, batch, **settings)
    with pytest.raises(CheckFailed) as caught:
        ex.check_training_loop(learner)
    assert caught.value.property == "the parameters after training"
    assert words in caught.value.fix


def test_steps_counted_from_zero_and_in_place_updates_are_named():
    def from_zero(params, batch, *, steps, **settings):
        return loop(params, lambda s: batch(s - 1 if s > 1 else 99), steps=steps,
                    **settings)
    with pytest.raises(CheckFailed) as caught:
        ex.check_training_loop(from_zero)
    assert caught.value.property == "the first loss"

    def in_place(params, batch, **settings):
        new, losses = loop(params, batch, **settings)
        params["ln_f"]["gamma"][:] = new["ln_f"]["gamma"]
        return new, losses
    with pytest.raises(CheckFailed) as caught:
        ex.check_training_loop(in_place)
    assert caught.value.property == "purity"


def test_an_unfinished_stub_is_reported(capsys):
    def my_train(params, batch, **settings):
        raise NotImplementedError("your code here")
    assert ex.check_training_loop(my_train) is None
    assert "Exercise not done yet: my_train" in capsys.readouterr().out
