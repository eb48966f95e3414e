"""The softmax Jacobian ``dp/dz = diag(p) - p p^T`` as a dense matrix, for teaching and checking.

Chapter 2 derives it from the quotient rule: ``diag(p)`` is the numerator path and
``-p p^T`` the denominator path. It is symmetric and each row sums to zero.

A backward pass never builds this ``n x n`` matrix: :func:`attncourse.softmax_backward`
computes the vector-Jacobian product ``J^T dp = p * (dp - p . dp)`` in ``O(n)``. The
dense form exists to make that product visible (Chapter 2 and ``tests/test_jacobian.py``
assert ``softmax_backward(p, dp) == softmax_jacobian(z).T @ dp``) and to check a learner's
Jacobian. :func:`numerical_jacobian` estimates a Jacobian by central differences, using
:func:`attncourse.numerical_gradient` for each output.

>>> import numpy as np
>>> softmax_jacobian(np.log([1.0, 3.0]))
array([[ 0.1875, -0.1875],
       [-0.1875,  0.1875]])
"""

import numpy as np

from ._validate import as_float_array
from .gradcheck import TOLERANCE, numerical_gradient
from .softmax import softmax

__all__ = ["softmax_jacobian", "numerical_jacobian", "check_softmax_jacobian"]


def softmax_jacobian(z):
    """Return ``J[..., j, k] = dp_j/dz_k = p_j (delta_jk - p_k)`` for ``p = softmax(z)`` over the last axis.

    ``z`` has shape ``(..., n)``; the result has shape ``(..., n, n)``.

    >>> softmax_jacobian(np.zeros((2, 3))).shape
    (2, 3, 3)
    """
    z = as_float_array("z", z)
    if z.ndim < 1 or z.shape[-1] == 0:
        raise ValueError(f"z must have at least one entry along its last axis, got shape {z.shape}")
    p = softmax(z)
    numerator_path = p[..., :, None] * np.eye(z.shape[-1])  # diag(p)
    denominator_path = -p[..., :, None] * p[..., None, :]  # -p p^T: (..., n, 1) x (..., 1, n) -> (..., n, n)
    return numerator_path + denominator_path


def numerical_jacobian(f, z, h):
    """Return the central-difference Jacobian ``J[j, k] ~ df_j/dz_k`` of ``f`` at a 1-D point ``z``.

    ``f`` maps an array of shape ``(n,)`` to an array of shape ``(m,)``; the result has shape
    ``(m, n)``. Row ``j`` is :func:`attncourse.numerical_gradient` of ``f(z)[j]``, so every
    coordinate of ``z`` is perturbed.

    >>> numerical_jacobian(lambda v: v ** 2, np.array([1.0, 3.0]), 1e-5).round(6)
    array([[2., 0.],
           [0., 6.]])
    """
    z = as_float_array("z", z)
    if z.ndim != 1:
        raise ValueError(f"z must be 1-D (n,), got shape {z.shape}")
    m = np.size(f(z))
    return np.stack([numerical_gradient(lambda v, j=j: float(np.ravel(f(v))[j]), z, h) for j in range(m)])


def check_softmax_jacobian(fn):
    """Check a learner's ``fn(z) -> J`` for a 1-D ``z``; raise ``AssertionError`` naming the failed property.

    Returns the names of the properties checked.

    >>> check_softmax_jacobian(softmax_jacobian)[0]
    'shape (n, n)'
    """
    z = np.array([0.3, -1.2, 2.0, 0.5, -0.4])
    J = np.asarray(fn(z), dtype=np.float64)
    assert J.shape == (5, 5), f"shape (n, n): expected (5, 5) for z of shape (5,), got {J.shape}"
    assert np.allclose(J, J.T, rtol=0, atol=1e-14), "symmetric: J should equal its transpose"
    assert np.allclose(J.sum(axis=1), 0, rtol=0, atol=1e-14), (
        "rows sum to zero: softmax ignores adding a constant to every logit "
        "(a numerator-only Jacobian diag(p) fails this)"
    )
    error = float(np.max(np.abs(J - numerical_jacobian(softmax, z, 1e-5))))
    assert error < TOLERANCE, (
        f"matches central differences of softmax: max |error| = {error:.1e} >= {TOLERANCE:.0e}"
    )
    z_big = np.array([1000.0, -1000.0, 0.0])
    J_big = np.asarray(fn(z_big), dtype=np.float64)
    assert np.all(np.isfinite(J_big)), "finite for extreme logits: z = [1000, -1000, 0] gave NaN or inf"
    assert np.allclose(J_big, 0, rtol=0, atol=1e-300), (
        "finite for extreme logits: for a saturated softmax (p one-hot) every entry should be 0"
    )
    return ("shape (n, n)", "symmetric", "rows sum to zero", "matches central differences of softmax",
            "finite for extreme logits")
