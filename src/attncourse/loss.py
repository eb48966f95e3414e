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

from ._validate import as_float_array, as_float_like, as_ids, require_that
from .layers.embedding import one_hot
from .softmax import logsumexp, softmax

__all__ = [
    "REDUCTION",
    "cross_entropy",
    "cross_entropy_forward",
    "cross_entropy_backward",
]

REDUCTION = "mean"


def _as_logits_targets(Z, y, params=None):
    """Return ``Z`` (float) and ``y`` (int64) or raise ``ValueError`` naming the shapes,
    values or ``params`` at fault."""
    require_that(not params, "cross_entropy has no parameters; params must be {{}}, "
                 "got keys {}", sorted(params or ()))
    Z = as_float_array("Z", Z)
    require_that(Z.shape[-1:] not in ((), (0,)) and np.shape(y) == Z.shape[:-1],
                 "logits Z must have shape y.shape + (n_vocab,), n_vocab >= 1: got Z "
                 "of shape {}, targets y of shape {}", Z.shape, np.shape(y))
    require_that(np.size(y), "no targets: the mean over an empty batch is undefined")
    require_that(np.isfinite(Z).all(), "Z contains NaN or infinity; logits must be "
                 "finite")
    return Z, as_ids(y, Z.shape[-1], name="targets y")


def cross_entropy(Z, y):
    """Return the mean over all ``N = y.size`` predictions of
    ``-log softmax(z)_y = logsumexp(z) - z_y``, as a float, without overflow.

    >>> cross_entropy(np.array([1000.0, -1000.0]), np.array(0))
    0.0
    >>> cross_entropy(np.array([1000.0, -1000.0]), np.array(1))
    2000.0
    >>> cross_entropy(np.zeros((4, 5)), np.array([0, 1, 2]))
    Traceback (most recent call last):
    ...
    ValueError: logits Z must have shape y.shape + (n_vocab,), n_vocab >= 1: got Z of
    shape (4, 5), targets y of shape (3,)
    """
    Z, y = _as_logits_targets(Z, y)
    z_y = np.take_along_axis(Z, y[..., None], axis=-1)[..., 0]  # (...,): z at y
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
    Z, y = _as_logits_targets(Z, targets, params)
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
    dloss = as_float_like("dloss", dloss, (), "the loss (a scalar)")
    Z, y = saved["Z"], saved["targets"]
    # (..., n_vocab): dZ = dloss (p - onehot(y)) / N
    return {}, float(dloss) * (softmax(Z) - one_hot(y, Z.shape[-1])) / y.size
