"""Central finite differences over every coordinate, and a compare helper.

The tolerance and step sizes are fixed before any check runs: steps ``1e-5`` and
``1e-6`` in float64, maximum absolute error ``1e-7``.
"""

from typing import NamedTuple

import numpy as np

__all__ = [
    "STEPS",
    "TOLERANCE",
    "numerical_gradient",
    "GradcheckReport",
    "gradcheck",
    "compare",
]

STEPS = (1e-5, 1e-6)
TOLERANCE = 1e-7


def numerical_gradient(f, x, h):
    """Return the central-difference estimate of ``df/dx`` at ``x``, one coordinate at a time.

    ``f`` maps an array of ``x``'s shape to a scalar. Every coordinate is perturbed.

    >>> import numpy as np
    >>> numerical_gradient(lambda x: float(np.sum(x ** 2)), np.array([1.0, -2.0]), 1e-5).round(8)
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


class GradcheckReport(NamedTuple):
    """Result of :func:`gradcheck`: ``errors[(name, h)]`` is the max absolute error."""

    errors: dict
    tolerance: float

    @property
    def worst(self):
        return max(self.errors.values())

    @property
    def passed(self):
        return self.worst < self.tolerance

    def __str__(self):
        rows = [f"  {name:>6}  h={h:.0e}  max|error|={err:.2e}" for (name, h), err in self.errors.items()]
        verdict = "passed" if self.passed else "FAILED"
        return f"gradcheck {verdict} (tolerance {self.tolerance:.0e})\n" + "\n".join(rows)


def gradcheck(f, inputs, grads, steps=STEPS, tolerance=TOLERANCE):
    """Compare analytic gradients with central differences, every coordinate of every input.

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
            raise ValueError(f"gradient for {name} has shape {analytic.shape}, input has {np.shape(inputs[name])}")

        def f_of(x, name=name):
            return f(**{**inputs, name: x})

        for h in steps:
            numeric = numerical_gradient(f_of, inputs[name], h)
            errors[(name, h)] = float(np.max(np.abs(numeric - analytic), initial=0.0))
    return GradcheckReport(errors=errors, tolerance=tolerance)


def compare(name, actual, desired, rtol=1e-12, atol=1e-12):
    """Return a one-line verdict: exact, approximate (within tolerance) or wrong, with the max difference.

    >>> import numpy as np
    >>> compare("dV", np.array([0.75, 0.5]), np.array([0.75, 0.5]))
    'dV          exact: True  approximate: True  max|diff|: 0.0e+00'
    """
    actual, desired = np.asarray(actual), np.asarray(desired)
    exact = bool(np.array_equal(actual, desired))
    approx = bool(np.allclose(actual, desired, rtol=rtol, atol=atol))
    diff = float(np.max(np.abs(actual - desired), initial=0.0))
    return f"{name:<10}  exact: {str(exact):<5} approximate: {str(approx):<5} max|diff|: {diff:.1e}"
