"""Token embeddings: one-hot vectors, the lookup ``X = onehot(x) E`` as a row gather,
and its backward.

``E (n_vocab, D)`` holds one row per token. Looking up the ids ``x`` (any shape) gives
``X = E[x]``; the backward pass is the scatter-add ``dE = onehot(x)^T dX``, so a token
that occurs several times receives the **sum** of the gradients of its occurrences.
Token ids are integers, so the layer passes no gradient to its input (``dx`` is
``None``).

>>> import numpy as np
>>> params = {"E": np.arange(6.0).reshape(3, 2)}
>>> X, saved = embedding_forward(params, np.array([2, 0, 2]))
>>> X
array([[4., 5.],
       [0., 1.],
       [4., 5.]])
>>> dparams, dx = embedding_backward(params, saved, np.ones((3, 2)))
>>> dparams["E"]
array([[1., 1.],
       [0., 0.],
       [2., 2.]])
"""

import numpy as np

from .._validate import as_float_like, as_ids, as_params, require_sizes, shaped

__all__ = ["one_hot", "init_embedding", "embedding_forward", "embedding_backward"]


def one_hot(ids, n_vocab):
    """Return the one-hot vectors of ``ids``, ``onehot(x)[..., v] = [x == v]``: shape
    ``ids.shape + (n_vocab,)``, float64.

    >>> one_hot([1, 0], 3)
    array([[0., 1., 0.],
           [1., 0., 0.]])
    """
    ids = as_ids(ids, n_vocab)
    out = np.zeros(ids.shape + (n_vocab,))  # (..., n_vocab)
    np.put_along_axis(out, ids[..., None], 1.0, axis=-1)  # onehot(x)[..., x] = 1
    return out


def init_embedding(rng, n_vocab, D, *, scale=1.0):
    """Return ``{"E": (n_vocab, D)}`` with entries drawn from ``N(0, scale^2)``.

    >>> init_embedding(np.random.default_rng(0), 5, 3)["E"].shape
    (5, 3)
    """
    require_sizes(n_vocab=n_vocab, D=D)
    return {"E": scale * rng.standard_normal((n_vocab, D))}


def _as_table(params, ids):
    """Return ``E (n_vocab, D)`` (float) and ``ids`` (int64, rows of ``E``), or raise
    ``ValueError`` naming the shapes or ids at fault."""
    E = shaped("E(n_vocab, D)", *as_params("embedding", params, "E"))
    return E, as_ids(ids, E.shape[0])


def embedding_forward(params, ids):
    """Return ``X, saved`` with ``X = E[ids]``, the rows of ``E`` selected by ``ids``:
    shape ``ids.shape + (D,)``.

    This equals ``one_hot(ids, n_vocab) @ E`` without building the one-hot matrix.

    >>> embedding_forward({"E": np.eye(3, 2)}, [[0, 1]])[0].shape
    (1, 2, 2)
    """
    E, ids = _as_table(params, ids)
    X = E[ids]  # onehot(ids) (..., n_vocab) x E (n_vocab, D) -> (..., D), as a gather
    return X, {"ids": ids}


def embedding_backward(params, saved, dX):
    """Return ``dparams, None`` with ``dparams["E"] = onehot(ids)^T dX``: a scatter-add
    of the rows of ``dX``.

    ``dX`` has shape ``ids.shape + (D,)``. ``np.add.at`` accumulates repeated ids; a
    plain fancy assignment ``dE[ids] = dX`` would keep only the last occurrence.

    >>> params = {"E": np.zeros((4, 3))}
    >>> _, saved = embedding_forward(params, [0, 1, 2])
    >>> embedding_backward(params, saved, np.ones((2, 3)))
    Traceback (most recent call last):
    ...
    ValueError: dX must have the shape of X = E[ids], (3, 3), got (2, 3)
    """
    E, ids = _as_table(params, saved["ids"])
    dX = as_float_like("dX", dX, ids.shape + E.shape[1:], "X = E[ids]")
    dE = np.zeros(E.shape, dtype=np.result_type(E, dX))
    # onehot(ids)^T (n_vocab, N) x dX (N, D) -> (n_vocab, D): row ids[i] += dX[i]
    np.add.at(dE, ids.reshape(-1), dX.reshape(-1, E.shape[1]))
    return {"E": dE}, None
