"""Central finite differences over every coordinate, the one layer gradient checker, and
a compare helper.

The tolerance and step sizes are fixed before any check runs: steps ``1e-5`` and
``1e-6`` in float64, maximum absolute error ``1e-7``. :func:`layer_gradcheck` checks any
layer pair ``y, saved = forward(params, x, **hyperparameters)`` /
``dparams, dx = backward(params, saved, dy)``: every coordinate of every parameter and
of the input. A planted fault is checked by the same call with another ``backward``.
"""

from typing import NamedTuple

import numpy as np

from .._validate import as_float_array
from ..params import flatten_params, unflatten_params

__all__ = [
    "STEPS",
    "TOLERANCE",
    "numerical_gradient",
    "numerical_jacobian",
    "GradcheckReport",
    "gradcheck",
    "layer_gradcheck",
    "qkv_gradcheck",
    "compare",
]

STEPS = (1e-5, 1e-6)
TOLERANCE = 1e-7


def numerical_gradient(f, x, h):
    """Return the central-difference estimate of ``df/dx`` at ``x``, one coordinate at a
    time.

    ``f`` maps an array of ``x``'s shape to a scalar. Every coordinate is perturbed.

    >>> import numpy as np
    >>> x = np.array([1.0, -2.0])
    >>> g = numerical_gradient(lambda x: float(np.sum(x ** 2)), x, 1e-5)
    >>> g.round(8)
    array([ 2., -4.])
    """
    x = np.array(x, dtype=np.float64)  # a private copy
    grad = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        saved = x[idx]
        x[idx] = saved + h
        f_plus = f(x)
        x[idx] = saved - h
        f_minus = f(x)
        x[idx] = saved
        grad[idx] = (f_plus - f_minus) / (2 * h)
    return grad


def numerical_jacobian(f, z, h):
    """Return the central-difference Jacobian ``J[j, k] ~ df_j/dz_k`` of ``f`` at a 1-D
    point ``z``.

    ``f`` maps an array of shape ``(n,)`` to an array of shape ``(m,)``; the result has
    shape ``(m, n)``. Row ``j`` is :func:`attncourse.numerical_gradient` of ``f(z)[j]``,
    so every coordinate of ``z`` is perturbed.

    >>> numerical_jacobian(lambda v: v ** 2, np.array([1.0, 3.0]), 1e-5).round(6)
    array([[2., 0.],
           [0., 6.]])
    """
    z = as_float_array("z", z)
    if z.ndim != 1:
        raise ValueError(f"z must be 1-D (n,), got shape {z.shape}")
    m = np.size(f(z))
    return np.stack(
        [
            numerical_gradient(lambda v, j=j: float(np.ravel(f(v))[j]), z, h)
            for j in range(m)
        ]
    )


class GradcheckReport(NamedTuple):
    """Result of :func:`gradcheck`: ``errors[(name, h)]`` is the max absolute error."""

    errors: dict
    tolerance: float

    @property
    def worst(self):
        """The largest error; NaN when any error is NaN (a NaN gradient is never within
        tolerance)."""
        values = np.array(list(self.errors.values()), dtype=np.float64)
        return float(np.max(values)) if values.size else 0.0

    @property
    def passed(self):
        """True when every error is below the tolerance (NaN is not).

        >>> GradcheckReport({("a", 1e-5): 1e-9, ("b", 1e-5): float("nan")}, 1e-7).passed
        False
        """
        return all(err < self.tolerance for err in self.errors.values())

    def __str__(self):
        width = max((len(name) for name, _ in self.errors), default=0)
        rows = [
            f"  {name:>{width}}  h={h:.0e}  max|error|={err:.2e}"
            for (name, h), err in self.errors.items()
        ]
        verdict = "passed" if self.passed else "FAILED"
        return f"gradcheck {verdict} (tolerance {self.tolerance:.0e})\n" + "\n".join(
            rows
        )


def gradcheck(f, inputs, grads, steps=STEPS, tolerance=TOLERANCE):
    """Compare analytic gradients with central differences, every coordinate of every
    input.

    ``inputs`` maps names to arrays and ``f(**inputs)`` is a scalar; ``grads`` maps the
    same names (or a subset) to the analytic gradients. Each input is perturbed with the
    others held fixed. Returns a :class:`GradcheckReport`; it does not raise.

    >>> import numpy as np
    >>> f = lambda a, b: float(np.sum(a * b))
    >>> a, b = np.array([1.0, 2.0]), np.array([3.0, -1.0])
    >>> gradcheck(f, {"a": a, "b": b}, {"a": b, "b": a}).passed
    True
    >>> gradcheck(f, {"a": a, "b": b}, {"a": -b, "b": a}).passed
    False
    """
    errors = {}
    for name, analytic in grads.items():
        analytic = np.asarray(analytic, dtype=np.float64)
        if analytic.shape != np.shape(inputs[name]):
            raise ValueError(
                f"gradient for {name} has shape {analytic.shape}, input has "
                f"{np.shape(inputs[name])}"
            )

        def f_of(x, name=name):
            return f(**{**inputs, name: x})

        for h in steps:
            numeric = numerical_gradient(f_of, inputs[name], h)
            errors[(name, h)] = float(np.max(np.abs(numeric - analytic), initial=0.0))
    return GradcheckReport(errors=errors, tolerance=tolerance)


def layer_gradcheck(
    forward,
    backward,
    params,
    x,
    *,
    dy=None,
    seed=0,
    steps=STEPS,
    tolerance=TOLERANCE,
    **hyperparameters,
):
    """Check a layer pair by central differences on every coordinate of every parameter
    and of ``x``.

    The objective is the probe
    ``J = sum(forward(params, x, **hyperparameters)[0] * dy)``, whose gradient with
    respect to the output is ``dy`` (by default seeded standard normal numbers of the
    output's shape). ``backward(params, saved, dy)`` must return ``dparams`` with
    exactly the (nested) keys of ``params``, and ``dx`` of ``x``'s shape, or ``None``
    when ``x`` holds integers (token ids), which have no gradient. Errors are keyed by
    the dotted parameter path (``"blocks.0.attn.W_Q"``) or ``"x"``. Returns a
    :class:`GradcheckReport`; it does not raise on a failed check.

    >>> from attncourse.layers.linear import linear_forward, linear_backward
    >>> rng = np.random.default_rng(0)
    >>> params = {"W": rng.normal(size=(3, 2)), "b": rng.normal(size=2)}
    >>> X = rng.normal(size=(4, 3))
    >>> layer_gradcheck(linear_forward, linear_backward, params, X).passed
    True
    >>> def backward_wrong_sign(params, saved, dY):  # a planted fault
    ...     dparams, dX = linear_backward(params, saved, dY)
    ...     return {**dparams, "W": -dparams["W"]}, dX
    >>> layer_gradcheck(linear_forward, backward_wrong_sign, params, X).passed
    False
    """
    y, saved = forward(params, x, **hyperparameters)
    y = np.asarray(y, dtype=np.float64)
    if dy is None:
        dy = np.random.default_rng(seed).standard_normal(y.shape)
    dy = as_float_array("dy", dy)
    if dy.shape != y.shape:
        raise ValueError(
            f"dy must have the shape of the output, {y.shape}, got {dy.shape}"
        )
    dparams, dx = backward(params, saved, dy)
    flat, dflat = flatten_params(params), flatten_params(dparams)
    if set(flat) != set(dflat):
        raise ValueError(
            f"dparams must have exactly the keys of params: params {sorted(flat)}, "
            f"dparams {sorted(dflat)}"
        )

    def J(flat_params, x):
        out, _ = forward(unflatten_params(flat_params, params), x, **hyperparameters)
        return float(np.sum(np.asarray(out) * dy))

    inputs = {name: np.asarray(value, dtype=np.float64) for name, value in flat.items()}
    grads = dict(dflat)
    x_is_float = np.asarray(x).dtype.kind in "fc"
    if dx is not None:
        if not x_is_float:
            raise ValueError(
                "backward returned a gradient for an input of integers (token ids have "
                "none)"
            )
        inputs["x"], grads["x"] = np.asarray(x, dtype=np.float64), dx
    elif x_is_float:
        raise ValueError("backward returned dx = None for a float input x")
    if "x" in flat:
        raise ValueError(
            "a parameter may not be called 'x': it is the name of the input"
        )

    def f(**named):
        x_now = named.pop("x", x)
        return J(named, x_now)

    return gradcheck(f, inputs, grads, steps=steps, tolerance=tolerance)


def qkv_gradcheck(
    backward, Q, K, V, G, *, forward=None, steps=STEPS, tolerance=TOLERANCE
):
    """Check the pair's ``backward(saved, G) -> (dQ, dK, dV)``, with
    ``_, saved = forward(Q, K, V)``, against central differences of
    ``J = sum(forward(Q, K, V)[0] * G)``.

    ``Q``, ``K`` and ``V`` are perturbed as three independent inputs; ``forward``
    defaults to :func:`attncourse.attention_forward` (any function returning
    ``O, saved``). Returns a :class:`GradcheckReport`.

    >>> from attncourse.layers.attention import attention_backward
    >>> rng = np.random.default_rng(0)
    >>> Q, K = rng.normal(size=(4, 3)), rng.normal(size=(5, 3))
    >>> V, G = rng.normal(size=(5, 2)), rng.normal(size=(4, 2))
    >>> qkv_gradcheck(attention_backward, Q, K, V, G).passed
    True
    """
    if forward is None:
        from ..layers.attention import attention_forward as forward
    dQ, dK, dV = backward(forward(Q, K, V)[1], G)
    J = lambda Q, K, V: float(np.sum(forward(Q, K, V)[0] * G))
    return gradcheck(
        J,
        {"Q": Q, "K": K, "V": V},
        {"Q": dQ, "K": dK, "V": dV},
        steps=steps,
        tolerance=tolerance,
    )


def compare(name, actual, desired, rtol=1e-12, atol=1e-12):
    """Return a one-line verdict: exact, approximate (within tolerance) or wrong, with
    the max difference.

    >>> import numpy as np
    >>> compare("dV", np.array([0.75, 0.5]), np.array([0.75, 0.5]))
    'dV          exact: True  approximate: True  max|diff|: 0.0e+00'
    """
    actual, desired = np.asarray(actual), np.asarray(desired)
    exact = bool(np.array_equal(actual, desired))
    approx = bool(np.allclose(actual, desired, rtol=rtol, atol=atol))
    diff = float(np.max(np.abs(actual - desired), initial=0.0))
    return (f"{name:<10}  exact: {str(exact):<5} approximate: {str(approx):<5} "
            f"max|diff|: {diff:.1e}")
