"""The registry of planted mistakes: the checks that catch each, and those blind to it.

A :class:`Fault` is one planted mistake in the role of a package function
(``imitates``); a :class:`Check` takes an implementation of one role and raises
:class:`~attncourse.kit.CheckFailed` when it finds a problem. :func:`verdicts` runs
every pair a registry states, :func:`table` prints them.

>>> from attncourse.kit.faults import softmax as fs
>>> print(table(fs.FAULTS[:1], fs.CHECKS))
fault               check                   verdict
softmax_columnwise  rows sum to one         caught
softmax_columnwise  masked rows sum to one  caught
"""

from typing import Callable, NamedTuple

import numpy as np

from ..failed import CheckFailed

__all__ = ["Fault", "Check", "verdicts", "table"]


class Fault(NamedTuple):
    """A planted mistake: what it gets wrong, which checks catch it, which are blind.

    ``function`` has the role ``imitates`` (the name of the package function it stands
    in for, e.g. ``"attention_backward"``); for a role that is a layer pair (its name
    ends in ``"pair"``) it is a ``(forward, backward)`` tuple, one of them planted.
    """

    name: str
    wrong: str
    function: Callable
    imitates: str
    caught_by: tuple[str, ...]
    blind: tuple[str, ...] = ()


class Check(NamedTuple):
    """A check of one role: ``run(implementation)`` returns None or raises."""

    name: str
    takes: str
    run: Callable


def _check_for(fault, name, checks):
    """Return ``checks[name]``; ``ValueError`` if it is missing or of another role."""
    if name not in checks:
        raise ValueError(
            f"fault {fault.name!r} names the check {name!r}, which is not registered")
    check = checks[name]
    if check.takes != fault.imitates:
        raise ValueError(
            f"fault {fault.name!r} imitates {fault.imitates!r}, but the check {name!r} "
            f"takes {check.takes!r}"
        )
    return check


def caught(fault, check):
    """Return True if ``check`` raises ``CheckFailed`` on the fault, False if it passes.

    Any other exception propagates: a check that crashes has not caught anything.
    """
    try:
        result = check.run(fault.function)
    except CheckFailed:
        return True
    if result is not None:
        raise TypeError(f"check {check.name!r} returned {result!r}, not None")
    return False


def verdicts(faults, checks):
    """Return ``[(fault, check, expected_caught, caught), ...]`` for every stated pair.

    Each ``caught_by`` entry is expected caught, each ``blind`` entry expected to pass.
    """
    rows = []
    for fault in faults:
        for names, expected in ((fault.caught_by, True), (fault.blind, False)):
            for name in names:
                check = _check_for(fault, name, checks)
                rows.append((fault.name, name, expected, caught(fault, check)))
    return rows


def table(faults, checks, rows=None):
    """Return a table: fault, check, ``caught`` or ``passes: blind to it``.

    A verdict that contradicts the registry is flagged ``(registry says ...)``. ``rows``
    are the ``verdicts(faults, checks)`` when they have been run already.
    """
    found = verdicts(faults, checks) if rows is None else rows
    rows = [("fault", "check", "verdict")]
    for fault, check, expected, was_caught in found:
        verdict = "caught" if was_caught else "passes: blind to it"
        if was_caught != expected:
            verdict += " (registry says " + ("caught)" if expected else "blind)")
        rows.append((fault, check, verdict))
    w_fault = max(len(r[0]) for r in rows)
    w_check = max(len(r[1]) for r in rows)
    return "\n".join(f"{f:<{w_fault}}  {c:<{w_check}}  {v}" for f, c, v in rows)


# --- helpers for the checks of the fault modules --------------------------------------


def require_close(property, name, actual, desired, rtol=1e-12, atol=1e-12):
    """Raise ``CheckFailed(property, ...)`` unless ``actual`` equals ``desired``."""
    actual = np.asarray(actual, dtype=np.float64)
    desired = np.asarray(desired, dtype=np.float64)
    if actual.shape != desired.shape:
        raise CheckFailed(
            property, f"{name} has shape {actual.shape}, expected {desired.shape}")
    if not np.allclose(actual, desired, rtol=rtol, atol=atol):
        with np.errstate(invalid="ignore"):
            diff = float(np.nanmax(np.abs(actual - desired), initial=0.0))
        finite = "" if np.all(np.isfinite(actual)) else " (it holds NaN or infinity)"
        raise CheckFailed(
            property, f"{name} differs from the expected values by {diff:.2e}{finite}")


def require_gradcheck(property, report, names=None):
    """Raise ``CheckFailed`` unless every error of the report (or of ``names``) passes.

    An error passes only if it is below the report's tolerance: a NaN error fails.
    """
    bad = [
        (key, err) for key, err in report.errors.items()
        if (names is None or key[0] in names) and not err < report.tolerance
    ]
    if bad:
        listed = ", ".join(f"{name} (h={h:.0e}): {err:.1e}" for (name, h), err in bad)
        raise CheckFailed(
            property, f"max |error| above {report.tolerance:.0e} on {listed}")


def learner_checker(property, checker, fn):
    """Run a learner checker on ``fn``; its plain AssertionError becomes CheckFailed."""
    try:
        checker(fn)
    except CheckFailed:
        raise
    except AssertionError as e:
        raise CheckFailed(property, str(e)) from e
