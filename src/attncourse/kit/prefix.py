"""The prefix interface check: what a next-token model may and may not look at.

For a layer (or model) ``forward`` whose output at position ``t`` is meant to depend
only on inputs at positions ``0 ... t``, three properties must hold at every ``t``:

(i)   changing the inputs after ``t`` leaves the outputs at ``0 ... t`` unchanged; (ii)
running on the prefix ``0 ... t`` alone reproduces the first ``t + 1`` outputs of the
full run; (iii) the gradient of the output at ``t`` with respect to the inputs after
``t`` is **exactly** zero.

(i) and (ii) compare float64 results computed in different orders, so they use a small
fixed tolerance, ``PREFIX_TOLERANCE`` times the largest output magnitude (at least 1);
(iii) is exact, because masked weights are exact zeros.
"""

from typing import NamedTuple

import numpy as np

from .failed import CheckFailed

__all__ = [
    "PREFIX_TOLERANCE",
    "PrefixReport",
    "prefix_report",
    "assert_prefix_interface",
]

PREFIX_TOLERANCE = 1e-12


class PrefixReport(NamedTuple):
    """Worst case over every position ``t`` of each property of the prefix interface."""

    # (i)   max |change of outputs at <= t| when inputs after t change
    future_change: float
    prefix_change: float  # (ii)  max |prefix run - prefix of the full run|
    # (iii) max |d output_t / d input_{>t}|; NaN when no gradient was given
    future_gradient: float
    tolerance: float  # absolute: PREFIX_TOLERANCE * max(1, max |output|)

    @property
    def failures(self):
        """Names of the properties that do not hold, in order."""
        out = []
        if not self.future_change <= self.tolerance:
            out.append(
                "(i) outputs up to t changed when inputs after t changed (max "
                f"|change| = {self.future_change:.1e})"
            )
        if not self.prefix_change <= self.tolerance:
            out.append(
                "(ii) the run on a prefix differs from the prefix of the full run "
                f"(max |diff| = {self.prefix_change:.1e})"
            )
        if not np.isnan(self.future_gradient) and self.future_gradient != 0.0:
            out.append(
                "(iii) the output at t has a non-zero gradient from inputs after t "
                f"(max = {self.future_gradient:.1e})"
            )
        return out

    @property
    def passed(self):
        """True when (i), (ii) and (iii) all hold."""
        return not self.failures

    def __str__(self):
        verdict = "passed" if self.passed else "FAILED: " + "; ".join(self.failures)
        grad = (
            "not checked"
            if np.isnan(self.future_gradient)
            else f"{self.future_gradient:.1e}"
        )
        return (
            f"prefix interface {verdict}\n  (i) future change {self.future_change:.1e} "
            " "
            f"(ii) prefix change {self.prefix_change:.1e}  (iii) future gradient {grad}"
        )


def _take(x, stop, axis):
    """Return the first ``stop`` entries of ``x`` along ``axis`` (the prefix of the
    positions)."""
    index = [slice(None)] * x.ndim
    index[axis] = slice(0, stop)
    return x[tuple(index)]


def prefix_report(
    forward,
    x,
    x_other,
    input_gradient=None,
    position_axis=-2,
    tolerance=PREFIX_TOLERANCE,
    seed=0,
):
    """Measure properties (i)-(iii) at every position ``t``; return a
    :class:`PrefixReport`.

    ``forward(x)`` returns outputs of shape ``(..., T, n)``; ``x`` has its positions on
    ``position_axis`` (``-2`` for vectors ``(..., T, D)``, ``-1`` for token ids
    ``(..., T)``). ``x_other`` has ``x``'s shape and differs from it at **every**
    position, so that (i) really changes something. ``input_gradient(x, dY)`` (optional)
    returns ``dJ/dx`` for ``J = sum(Y * dY)``; it is called with ``dY`` non-zero only at
    position ``t``. (i) and (ii) pass when their maximum absolute difference is at most
    ``tolerance`` times the largest output magnitude (at least 1); (iii) passes only
    when it is exactly 0.

    >>> import numpy as np
    >>> x = np.arange(4.0)[:, None]
    >>> # a running sum reads only the past
    >>> prefix_report(lambda x: np.cumsum(x, axis=-2), x, x + 1.0).passed
    True
    >>> def total(x):
    ...     return x.sum(axis=-2, keepdims=True) + 0 * x
    >>> print(prefix_report(total, x, x + 1.0).failures[0])
    (i) outputs up to t changed when inputs after t changed (max |change| = 3.0e+00)
    """
    x, x_other = np.asarray(x), np.asarray(x_other)
    if x.shape != x_other.shape:
        raise ValueError(
            f"x and x_other must have the same shape, got {x.shape} and {x_other.shape}"
        )
    axis = position_axis % x.ndim
    T = x.shape[axis]
    differs = np.any(x != x_other, axis=tuple(a for a in range(x.ndim) if a != axis))
    if not np.all(differs):
        raise ValueError(
            "x_other must differ from x at every position; it agrees at positions "
            f"{np.flatnonzero(~differs).tolist()}"
        )
    Y = np.asarray(forward(x))
    if Y.ndim < 2 or Y.shape[-2] != T:
        raise ValueError(
            f"forward must return outputs of shape (..., T={T}, n), got shape {Y.shape}"
        )
    tolerance = tolerance * max(1.0, float(np.max(np.abs(Y), initial=0.0)))
    rng = np.random.default_rng(seed)
    future_change = prefix_change = 0.0
    future_gradient = 0.0 if input_gradient is not None else float("nan")
    position = np.arange(T).reshape([T if a == axis else 1 for a in range(x.ndim)])
    for t in range(T):
        # the same inputs up to t, others after
        changed = np.where(position > t, x_other, x)
        Y_changed = np.asarray(forward(changed))
        future_change = max(
            future_change,
            float(np.max(np.abs(Y_changed[..., : t + 1, :] - Y[..., : t + 1, :]))),
        )
        Y_prefix = np.asarray(forward(_take(x, t + 1, axis)))
        prefix_change = max(
            prefix_change, float(np.max(np.abs(Y_prefix - Y[..., : t + 1, :])))
        )
        if input_gradient is not None and t + 1 < T:
            dY = np.zeros(Y.shape)
            # only the output at t matters
            dY[..., t, :] = rng.normal(size=dY[..., t, :].shape)
            dx = np.asarray(input_gradient(x, dY))
            after = np.broadcast_to(position > t, dx.shape)
            future_gradient = max(future_gradient, float(np.max(np.abs(dx[after]))))
    return PrefixReport(future_change, prefix_change, future_gradient, tolerance)


def assert_prefix_interface(
    forward, x, x_other, input_gradient=None, position_axis=-2, seed=0
):
    """Run :func:`prefix_report` and raise :class:`CheckFailed` naming every property
    that fails.

    >>> import numpy as np
    >>> x = np.arange(3.0)[:, None]
    >>> assert_prefix_interface(lambda x: x[::-1] + 0 * x, x, x - 1.0)
    Traceback (most recent call last):
    ...
    attncourse.kit.failed.CheckFailed: prefix interface: (i) outputs up to t changed
    when inputs after t changed (max |change| = 1.0e+00); (ii) the run on a prefix
    differs from the prefix of the full run (max |diff| = 2.0e+00)
    """
    report = prefix_report(
        forward, x, x_other, input_gradient, position_axis, seed=seed
    )
    if not report.passed:
        raise CheckFailed("prefix interface", "; ".join(report.failures))
    return report
