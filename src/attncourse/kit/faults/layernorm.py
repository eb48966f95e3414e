"""Planted mistakes in :mod:`attncourse.layers.layernorm`, with their registry.

A backward pass missing the mean term or the variance (``x_hat``) term; a forward pass
that puts ``eps`` outside the square root, or divides the variance by ``D - 1``, while
the backward pass assumes the correct forward; a pair that normalises over the wrong
axis (positions, axis ``-2``) in both passes. The faults are layer pairs
``(forward, backward)``, one of them planted. :data:`FAULTS` says which of
:data:`CHECKS` catch each one and which are blind to it; :data:`CORRECT` holds the
package pair every check must pass.
"""

import numpy as np

from ...layers.layernorm import layernorm_backward, layernorm_forward
from ..exercises import check_layernorm_backward
from ..gradients import layer_gradcheck
from ._registry import Check, Fault, learner_checker, require_close, require_gradcheck

__all__ = [
    "FAULTS",
    "CHECKS",
    "CORRECT",
    "BUILDING_BLOCKS",
    "layernorm_backward_no_mean_term",
    "layernorm_backward_no_variance_term",
    "layernorm_forward_eps_outside",
    "layernorm_forward_unbiased",
    "layernorm_forward_wrong_axis",
    "layernorm_backward_wrong_axis",
]


def _backward(params, saved, dY, *, mean_term=True, variance_term=True, axis=-1):
    """The compact backward with either term optional and the means over ``axis``."""
    gamma = np.asarray(params["gamma"], dtype=np.float64)
    x_hat, inv_std = saved["x_hat"], saved["inv_std"]
    dY = np.asarray(dY, dtype=np.float64)
    g = dY * gamma
    dX = g
    if mean_term:
        dX = dX - g.mean(axis=axis, keepdims=True)
    if variance_term:
        dX = dX - x_hat * np.mean(g * x_hat, axis=axis, keepdims=True)
    D = gamma.shape[0]
    dgamma = np.sum((dY * x_hat).reshape(-1, D), axis=0)
    dbeta = np.sum(dY.reshape(-1, D), axis=0)
    return {"gamma": dgamma, "beta": dbeta}, dX * inv_std


def _forward(params, X, eps, *, ddof=0, eps_outside=False, axis=-1):
    """LayerNorm; the variance's divisor, ``eps``'s place and the axis as arguments."""
    gamma = np.asarray(params["gamma"], dtype=np.float64)
    beta = np.asarray(params["beta"], dtype=np.float64)
    X = np.asarray(X, dtype=np.float64)
    centred = X - X.mean(axis=axis, keepdims=True)
    var = np.var(X, axis=axis, ddof=ddof, keepdims=True)
    if eps_outside:
        inv_std = 1.0 / (np.sqrt(var) + eps)
    else:
        inv_std = 1.0 / np.sqrt(var + eps)
    x_hat = centred * inv_std
    return gamma * x_hat + beta, {"X": X, "x_hat": x_hat, "inv_std": inv_std}


def layernorm_backward_no_mean_term(params, saved, dY):
    """FAULT: ``dX = (g - x_hat mean(g x_hat)) inv_std``: the mean path is dropped.

    The rows of ``dX`` no longer sum to zero.

    >>> params = {"gamma": np.ones(3), "beta": np.zeros(3)}
    >>> _, saved = layernorm_forward(params, np.array([[0.0, 1.0, 5.0]]))
    >>> _, dX = layernorm_backward_no_mean_term(params, saved, np.ones((1, 3)))
    >>> bool(abs(dX.sum()) > 0.1)
    True
    """
    return _backward(params, saved, dY, mean_term=False)


def layernorm_backward_no_variance_term(params, saved, dY):
    """FAULT: ``dX = (g - mean(g)) inv_std``: the variance path (``x_hat`` term) lost.

    ``dX`` is no longer orthogonal to ``x_hat``: it treats ``inv_std`` as a constant.
    """
    return _backward(params, saved, dY, variance_term=False)


def layernorm_forward_eps_outside(params, X, *, eps=1e-5):
    """FAULT: ``inv_std = 1 / (sqrt(var) + eps)`` in the forward pass.

    The backward pass assumes ``inv_std = 1 / sqrt(var + eps)``. The two agree when
    ``eps = 0``; with ``eps > 0`` the forward's scale differs from the one the backward
    assumes by a relative ``eps / (2 var) - eps / sqrt(var)`` to first order (zero at
    ``sqrt(var) = 1/2``, larger for rows of small spread).
    """
    return _forward(params, X, eps, eps_outside=True)


def layernorm_forward_unbiased(params, X, *, eps=1e-5):
    """FAULT: the variance divided by ``D - 1`` (unbiased) in the forward pass only.

    The backward's compact formula assumes the biased variance (divide by ``D``).
    """
    return _forward(params, X, eps, ddof=1)


def layernorm_forward_wrong_axis(params, X, *, eps=1e-5):
    """FAULT: the mean and variance taken over positions (axis ``-2``), not features.

    Paired with :func:`layernorm_backward_wrong_axis`, its exact backward, the pair is
    consistent: finite differences are blind to it.
    """
    return _forward(params, X, eps, axis=-2)


def layernorm_backward_wrong_axis(params, saved, dY):
    """The exact backward of :func:`layernorm_forward_wrong_axis`: means over -2."""
    return _backward(params, saved, dY, axis=-2)


# --- the registry ---------------------------------------------------------------------


def _case(eps):
    """A seeded LayerNorm: gamma, beta random; ``X (2, 5, 7)``, rows of spread ~0.3.

    A small spread makes ``eps`` visible (``eps / (2 var) - eps / sqrt(var)`` about
    ``2e-5`` at spread 0.3).
    """
    rng = np.random.default_rng(5)
    D = 7
    params = {"gamma": rng.uniform(0.5, 1.5, size=D) * rng.choice([-1.0, 1.0], size=D),
              "beta": rng.normal(size=D)}
    X = 0.3 * rng.normal(size=(2, 5, D)) * rng.uniform(0.5, 1.5, size=(2, 5, 1)) + 1.0
    return params, X, rng.normal(size=X.shape)


def _gradcheck(pair):
    """The layer gradient check of the pair, ``eps = 1e-5``: gamma, beta and X."""
    forward, backward = pair
    params, X, dY = _case(eps=1e-5)
    report = layer_gradcheck(forward, backward, params, X, dy=dY, eps=1e-5)
    require_gradcheck("gradient check of the layer pair", report)


def _orthogonal(pair):
    """With ``eps = 0``: each row of ``dX`` sums to zero, is orthogonal to x_hat."""
    forward, backward = pair
    params, X, dY = _case(eps=0.0)
    _, saved = forward(params, X, eps=0.0)
    _, dX = backward(params, saved, dY)
    x_hat = layernorm_forward(params, X, eps=0.0)[1]["x_hat"]
    zeros = np.zeros(X.shape[:-1])
    require_close("rows of dX sum to zero", "the row sums of dX", dX.sum(axis=-1),
                  zeros)
    require_close("dX orthogonal to x_hat", "x_hat . dX per row",
                  np.sum(dX * x_hat, axis=-1), zeros)


def _invariant(pair):
    """With ``eps = 0``: shifting a row or scaling it by ``c > 0`` keeps Y."""
    forward, _ = pair
    params, X, _ = _case(eps=0.0)
    rng = np.random.default_rng(6)
    shift = rng.normal(size=X.shape[:-1] + (1,))
    scale = rng.uniform(0.5, 3.0, size=X.shape[:-1] + (1,))
    Y, _ = forward(params, X, eps=0.0)
    require_close("invariant to shifting a row", "Y of X + shift",
                  forward(params, X + shift, eps=0.0)[0], Y, rtol=1e-10, atol=1e-10)
    require_close("invariant to scaling a row", "Y of scale * X",
                  forward(params, scale * X, eps=0.0)[0], Y, rtol=1e-10, atol=1e-10)


def _direct(pair):
    """Y against a direct computation: ``np.var`` (divide by D) over the last axis."""
    forward, _ = pair
    params, X, _ = _case(eps=1e-5)
    Y, _ = forward(params, X, eps=1e-5)
    mu, var = np.mean(X, axis=-1, keepdims=True), np.var(X, axis=-1, keepdims=True)
    expected = params["gamma"] * (X - mu) / np.sqrt(var + 1e-5) + params["beta"]
    require_close("the direct formula", "Y", Y, expected)


def _learner(pair):
    """The learner checker on the backward, as ``fn(dY, x_hat, inv_std, gamma)``."""
    _, backward = pair

    def fn(dY, x_hat, inv_std, gamma):
        params = {"gamma": gamma, "beta": np.zeros_like(gamma)}
        # X is read for its shape only
        saved = {"X": x_hat, "x_hat": x_hat, "inv_std": inv_std}
        return backward(params, saved, dY)[1]

    learner_checker("learner checker", check_layernorm_backward, fn)


CHECKS = {c.name: c for c in (
    Check("layer gradcheck", "layernorm pair", _gradcheck),
    Check("dX orthogonal to 1 and x_hat", "layernorm pair", _orthogonal),
    Check("shift and scale invariance", "layernorm pair", _invariant),
    Check("direct formula", "layernorm pair", _direct),
    Check("learner checker", "layernorm pair", _learner),
)}
"""Check name -> :class:`~attncourse.kit.faults.Check`."""

FAULTS = (
    Fault("layernorm_backward_no_mean_term",
          "the mean path dropped from dX: rows of dX no longer sum to zero",
          (layernorm_forward, layernorm_backward_no_mean_term), "layernorm pair",
          caught_by=("layer gradcheck", "dX orthogonal to 1 and x_hat",
                     "learner checker"),
          blind=("shift and scale invariance", "direct formula")),
    Fault("layernorm_backward_no_variance_term",
          "the variance path (x_hat term) dropped from dX",
          (layernorm_forward, layernorm_backward_no_variance_term), "layernorm pair",
          caught_by=("layer gradcheck", "dX orthogonal to 1 and x_hat",
                     "learner checker"),
          blind=("shift and scale invariance", "direct formula")),
    Fault("layernorm_forward_eps_outside",
          "eps outside the square root in the forward, inside in the backward",
          (layernorm_forward_eps_outside, layernorm_backward), "layernorm pair",
          caught_by=("layer gradcheck", "direct formula"),
          blind=("dX orthogonal to 1 and x_hat", "shift and scale invariance",
                 "learner checker")),
    Fault("layernorm_forward_unbiased",
          "the forward's variance divided by D - 1, the backward's by D",
          (layernorm_forward_unbiased, layernorm_backward), "layernorm pair",
          caught_by=("layer gradcheck", "dX orthogonal to 1 and x_hat",
                     "direct formula"),
          blind=("shift and scale invariance", "learner checker")),
    Fault("layernorm_wrong_axis_pair",
          "mean and variance over positions (axis -2), in both passes",
          (layernorm_forward_wrong_axis, layernorm_backward_wrong_axis),
          "layernorm pair",
          caught_by=("dX orthogonal to 1 and x_hat", "shift and scale invariance",
                     "direct formula", "learner checker"),
          blind=("layer gradcheck",)),
)
"""The planted mistakes: the checks that catch each one, and those blind to it."""

CORRECT = {"layernorm pair": (layernorm_forward, layernorm_backward)}
"""Role -> the package pair: every check must pass it."""

BUILDING_BLOCKS = {}
"""Public functions that are not faults themselves -> the fault they are part of."""
