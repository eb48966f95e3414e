"""Planted mistakes in :mod:`attncourse.layers.multihead`, with their registry.

A reshape without the transpose, heads concatenated in the wrong order. The faults are
layer pairs ``(forward, backward)``: a wrong forward with its own exact backward
(consistent, so finite differences are blind to it), or the correct forward with a
wrong backward. :data:`FAULTS` says which of :data:`CHECKS` catch each one and which are
blind to it; :data:`CORRECT` holds the package pair every check must pass.
"""

import numpy as np

from ..._validate import as_float_like
from ...layers.attention import (AttentionSaved, attention_backward, causal_attention,
                                 key_padding_mask, key_valid_from_lengths)
from ...layers.head import project
from ...layers.linear import matmul_backward
from ...layers.multihead import (_as_inputs, init_multihead, merge_heads,
                                multihead_backward, multihead_forward, split_heads)
from ..examples import multihead_reference
from ..gradients import layer_gradcheck
from ._registry import Check, Fault, require_close, require_gradcheck

__all__ = [
    "FAULTS",
    "CHECKS",
    "CORRECT",
    "BUILDING_BLOCKS",
    "split_heads_no_transpose",
    "merge_heads_no_transpose",
    "merge_heads_reversed",
    "split_heads_reversed",
    "multihead_forward_no_transpose",
    "multihead_backward_no_transpose",
    "multihead_forward_reversed",
    "multihead_backward_reversed",
]


def split_heads_no_transpose(Y, heads):
    """WRONG: reshape ``(..., T, H w)`` straight to ``(..., H, T, w)``, no transpose.

    It mixes positions and features: with 2 positions of 2 features and 2 heads, head 1
    gets both features of position 1 instead of feature 1 of both positions.

    >>> split_heads_no_transpose(np.arange(4).reshape(2, 2), 2)[1]
    array([[2],
           [3]])
    """
    *lead, T, width = Y.shape
    return Y.reshape(*lead, heads, T, width // heads)


def merge_heads_no_transpose(O):
    """WRONG: reshape ``(..., H, T, w)`` straight to ``(..., T, H w)``, no transpose.

    It undoes :func:`split_heads_no_transpose`.
    """
    *lead, H, T, w = O.shape
    return O.reshape(*lead, T, H * w)


def merge_heads_reversed(O):
    """WRONG: concatenate the heads in reverse order, head ``H-1`` first."""
    return merge_heads(np.flip(O, axis=-3))


def split_heads_reversed(Y, heads):
    """WRONG: the split undoing :func:`merge_heads_reversed` (last block to head 0)."""
    return np.flip(split_heads(Y, heads), axis=-3)


# Each multihead fault is a copy of attncourse.layers.multihead.multihead_forward or
# multihead_backward with the step at fault changed, marked "the fault".


def multihead_forward_no_transpose(params, X, *, heads, key_valid=None, past=None,
                                   query_offset=0):
    """WRONG: multi-head forward whose split and merge reshape without the transpose.

    One mistake made at both reshapes: the split of ``Q, K, V`` and the merge of the
    heads' outputs.
    """
    X, W_Q, W_K, W_V, W_O = _as_inputs(params, X, heads)
    # (..., T, D) x (D, H d) -> (..., T, H d); V: (..., T, H r)
    Q, K, V = project(X, W_Q, W_K, W_V)
    # (..., H, T, d), (..., H, T, d), (..., H, T, r)
    Q_h, K_h, V_h = (split_heads_no_transpose(M, heads) for M in (Q, K, V))  # the fault
    if past is not None:  # the cached keys and values of the t earlier positions first
        K_h = np.concatenate([past[0], K_h], axis=-2)  # (..., H, t + T, d)
        V_h = np.concatenate([past[1], V_h], axis=-2)  # (..., H, t + T, r)
    head_valid = None  # key_valid (..., T_k) as (..., 1, T_k): the same keys per head
    if key_valid is not None:
        head_valid = key_padding_mask(key_valid, K_h.shape[-2], X.shape[:-2])
    # (..., H, T, r), (..., H, T, T_k); query i sits at position query_offset + i
    O_h, A = causal_attention(Q_h, K_h, V_h, query_offset, key_valid=head_valid)
    C = merge_heads_no_transpose(O_h)  # the fault: a plain reshape
    Y = C @ W_O  # (..., T, H r) x (H r, D_out) -> (..., T, D_out)
    saved = {"X": X, "Q": Q_h, "K": K_h, "V": V_h, "A": A, "C": C, "heads": heads}
    return Y, saved


def multihead_backward_no_transpose(params, saved, dY):
    """The exact backward of :func:`multihead_forward_no_transpose`: consistent (the
    split of ``dC`` and the merge of ``dQ_h, dK_h, dV_h`` reshape without the
    transpose)."""
    X, W_Q, W_K, W_V, W_O = _as_inputs(params, saved["X"], saved["heads"])
    C, heads = saved["C"], saved["heads"]
    dY = as_float_like("dY", dY, C.shape[:-1] + W_O.shape[1:], "the output Y")
    # dC = dY W_O^T (..., T, H r); dW_O = C^T dY (H r, D_out), summed over the batch
    dC, dW_O = matmul_backward(C, W_O, dY)
    G_h = split_heads_no_transpose(dC, heads)  # the fault: a plain reshape
    attention = AttentionSaved(*(saved[n] for n in AttentionSaved._fields))
    # (..., H, T, d), (..., H, T, d), (..., H, T, r)
    dQ_h, dK_h, dV_h = attention_backward(attention, G_h)
    # backward of the split: (..., T, H d), (..., T, H d), (..., T, H r)
    dQ, dK, dV = map(merge_heads_no_transpose, (dQ_h, dK_h, dV_h))  # the fault
    dX_Q, dW_Q = matmul_backward(X, W_Q, dQ)  # dQ W_Q^T (..., T, D), X^T dQ (D, H d)
    dX_K, dW_K = matmul_backward(X, W_K, dK)  # dK W_K^T (..., T, D), X^T dK (D, H d)
    dX_V, dW_V = matmul_backward(X, W_V, dV)  # dV W_V^T (..., T, D), X^T dV (D, H r)
    dparams = {"W_Q": dW_Q, "W_K": dW_K, "W_V": dW_V, "W_O": dW_O}
    return dparams, dX_Q + dX_K + dX_V  # three branches summed


def multihead_forward_reversed(params, X, *, heads, key_valid=None, past=None,
                               query_offset=0):
    """WRONG: multi-head forward that concatenates the heads in reverse order."""
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
    C = merge_heads_reversed(O_h)  # the fault: head H-1 first
    Y = C @ W_O  # (..., T, H r) x (H r, D_out) -> (..., T, D_out)
    saved = {"X": X, "Q": Q_h, "K": K_h, "V": V_h, "A": A, "C": C, "heads": heads}
    return Y, saved


def multihead_backward_reversed(params, saved, dY):
    """WRONG for the correct forward: ``dC`` is split into heads in reverse order.

    It is also the exact backward of :func:`multihead_forward_reversed`: paired with
    that wrong forward it is consistent, so only a check of the forward values can catch
    the pair.
    """
    X, W_Q, W_K, W_V, W_O = _as_inputs(params, saved["X"], saved["heads"])
    C, heads = saved["C"], saved["heads"]
    dY = as_float_like("dY", dY, C.shape[:-1] + W_O.shape[1:], "the output Y")
    # dC = dY W_O^T (..., T, H r); dW_O = C^T dY (H r, D_out), summed over the batch
    dC, dW_O = matmul_backward(C, W_O, dY)
    G_h = split_heads_reversed(dC, heads)  # the fault: dC's last block to head 0
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


# --- the registry ---------------------------------------------------------------------


def _layer():
    """A seeded layer: B=2, T=5, D=7, H=2, d=3, r=2; sequence 0 has 2 padded tokens."""
    rng = np.random.default_rng(1)
    B, T, D, H = 2, 5, 7, 2
    params = init_multihead(rng, D, heads=H, d=3, r=2)
    X = rng.normal(size=(B, T, D))
    key_valid = key_valid_from_lengths([3, 5], T, side="left")
    G = rng.normal(size=(B, T, D))
    return params, X, H, key_valid, G


def _loop_reference(pair):
    """The pair's forward values against the reference of explicit per-head slices."""
    forward, _ = pair
    params, X, H, key_valid, _ = _layer()
    Y, _ = forward(params, X, heads=H, key_valid=key_valid)
    reference = multihead_reference(params, X, heads=H, key_valid=key_valid)
    require_close("the loop reference", "Y", Y, reference)


def _pair_gradcheck(pair):
    """The layer gradient check of the pair: every weight and ``X``."""
    forward, backward = pair
    params, X, H, key_valid, G = _layer()
    report = layer_gradcheck(forward, backward, params, X, dy=G,
                             heads=H, key_valid=key_valid)
    require_gradcheck("gradient check of the layer pair", report)


CHECKS = {c.name: c for c in (
    Check("loop reference", "multihead pair", _loop_reference),
    Check("layer gradcheck", "multihead pair", _pair_gradcheck),
)}
"""Check name -> :class:`~attncourse.kit.faults.Check`."""

FAULTS = (
    Fault("multihead_no_transpose_pair",
          "split and merge reshape without the transpose, in both passes",
          (multihead_forward_no_transpose, multihead_backward_no_transpose),
          "multihead pair",
          caught_by=("loop reference",), blind=("layer gradcheck",)),
    Fault("multihead_reversed_pair",
          "heads concatenated in reverse order, in both passes",
          (multihead_forward_reversed, multihead_backward_reversed), "multihead pair",
          caught_by=("loop reference",), blind=("layer gradcheck",)),
    Fault("multihead_backward_reversed",
          "the correct forward; its backward splits dC in reverse order",
          (multihead_forward, multihead_backward_reversed), "multihead pair",
          caught_by=("layer gradcheck",), blind=("loop reference",)),
    Fault("multihead_backward_no_transpose",
          "the correct forward; its backward reshapes without the transpose",
          (multihead_forward, multihead_backward_no_transpose), "multihead pair",
          caught_by=("layer gradcheck",), blind=("loop reference",)),
)
"""The planted mistakes: the checks that catch each one, and those blind to it."""

CORRECT = {"multihead pair": (multihead_forward, multihead_backward)}
"""Role -> the package pair: every check must pass it."""

BUILDING_BLOCKS = {
    "split_heads_no_transpose": "multihead_no_transpose_pair",
    "merge_heads_no_transpose": "multihead_no_transpose_pair",
    "merge_heads_reversed": "multihead_reversed_pair",
    "split_heads_reversed": "multihead_backward_reversed",
}
"""Public functions that are not faults themselves -> the fault they are part of."""
