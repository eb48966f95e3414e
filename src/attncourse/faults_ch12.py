"""Planted mistakes for Chapters 1 and 2: each one is a function a careful reader could write.

Every check in those chapters (and in ``tests/``) is shown to catch the fault it exists for:

- :func:`embedding_backward_overwrite`: ``dE[ids] = dX`` keeps only the last occurrence of a repeated token;
- :func:`embedding_backward_fancy_iadd`: ``dE[ids] += dX`` looks like accumulation but is buffered, so it too
  keeps one occurrence;
- :func:`softmax_naive` and :func:`cross_entropy_naive`: no max subtraction, so ``exp(1000)`` overflows;
- :func:`cross_entropy_backward_wrong_sign`: ``onehot(y) - p`` (gradient ascent on the loss);
- :func:`cross_entropy_backward_sum`: forgets the ``1/B`` of the mean loss;
- :func:`unembedding_backward_transposed`: returns ``dU`` transposed, ``dZ^T X``.

>>> import numpy as np
>>> float(cross_entropy_naive(np.array([[1000.0, 0.0]]), np.array([0])))
nan
"""

import numpy as np

from .embedding import one_hot
from .softmax import softmax

__all__ = [
    "embedding_backward_overwrite",
    "embedding_backward_fancy_iadd",
    "softmax_naive",
    "cross_entropy_naive",
    "cross_entropy_backward_wrong_sign",
    "cross_entropy_backward_sum",
    "unembedding_backward_transposed",
]


def embedding_backward_overwrite(dX, ids, n_vocab):
    """FAULT: ``dE[ids] = dX`` (assignment, not accumulation): a repeated token keeps one gradient.

    >>> embedding_backward_overwrite(np.ones((2, 1)), np.array([0, 0]), 2)
    array([[1.],
           [0.]])
    """
    ids = np.asarray(ids)
    dX = np.asarray(dX, dtype=np.float64)
    dE = np.zeros((n_vocab, dX.shape[-1]))
    dE[ids.reshape(-1)] = dX.reshape(-1, dX.shape[-1])
    return dE


def embedding_backward_fancy_iadd(dX, ids, n_vocab):
    """FAULT: ``dE[ids] += dX``: numpy applies fancy-indexed ``+=`` once per distinct index, not once per occurrence.

    >>> embedding_backward_fancy_iadd(np.ones((2, 1)), np.array([0, 0]), 2)
    array([[1.],
           [0.]])
    """
    ids = np.asarray(ids)
    dX = np.asarray(dX, dtype=np.float64)
    dE = np.zeros((n_vocab, dX.shape[-1]))
    dE[ids.reshape(-1)] += dX.reshape(-1, dX.shape[-1])
    return dE


def softmax_naive(Z):
    """FAULT: ``exp(Z) / sum(exp(Z))`` without subtracting the row maximum (overflows silently to NaN)."""
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(np.asarray(Z, dtype=np.float64))
        return e / e.sum(axis=-1, keepdims=True)


def cross_entropy_naive(Z, y):
    """FAULT: the mean of ``-log(softmax_naive(Z)_y)``: NaN or inf for logits such as 1000 or -1000."""
    p = softmax_naive(Z)
    p_y = np.take_along_axis(p, np.asarray(y)[..., None], axis=-1)[..., 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.mean(-np.log(p_y)))


def cross_entropy_backward_wrong_sign(Z, y):
    """FAULT: ``(onehot(y) - p) / B``, the negative of the gradient."""
    y = np.asarray(y)
    return (one_hot(y, np.shape(Z)[-1]) - softmax(Z)) / y.size


def cross_entropy_backward_sum(Z, y):
    """FAULT: ``p - onehot(y)`` without the ``1/B``: the gradient of the summed loss, paired with a mean loss."""
    return softmax(Z) - one_hot(y, np.shape(Z)[-1])


def unembedding_backward_transposed(X, U, dZ):
    """FAULT: ``dU = dZ^T X`` (the transpose of ``X^T dZ``); ``dX`` is correct.

    Its shape is ``(n_vocab, D)`` instead of ``(D, n_vocab)``: unequal sizes expose it at once,
    and with ``D = n_vocab`` only a value check (finite differences) can.
    """
    X, U, dZ = (np.asarray(a, dtype=np.float64) for a in (X, U, dZ))
    D, n_vocab = U.shape
    dX = dZ @ U.T  # (B, n_vocab) x (n_vocab, D) -> (B, D)
    dU_T = dZ.reshape(-1, n_vocab).T @ X.reshape(-1, D)  # (n_vocab, B) x (B, D) -> (n_vocab, D)
    return dX, dU_T
