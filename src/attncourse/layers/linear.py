"""The linear layer ``Y = X W (+ b)``, as a forward/backward pair; the unembedding is
one.

``W (D_in, D_out)`` and the optional bias ``b (D_out,)`` act on the last axis of
``X (..., D_in)``. The backward pass gives ``dX = dY W^T``, ``dW = X^T dY`` and
``db = sum dY``, the last two summed over every leading (batch and position) axis.
Chapter 2's unembedding ``Z = X U`` is this layer with ``params = {"W": U}``.

>>> import numpy as np
>>> params = {"W": np.array([[1.0, 0.0, -1.0], [0.5, 1.0, 0.0]])}
>>> Z, saved = linear_forward(params, np.array([[1.0, 2.0]]))
>>> Z
array([[ 2.,  2., -1.]])
>>> dparams, dX = linear_backward(params, saved, np.array([[1.0, 0.0, 0.0]]))
>>> dX, dparams["W"].shape
(array([[1. , 0.5]]), (2, 3))
"""

import numpy as np

from .._validate import as_float_like, as_params, require_sizes, shaped

__all__ = ["init_linear", "linear_forward", "linear_backward", "matmul_backward"]


def init_linear(rng, D_in, D_out, *, bias=False, scale=1.0):
    """Return ``{"W": (D_in, D_out)}`` (and ``"b"``, zeros) with entries of spread
    ``scale / sqrt(D_in)``.

    >>> params = init_linear(np.random.default_rng(0), 3, 5, bias=True)
    >>> {k: v.shape for k, v in params.items()}
    {'W': (3, 5), 'b': (5,)}
    """
    require_sizes(D_in=D_in, D_out=D_out)
    params = {"W": scale * rng.standard_normal((D_in, D_out)) / np.sqrt(D_in)}
    if bias:
        params["b"] = np.zeros(D_out)
    return params


def _as_inputs(params, X):
    """Return ``X (..., D_in)``, ``W (D_in, D_out)`` and ``b (D_out,)`` (None without a
    bias) as float arrays, or raise ``ValueError`` naming the shapes at fault."""
    W, = as_params("linear", params, "W")
    return shaped("X(..., D_in) W(D_in, D_out) b(D_out)", X, W, params.get("b"))


def linear_forward(params, X):
    """Return ``Y, saved`` with ``Y = X W (+ b)`` of shape ``X.shape[:-1] + (D_out,)``.

    >>> linear_forward({"W": np.ones((3, 5))}, np.ones((2, 4, 3)))[0].shape
    (2, 4, 5)
    >>> linear_forward({"W": np.ones((5, 7))}, np.ones((4, 3)))
    Traceback (most recent call last):
    ...
    ValueError: W must have shape (D_in, D_out) with D_in=3 (as in X), got shape (5, 7)
    """
    X, W, b = _as_inputs(params, X)
    Y = X @ W  # (..., D_in) x (D_in, D_out) -> (..., D_out)
    if b is not None:
        Y = Y + b  # (..., D_out) + (D_out,)
    return Y, {"X": X}


def matmul_backward(X, W, dY):
    """For ``Y = X W`` return ``(dX, dW) = (dY W^T, X^T dY)``, ``dW`` summed over every
    leading axis."""
    dX = dY @ W.T  # (..., D_out) x (D_out, D_in) -> (..., D_in)
    # (D_in, N) x (N, D_out) -> (D_in, D_out)
    dW = X.reshape(-1, W.shape[0]).T @ dY.reshape(-1, W.shape[1])
    return dX, dW


def linear_backward(params, saved, dY):
    """Return ``dparams, dX``: ``{"W": X^T dY}`` (and ``"b": sum dY``) and
    ``dX = dY W^T``.

    >>> params = {"W": np.ones((3, 5))}
    >>> _, saved = linear_forward(params, np.ones((4, 3)))
    >>> linear_backward(params, saved, np.ones((5, 4)))
    Traceback (most recent call last):
    ...
    ValueError: dY must have the shape of Y = X W, (4, 5), got (5, 4)
    """
    X, W, b = _as_inputs(params, saved["X"])
    dY = as_float_like("dY", dY, X.shape[:-1] + W.shape[1:], "Y = X W")
    dX, dW = matmul_backward(X, W, dY)
    dparams = {"W": dW}
    if b is not None:
        # the bias is added at every position: db = sum over them of dY, (D_out,)
        dparams["b"] = dY.reshape(-1, W.shape[1]).sum(axis=0)
    return dparams, dX
