"""Planted mistakes in :mod:`attncourse.layers.multihead`, with their registry.

A reshape without the transpose, heads concatenated in the wrong order. The faults are
layer pairs ``(forward, backward)``: a wrong forward with its own exact backward
(consistent, so finite differences are blind to it), or the correct forward with a
wrong backward. :data:`FAULTS` says which of :data:`CHECKS` catch each one and which are
blind to it; :data:`CORRECT` holds the package pair every check must pass.
"""

import numpy as np

from ...layers.attention import key_valid_from_lengths
from ...layers.multihead import (_backward, _forward, init_multihead, merge_heads,
                                multihead_backward, multihead_by_loop,
                                multihead_forward, split_heads)
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


def multihead_forward_no_transpose(params, X, *, heads, key_valid=None):
    """WRONG: multi-head forward whose split and merge reshape without the transpose."""
    return _forward(params, X, heads, key_valid, split_heads_no_transpose,
                    merge_heads_no_transpose)


def multihead_backward_no_transpose(params, saved, dY):
    """The exact backward of :func:`multihead_forward_no_transpose`: consistent."""
    return _backward(params, saved, dY, split_heads_no_transpose,
                     merge_heads_no_transpose)


def multihead_forward_reversed(params, X, *, heads, key_valid=None):
    """WRONG: multi-head forward that concatenates the heads in reverse order."""
    return _forward(params, X, heads, key_valid, split_heads, merge_heads_reversed)


def multihead_backward_reversed(params, saved, dY):
    """WRONG for the correct forward: ``dC`` is split into heads in reverse order.

    It is also the exact backward of :func:`multihead_forward_reversed`: paired with
    that wrong forward it is consistent, so only a check of the forward values can catch
    the pair.
    """
    return _backward(params, saved, dY, split_heads_reversed, merge_heads)


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
    reference = multihead_by_loop(params, X, heads=H, key_valid=key_valid)
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
