"""The position-wise MLP ``D -> ratio D -> D``, composed of linear and GELU pairs.

Every position (row of ``X``) goes through the same two linear maps, GELU between::

    U = X W_up + b_up          (..., D) -> (..., F),  F = ratio * D
    A = gelu(U)
    Y = A W_down + b_down      (..., F) -> (..., D)

The parameters nest by sublayer, ``{"up": {"W", "b"}, "down": {"W", "b"}}``. The
backward pass runs the three pairs in reverse:
:func:`attncourse.layers.linear.linear_backward`,
:func:`attncourse.layers.gelu.gelu_backward`, ``linear_backward`` again. Positions do
not interact: row ``t`` of ``Y`` depends on row ``t`` of ``X`` only.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> params = init_mlp(rng, 3, ratio=4)
>>> Y, saved = mlp_forward(params, rng.normal(size=(5, 3)))
>>> dparams, dX = mlp_backward(params, saved, np.ones_like(Y))
>>> Y.shape, dX.shape, dparams["up"]["W"].shape, dparams["down"]["b"].shape
((5, 3), (5, 3), (3, 12), (3,))
"""

import numpy as np

from .._validate import as_params, require_sizes, shaped
from .gelu import gelu_backward, gelu_forward
from .linear import init_linear, linear_backward, linear_forward

__all__ = ["init_mlp", "mlp_forward", "mlp_backward"]

SPEC = "X(..., D) W_up(D, F) W_down(F, D)"


def init_mlp(rng, D, *, ratio=4):
    """Return the up and down linear layers, each with a bias: ``F = ratio * D``.

    ``{"up": {"W": (D, F), "b": (F,)}, "down": {"W": (F, D), "b": (D,)}}``; weights
    as :func:`attncourse.layers.linear.init_linear` (spread ``1/sqrt(fan-in)``), biases
    zero.

    >>> params = init_mlp(np.random.default_rng(0), 2, ratio=3)
    >>> {k: {n: v.shape for n, v in p.items()} for k, p in params.items()}
    {'up': {'W': (2, 6), 'b': (6,)}, 'down': {'W': (6, 2), 'b': (2,)}}
    """
    require_sizes(D=D, ratio=ratio)
    return {
        "up": init_linear(rng, D, ratio * D, bias=True),
        "down": init_linear(rng, ratio * D, D, bias=True),
    }


def mlp_forward(params, X, *, approximate=False):
    """Return ``Y, saved`` with ``Y = gelu(X W_up + b_up) W_down + b_down``.

    ``approximate`` selects GELU's tanh form. ``saved`` holds the three pairs' stashes.

    >>> params = init_mlp(np.random.default_rng(0), 3)
    >>> mlp_forward(params, np.ones((4, 5)))
    Traceback (most recent call last):
    ...
    ValueError: W_up must have shape (D, F) with D=5 (as in X), got shape (3, 12)
    """
    X, _, _ = shaped(SPEC, X, *as_params("mlp", params, "up.W down.W"))
    U, up = linear_forward(params["up"], X)  # (..., D) x (D, F) -> (..., F)
    A, act = gelu_forward({}, U, approximate=approximate)  # (..., F)
    Y, down = linear_forward(params["down"], A)  # (..., F) x (F, D) -> (..., D)
    return Y, {"up": up, "gelu": act, "down": down}


def mlp_backward(params, saved, dY):
    """Return ``dparams, dX``: the three pairs' backward passes in reverse order.

    ``dparams`` has the nesting of ``params``; weight and bias gradients are summed over
    every leading axis.
    """
    shaped(SPEC, saved["up"]["X"], *as_params("mlp", params, "up.W down.W"))
    ddown, dA = linear_backward(params["down"], saved["down"], dY)  # dA (..., F)
    _, dU = gelu_backward({}, saved["gelu"], dA)  # (..., F)
    dup, dX = linear_backward(params["up"], saved["up"], dU)  # dX (..., D)
    return {"up": dup, "down": ddown}, dX
