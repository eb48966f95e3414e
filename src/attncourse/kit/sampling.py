"""Do many draws come from a stated distribution? A bound fixed before drawing.

Draw ``n`` tokens independently from a distribution ``p`` over ``m`` outcomes and let
``f_i`` be the fraction of draws equal to ``i``. :func:`frequency_bound` gives an
``eps`` such that, **if the draws really come from** ``p``, the largest gap
``max_i |f_i - p_i|`` reaches ``eps`` with probability at most ``alpha``, the
false-alarm rate chosen in advance. :func:`assert_draws_match` raises
:class:`~attncourse.kit.failed.CheckFailed` when the gap reaches ``eps``.

The other direction (power): if a sampler draws from ``q`` instead, with
``max_i |q_i - p_i| = delta > 2 eps``, then at the worst outcome ``i`` the frequency
stays within ``eps`` of ``q_i`` with probability ``>= 1 - alpha`` (the same bound
applied to ``q``), so ``|f_i - p_i| >= delta - eps > eps``: the mistake is caught
with probability at least ``1 - alpha``. A test picks ``n`` so that the shift each
planted mistake causes exceeds ``2 eps``.

>>> rng = np.random.default_rng(0)
>>> p = np.array([0.1, 0.2, 0.3, 0.4])
>>> draws = rng.choice(4, size=20_000, p=p)
>>> report = assert_draws_match(draws, p, alpha=1e-6)
>>> round(report.eps, 4), report.max_gap < report.eps
(0.0199, True)
"""

import math
import numbers
from typing import NamedTuple

import numpy as np

from .failed import CheckFailed

__all__ = ["frequency_bound", "assert_draws_match", "DrawsReport"]


def _require_alpha(alpha):
    if not (isinstance(alpha, numbers.Real) and not isinstance(alpha, bool)
            and 0 < alpha < 1):
        raise ValueError(f"alpha must be a number in (0, 1), got {alpha!r}")


def frequency_bound(n_draws, n_outcomes, alpha):
    """Return ``eps = sqrt(ln(2 m / alpha) / (2 n))``, so ``P(gap >= eps) <= alpha``.

    ``n = n_draws`` independent draws, ``m = n_outcomes`` outcomes. Why: the frequency
    ``f_i`` is the mean of ``n`` independent indicators ``[X_t = i]``, each in
    ``[0, 1]`` with mean ``p_i``, so Hoeffding's inequality gives
    ``P(|f_i - p_i| >= eps) <= 2 exp(-2 n eps^2)`` for each ``i``. The union bound
    (Bonferroni) over the ``m`` outcomes gives
    ``P(max_i |f_i - p_i| >= eps) <= 2 m exp(-2 n eps^2)``; setting the right-hand side
    to ``alpha`` and solving for ``eps`` gives the formula. It holds for every ``p``
    and every ``n``, with no normal approximation: the false-alarm rate is at most
    ``alpha``, whatever the distribution.

    >>> round(frequency_bound(20_000, 4, 1e-6), 6)
    0.019934
    >>> frequency_bound(4 * 20_000, 4, 1e-6) / frequency_bound(20_000, 4, 1e-6)
    0.5
    >>> frequency_bound(0, 4, 1e-6)
    Traceback (most recent call last):
    ...
    ValueError: n_draws must be an integer >= 1, got 0
    """
    for name, value in (("n_draws", n_draws), ("n_outcomes", n_outcomes)):
        if not (isinstance(value, numbers.Integral) and not isinstance(value, bool)
                and value >= 1):
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    _require_alpha(alpha)
    return math.sqrt(math.log(2 * n_outcomes / alpha) / (2 * n_draws))


class DrawsReport(NamedTuple):
    """What :func:`assert_draws_match` measured: the largest gap, where, the bound."""

    max_gap: float
    token: int
    eps: float
    n_draws: int
    frequencies: np.ndarray


def assert_draws_match(draws, P, *, alpha):
    """Raise ``CheckFailed("distribution")`` if a frequency is ``eps`` or more off P.

    ``draws`` holds token ids (any shape; all are drawn from the same ``P``), ``P`` is
    one distribution over ``m`` tokens (1-D, ``>= 0``, summing to one within ``1e-9``).
    ``eps = frequency_bound(draws.size, m, alpha)``, fixed by ``alpha`` before the
    draws are looked at. Returns a :class:`DrawsReport` (the largest gap
    ``max_i |f_i - P_i|``, its token, ``eps``, the number of draws, the frequencies).

    >>> P = np.array([0.5, 0.3, 0.2])
    >>> assert_draws_match(np.array([0] * 500 + [1] * 300 + [2] * 200), P,
    ...                    alpha=1e-6).max_gap
    0.0
    >>> assert_draws_match(np.array([0] * 700 + [1] * 200 + [2] * 100), P, alpha=1e-6)
    Traceback (most recent call last):
    ...
    attncourse.kit.failed.CheckFailed: distribution: token 0 has frequency 0.7 but \
probability 0.5: a gap of 0.2 >= eps = 0.0883 (1000 draws, 3 outcomes, alpha = 1e-06) \
(likely fix: draw from the stated distribution (probabilities, then the inverse CDF))
    """
    _require_alpha(alpha)
    P = np.asarray(P, dtype=np.float64)
    if P.ndim != 1 or P.size == 0:
        raise ValueError(f"P must be one distribution, 1-D, got shape {P.shape}")
    if not (np.all(P >= 0) and abs(P.sum() - 1.0) <= 1e-9):
        raise ValueError(f"P must be >= 0 and sum to 1 within 1e-9, "
                         f"got sum {float(P.sum())!r}")
    draws = np.asarray(draws)
    if draws.size == 0 or draws.dtype.kind not in "iu":
        raise ValueError(f"draws must be a non-empty array of token ids, got dtype "
                         f"{draws.dtype} and shape {draws.shape}")
    outside = (draws < 0) | (draws >= P.size)
    if outside.any():
        raise CheckFailed("distribution", f"{int(outside.sum())} draws are outside the "
                          f"{P.size} tokens 0..{P.size - 1}, e.g. "
                          f"{int(draws[outside].flat[0])}",
                          "return token ids in range")
    n = int(draws.size)
    eps = frequency_bound(n, int(P.size), alpha)
    f = np.bincount(draws.ravel(), minlength=P.size) / n
    gaps = np.abs(f - P)
    i = int(np.argmax(gaps))
    report = DrawsReport(float(gaps[i]), i, eps, n, f)
    if gaps[i] >= eps:
        raise CheckFailed(
            "distribution", f"token {i} has frequency {f[i]:.4g} but probability "
            f"{P[i]:.4g}: a gap of {gaps[i]:.3g} >= eps = {eps:.3g} ({n} draws, "
            f"{P.size} outcomes, alpha = {alpha:.3g})",
            "draw from the stated distribution (probabilities, then the inverse CDF)")
    return report
