"""The pre-norm transformer block, composed of LayerNorm, multi-head and MLP pairs.

Two residual sublayers, each reading a normalised copy of the stream and adding its
output back to it::

    H = X + multihead(LN1(X))      causal multi-head attention: positions interact
    Y = H + mlp(LN2(H))            the MLP: each position on its own

``X``, ``H`` and ``Y`` all have shape ``(..., T, D)``. The parameters nest by sublayer,
``{"ln1", "attn", "ln2", "mlp"}``; ``attn`` is the dict of
:func:`attncourse.layers.multihead.init_multihead` (``W_O`` maps back to ``D``).

Backward: for ``y = x + f(x)`` the gradient reaching ``x`` is ``dy`` (the identity path)
**plus** ``f``'s backward of ``dy`` (the sublayer path), each added once
(:func:`residual_backward`)::

    dH = dY + LN2_backward(mlp_backward(dY))
    dX = dH + LN1_backward(multihead_backward(dH))

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> params = init_block(rng, 6, heads=2)
>>> X = rng.normal(size=(2, 5, 6))
>>> Y, saved = block_forward(params, X, heads=2)
>>> dparams, dX = block_backward(params, saved, np.ones_like(Y))
>>> Y.shape, dX.shape, sorted(dparams)
((2, 5, 6), (2, 5, 6), ['attn', 'ln1', 'ln2', 'mlp'])
"""

import numpy as np

from .._validate import as_float_like, as_params, require_sizes, require_that, shaped
from .layernorm import init_layernorm, layernorm_backward, layernorm_forward
from .mlp import init_mlp, mlp_backward, mlp_forward
from .multihead import init_multihead, multihead_backward, multihead_forward

__all__ = ["init_block", "block_forward", "block_backward", "residual_backward"]

SUBLAYERS = ("ln1", "attn", "ln2", "mlp")
SPEC = "X(..., T, D) W_O(Hr, D)"  # W_O maps the heads back to D


def init_block(rng, D, *, heads, d=None, r=None, ratio=4):
    """Return ``{"ln1", "attn", "ln2", "mlp"}``: ``d = r = D // heads`` unless given.

    >>> params = init_block(np.random.default_rng(0), 6, heads=2, d=2)
    >>> {name: W.shape for name, W in params["attn"].items()}
    {'W_Q': (6, 4), 'W_K': (6, 4), 'W_V': (6, 6), 'W_O': (6, 6)}
    >>> init_block(np.random.default_rng(0), 6, heads=4)
    Traceback (most recent call last):
    ...
    ValueError: D = 6 does not split into heads = 4 equal heads: give d and r
    """
    require_sizes(D=D, heads=heads, ratio=ratio)
    require_that(None not in (d, r) or D % heads == 0, "D = {} does not split into "
                 "heads = {} equal heads: give d and r", D, heads)
    d = D // heads if d is None else d
    r = D // heads if r is None else r
    return {
        "ln1": init_layernorm(D),
        "attn": init_multihead(rng, D, heads=heads, d=d, r=r),
        "ln2": init_layernorm(D),
        "mlp": init_mlp(rng, D, ratio=ratio),
    }


def _as_W_O(params):
    """``params["attn"]["W_O"]``; ``ValueError`` naming a missing sublayer."""
    return as_params("block", params, SUBLAYERS + ("attn.W_O",))[-1]


def residual_backward(dY, d_sublayer):
    """Return ``dX = dY + d_sublayer`` for ``y = x + f(x)``: both paths, added once.

    ``dY`` arrives through the identity path unchanged; ``d_sublayer`` is ``f``'s
    backward pass applied to ``dY``.

    >>> residual_backward(np.array([1.0, 2.0]), np.array([0.5, -1.0]))
    array([1.5, 1. ])
    """
    return dY + d_sublayer


def block_forward(params, X, *, heads, key_valid=None, eps=1e-5, approximate=False,
                  past=None, query_offset=0):
    """Return ``Y, saved`` with ``H = X + multihead(LN1(X))``, ``Y = H + mlp(LN2(H))``.

    ``key_valid`` (optional, boolean ``(..., T)``) marks real tokens for the attention;
    ``eps`` goes to both LayerNorms, ``approximate`` to the MLP's GELU. ``past`` (the
    cached keys and values of the earlier positions) and ``query_offset`` go to the
    attention (:func:`attncourse.layers.multihead.multihead_forward`; Chapter 10).

    >>> params = init_block(np.random.default_rng(0), 6, heads=2)
    >>> block_forward(params, np.ones((5, 4)), heads=2)
    Traceback (most recent call last):
    ...
    ValueError: W_O must have shape (Hr, D) with D=4 (as in X), got shape (6, 6)
    """
    X, _ = shaped(SPEC, X, _as_W_O(params))
    N1, ln1 = layernorm_forward(params["ln1"], X, eps=eps)  # (..., T, D)
    # (..., T, D) x (D, H d) -> ... -> (..., T, H r) x (H r, D) -> (..., T, D)
    att, attn = multihead_forward(params["attn"], N1, heads=heads, key_valid=key_valid,
                                  past=past, query_offset=query_offset)
    H = X + att  # the first residual
    N2, ln2 = layernorm_forward(params["ln2"], H, eps=eps)  # (..., T, D)
    # (..., T, D) x (D, F) -> (..., T, F) x (F, D) -> (..., T, D)
    M, mlp = mlp_forward(params["mlp"], N2, approximate=approximate)
    Y = H + M  # the second residual
    return Y, {"ln1": ln1, "attn": attn, "ln2": ln2, "mlp": mlp}


def block_backward(params, saved, dY):
    """Return ``dparams, dX``; ``dparams`` nests as ``params``, summed over the batch.

    >>> params = init_block(np.random.default_rng(0), 6, heads=2)
    >>> _, saved = block_forward(params, np.ones((5, 6)), heads=2)
    >>> block_backward(params, saved, np.ones((6, 5)))
    Traceback (most recent call last):
    ...
    ValueError: dY must have the shape of Y (and X), (5, 6), got (6, 5)
    """
    X, _ = shaped(SPEC, saved["ln1"]["X"], _as_W_O(params))
    dY = as_float_like("dY", dY, X.shape, "Y (and X)")
    dmlp, dN2 = mlp_backward(params["mlp"], saved["mlp"], dY)  # (..., T, D)
    dln2, dH_sub = layernorm_backward(params["ln2"], saved["ln2"], dN2)  # (..., T, D)
    dH = residual_backward(dY, dH_sub)  # the identity path plus the MLP path
    dattn, dN1 = multihead_backward(params["attn"], saved["attn"], dH)  # (..., T, D)
    dln1, dX_sub = layernorm_backward(params["ln1"], saved["ln1"], dN1)  # (..., T, D)
    dX = residual_backward(dH, dX_sub)  # the identity path plus the attention path
    return {"ln1": dln1, "attn": dattn, "ln2": dln2, "mlp": dmlp}, dX
