"""The unembedding: logits ``Z = X U`` from vectors ``X (..., D)`` and ``U (D, n_vocab)``, and its backward.

Given ``dZ``, the gradients are ``dX = dZ U^T`` and ``dU = X^T dZ`` (summed over every
leading position), each with the shape of what it differentiates.

>>> import numpy as np
>>> X = np.array([[1.0, 2.0]]); U = np.array([[1.0, 0.0, -1.0], [0.5, 1.0, 0.0]])
>>> unembedding_forward(X, U)
array([[ 2.,  2., -1.]])
>>> dX, dU = unembedding_backward(X, U, np.array([[1.0, 0.0, 0.0]]))
>>> dX, dU.shape
(array([[1. , 0.5]]), (2, 3))
"""

import numpy as np

from ._validate import as_float_array
from .head import projection_backward

__all__ = ["check_unembedding", "unembedding_forward", "unembedding_backward"]


def check_unembedding(X, U):
    """Return ``X`` and ``U`` as float arrays, or raise ``ValueError`` naming the shapes at fault.

    >>> check_unembedding(np.ones((4, 3)), np.ones((5, 7)))
    Traceback (most recent call last):
    ...
    ValueError: U must have one row per feature of X: X has shape (4, 3) (D=3), U has shape (5, 7)
    """
    X = as_float_array("X", X)
    U = as_float_array("U", U)
    if X.ndim < 1:
        raise ValueError(f"X must be at least 1-D (..., D), got shape {X.shape}")
    if U.ndim != 2:
        raise ValueError(f"U must be 2-D (D, n_vocab), got shape {U.shape}")
    if U.shape[0] != X.shape[-1]:
        raise ValueError(
            f"U must have one row per feature of X: X has shape {X.shape} (D={X.shape[-1]}), U has shape {U.shape}"
        )
    return X, U


def unembedding_forward(X, U):
    """Return the logits ``Z = X U`` of shape ``X.shape[:-1] + (n_vocab,)``.

    >>> unembedding_forward(np.ones((2, 4, 3)), np.ones((3, 5))).shape
    (2, 4, 5)
    """
    X, U = check_unembedding(X, U)
    return X @ U  # (..., D) x (D, n_vocab) -> (..., n_vocab)


def unembedding_backward(X, U, dZ):
    """Return ``(dX, dU)`` for ``Z = X U`` given the upstream gradient ``dZ`` (shape of ``Z``).

    >>> unembedding_backward(np.ones((4, 3)), np.ones((3, 5)), np.ones((5, 4)))
    Traceback (most recent call last):
    ...
    ValueError: dZ must have the shape of Z = X U, (4, 5), got (5, 4)
    """
    X, U = check_unembedding(X, U)
    dZ = as_float_array("dZ", dZ)
    want = X.shape[:-1] + (U.shape[1],)
    if dZ.shape != want:
        raise ValueError(f"dZ must have the shape of Z = X U, {want}, got {dZ.shape}")
    return projection_backward(X, U, dZ)  # (dZ U^T, X^T dZ) summed over the batch
