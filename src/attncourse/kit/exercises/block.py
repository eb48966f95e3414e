"""Checker of Chapter 5's exercise on the block: the residual's backward pass."""

import numpy as np

from ..failed import CheckFailed
from ..gradients import TOLERANCE, numerical_gradient
from ._base import _array, _call, reports_unfinished

__all__ = ["check_block_residual"]


@reports_unfinished
def check_block_residual(fn, seed=0):
    """Check a learner's ``fn(dY, d_sublayer) -> dX``, the backward of ``y = x + f(x)``.

    ``d_sublayer`` is ``f``'s backward pass applied to ``dY`` (the sublayer path); the
    identity path carries ``dY`` to ``x`` unchanged, so ``dX = dY + d_sublayer``, each
    path added once. Properties, in order: **shape**; **the identity path is added**
    (``fn(dY, 0)`` is not zero); **the identity path is added once**
    (``fn(dY, 0) = dY``); **the sublayer path is added** (``fn(0, d) = d``); **matches
    central differences of y = x + f(x)** (``f(x) = tanh(x W)``, every coordinate of
    ``x``, tolerance ``1e-7``).

    Raises :class:`CheckFailed` naming the first failed property; reports a stub
    (``NotImplementedError``) as unfinished. Returns the properties checked.

    >>> check_block_residual(lambda dY, d_sublayer: dY + d_sublayer)[-1]
    'matches central differences of y = x + f(x)'
    >>> check_block_residual(lambda dY, d_sublayer: d_sublayer)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    attncourse.kit.failed.CheckFailed: the identity path is added: ...
    """
    rng = np.random.default_rng(seed)
    T, D = 4, 3
    x, W, dY = rng.normal(size=(T, D)), rng.normal(size=(D, D)), rng.normal(size=(T, D))
    F = np.tanh(x @ W)  # (T, D) x (D, D) -> (T, D)
    d_sublayer = ((1.0 - F * F) * dY) @ W.T  # (T, D) x (D, D) -> (T, D)
    dX = _array(_call(fn, "shape", dY.copy(), d_sublayer.copy()), "shape", np.float64)
    if dX.shape != (T, D):
        raise CheckFailed(
            "shape",
            f"expected the shape of x, {(T, D)}, got {dX.shape}",
            "dX = dY + d_sublayer, elementwise",
        )
    zeros = np.zeros((T, D))
    identity = _array(
        _call(fn, "the identity path is added", dY.copy(), zeros.copy()),
        "the identity path is added",
        np.float64,
    )
    if identity.shape == (T, D) and np.allclose(identity, 0.0, rtol=0, atol=1e-15):
        raise CheckFailed(
            "the identity path is added",
            "fn(dY, 0) is zero: only the sublayer path reaches x",
            "add dY: the identity path of y = x + f(x) carries it as is",
        )
    once = identity.shape == (T, D) and np.allclose(
        identity, dY, rtol=1e-12, atol=1e-15
    )
    if not once:
        twice = identity.shape == (T, D) and np.allclose(identity, 2 * dY, rtol=1e-12)
        detail = (
            "fn(dY, 0) is 2 dY: the identity path is counted twice"
            if twice
            else ("fn(dY, 0) differs from dY")
        )
        raise CheckFailed(
            "the identity path is added once",
            detail,
            "add dY exactly once: dX = dY + d_sublayer",
        )
    sub = _call(fn, "the sublayer path is added", zeros.copy(), d_sublayer.copy())
    sub = _array(sub, "the sublayer path is added", np.float64)
    kept = sub.shape == (T, D) and np.allclose(sub, d_sublayer, rtol=1e-12, atol=1e-15)
    if not kept:
        raise CheckFailed(
            "the sublayer path is added",
            "fn(0, d_sublayer) differs from d_sublayer",
            "add d_sublayer, the gradient through f: dY + d_sublayer",
        )

    def J(x):
        return float(np.sum((x + np.tanh(x @ W)) * dY))  # (T, D) x (D, D) -> (T, D)

    numeric = numerical_gradient(J, x, 1e-5)
    err = float(np.max(np.abs(dX - numeric)))
    if not err < TOLERANCE:
        raise CheckFailed(
            "matches central differences of y = x + f(x)",
            f"max |error| = {err:.1e} >= {TOLERANCE:.0e}",
            "sum the two paths and nothing else: dX = dY + d_sublayer",
        )
    return (
        "shape",
        "the identity path is added",
        "the identity path is added once",
        "the sublayer path is added",
        "matches central differences of y = x + f(x)",
    )
