"""Planted mistakes for Chapters 1 and 2: each one is a function a careful reader could write.

Every check in those chapters (and in ``tests/``) is shown to catch the fault it exists for:

- :func:`embedding_backward_overwrite`: ``dE[ids] = dX`` keeps only the last occurrence of a repeated token;
- :func:`embedding_backward_fancy_iadd`: ``dE[ids] += dX`` looks like accumulation but is buffered, so it too
  keeps one occurrence;
- :func:`cross_entropy_naive`: ``-log`` of the softmax computed without max subtraction
  (:func:`attncourse.faults.softmax_without_max_subtraction`), so ``exp(1000)`` overflows;
- :func:`cross_entropy_backward_wrong_sign`: ``onehot(y) - p`` (gradient ascent on the loss);
- :func:`cross_entropy_backward_sum`: forgets the ``1/N`` of the mean loss (``N = y.size`` predictions);
- :func:`unembedding_backward_transposed`: returns ``dU`` transposed, ``dZ^T X``.

>>> import numpy as np
>>> float(cross_entropy_naive(np.array([[1000.0, 0.0]]), np.array([0])))
nan
"""

import numpy as np

from .cross_entropy import check_logits_targets
from .embedding import one_hot
from .faults import softmax_without_max_subtraction
from .softmax import softmax

__all__ = [
    "embedding_backward_overwrite",
    "embedding_backward_fancy_iadd",
    "cross_entropy_naive",
    "cross_entropy_backward_wrong_sign",
    "cross_entropy_backward_sum",
    "unembedding_backward_transposed",
]


def _zero_table_and_rows(dX, ids, n_vocab):
    """Return ``(dE, ids, rows)``: a zero ``(n_vocab, D)`` table, the flat ids and the matching rows of ``dX``."""
    ids = np.asarray(ids).reshape(-1)
    dX = np.asarray(dX, dtype=np.float64)
    rows = dX.reshape(ids.size, dX.shape[-1])  # (T, D): row i belongs to token ids[i]
    return np.zeros((n_vocab, dX.shape[-1])), ids, rows


def embedding_backward_overwrite(dX, ids, n_vocab):
    """FAULT: ``dE[ids] = dX`` (assignment, not accumulation): a repeated token keeps one gradient.

    >>> embedding_backward_overwrite(np.ones((2, 1)), np.array([0, 0]), 2)
    array([[1.],
           [0.]])
    """
    dE, ids, rows = _zero_table_and_rows(dX, ids, n_vocab)
    dE[ids] = rows  # the fault: the last occurrence of a repeated id wins
    return dE


def embedding_backward_fancy_iadd(dX, ids, n_vocab):
    """FAULT: ``dE[ids] += dX``: numpy applies fancy-indexed ``+=`` once per distinct index, not once per occurrence.

    >>> embedding_backward_fancy_iadd(np.ones((2, 1)), np.array([0, 0]), 2)
    array([[1.],
           [0.]])
    """
    dE, ids, rows = _zero_table_and_rows(dX, ids, n_vocab)
    dE[ids] += rows  # the fault: buffered, so a repeated id is added once
    return dE


def cross_entropy_naive(Z, y):
    """FAULT: the mean of ``-log(p_y)`` with ``p`` from a softmax without max subtraction.

    NaN or inf for logits such as 1000 or -1000; right for moderate logits.

    >>> cross_entropy_naive(np.array([[0.0, -1000.0]]), np.array([1]))  # the true loss is 1000
    inf
    """
    y = np.asarray(y)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        p = softmax_without_max_subtraction(Z)
        p_y = np.take_along_axis(p, y[..., None], axis=-1)[..., 0]
        return float(np.mean(-np.log(p_y)))


def cross_entropy_backward_wrong_sign(Z, y):
    """FAULT: ``(onehot(y) - p) / N``, the negative of the gradient.

    >>> cross_entropy_backward_wrong_sign(np.zeros((2, 2)), np.array([0, 0]))
    array([[ 0.25, -0.25],
           [ 0.25, -0.25]])
    """
    Z, y = check_logits_targets(Z, y)
    return (one_hot(y, Z.shape[-1]) - softmax(Z)) / y.size


def cross_entropy_backward_sum(Z, y):
    """FAULT: ``p - onehot(y)`` without the ``1/N``: the gradient of the summed loss, paired with a mean loss.

    >>> cross_entropy_backward_sum(np.zeros((2, 2)), np.array([0, 0]))  # twice the right gradient
    array([[-0.5,  0.5],
           [-0.5,  0.5]])
    """
    Z, y = check_logits_targets(Z, y)
    return softmax(Z) - one_hot(y, Z.shape[-1])


def unembedding_backward_transposed(X, U, dZ):
    """FAULT: ``dU = dZ^T X`` (the transpose of ``X^T dZ``); ``dX`` is correct.

    Its shape is ``(n_vocab, D)`` instead of ``(D, n_vocab)``: unequal sizes expose it at once,
    and with ``D = n_vocab`` only a value check (finite differences) can.

    >>> dX, dU_T = unembedding_backward_transposed(np.ones((4, 2)), np.ones((2, 3)), np.ones((4, 3)))
    >>> dX.shape, dU_T.shape  # U has shape (2, 3)
    ((4, 2), (3, 2))
    """
    X, U, dZ = (np.asarray(a, dtype=np.float64) for a in (X, U, dZ))
    D, n_vocab = U.shape
    dX = dZ @ U.T  # (B, n_vocab) x (n_vocab, D) -> (B, D)
    dU_T = dZ.reshape(-1, n_vocab).T @ X.reshape(-1, D)  # (n_vocab, B) x (B, D) -> (n_vocab, D)
    return dX, dU_T
