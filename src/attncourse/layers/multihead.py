"""Causal multi-head attention with an output projection, as a forward/backward layer
pair.

With ``H`` heads, each of query/key width ``d`` and value width ``r``, the parameters
are ``W_Q, W_K (D, H d)``, ``W_V (D, H r)`` and ``W_O (H r, D_out)``. Columns
``h d : (h+1) d`` of ``W_Q`` and ``W_K`` (and ``h r : (h+1) r`` of ``W_V``) belong to
head ``h``:

1. project: ``Q = X W_Q``, ``K = X W_K``, ``V = X W_V``;
2. split: ``(..., T, H w) -> (..., H, T, w)``, one slice of columns per head;
3. attend: each head runs :func:`attncourse.causal_attention` on its own slices;
4. merge (concatenate): ``(..., H, T, r) -> (..., T, H r)``, head ``h`` in columns
   ``h r : (h+1) r``;
5. mix: ``Y = C W_O``. This is the first place where the heads interact.

The backward pass runs the same steps in reverse: the backward of a merge is a split and
the backward of a split is a merge; ``dX`` sums the three projection branches.
"""

import numpy as np

from .._validate import as_float_like, as_params, require_sizes, require_that, shaped
from .attention import (AttentionSaved, attention_backward, causal_attention,
                        key_padding_mask)
from .head import project
from .linear import matmul_backward

__all__ = [
    "split_heads",
    "merge_heads",
    "init_multihead",
    "multihead_forward",
    "multihead_backward",
]

PARAMETER_NAMES = ("W_Q", "W_K", "W_V", "W_O")
# the shapes of the input and the weights, for :func:`attncourse._validate.shaped`
SHAPES = "X(..., T, D) W_Q(D, Hd) W_K(D, Hd) W_V(D, Hr) W_O(Hr, D_out)"


def split_heads(Y, heads):
    """Return ``Y (..., T, H w)`` as ``(..., H, T, w)``: head ``h`` gets columns
    ``h w : (h+1) w``.

    >>> import numpy as np
    >>> Y = np.arange(12).reshape(2, 6)  # T = 2 positions, H w = 6 columns
    >>> split_heads(Y, 3)[1]  # head 1: columns 2 and 3 of both positions
    array([[2, 3],
           [8, 9]])
    """
    Y = np.asarray(Y)  # any dtype: a split only moves entries
    require_sizes(heads=heads)
    require_that(Y.ndim >= 2 and Y.shape[-1] % heads == 0, "cannot split Y of shape {} "
                 "into {} equal heads: Y must have shape (..., T, H w)", Y.shape, heads)
    *lead, T, width = Y.shape
    # (..., T, H, w): position first
    per_head = Y.reshape(*lead, T, heads, width // heads)
    return np.swapaxes(per_head, -3, -2)  # (..., T, H, w) -> (..., H, T, w)


def merge_heads(O):
    """Return ``O (..., H, T, w)`` as ``(..., T, H w)``, head ``h`` in columns
    ``h w : (h+1) w``.

    The inverse of :func:`split_heads`; each is the other's backward pass.

    >>> import numpy as np
    >>> Y = np.arange(12).reshape(2, 6)
    >>> bool(np.array_equal(merge_heads(split_heads(Y, 3)), Y))
    True
    """
    O = np.asarray(O)  # any dtype: a merge only moves entries
    require_that(O.ndim >= 3, "O must have shape (..., H, T, w), got shape {}", O.shape)
    *lead, H, T, w = O.shape
    # (..., H, T, w) -> (..., T, H, w) -> (..., T, H w)
    return np.swapaxes(O, -3, -2).reshape(*lead, T, H * w)


def init_multihead(rng, D, *, heads, d, r, D_out=None):
    """Return random parameters ``{"W_Q", "W_K", "W_V", "W_O"}`` with entries of spread
    ``1/sqrt(fan-in)``.

    >>> import numpy as np
    >>> params = init_multihead(np.random.default_rng(0), D=5, heads=2, d=3, r=4)
    >>> {name: W.shape for name, W in params.items()}
    {'W_Q': (5, 6), 'W_K': (5, 6), 'W_V': (5, 8), 'W_O': (8, 5)}
    """
    D_out = D if D_out is None else D_out
    require_sizes(D=D, heads=heads, d=d, r=r, D_out=D_out)
    return {
        "W_Q": rng.normal(size=(D, heads * d)) / np.sqrt(D),
        "W_K": rng.normal(size=(D, heads * d)) / np.sqrt(D),
        "W_V": rng.normal(size=(D, heads * r)) / np.sqrt(D),
        "W_O": rng.normal(size=(heads * r, D_out)) / np.sqrt(heads * r),
    }


def _as_inputs(params, X, heads):
    """Return ``X`` and the four weights as float arrays, or raise ``ValueError`` naming
    the shapes at fault (the columns of ``W_Q``, ``W_K`` and ``W_V`` split into
    ``heads`` equal blocks)."""
    require_sizes(heads=heads)
    weights = as_params("multihead", params, PARAMETER_NAMES)
    X, W_Q, W_K, W_V, W_O = shaped(SHAPES, X, *weights)
    for name, W in (("W_Q", W_Q), ("W_V", W_V)):
        require_that(W.shape[1] % heads == 0, "{} has shape {}: its {} columns do not "
                     "split into {} heads", name, W.shape, W.shape[1], heads)
    return X, W_Q, W_K, W_V, W_O


def multihead_forward(params, X, *, heads, key_valid=None, past=None, query_offset=0):
    """Return ``Y, saved`` of causal multi-head attention on ``X (..., T, D)``.

    ``key_valid`` (optional, boolean ``(..., T_k)``) marks the real tokens; padded keys
    get weight exactly 0 in every head. ``saved`` holds what :func:`multihead_backward`
    needs, including the keys ``K (..., H, T_k, d)``, the values ``V (..., H, T_k, r)``
    and the weights ``A (..., H, T, T_k)`` for inspection.

    ``past`` (Chapter 10, the key/value cache: a pair ``keys (..., H, t, d)``,
    ``values (..., H, t, r)`` of the ``t`` earlier positions) is read before the keys
    and values of ``X``, so ``T_k = t + T``, and ``query_offset`` (``t`` when decoding)
    says where the queries of ``X`` sit (:func:`attncourse.causal_attention`). Without
    ``past``, ``T_k = T``. :func:`multihead_backward` differentiates the pass without
    ``past``.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> params = init_multihead(rng, D=4, heads=2, d=3, r=2, D_out=5)
    >>> Y, saved = multihead_forward(params, rng.normal(size=(2, 6, 4)), heads=2)
    >>> Y.shape, saved["A"].shape
    ((2, 6, 5), (2, 2, 6, 6))
    """
    X, W_Q, W_K, W_V, W_O = _as_inputs(params, X, heads)
    # (..., T, D) x (D, H d) -> (..., T, H d); V: (..., T, H r)
    Q, K, V = project(X, W_Q, W_K, W_V)
    # (..., H, T, d), (..., H, T, d), (..., H, T, r)
    Q_h, K_h, V_h = split_heads(Q, heads), split_heads(K, heads), split_heads(V, heads)
    if past is not None:  # the cached keys and values of the t earlier positions first
        K_h = np.concatenate([past[0], K_h], axis=-2)  # (..., H, t + T, d)
        V_h = np.concatenate([past[1], V_h], axis=-2)  # (..., H, t + T, r)
    head_valid = None  # key_valid (..., T_k) as (..., 1, T_k): the same keys per head
    if key_valid is not None:
        head_valid = key_padding_mask(key_valid, K_h.shape[-2], X.shape[:-2])
    # (..., H, T, r), (..., H, T, T_k); query i sits at position query_offset + i
    O_h, A = causal_attention(Q_h, K_h, V_h, query_offset, key_valid=head_valid)
    C = merge_heads(O_h)  # (..., T, H r)
    Y = C @ W_O  # (..., T, H r) x (H r, D_out) -> (..., T, D_out)
    saved = {"X": X, "Q": Q_h, "K": K_h, "V": V_h, "A": A, "C": C, "heads": heads}
    return Y, saved


def multihead_backward(params, saved, dY):
    """Return ``dparams, dX`` for the upstream gradient ``dY = dJ/dY``.

    ``dparams`` has the keys of ``params``; weight gradients are summed over the batch.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> params = init_multihead(rng, D=4, heads=2, d=3, r=2, D_out=5)
    >>> X = rng.normal(size=(2, 6, 4))
    >>> Y, saved = multihead_forward(params, X, heads=2)
    >>> dparams, dX = multihead_backward(params, saved, np.ones_like(Y))
    >>> {name: g.shape for name, g in dparams.items()}, dX.shape
    ({'W_Q': (4, 6), 'W_K': (4, 6), 'W_V': (4, 4), 'W_O': (4, 5)}, (2, 6, 4))
    """
    X, W_Q, W_K, W_V, W_O = _as_inputs(params, saved["X"], saved["heads"])
    C, heads = saved["C"], saved["heads"]
    dY = as_float_like("dY", dY, C.shape[:-1] + W_O.shape[1:], "the output Y")
    # dC = dY W_O^T (..., T, H r); dW_O = C^T dY (H r, D_out), summed over the batch
    dC, dW_O = matmul_backward(C, W_O, dY)
    G_h = split_heads(dC, heads)  # backward of the merge: G_h = dJ/dO_h (..., H, T, r)
    attention = AttentionSaved(*(saved[n] for n in AttentionSaved._fields))
    # (..., H, T, d), (..., H, T, d), (..., H, T, r)
    dQ_h, dK_h, dV_h = attention_backward(attention, G_h)
    # backward of the split: (..., T, H d), (..., T, H d), (..., T, H r)
    dQ, dK, dV = merge_heads(dQ_h), merge_heads(dK_h), merge_heads(dV_h)
    dX_Q, dW_Q = matmul_backward(X, W_Q, dQ)  # dQ W_Q^T (..., T, D), X^T dQ (D, H d)
    dX_K, dW_K = matmul_backward(X, W_K, dK)  # dK W_K^T (..., T, D), X^T dK (D, H d)
    dX_V, dW_V = matmul_backward(X, W_V, dV)  # dV W_V^T (..., T, D), X^T dV (D, H r)
    dparams = {"W_Q": dW_Q, "W_K": dW_K, "W_V": dW_V, "W_O": dW_O}
    return dparams, dX_Q + dX_K + dX_V  # three branches summed

