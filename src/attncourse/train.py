"""The training loop: AdamW steps on the model's loss, deterministic and compact.

One step of :func:`train` is::

    ids, targets, counted = batch(step)                      the data of this step
    loss, grads = model_loss(params, ids, targets, ...)      forward and backward
    grads, norm = clip_by_global_norm(grads, clip)           one norm over all arrays
    params, state = adamw_step(params, grads, state, lr=lr_at(step, ...), ...)

Nothing is random inside the loop: ``batch(step)`` decides the data, so the same
``batch`` and the same starting ``params`` give the same loss curve, bit for bit. The
loop runs the matrix products on one BLAS thread: the model's matrices are small, so
more threads cost more than they save, and with one thread the result does not depend on
how many cores the machine has (the last bits of a product do, when it is split). The
loss must stay finite: NaN or inf stops training with :class:`TrainingDiverged`, which
names the step. Progress is a few printed lines, not one per step.

>>> from attncourse.model import ModelConfig, init_model
>>> config = ModelConfig(n_vocab=3, T_max=4, D=4, heads=1, layers=1)
>>> def batch(step):  # the sequence 0 1 2 0 1 ...: each token names the next
...     ids = np.array([[0, 1, 2, 0], [1, 2, 0, 1]])
...     return ids, (ids + 1) % 3, None
>>> params, history = train(init_model(config), batch, config=config, steps=60,
...                         lr=0.05, lines=0)
>>> bool(history["loss"][-1] < 0.1 < np.log(3) - 0.05 < history["loss"][0])
True
"""

import math
import time

import numpy as np
from threadpoolctl import threadpool_limits

from ._validate import as_number, require_that
from .model import model_forward, model_loss, save_model
from .optim import adamw_init, adamw_step, clip_by_global_norm, global_norm, lr_at

__all__ = ["train", "TrainingDiverged", "as_dtype"]


class TrainingDiverged(ValueError):
    """The loss became NaN or infinite; the message names the step."""


def as_dtype(params, dtype):
    """Return a copy of the nested ``params`` with every array cast to ``dtype``.

    >>> params = {"W": np.ones(2), "blocks": [{"b": np.zeros(1)}]}
    >>> as_dtype(params, np.float32)["W"].dtype
    dtype('float32')
    """
    if isinstance(params, dict):
        return {key: as_dtype(value, dtype) for key, value in params.items()}
    if isinstance(params, list):
        return [as_dtype(value, dtype) for value in params]
    return np.asarray(params, dtype=dtype).copy()


def _finite_logits(params, ids, config):
    with np.errstate(over="ignore", invalid="ignore"):
        logits, _ = model_forward(params, ids, config=config)
    return bool(np.isfinite(logits).all())


def _as_batch(batch, step):
    """Return ``batch(step)``, or ``ValueError`` unless it is a triple."""
    data = batch(step)
    require_that(isinstance(data, tuple) and len(data) == 3, "batch(step) must return "
                 "(ids, targets, counted), got {!r:.80}", data)
    return data


def train(params, batch, *, config, steps, lr, warmup=0, min_lr=0.0, betas=(0.9, 0.999),
          eps=1e-8, weight_decay=0.0, clip=None, evaluate=None, every=None, lines=5,
          checkpoint=None):
    """Train ``params`` for ``steps`` AdamW steps; return ``params, history``.

    ``batch(step)`` returns ``(ids, targets, counted)`` for ``step = 1 .. steps``
    (``counted`` may be None: every position is scored). The learning rate follows
    :func:`attncourse.optim.lr_at` (linear warm-up, then cosine to ``min_lr``);
    ``clip`` is a maximum global gradient norm (None: no clipping). The arrays keep the
    dtype of ``params`` (cast them with :func:`as_dtype` to train in float32).

    Every ``every`` steps (and after the last) ``evaluate(params)`` returns a dict of
    numbers, recorded in ``history["eval"]``; ``checkpoint`` (a path) is then rewritten
    with :func:`attncourse.model.save_model`. ``lines`` progress lines are printed,
    evenly spaced (0: silent). ``history`` holds arrays ``"step"``, ``"loss"``,
    ``"lr"``, ``"grad_norm"`` (before clipping), the list ``"eval"`` of
    ``(step, metrics)``, ``"seconds"`` (wall-clock time) and ``"cpu_seconds"`` (the
    processor time of this process, all its threads: what other programs running on the
    machine cannot inflate).

    >>> from attncourse.model import ModelConfig, init_model
    >>> config = ModelConfig(n_vocab=3, T_max=2, D=4, heads=1, layers=1)
    >>> def batch(step):
    ...     return np.array([[0, 1]]), np.array([[1, 2]]), None
    >>> train(init_model(config), batch, config=config, steps=3, lr=1e200, lines=0)
    Traceback (most recent call last):
    ...
    attncourse.train.TrainingDiverged: the loss is nan at step 2 (the learning rate \
was 2.5e+199): lower it, or clip the gradients
    """
    steps = as_number("steps", steps, "[1, inf)", integer=True)
    lines = as_number("lines", lines, "[0, inf)", integer=True)
    every = as_number("every", every, "[1, inf)", integer=True, optional=True)
    if (evaluate is not None or checkpoint is not None) and every is None:
        every = steps
    state = adamw_init(params)
    history = {"step": np.arange(1, steps + 1), "loss": np.empty(steps),
               "lr": np.empty(steps), "grad_norm": np.empty(steps), "eval": []}
    shown = set(np.linspace(1, steps, lines).round().astype(int)) if lines else set()
    start, start_cpu = time.perf_counter(), time.process_time()
    with threadpool_limits(limits=1, user_api="blas"):  # one BLAS thread
        for step in range(1, steps + 1):
            ids, targets, counted = _as_batch(batch, step)
            try:
                with np.errstate(over="ignore", invalid="ignore"):  # caught just below
                    loss, grads = model_loss(params, ids, targets, config=config,
                                             counted=counted)
            except ValueError:
                if _finite_logits(params, ids, config):
                    raise  # bad input, not divergence
                loss = math.nan  # the parameters grew until the logits overflowed
            rate = lr_at(step, lr=lr, warmup=warmup, total=steps, min_lr=min_lr)
            if not math.isfinite(loss):
                raise TrainingDiverged(f"the loss is {loss} at step {step} (the "
                                       f"learning rate was {rate:g}): lower it, or "
                                       "clip the gradients")
            if clip is None:
                norm = global_norm(grads)
            else:
                grads, norm = clip_by_global_norm(grads, clip)
            with np.errstate(over="ignore", invalid="ignore"):  # see the check above
                params, state = adamw_step(params, grads, state, lr=rate, betas=betas,
                                           eps=eps, weight_decay=weight_decay)
            history["loss"][step - 1] = loss
            history["lr"][step - 1] = rate
            history["grad_norm"][step - 1] = norm
            metrics = {}
            if every is not None and (step % every == 0 or step == steps):
                if evaluate is not None:
                    metrics = dict(evaluate(params))
                    history["eval"].append((step, metrics))
                if checkpoint is not None:
                    save_model(checkpoint, params, config)
            if step in shown:
                extra = "".join(f"  {name} {value:.3f}" for name, value in
                                metrics.items())
                print(f"step {step:>{len(str(steps))}}/{steps}  loss {loss:.4f}{extra}"
                      f"  ({time.perf_counter() - start:.1f} s)")
    history["seconds"] = time.perf_counter() - start
    history["cpu_seconds"] = time.process_time() - start_cpu
    return params, history
