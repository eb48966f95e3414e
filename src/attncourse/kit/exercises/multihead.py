"""Checker of Chapter 4's exercise on heads: splitting into heads, merging them back."""

import numpy as np

from ...layers.multihead import merge_heads, split_heads
from ..failed import CheckFailed
from ._base import _array, _call, reports_unfinished

__all__ = ["SPLIT_MERGE_PROPERTIES", "check_split_merge"]


SPLIT_MERGE_PROPERTIES = (
    "split: shape",
    "split: head h takes columns h w .. (h+1) w - 1",
    "merge: shape",
    "merge: head h fills columns h w .. (h+1) w - 1",
)


@reports_unfinished
def check_split_merge(split_fn, merge_fn):
    """Check a learner's ``split_fn(Y, heads)`` and ``merge_fn(O)`` for multi-head
    attention.

    ``split_fn`` turns ``Y (..., T, H w)`` into ``(..., H, T, w)``, head ``h`` taking
    columns ``h w .. (h+1) w - 1`` of every position; ``merge_fn`` is its inverse,
    ``(..., H, T, w) -> (..., T, H w)``. Each is the other's backward pass. Both are
    tried with a batch axis and without one, on unequal sizes (``B=2, T=5, H=3, w=4``),
    and compared with the package's :func:`~attncourse.layers.multihead.split_heads`
    and :func:`~attncourse.layers.multihead.merge_heads`. Returns the names of the
    properties checked.

    >>> from attncourse.layers.multihead import merge_heads, split_heads
    >>> check_split_merge(split_heads, merge_heads)[0]
    'split: shape'
    """
    rng = np.random.default_rng(4)
    B, T, H, w = 2, 5, 3, 4
    fix_axes = (
        "reshape to (..., T, H, w) first, then swap the axes T and H "
        "(np.swapaxes(x, -3, -2)); one reshape straight to (..., H, T, w) cuts "
        "across positions"
    )
    for Y in (rng.standard_normal((B, T, H * w)), rng.standard_normal((T, H * w))):
        want = split_heads(Y, H)  # head h of position t: Y[..., t, h w : (h+1) w]
        got = _array(
            _call(split_fn, "split: shape", Y.copy(), H), "split: shape", float
        )
        if got.shape != want.shape:
            raise CheckFailed(
                "split: shape",
                f"Y {Y.shape} with {H} heads gave {got.shape}, expected {want.shape}",
                fix_axes,
            )
        if not np.array_equal(got, want):
            prop = "split: head h takes columns h w .. (h+1) w - 1"
            if np.array_equal(got, want[..., ::-1, :, :]):
                fix = "head 0 takes the first w columns: keep the heads in order"
            elif np.array_equal(got, Y.reshape(want.shape)):
                fix = fix_axes
            else:
                fix = "head h of position t is Y[..., t, h*w:(h+1)*w]"
            bad = np.argwhere(~np.all(np.isclose(got, want), axis=(-2, -1)))[0][-1]
            raise CheckFailed(
                prop,
                f"Y {Y.shape}: head {int(bad)} differs from "
                f"columns {bad * w}..{(bad + 1) * w - 1}",
                fix,
            )
    for O in (rng.standard_normal((B, H, T, w)), rng.standard_normal((H, T, w))):
        want = merge_heads(O)  # head h of position t: columns h w .. (h+1) w - 1
        got = _array(_call(merge_fn, "merge: shape", O.copy()), "merge: shape", float)
        if got.shape != want.shape:
            raise CheckFailed(
                "merge: shape",
                f"O {O.shape} gave {got.shape}, expected {want.shape}",
                "swap the axes H and T back, then reshape to (..., T, H w)",
            )
        if not np.array_equal(got, want):
            if np.array_equal(got, O.reshape(want.shape)):
                fix = (
                    "swap the axes H and T back first (np.swapaxes(O, -3, -2)), then "
                    "reshape; a reshape alone mixes positions"
                )
            else:
                fix = "head h of position t goes to columns h*w:(h+1)*w of row t"
            raise CheckFailed(
                "merge: head h fills columns h w .. (h+1) w - 1",
                f"O {O.shape}: the merged columns are not the heads in order",
                fix,
            )
    return SPLIT_MERGE_PROPERTIES
