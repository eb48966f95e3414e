"""Learned absolute positions: ``X = embeddings + P[:T]``, as a forward/backward layer
pair.

``P (T_max, D)`` holds one learned row per position. Row ``t`` is added to the embedding
of whichever token sits at position ``t``, in every sequence of the batch, so its
gradient is the **sum** over the batch of the upstream gradient at position ``t``. Rows
``t >= T`` took no part and get gradient exactly 0. A sequence longer than ``T_max`` has
no row to use: it is an error.
"""

import numpy as np

from .._validate import as_float_like, as_params, require_sizes, require_that, shaped

__all__ = ["init_positions", "positions_forward", "positions_backward"]


def init_positions(rng, T_max, D, *, scale=1.0):
    """Return ``{"P": P}`` with ``P (T_max, D)`` drawn from ``N(0, scale^2)``.

    >>> import numpy as np
    >>> init_positions(np.random.default_rng(0), T_max=8, D=3)["P"].shape
    (8, 3)
    """
    require_sizes(T_max=T_max, D=D)
    return {"P": scale * rng.normal(size=(T_max, D))}


def positions_forward(params, X):
    """Return ``Y, saved`` with ``Y = X + P[:T]`` for ``X (..., T, D)``; ``T <= T_max``
    (a row for every position).

    >>> import numpy as np
    >>> params = {"P": np.array([[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]])}
    >>> # a batch of two, T = 2 < T_max = 3
    >>> Y, saved = positions_forward(params, np.zeros((2, 2, 2)))
    >>> Y[1]
    array([[1., 0.],
           [0., 1.]])
    >>> positions_forward(params, np.zeros((4, 2)))
    Traceback (most recent call last):
    ...
    ValueError: sequence length T=4 exceeds T_max=3: P has shape (3, 2),
    X has shape (4, 2)
    """
    P, X = shaped("P(T_max, D) X(..., T, D)", *as_params("positions", params, "P"), X)
    require_that(X.shape[-2] <= P.shape[0], "sequence length T={} exceeds T_max={}: P "
                 "has shape {}, X has shape {}", X.shape[-2], P.shape[0], P.shape,
                 X.shape)
    T = X.shape[-2]
    Y = X + P[:T]  # (..., T, D) + (T, D): the same row t for every sequence
    return Y, {"T": T, "shape": X.shape}


def positions_backward(params, saved, dY):
    """Return ``dparams, dX``: ``dP[:T]`` is ``dY`` summed over the batch,
    ``dP[T:] = 0``, ``dX = dY``.

    >>> import numpy as np
    >>> params = {"P": np.zeros((3, 2))}
    >>> _, saved = positions_forward(params, np.zeros((2, 2, 2)))
    >>> dparams, dX = positions_backward(params, saved, np.ones((2, 2, 2)))
    >>> # two sequences each contribute 1 to rows 0 and 1; row 2 was not used
    >>> dparams["P"]
    array([[2., 2.],
           [2., 2.],
           [0., 0.]])
    """
    P = shaped("P(T_max, D)", *as_params("positions", params, "P"))
    dY = as_float_like("dY", dY, saved["shape"], "the output")
    T = saved["T"]
    dP = np.zeros_like(P)  # (T_max, D): rows t >= T took no part
    # (..., T, D) summed over every leading (batch) dimension -> (T, D)
    dP[:T] = dY.reshape(-1, T, P.shape[1]).sum(axis=0)
    return {"P": dP}, dY.copy()
