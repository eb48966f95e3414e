"""The loss: cross-entropy of next-token logits, computed with log-sum-exp, as a layer
pair.

For logits ``Z (..., n_vocab)`` and target ids ``y`` (shape ``Z.shape[:-1]``), the loss
is the **mean** of ``-log p_y = logsumexp(z) - z_y`` over all ``N = y.size`` predictions
(``REDUCTION = "mean"``), and ``dZ = (softmax(Z) - onehot(y)) / N``. In Chapter 2 a
batch holds ``B`` examples of one prediction each, so ``N = B``; for ``B`` sequences of
``T`` positions (Chapter 4 on), ``Z`` has shape ``(B, T, n_vocab)`` and ``N = B T``.

>>> import numpy as np
>>> z = np.log(np.array([[1.0, 2.0, 3.0, 6.0]]))  # p = (1, 2, 3, 6) / 12
>>> loss, saved = cross_entropy_forward({}, z, targets=np.array([2]))
>>> round(loss, 12) == round(float(np.log(4.0)), 12)
True
>>> _, dZ = cross_entropy_backward({}, saved, 1.0)
>>> dZ.round(6)
array([[ 0.083333,  0.166667, -0.75    ,  0.5     ]])

The loss has no parameters: its ``params`` is the empty dict, and so is its ``dparams``.
"""

import numpy as np

from ._validate import as_float_array
from .layers.embedding import one_hot
from .softmax import logsumexp, softmax
from .text import validate_ids

__all__ = [
    "REDUCTION",
    "validate_logits_targets",
    "cross_entropy",
    "cross_entropy_forward",
    "cross_entropy_backward",
]

REDUCTION = "mean"


def validate_logits_targets(Z, y):
    """Return ``Z`` (float) and ``y`` (int64) or raise ``ValueError`` naming the shapes
    or values at fault.

    >>> validate_logits_targets(np.zeros((4, 5)), np.array([0, 1, 2]))
    Traceback (most recent call last):
    ...
    ValueError: targets y must have shape Z.shape[:-1] = (4,), got y of shape (3,)
    for Z of shape (4, 5)
    """
    Z = as_float_array("Z", Z)
    if Z.ndim < 1 or Z.shape[-1] == 0:
        raise ValueError(
            f"Z must have a non-empty last axis of logits, got shape {Z.shape}"
        )
    y = np.asarray(y)
    if y.shape != Z.shape[:-1]:
        raise ValueError(
            f"targets y must have shape Z.shape[:-1] = {Z.shape[:-1]}, got y of shape "
            f"{y.shape} for Z of shape {Z.shape}"
        )
    if y.size == 0:
        raise ValueError(
            f"the mean over an empty batch is undefined: y has shape {y.shape}"
        )
    if not np.all(np.isfinite(Z)):
        raise ValueError(
            "Z contains NaN or infinity; logits must be finite (large finite values "
            "are fine)"
        )
    return Z, validate_ids(y, Z.shape[-1], name="targets y")


def cross_entropy(Z, y):
    """Return the mean over all predictions of ``-log softmax(z)_y``, as a float,
    without overflow.

    >>> cross_entropy(np.array([1000.0, -1000.0]), np.array(0))
    0.0
    >>> cross_entropy(np.array([1000.0, -1000.0]), np.array(1))
    2000.0
    """
    Z, y = validate_logits_targets(Z, y)
    z_y = np.take_along_axis(Z, y[..., None], axis=-1)[..., 0]
    return float(np.mean(logsumexp(Z) - z_y))  # -log p_y = log sum_k exp(z_k) - z_y


def cross_entropy_forward(params, Z, *, targets):
    """Return ``loss, saved``: the mean cross-entropy of ``Z`` against ``targets`` and
    what the backward needs.

    ``params`` must be empty (the loss has none); it is there so that the loss composes
    like every other layer.

    >>> cross_entropy_forward({"W": 1}, np.zeros((1, 2)), targets=np.array([0]))
    Traceback (most recent call last):
    ...
    ValueError: cross_entropy has no parameters; params must be {}, got keys ['W']
    """
    if params:
        raise ValueError(
            f"cross_entropy has no parameters; params must be {{}}, got keys "
            f"{sorted(params)}"
        )
    Z, y = validate_logits_targets(Z, targets)
    return cross_entropy(Z, y), {"Z": Z, "targets": y}


def cross_entropy_backward(params, saved, dloss):
    """Return ``{}, dZ`` with ``dZ = dloss (softmax(Z) - onehot(y)) / N``
    (``N = y.size``).

    ``dloss`` is the upstream gradient of the scalar loss: 1 when the loss is the
    objective. Each row of ``dZ`` sums to zero.

    >>> _, saved = cross_entropy_forward({}, np.zeros((2, 2)), targets=np.array([0, 0]))
    >>> cross_entropy_backward({}, saved, 1.0)[1]
    array([[-0.25,  0.25],
           [-0.25,  0.25]])
    """
    Z, y = saved["Z"], saved["targets"]
    dloss = as_float_array("dloss", dloss)
    if dloss.shape != ():
        raise ValueError(
            f"dloss must be a scalar (the loss is one number), got shape {dloss.shape}"
        )
    return {}, float(dloss) * (softmax(Z) - one_hot(y, Z.shape[-1])) / y.size
