"""Checker of Chapter 2's exercise on the softmax: its Jacobian."""

import numpy as np

from ...softmax import softmax
from ..failed import CheckFailed
from ..gradients import TOLERANCE, numerical_jacobian
from ._base import _array, _call, _sign_flipped, reports_unfinished

__all__ = ["check_softmax_jacobian"]


@reports_unfinished
def check_softmax_jacobian(fn):
    """Check a learner's ``fn(z) -> J`` for a 1-D ``z``; raise :class:`CheckFailed`
    naming the failed property.

    Returns the names of the properties checked.

    >>> from attncourse.softmax import softmax_jacobian
    >>> check_softmax_jacobian(softmax_jacobian)[0]
    'shape (n, n)'
    """
    z = np.array([0.3, -1.2, 2.0, 0.5, -0.4])
    J = _array(_call(fn, "shape (n, n)", z.copy()), "shape (n, n)", np.float64)
    if J.shape != (5, 5):
        raise CheckFailed(
            "shape (n, n)",
            f"expected (5, 5) for z of shape (5,), got {J.shape}",
            "J[j, k] = dp_j/dz_k has one row and one column per logit",
        )
    if not np.allclose(J, J.T, rtol=0, atol=1e-14):
        raise CheckFailed(
            "symmetric",
            "J should equal its transpose",
            "J = diag(p) - p p^T, which is symmetric",
        )
    if not np.allclose(J.sum(axis=1), 0, rtol=0, atol=1e-14):
        raise CheckFailed(
            "rows sum to zero",
            "softmax ignores adding a constant to every logit, so every row of J sums "
            "to 0 (a numerator-only Jacobian diag(p) fails this)",
            "add the denominator path -p p^T to diag(p)",
        )
    numeric = numerical_jacobian(softmax, z, 1e-5)
    error = float(np.max(np.abs(J - numeric)))
    if error >= TOLERANCE:
        if _sign_flipped(J, numeric):
            raise CheckFailed(
                "matches central differences of softmax",
                f"J is the negative of the Jacobian (max |error| = {error:.1e}): "
                "off by a sign",
                "J = diag(p) - p p^T, not p p^T - diag(p)",
            )
        raise CheckFailed(
            "matches central differences of softmax",
            f"max |error| = {error:.1e} >= {TOLERANCE:.0e}",
            "J[j, k] = p_j (delta_jk - p_k)",
        )
    z_big = np.array([1000.0, -1000.0, 0.0])
    with np.errstate(all="ignore"):
        J_big = _array(
            _call(fn, "finite for extreme logits", z_big.copy()),
            "finite for extreme logits",
            np.float64,
        )
    if not np.all(np.isfinite(J_big)):
        raise CheckFailed(
            "finite for extreme logits",
            "z = [1000, -1000, 0] gave NaN or inf",
            "compute p with the maximum logit subtracted first",
        )
    if not np.allclose(J_big, 0, rtol=0, atol=1e-300):
        raise CheckFailed(
            "finite for extreme logits",
            "for a saturated softmax (p one-hot) every entry should be 0",
            "compute p with the maximum logit subtracted first",
        )
    return (
        "shape (n, n)",
        "symmetric",
        "rows sum to zero",
        "matches central differences of softmax",
        "finite for extreme logits",
    )
