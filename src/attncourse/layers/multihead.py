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

from .._validate import as_float_array, require_params, require_sizes
from .attention import backward_from_weights, causal_attention, key_padding_mask
from .head import project
from .linear import matmul_backward

__all__ = [
    "split_heads",
    "merge_heads",
    "init_multihead",
    "multihead_forward",
    "multihead_backward",
    "multihead_by_loop",
]

PARAMETER_NAMES = ("W_Q", "W_K", "W_V", "W_O")


def split_heads(Y, heads):
    """Return ``Y (..., T, H w)`` as ``(..., H, T, w)``: head ``h`` gets columns
    ``h w : (h+1) w``.

    >>> import numpy as np
    >>> Y = np.arange(12).reshape(2, 6)  # T = 2 positions, H w = 6 columns
    >>> split_heads(Y, 3)[1]  # head 1: columns 2 and 3 of both positions
    array([[2, 3],
           [8, 9]])
    """
    Y = np.asarray(Y)
    if Y.ndim < 2:
        raise ValueError(
            "split_heads needs at least 2-D input (positions, features), got shape "
            f"{Y.shape}"
        )
    require_sizes(heads=heads)
    if Y.shape[-1] % heads:
        raise ValueError(
            f"cannot split {Y.shape[-1]} columns (shape {Y.shape}) into {heads} equal "
            "heads"
        )
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
    O = np.asarray(O)
    if O.ndim < 3:
        raise ValueError(
            f"merge_heads needs input of shape (..., H, T, w), got shape {O.shape}"
        )
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


def _check(params, X, heads):
    """Return ``X`` and the four weights as float arrays, or raise ``ValueError`` naming
    the shapes."""
    require_params("multihead", params, PARAMETER_NAMES)
    require_sizes(heads=heads)
    X = as_float_array("X", X)
    W_Q, W_K, W_V, W_O = (as_float_array(n, params[n]) for n in PARAMETER_NAMES)
    if X.ndim < 2:
        raise ValueError(
            f"X must be at least 2-D (positions, features), got shape {X.shape}"
        )
    for name, W in zip(PARAMETER_NAMES, (W_Q, W_K, W_V, W_O)):
        if W.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got shape {W.shape}")
    for name, W in (("W_Q", W_Q), ("W_K", W_K), ("W_V", W_V)):
        if W.shape[0] != X.shape[-1]:
            raise ValueError(
                f"{name} must have one row per input feature: X has shape {X.shape}, "
                f"{name} has shape {W.shape}"
            )
    if W_Q.shape != W_K.shape:
        raise ValueError(
            f"W_Q and W_K must have the same shape (D, H d): W_Q {W_Q.shape}, W_K "
            f"{W_K.shape}"
        )
    for name, W in (("W_Q", W_Q), ("W_V", W_V)):
        if W.shape[1] % heads:
            raise ValueError(
                f"{name} has shape {W.shape}: its {W.shape[1]} columns do not split "
                f"into {heads} heads"
            )
    if W_O.shape[0] != W_V.shape[1]:
        raise ValueError(
            f"W_O must have one row per concatenated value column: W_V {W_V.shape}, "
            f"W_O {W_O.shape}"
        )
    return X, W_Q, W_K, W_V, W_O


def _forward(params, X, heads, key_valid, split, merge):
    """The forward pass with the split and merge steps as arguments (fault variants swap
    them)."""
    X, W_Q, W_K, W_V, W_O = _check(params, X, heads)
    T = X.shape[-2]
    # (..., T, D) x (D, H d) -> (..., T, H d); V: (..., T, H r)
    Q, K, V = project(X, W_Q, W_K, W_V)
    # (..., H, T, d), (..., H, T, r)
    Q_h, K_h, V_h = split(Q, heads), split(K, heads), split(V, heads)
    head_valid = None
    if key_valid is not None:
        # validates the shape against X's batch
        key_padding_mask(key_valid, T, X.shape[:-2])
        # (..., 1, T): the same keys for every head
        head_valid = np.asarray(key_valid)[..., None, :]
    # (..., H, T, r), (..., H, T, T)
    O_h, A = causal_attention(Q_h, K_h, V_h, key_valid=head_valid)
    C = merge(O_h)  # (..., T, H r)
    Y = C @ W_O  # (..., T, H r) x (H r, D_out) -> (..., T, D_out)
    saved = {"X": X, "Q": Q_h, "K": K_h, "V": V_h, "A": A, "C": C, "heads": heads}
    return Y, saved


def _backward(params, saved, dY, split, merge):
    """The backward pass with the split and merge steps as arguments (fault variants
    swap them)."""
    require_params("multihead", params, PARAMETER_NAMES)
    X, heads = saved["X"], saved["heads"]
    W_Q, W_K, W_V, W_O = (as_float_array(n, params[n]) for n in PARAMETER_NAMES)
    dY = as_float_array("dY", dY)
    expected = saved["C"].shape[:-1] + (W_O.shape[1],)
    if dY.shape != expected:
        raise ValueError(
            f"dY must have the shape of the output Y, {expected}, got {dY.shape}"
        )
    # dC (..., T, H r); dW_O (H r, D_out), summed over the batch
    dC, dW_O = matmul_backward(saved["C"], W_O, dY)
    dO_h = split(dC, heads)  # backward of the merge: (..., H, T, r)
    dQ_h, dK_h, dV_h = backward_from_weights(
        saved["Q"], saved["K"], saved["V"], saved["A"], dO_h
    )
    # backward of the split: (..., T, H d), (..., T, H r)
    dQ, dK, dV = merge(dQ_h), merge(dK_h), merge(dV_h)
    dX_Q, dW_Q = matmul_backward(X, W_Q, dQ)
    dX_K, dW_K = matmul_backward(X, W_K, dK)
    dX_V, dW_V = matmul_backward(X, W_V, dV)
    dparams = {"W_Q": dW_Q, "W_K": dW_K, "W_V": dW_V, "W_O": dW_O}
    return dparams, dX_Q + dX_K + dX_V  # three branches summed


def multihead_forward(params, X, *, heads, key_valid=None):
    """Return ``Y, saved`` of causal multi-head attention on ``X (..., T, D)``.

    ``key_valid`` (optional, boolean ``(..., T)``) marks the real tokens; padded keys
    get weight exactly 0 in every head. ``saved`` holds what :func:`multihead_backward`
    needs, including the weights ``A (..., H, T, T)`` for inspection.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> params = init_multihead(rng, D=4, heads=2, d=3, r=2, D_out=5)
    >>> Y, saved = multihead_forward(params, rng.normal(size=(2, 6, 4)), heads=2)
    >>> Y.shape, saved["A"].shape
    ((2, 6, 5), (2, 2, 6, 6))
    """
    return _forward(params, X, heads, key_valid, split_heads, merge_heads)


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
    return _backward(params, saved, dY, split_heads, merge_heads)


def multihead_by_loop(params, X, *, heads, key_valid=None):
    """Reference:
    ``Y = sum_h causal_attention(X W_Q^(h), X W_K^(h), X W_V^(h)) W_O^(h)`` with
    explicit slices.

    ``W^(h)`` is head ``h``'s block of columns (rows, for ``W_O``). No reshape and no
    transpose: this is the definition that :func:`multihead_forward` must reproduce.

    >>> import numpy as np
    >>> rng = np.random.default_rng(1)
    >>> params = init_multihead(rng, D=5, heads=3, d=2, r=2)
    >>> X = rng.normal(size=(4, 5))
    >>> by_loop = multihead_by_loop(params, X, heads=3)
    >>> bool(np.allclose(by_loop, multihead_forward(params, X, heads=3)[0],
    ...                  rtol=1e-13, atol=1e-15))
    True
    """
    X, W_Q, W_K, W_V, W_O = _check(params, X, heads)
    d, r = W_Q.shape[1] // heads, W_V.shape[1] // heads
    Y = 0.0
    for h in range(heads):
        cols_k, cols_v = slice(h * d, (h + 1) * d), slice(h * r, (h + 1) * r)
        # (..., T, D) x (D, d), twice, and (..., T, D) x (D, r); O_h is (..., T, r)
        O_h, _ = causal_attention(
            X @ W_Q[:, cols_k],
            X @ W_K[:, cols_k],
            X @ W_V[:, cols_v],
            key_valid=key_valid,
        )
        Y = Y + O_h @ W_O[cols_v, :]  # (..., T, r) x (r, D_out) -> (..., T, D_out)
    return Y
