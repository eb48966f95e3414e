"""Cross-entropy of next-token logits, computed with log-sum-exp, and its gradient ``(p - onehot(y)) / N``.

For logits ``Z (..., n_vocab)`` and target ids ``y`` (shape ``Z.shape[:-1]``), the loss is
the **mean** of ``-log p_y = logsumexp(z) - z_y`` over all ``N = y.size`` predictions
(``REDUCTION = "mean"``), and ``dZ = (softmax(Z) - onehot(y)) / N``. In Chapter 2 a batch
holds ``B`` examples of one prediction each, so ``N = B``; for ``B`` sequences of ``T``
positions (Chapter 4 on), ``Z`` has shape ``(B, T, n_vocab)`` and ``N = B T``.

>>> import numpy as np
>>> z = np.log(np.array([[1.0, 2.0, 3.0, 6.0]]))  # p = (1, 2, 3, 6) / 12
>>> round(cross_entropy(z, np.array([2])), 12) == round(float(np.log(4.0)), 12)
True
>>> cross_entropy_backward(z, np.array([2])).round(6)
array([[ 0.083333,  0.166667, -0.75    ,  0.5     ]])
"""

import numpy as np

from ._validate import as_float_array
from .embedding import one_hot
from .gradcheck import TOLERANCE, numerical_gradient
from .softmax import logsumexp, softmax
from .tokenizer import check_ids

__all__ = ["REDUCTION", "check_logits_targets", "cross_entropy", "cross_entropy_backward", "check_cross_entropy"]

REDUCTION = "mean"


def check_logits_targets(Z, y):
    """Return ``Z`` (float) and ``y`` (int64) or raise ``ValueError`` naming the shapes or values at fault.

    >>> check_logits_targets(np.zeros((4, 5)), np.array([0, 1, 2]))
    Traceback (most recent call last):
    ...
    ValueError: targets y must have shape Z.shape[:-1] = (4,), got y of shape (3,) for Z of shape (4, 5)
    """
    Z = as_float_array("Z", Z)
    if Z.ndim < 1 or Z.shape[-1] == 0:
        raise ValueError(f"Z must have a non-empty last axis of logits, got shape {Z.shape}")
    y = np.asarray(y)
    if y.shape != Z.shape[:-1]:
        raise ValueError(
            f"targets y must have shape Z.shape[:-1] = {Z.shape[:-1]}, got y of shape {y.shape} for Z of shape {Z.shape}"
        )
    if y.size == 0:
        raise ValueError(f"the mean over an empty batch is undefined: y has shape {y.shape}")
    if not np.all(np.isfinite(Z)):
        raise ValueError("Z contains NaN or infinity; logits must be finite (large finite values are fine)")
    return Z, check_ids(y, Z.shape[-1], name="targets y")


def cross_entropy(Z, y):
    """Return the mean over all predictions of ``-log softmax(z)_y``, as a float, without overflow.

    >>> cross_entropy(np.array([1000.0, -1000.0]), np.array(0))
    0.0
    >>> cross_entropy(np.array([1000.0, -1000.0]), np.array(1))
    2000.0
    """
    Z, y = check_logits_targets(Z, y)
    z_y = np.take_along_axis(Z, y[..., None], axis=-1)[..., 0]
    return float(np.mean(logsumexp(Z) - z_y))  # -log p_y = log sum_k exp(z_k) - z_y


def cross_entropy_backward(Z, y):
    """Return ``dZ = (softmax(Z) - onehot(y)) / N``, the gradient of :func:`cross_entropy` (``N = y.size``).

    Each row of ``dZ`` sums to zero.

    >>> cross_entropy_backward(np.array([[0.0, 0.0], [0.0, 0.0]]), np.array([0, 0]))
    array([[-0.25,  0.25],
           [-0.25,  0.25]])
    """
    Z, y = check_logits_targets(Z, y)
    return (softmax(Z) - one_hot(y, Z.shape[-1])) / y.size


def check_cross_entropy(fn):
    """Check a learner's ``fn(Z, y) -> (loss, dZ)`` (mean over the batch); raise ``AssertionError`` naming the failed property.

    Returns the names of the properties checked.

    >>> check_cross_entropy(lambda Z, y: (cross_entropy(Z, y), cross_entropy_backward(Z, y)))[-1]
    'gradient matches central differences of the loss'
    """
    rng = np.random.default_rng(21)
    B, n_vocab = 4, 6
    Z = rng.normal(size=(B, n_vocab))
    y = np.array([5, 0, 3, 0])
    loss, dZ = fn(Z, y)
    assert np.ndim(loss) == 0, f"loss is a scalar: got an array of shape {np.shape(loss)}"
    want = float(np.mean(-np.log(np.exp(Z[np.arange(B), y]) / np.exp(Z).sum(axis=1))))
    assert abs(float(loss) - want) < 1e-12, (
        f"loss is the mean of -log p_y: expected {want:.12f}, got {float(loss):.12f}"
    )
    loss2, _ = fn(np.concatenate([Z, Z]), np.concatenate([y, y]))
    assert abs(float(loss2) - want) < 1e-12, (
        "mean over the batch: repeating the batch twice must leave the loss unchanged (a sum would double it)"
    )
    Z_big = np.array([[1000.0, -1000.0, 0.0], [1000.0, -1000.0, 0.0]])
    with np.errstate(all="ignore"):
        loss_big, dZ_big = fn(Z_big, np.array([0, 1]))
    assert np.isfinite(loss_big) and np.all(np.isfinite(dZ_big)), (
        "finite for extreme logits: Z = [1000, -1000, 0] gave NaN or inf (subtract the row maximum)"
    )
    assert abs(float(loss_big) - 1000.0) < 1e-9, (
        f"finite for extreme logits: the losses 0 and 2000 should average to 1000, got {float(loss_big)}"
    )
    dZ = np.asarray(dZ, dtype=np.float64)
    assert dZ.shape == Z.shape, f"gradient has the shape of Z: expected {Z.shape}, got {dZ.shape}"
    assert np.allclose(dZ.sum(axis=-1), 0, rtol=0, atol=1e-15), "gradient rows sum to zero"
    numeric = numerical_gradient(lambda Z: float(fn(Z, y)[0]), Z, 1e-5)
    err = float(np.max(np.abs(dZ - numeric)))
    assert err < TOLERANCE, (
        f"gradient matches central differences of the loss: max |error| = {err:.1e} >= {TOLERANCE:.0e} "
        "(check the sign and the 1/B of the mean)"
    )
    return ("loss is a scalar", "loss is the mean of -log p_y", "mean over the batch",
            "finite for extreme logits", "gradient has the shape of Z", "gradient rows sum to zero",
            "gradient matches central differences of the loss")
