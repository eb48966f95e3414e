"""Checker of Chapter 2's exercise on the loss: cross-entropy and its gradient."""

import numpy as np

from ...loss import cross_entropy
from ..failed import CheckFailed
from ..gradients import TOLERANCE, numerical_gradient
from ._base import _array, _call, _sign_flipped, reports_unfinished

__all__ = ["check_cross_entropy"]


@reports_unfinished
def check_cross_entropy(fn):
    """Check a learner's ``fn(Z, y) -> (loss, dZ)`` (mean over the batch); raise
    :class:`CheckFailed` naming the failed property.

    Returns the names of the properties checked.

    >>> from attncourse.loss import cross_entropy_backward, cross_entropy_forward
    >>> def mine(Z, y):
    ...     loss, saved = cross_entropy_forward({}, Z, targets=y)
    ...     return loss, cross_entropy_backward({}, saved, 1.0)[1]
    >>> check_cross_entropy(mine)[-1]
    'gradient matches central differences of the loss'
    """
    rng = np.random.default_rng(21)
    B, n_vocab = 4, 6
    Z = rng.normal(size=(B, n_vocab))
    y = np.array([5, 0, 3, 0])

    def run(property, Z, y):
        result = _call(fn, property, Z.copy(), y.copy())
        if not (isinstance(result, tuple) and len(result) == 2):
            raise CheckFailed(
                property,
                f"fn must return a pair (loss, dZ), got {type(result).__name__}",
                "return loss, dZ",
            )
        return result

    loss, dZ = run("loss is a scalar", Z, y)
    loss = _array(loss, "loss is a scalar", np.float64)
    if np.ndim(loss) != 0:
        raise CheckFailed(
            "loss is a scalar",
            f"got an array of shape {np.shape(loss)}",
            "average the per-example losses into one number",
        )
    want = cross_entropy(Z, y)  # the mean of -log softmax(Z)[b, y_b]
    if not abs(float(loss) - want) < 1e-12:
        raise CheckFailed(
            "loss is the mean of -log p_y",
            f"expected {want:.12f}, got {float(loss):.12f}",
            "loss = mean over the batch of -log softmax(Z)[b, y_b]",
        )
    loss2, _ = run(
        "mean over the batch", np.concatenate([Z, Z]), np.concatenate([y, y])
    )
    if not abs(float(loss2) - want) < 1e-12:
        raise CheckFailed(
            "mean over the batch",
            "repeating the batch twice must leave the loss unchanged (a sum would "
            "double it)",
            "divide by the batch size B",
        )
    Z_big = np.array([[1000.0, -1000.0, 0.0], [1000.0, -1000.0, 0.0]])
    with np.errstate(all="ignore"):
        loss_big, dZ_big = run("finite for extreme logits", Z_big, np.array([0, 1]))
        finite = bool(np.isfinite(loss_big)) and bool(np.all(np.isfinite(dZ_big)))
    log_sum_exp = (
        "use log-sum-exp: log p_y = z_y - logsumexp(z), logsumexp(z) = m + log sum "
        "exp(z - m) with m the row maximum; subtracting the maximum alone still takes "
        "log(0) = -inf once p_y underflows to 0"
    )
    if not finite:
        raise CheckFailed(
            "finite for extreme logits",
            "Z = [1000, -1000, 0] gave NaN or inf (the loss overflows)",
            log_sum_exp,
        )
    if not abs(float(loss_big) - 1000.0) < 1e-9:
        raise CheckFailed(
            "finite for extreme logits",
            f"the losses 0 and 2000 should average to 1000, got {float(loss_big)}",
            log_sum_exp,
        )
    dZ = _array(dZ, "gradient has the shape of Z", np.float64)
    if dZ.shape != Z.shape:
        raise CheckFailed(
            "gradient has the shape of Z",
            f"expected {Z.shape}, got {dZ.shape}",
            "dZ has one row per example and one column per token",
        )
    if not np.allclose(dZ.sum(axis=-1), 0, rtol=0, atol=1e-15):
        raise CheckFailed(
            "gradient rows sum to zero",
            f"row sums are {np.round(dZ.sum(axis=-1), 6).tolist()}",
            "dZ = (softmax(Z) - onehot(y)) / B: subtract the one-hot of the target",
        )
    numeric = numerical_gradient(lambda Z: float(fn(Z, y)[0]), Z, 1e-5)
    err = float(np.max(np.abs(dZ - numeric)))
    if err >= TOLERANCE:
        if _sign_flipped(dZ, numeric):
            detail, fix = (
                "dZ is the negative of the gradient: off by a sign",
                "dZ = (p - onehot(y)) / B",
            )
        elif np.allclose(dZ, B * numeric, rtol=1e-6, atol=1e-9):
            detail, fix = (
                f"dZ is B = {B} times the gradient of the mean",
                "divide dZ by the batch size B",
            )
        else:
            detail, fix = "", "check the sign and the 1/B of the mean"
        raise CheckFailed(
            "gradient matches central differences of the loss",
            f"max |error| = {err:.1e} >= {TOLERANCE:.0e}"
            + (f"; {detail}" if detail else ""),
            fix,
        )
    return (
        "loss is a scalar",
        "loss is the mean of -log p_y",
        "mean over the batch",
        "finite for extreme logits",
        "gradient has the shape of Z",
        "gradient rows sum to zero",
        "gradient matches central differences of the loss",
    )
