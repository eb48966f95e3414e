"""Token embeddings: one-hot vectors, the lookup ``X = onehot(x) E`` as a row gather, and its backward.

``E (n_vocab, D)`` holds one row per token. Looking up the ids ``x`` (any shape) gives
``X = E[x]``; the backward pass is the scatter-add ``dE = onehot(x)^T dX``, so a token that
occurs several times receives the **sum** of the gradients of its occurrences.

>>> import numpy as np
>>> E = np.arange(6.0).reshape(3, 2)
>>> embedding_forward(E, np.array([2, 0, 2]))
array([[4., 5.],
       [0., 1.],
       [4., 5.]])
>>> embedding_backward(np.ones((3, 2)), np.array([2, 0, 2]), 3)
array([[1., 1.],
       [0., 0.],
       [2., 2.]])
"""

import numpy as np

from ._validate import as_float_array
from .tokenizer import check_ids

__all__ = ["one_hot", "embedding_forward", "embedding_backward", "check_one_hot", "check_embedding_backward"]


def one_hot(ids, n_vocab):
    """Return the one-hot vectors of ``ids``: shape ``ids.shape + (n_vocab,)``, float64.

    >>> one_hot([1, 0], 3)
    array([[0., 1., 0.],
           [1., 0., 0.]])
    """
    ids = check_ids(ids, n_vocab)
    out = np.zeros(ids.shape + (n_vocab,))
    np.put_along_axis(out, ids[..., None], 1.0, axis=-1)
    return out


def _check_table(E):
    E = as_float_array("E", E)
    if E.ndim != 2:
        raise ValueError(f"E must be 2-D (n_vocab, D), got shape {E.shape}")
    return E


def embedding_forward(E, ids):
    """Return ``X = E[ids]``, the rows of ``E`` selected by ``ids``: shape ``ids.shape + (D,)``.

    This equals ``one_hot(ids, n_vocab) @ E`` without building the one-hot matrix.

    >>> import numpy as np
    >>> embedding_forward(np.eye(3, 2), [[0, 1]]).shape
    (1, 2, 2)
    """
    E = _check_table(E)
    ids = check_ids(ids, E.shape[0])
    return E[ids]


def embedding_backward(dX, ids, n_vocab):
    """Return ``dE = onehot(ids)^T dX`` of shape ``(n_vocab, D)``: a scatter-add of the rows of ``dX``.

    ``dX`` has shape ``ids.shape + (D,)``. ``np.add.at`` accumulates repeated ids; a plain
    fancy assignment ``dE[ids] = dX`` would keep only the last occurrence.

    >>> import numpy as np
    >>> embedding_backward(np.ones((2, 3)), [0, 1, 2], 4)
    Traceback (most recent call last):
    ...
    ValueError: dX must have shape ids.shape + (D,) = (3, D), got dX of shape (2, 3)
    """
    ids = check_ids(ids, n_vocab)
    dX = as_float_array("dX", dX)
    if dX.ndim != ids.ndim + 1 or dX.shape[:-1] != ids.shape:
        shape = ", ".join(map(str, ids.shape))
        raise ValueError(f"dX must have shape ids.shape + (D,) = ({shape}, D), got dX of shape {dX.shape}")
    dE = np.zeros((n_vocab, dX.shape[-1]), dtype=dX.dtype)
    np.add.at(dE, ids.reshape(-1), dX.reshape(-1, dX.shape[-1]))  # row ids[i] += dX[i]
    return dE


def check_one_hot(fn):
    """Check a learner's ``fn(ids, n_vocab)``; raise ``AssertionError`` naming the first property that fails.

    Returns the names of the properties checked.

    >>> check_one_hot(one_hot)
    ('shape', 'entries are 0 or 1', 'one 1 per vector', 'the 1 sits at the id', 'rejects ids out of range')
    """
    ids = np.array([[3, 0, 3], [1, 4, 2]])
    n_vocab = 6
    out = np.asarray(fn(ids, n_vocab))
    assert out.shape == (2, 3, 6), f"shape: expected ids.shape + (n_vocab,) = (2, 3, 6), got {out.shape}"
    assert np.isin(out, (0.0, 1.0)).all(), "entries are 0 or 1: found other values"
    assert (out.sum(axis=-1) == 1).all(), "one 1 per vector: some vector does not sum to 1"
    assert (out.argmax(axis=-1) == ids).all(), "the 1 sits at the id: some 1 is in the wrong column"
    try:
        fn(np.array([0, n_vocab]), n_vocab)
    except ValueError:
        pass
    else:
        raise AssertionError(f"rejects ids out of range: id {n_vocab} with n_vocab={n_vocab} raised no ValueError")
    return ("shape", "entries are 0 or 1", "one 1 per vector", "the 1 sits at the id", "rejects ids out of range")


def check_embedding_backward(fn):
    """Check a learner's ``fn(dX, ids, n_vocab) -> dE``; raise ``AssertionError`` naming the failed property.

    Returns the names of the properties checked.

    >>> check_embedding_backward(embedding_backward)[-1]
    'batched ids: equals onehot(ids)^T dX'
    """
    rng = np.random.default_rng(12)
    n_vocab, D = 7, 3
    ids = np.array([4, 1, 4, 6, 4])  # token 4 occurs three times; tokens 0, 2, 3, 5 never
    dX = rng.normal(size=(5, D))
    dE = np.asarray(fn(dX, ids, n_vocab))
    assert dE.shape == (n_vocab, D), f"shape: expected (n_vocab, D) = {(n_vocab, D)}, got {dE.shape}"
    unused = [0, 2, 3, 5]
    assert np.all(dE[unused] == 0), f"unused tokens get zero rows: rows {unused} should be exactly 0"
    assert np.allclose(dE[1], dX[1], rtol=1e-12, atol=1e-12), "a token seen once gets its gradient row: row 1 should equal dX[1]"
    assert np.allclose(dE[4], dX[0] + dX[2] + dX[4], rtol=1e-12, atol=1e-12), (
        "repeated tokens add their gradients: row 4 should be dX[0] + dX[2] + dX[4] "
        "(overwriting keeps only one occurrence)"
    )
    ids2 = np.array([[2, 0], [2, 2], [5, 0]])
    dX2 = rng.normal(size=(3, 2, D))
    dE2 = np.asarray(fn(dX2, ids2, n_vocab))
    want = one_hot(ids2, n_vocab).reshape(-1, n_vocab).T @ dX2.reshape(-1, D)  # (n_vocab, 6) x (6, D) -> (n_vocab, D)
    assert dE2.shape == want.shape and np.allclose(dE2, want, rtol=1e-12, atol=1e-12), (
        "batched ids: equals onehot(ids)^T dX: for ids of shape (3, 2) the result should sum over all 6 positions"
    )
    return ("shape", "unused tokens get zero rows", "a token seen once gets its gradient row",
            "repeated tokens add their gradients", "batched ids: equals onehot(ids)^T dX")
