"""Planted mistakes in :mod:`attncourse.loss`, with their registry.

No max subtraction, a wrong sign, a sum paired with a mean. :func:`cross_entropy_naive`
imitates :func:`attncourse.cross_entropy` ``(Z, y) -> loss``; the backward faults have
the signature of :func:`attncourse.cross_entropy_backward`,
``(params, saved, dloss) -> ({}, dZ)``, and pair with the correct forward pass.
:data:`FAULTS` says which of :data:`CHECKS` catch each one and which are blind to it;
:data:`CORRECT` holds the package functions every check must pass.
"""

import numpy as np

from ...layers.embedding import one_hot
from ...loss import cross_entropy, cross_entropy_backward, cross_entropy_forward
from ...softmax import softmax
from ..exercises import check_cross_entropy
from ..gradients import layer_gradcheck
from ._registry import Check, Fault, learner_checker, require_gradcheck
from .softmax import softmax_without_max_subtraction

__all__ = [
    "FAULTS",
    "CHECKS",
    "CORRECT",
    "BUILDING_BLOCKS",
    "cross_entropy_naive",
    "cross_entropy_backward_wrong_sign",
    "cross_entropy_backward_sum",
]


def cross_entropy_naive(Z, y):
    """FAULT: the mean of ``-log(p_y)``, ``p`` a softmax without max subtraction.

    NaN or inf for logits such as 1000 or -1000; right for moderate logits.

    >>> Z, y = np.array([[0.0, -1000.0]]), np.array([1])  # the true loss is 1000
    >>> cross_entropy_naive(Z, y)
    inf
    """
    y = np.asarray(y)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        p = softmax_without_max_subtraction(Z)
        p_y = np.take_along_axis(p, y[..., None], axis=-1)[..., 0]
        return float(np.mean(-np.log(p_y)))


def cross_entropy_backward_wrong_sign(params, saved, dloss):
    """FAULT: ``dloss (onehot(y) - p) / N``, the negative of the gradient.

    >>> saved = {"Z": np.zeros((2, 2)), "targets": np.array([0, 0])}
    >>> cross_entropy_backward_wrong_sign({}, saved, 1.0)[1]
    array([[ 0.25, -0.25],
           [ 0.25, -0.25]])
    """
    Z, y = saved["Z"], saved["targets"]
    return {}, float(dloss) * (one_hot(y, Z.shape[-1]) - softmax(Z)) / y.size


def cross_entropy_backward_sum(params, saved, dloss):
    """FAULT: ``dloss (p - onehot(y))``, no ``1/N``: the gradient of the summed loss.

    Paired with the mean loss it is ``N`` times too large (and right for ``N = 1``).

    >>> saved = {"Z": np.zeros((2, 2)), "targets": np.array([0, 0])}
    >>> cross_entropy_backward_sum({}, saved, 1.0)[1]
    array([[-0.5,  0.5],
           [-0.5,  0.5]])
    """
    Z, y = saved["Z"], saved["targets"]
    return {}, float(dloss) * (softmax(Z) - one_hot(y, Z.shape[-1]))


# --- the registry ---------------------------------------------------------------------


def _logits(B, n_vocab=7):
    """Seeded moderate logits ``Z (B, n_vocab)`` and targets ``y (B,)``."""
    rng = np.random.default_rng(12)
    return rng.normal(size=(B, n_vocab)), rng.integers(0, n_vocab, size=B)


def _gradient(Z, y):
    """The correct ``dZ`` of the mean loss, from the package pair."""
    _, saved = cross_entropy_forward({}, Z, targets=y)
    return cross_entropy_backward({}, saved, 1.0)[1]


def _learner_loss(loss):
    """The learner's checker on this loss, paired with the correct ``dZ``."""
    learner_checker("learner checker", check_cross_entropy,
                    lambda Z, y: (loss(Z, y), _gradient(Z, y)))


def _learner_backward(backward):
    """The learner's checker on this ``dZ``, paired with the correct loss."""
    def fn(Z, y):
        loss, saved = cross_entropy_forward({}, Z, targets=y)
        return loss, backward({}, saved, 1.0)[1]
    learner_checker("learner checker", check_cross_entropy, fn)


def _layer_gradcheck(backward, B):
    """The layer gradient check of the loss pair on ``B`` predictions."""
    Z, y = _logits(B)
    report = layer_gradcheck(cross_entropy_forward, backward, {}, Z, targets=y)
    require_gradcheck("gradient check of the loss pair", report)


CHECKS = {c.name: c for c in (
    Check("learner checker (loss)", "cross_entropy", _learner_loss),
    Check("learner checker (dZ)", "cross_entropy_backward", _learner_backward),
    Check("layer gradcheck", "cross_entropy_backward",
          lambda backward: _layer_gradcheck(backward, B=5)),
    Check("gradcheck, batch of one", "cross_entropy_backward",
          lambda backward: _layer_gradcheck(backward, B=1)),
)}
"""Check name -> :class:`~attncourse.kit.faults.Check`."""

FAULTS = (
    Fault("cross_entropy_naive",
          "-log p_y without max subtraction: inf at extreme logits",
          cross_entropy_naive, "cross_entropy",
          caught_by=("learner checker (loss)",)),
    Fault("cross_entropy_backward_wrong_sign", "dZ = onehot(y) - p: gradient ascent",
          cross_entropy_backward_wrong_sign, "cross_entropy_backward",
          caught_by=("learner checker (dZ)", "layer gradcheck",
                     "gradcheck, batch of one")),
    Fault("cross_entropy_backward_sum", "no 1/N: the gradient of the summed loss",
          cross_entropy_backward_sum, "cross_entropy_backward",
          caught_by=("learner checker (dZ)", "layer gradcheck"),
          blind=("gradcheck, batch of one",)),
)
"""The planted mistakes: the checks that catch each one, and those blind to it."""

CORRECT = {
    "cross_entropy": cross_entropy,
    "cross_entropy_backward": cross_entropy_backward,
}
"""Role -> the package function: every check must pass it."""

BUILDING_BLOCKS = {}
"""Public functions that are not faults themselves -> the fault they are part of."""
