"""Checkers of Chapter 5's exercises on the block: the residual's backward pass, and a
pre-norm residual sublayer written from scratch, forward and backward."""

import numpy as np

from ...layers.layernorm import layernorm_backward, layernorm_forward
from ..failed import CheckFailed
from ..gradients import TOLERANCE, numerical_gradient
from ._base import _array, _call, _sign_flipped, reports_unfinished

__all__ = [
    "check_block_residual",
    "PRENORM_RESIDUAL_PROPERTIES",
    "check_prenorm_residual",
]


def _require_unchanged(given, originals, names, fix):
    """Raise CheckFailed naming the inputs the learner's function wrote into."""
    changed = [n for n, a, b in zip(names, given, originals)
               if not np.array_equal(a, b)]
    if changed:
        raise CheckFailed(
            "inputs unchanged",
            f"the function wrote into its input {', '.join(changed)} (an in-place "
            "update such as += or [...] =)",
            fix,
        )


@reports_unfinished
def check_block_residual(fn, seed=0):
    """Check a learner's ``fn(dY, d_sublayer) -> dX``, the backward of ``y = x + f(x)``.

    ``d_sublayer`` is ``f``'s backward pass applied to ``dY`` (the sublayer path); the
    identity path carries ``dY`` to ``x`` unchanged, so ``dX = dY + d_sublayer``, each
    path added once. Properties, in order: **shape**; **inputs unchanged** (nothing
    written into the caller's ``dY`` or ``d_sublayer``: ``dY += d_sublayer; return dY``
    overwrites a gradient the caller still needs); **the identity path is added**
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
    given = (dY.copy(), d_sublayer.copy())  # the caller's arrays
    dX = _array(_call(fn, "shape", *given), "shape", np.float64)
    if dX.shape != (T, D):
        raise CheckFailed(
            "shape",
            f"expected the shape of x, {(T, D)}, got {dX.shape}",
            "dX = dY + d_sublayer, elementwise",
        )
    _require_unchanged(given, (dY, d_sublayer), ("dY", "d_sublayer"),
                       "return a new array, dY + d_sublayer: the caller still needs "
                       "dY")
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
        "inputs unchanged",
        "the identity path is added",
        "the identity path is added once",
        "the sublayer path is added",
        "matches central differences of y = x + f(x)",
    )


# --- a pre-norm residual sublayer, forward and backward, from scratch -----------------

PRENORM_RESIDUAL_PROPERTIES = (
    "returns Y, dX, dgamma, dbeta, dW",
    "inputs unchanged",
    "Y",
    "dW",
    "dbeta",
    "dgamma",
    "dX",
)
EPS = 1e-5  # LayerNorm's eps in the exercise


def _prenorm_case(seed):
    """``X (2, 5, 6)`` with rows of unequal spread, random gain (mixed signs), shift,
    ``W (6, 6)`` and a dense upstream gradient."""
    rng = np.random.default_rng(seed)
    B, T, D = 2, 5, 6
    X = rng.normal(size=(B, T, D)) * rng.uniform(0.3, 2.0, size=(B, T, 1)) + 0.5
    gamma = rng.uniform(0.5, 1.5, size=D) * rng.choice([-1.0, 1.0], size=D)
    beta = rng.normal(size=D)
    W = rng.normal(size=(D, D)) / np.sqrt(D)
    dY = rng.normal(size=(B, T, D))
    return X, gamma, beta, W, dY


def _prenorm_reference(X, gamma, beta, W, dY, *, mean_term=True, variance_term=True,
                       identity=1.0, ddof=0):
    """``Y = X + LN(X) W`` and its gradients, the package's LayerNorm pair, with the
    typical mistakes as switches (the defaults are right)."""
    params = {"gamma": gamma, "beta": beta}
    D = X.shape[-1]
    if ddof:
        mu = X.mean(axis=-1, keepdims=True)
        var = ((X - mu) ** 2).sum(axis=-1, keepdims=True) / (D - ddof)
        inv_std = 1.0 / np.sqrt(var + EPS)
        saved = {"X": X, "x_hat": (X - mu) * inv_std, "inv_std": inv_std}
        N = gamma * saved["x_hat"] + beta
    else:
        N, saved = layernorm_forward(params, X, eps=EPS)
    Y = X + N @ W  # (B, T, D) x (D, D) -> (B, T, D)
    dN = dY @ W.T  # (B, T, D) x (D, D) -> (B, T, D)
    dW = np.einsum("btd,bte->de", N, dY)  # N^T dY, summed over the batch
    dparams, dX_ln = layernorm_backward(params, saved, dN)
    if not (mean_term and variance_term):
        g, x_hat = dN * gamma, saved["x_hat"]
        dX_ln = g
        if mean_term:
            dX_ln = dX_ln - g.mean(axis=-1, keepdims=True)
        if variance_term:
            dX_ln = dX_ln - x_hat * (g * x_hat).mean(axis=-1, keepdims=True)
        dX_ln = dX_ln * saved["inv_std"]
    dX = identity * dY + dX_ln
    return {"Y": Y, "dX": dX, "dgamma": dparams["gamma"], "dbeta": dparams["beta"],
            "dW": dW}


@reports_unfinished
def check_prenorm_residual(fn, seed=0):
    """Check a learner's pre-norm residual sublayer ``Y = X + LN(X) W``, forward and
    backward, written from scratch: ``fn(X, gamma, beta, W, dY)`` returning
    ``(Y, dX, dgamma, dbeta, dW)``.

    ``LN`` normalises each row of ``X (B, T, D)`` over its features (biased variance,
    ``eps = 1e-5``), then applies ``gamma`` and ``beta``; the gradients are those of
    ``J = sum(dY * Y)``, parameter gradients summed over every row. Properties, in
    order: **returns Y, dX, dgamma, dbeta, dW** (five arrays of the right shapes);
    **inputs unchanged** (nothing written into the caller's arrays, ``dY`` included);
    **Y**; **dW**; **dbeta**; **dgamma**; **dX** (the identity path plus LayerNorm's
    backward of ``dY W^T``), each against the package's LayerNorm pair (relative
    ``1e-9``; the pair is confirmed by finite differences in Chapter 5). The first that
    fails is named, with the likely fix. Returns the properties checked.

    >>> from attncourse.layers.layernorm import layernorm_backward, layernorm_forward
    >>> def mine(X, gamma, beta, W, dY):
    ...     params = {"gamma": gamma, "beta": beta}
    ...     N, saved = layernorm_forward(params, X, eps=1e-5)
    ...     dparams, dX_ln = layernorm_backward(params, saved, dY @ W.T)
    ...     dW = (N.reshape(-1, N.shape[-1]).T @ dY.reshape(-1, dY.shape[-1]))
    ...     return X + N @ W, dY + dX_ln, dparams["gamma"], dparams["beta"], dW
    >>> check_prenorm_residual(mine)[-1]
    'dX'
    """
    X, gamma, beta, W, dY = _prenorm_case(seed)
    originals = (X, gamma, beta, W, dY)
    given = tuple(a.copy() for a in originals)
    prop = PRENORM_RESIDUAL_PROPERTIES[0]
    result = _call(fn, prop, *given)
    if not (isinstance(result, tuple) and len(result) == 5):
        got = (f"{len(result)} values" if isinstance(result, tuple)
               else type(result).__name__)
        raise CheckFailed(prop, f"expected a tuple of five arrays, got {got}",
                          "return Y, dX, dgamma, dbeta, dW, in that order")
    names = ("Y", "dX", "dgamma", "dbeta", "dW")
    got = dict(zip(names, (_array(a, prop, np.float64) for a in result)))
    want = _prenorm_reference(*originals)
    for name in names:
        if got[name].shape != want[name].shape:
            raise CheckFailed(
                prop,
                f"{name} has shape {got[name].shape}, expected {want[name].shape} "
                f"(X {X.shape}, gamma {gamma.shape}, W {W.shape})",
                "sum dgamma and dbeta over every row (all axes but the last)"
                if name in ("dgamma", "dbeta") else
                f"{name} has the shape of {name.lstrip('d') or 'X'}",
            )
    _require_unchanged(given, originals, ("X", "gamma", "beta", "W", "dY"),
                       "compute new arrays; dX = dY + ... must not be written into dY")

    def close(a, b):
        return np.allclose(a, b, rtol=1e-9, atol=1e-12)

    if not close(got["Y"], want["Y"]):
        fix = ("mu and the variance over the last axis (the features of one position), "
               "x_hat = (X - mu) / sqrt(var + eps), Y = X + (gamma * x_hat + beta) @ W")
        if close(got["Y"], want["Y"] - X):
            fix = "add the input back: Y = X + LN(X) W (the residual connection)"
        elif close(got["Y"], _prenorm_reference(*originals, ddof=1)["Y"]):
            fix = "the variance divides by D, not D - 1 (np.var's default, ddof=0)"
        raise CheckFailed("Y", f"Y differs from X + LN(X) W by up to "
                          f"{np.max(np.abs(got['Y'] - want['Y'])):.1e}", fix)
    fixes = {
        "dW": "dW = LN(X)^T dY, summed over every row",
        "dbeta": "dbeta = dY W^T summed over every row: beta's gradient is that of "
                 "LN's output, not of Y",
        "dgamma": "dgamma = sum over rows of (dY W^T) * x_hat",
        "dX": "dX = dY + LN's backward of dN = dY W^T: g = dN * gamma, "
              "(g - mean(g) - x_hat * mean(g * x_hat)) / sqrt(var + eps)",
    }
    wrong = {
        "the identity path is missing: add dY (y = x + f(x) gives dx = dy + ...)":
            dict(identity=0.0),
        "the identity path is counted twice: add dY once": dict(identity=2.0),
        "LayerNorm's mean term is missing: subtract mean(g) over each row":
            dict(mean_term=False),
        "LayerNorm's variance term is missing: subtract x_hat * mean(g * x_hat)":
            dict(variance_term=False),
    }
    for name in ("dW", "dbeta", "dgamma", "dX"):
        if close(got[name], want[name]):
            continue
        fix = fixes[name]
        if _sign_flipped(got[name], want[name]):
            fix = f"{name} has the wrong sign: J grows along +{name}"
        elif name == "dW" and close(got[name], want[name].T):
            fix = "dW = LN(X)^T dY, not dY^T LN(X): transpose"
        elif name == "dX":
            for wrong_fix, switches in wrong.items():
                if close(got[name], _prenorm_reference(*originals, **switches)["dX"]):
                    fix = wrong_fix
                    break
        raise CheckFailed(name, f"{name} differs from the gradient of J = sum(dY * Y) "
                          f"by up to {np.max(np.abs(got[name] - want[name])):.1e}", fix)
    return PRENORM_RESIDUAL_PROPERTIES
