"""Checkers of Chapter 4's exercises on heads: splitting into heads and merging them
back; the whole multi-head layer, forward and backward, from scratch."""

import numpy as np

from ...layers.attention import AttentionSaved, attention_backward, attention_forward
from ...layers.multihead import (init_multihead, merge_heads, multihead_backward,
                                 multihead_forward, split_heads)
from ..failed import CheckFailed
from ._base import _array, _call, _sign_flipped, reports_unfinished

__all__ = [
    "SPLIT_MERGE_PROPERTIES",
    "check_split_merge",
    "MULTIHEAD_BACKWARD_PROPERTIES",
    "check_multihead_backward",
]


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


# --- the whole layer, forward and backward, from scratch ------------------------------

MULTIHEAD_BACKWARD_PROPERTIES = (
    "returns Y, dX, dW_Q, dW_K, dW_V, dW_O",
    "inputs unchanged",
    "Y",
    "dW_O",
    "dW_V",
    "dW_Q",
    "dW_K",
    "dX",
)


def _multihead_case(seed):
    """A batch ``X (2, 5, 7)``, weights for 2 heads (``d = 3``, ``r = 4``, output
    width 6) and a dense upstream gradient ``dY (2, 5, 6)``: unequal sizes."""
    rng = np.random.default_rng(seed)
    B, T, D, H, d, r, D_out = 2, 5, 7, 2, 3, 4, 6
    params = init_multihead(rng, D, heads=H, d=d, r=r, D_out=D_out)
    X = rng.standard_normal((B, T, D))
    dY = rng.standard_normal((B, T, D_out))
    return params, X, dY, H


def _variant_outputs(params, X, heads):
    """``Y`` of the typical wrong forward passes, by name of their fix."""
    W_Q, W_K, W_V, W_O = (params[n] for n in ("W_Q", "W_K", "W_V", "W_O"))
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V  # (B, T, D) x (D, H w) -> (B, T, H w)
    T = X.shape[-2]
    causal = np.tril(np.ones((T, T), dtype=bool))

    def split_plain(M, heads):  # one reshape, no transpose
        *lead, T_, width = M.shape
        return M.reshape(*lead, heads, T_, width // heads)

    def run(split, merge, visible=causal, scale=1.0):
        O_h, _ = attention_forward(split(Q, heads) * scale, split(K, heads),
                                   split(V, heads), visible)
        return merge(O_h) @ W_O  # (B, T, H r) x (H r, D_out)

    def merge_plain(O):
        *lead, H, T_, w = O.shape
        return O.reshape(*lead, T_, H * w)

    def merge_reversed(O):
        return merge_heads(O[..., ::-1, :, :])

    d = W_Q.shape[1] // heads
    return {
        "split and merge with one reshape each: reshape to (..., T, H, w), then swap "
        "the axes T and H (and back before the merge)":
            run(split_plain, merge_plain),
        "heads concatenated in the wrong order: head h goes to columns h r .. "
        "(h+1) r - 1 of C, head 0 first": run(split_heads, merge_reversed),
        "every key visible: hide the keys j > i with a boolean visible mask, a "
        "softmax over the visible keys only (np.where(visible, S, -1e30))":
            run(split_heads, merge_heads, visible=None),
        "the scores are not divided by sqrt(d): S = Q K^T / sqrt(d), d the width of "
        "one head": run(split_heads, merge_heads, scale=np.sqrt(d)),
        "scaled by sqrt(H d), the width of all heads: divide by sqrt(d), the width of "
        "one head": run(split_heads, merge_heads, scale=np.sqrt(1 / heads)),
    }


@reports_unfinished
def check_multihead_backward(fn, seed=0):
    """Check a learner's causal multi-head attention, forward and backward, written
    from scratch: ``fn(X, W_Q, W_K, W_V, W_O, dY, heads)`` returning
    ``(Y, dX, dW_Q, dW_K, dW_V, dW_O)``.

    ``X (B, T, D)``, ``W_Q, W_K (D, H d)``, ``W_V (D, H r)``, ``W_O (H r, D_out)``;
    ``Y`` is the causal multi-head layer (split, attend, concatenate, ``W_O``) and the
    gradients are those of ``J = sum(dY * Y)``, weight gradients summed over the batch.
    Properties, in order: **returns Y, dX, dW_Q, dW_K, dW_V, dW_O** (six arrays of the
    right shapes); **inputs unchanged** (nothing written into the caller's arrays);
    **Y** (equal to :func:`~attncourse.layers.multihead.multihead_forward`, whose
    backward is confirmed by finite differences in Chapter 4); then **dW_O**, **dW_V**,
    **dW_Q**, **dW_K**, **dX** against the package's backward pass (relative
    ``1e-9``). The first that fails is named, with the likely fix. Sizes are unequal
    (``B=2, T=5, D=7, H=2, d=3, r=4, D_out=6``). Returns the properties checked.

    >>> from attncourse.layers.multihead import multihead_backward, multihead_forward
    >>> def mine(X, W_Q, W_K, W_V, W_O, dY, heads):
    ...     params = {"W_Q": W_Q, "W_K": W_K, "W_V": W_V, "W_O": W_O}
    ...     Y, saved = multihead_forward(params, X, heads=heads)
    ...     dparams, dX = multihead_backward(params, saved, dY)
    ...     return (Y, dX, *(dparams[n] for n in ("W_Q", "W_K", "W_V", "W_O")))
    >>> check_multihead_backward(mine)[-1]
    'dX'
    """
    params, X, dY, H = _multihead_case(seed)
    names = ("W_Q", "W_K", "W_V", "W_O")
    inputs = (X, *(params[n] for n in names), dY)
    copies = tuple(a.copy() for a in inputs)
    prop = MULTIHEAD_BACKWARD_PROPERTIES[0]
    result = _call(fn, prop, *copies, H)
    if not (isinstance(result, tuple) and len(result) == 6):
        got = (f"{len(result)} values" if isinstance(result, tuple)
               else type(result).__name__)
        raise CheckFailed(prop, f"expected a tuple of six arrays, got {got}",
                          "return Y, dX, dW_Q, dW_K, dW_V, dW_O, in that order")
    got = dict(zip(("Y", "dX", "dW_Q", "dW_K", "dW_V", "dW_O"),
                   (_array(a, prop, np.float64) for a in result)))
    Y_ref, saved = multihead_forward(params, X, heads=H)
    dparams, dX_ref = multihead_backward(params, saved, dY)
    want = {"Y": Y_ref, "dX": dX_ref, **{"d" + n: dparams[n] for n in names}}
    for name, value in got.items():
        if value.shape != want[name].shape:
            raise CheckFailed(
                prop,
                f"{name} has shape {value.shape}, expected {want[name].shape} "
                f"(X {X.shape}, W_Q {params['W_Q'].shape}, W_V {params['W_V'].shape}, "
                f"W_O {params['W_O'].shape}, heads {H})",
                "Y has the shape of dY; each gradient the shape of its array (weight "
                "gradients summed over the batch axis)" if name != "Y" else
                "Y = C W_O with C the heads concatenated, (B, T, H r)",
            )
    changed = [n for n, a, c in zip(("X", *names, "dY"), inputs, copies)
               if not np.array_equal(a, c)]
    if changed:
        raise CheckFailed(
            "inputs unchanged",
            f"the function wrote into its input {', '.join(changed)}",
            "compute new arrays (dX = dQ @ W_Q.T + ...) instead of updating the "
            "inputs in place (+=, [...] =)",
        )

    def close(a, b):
        return np.allclose(a, b, rtol=1e-9, atol=1e-12)

    if not close(got["Y"], Y_ref):
        fix = "Y = sum over heads h of softmax_M(Q_h K_h^T / sqrt(d)) V_h W_O^(h)"
        for variant_fix, Y_wrong in _variant_outputs(params, X, H).items():
            if close(got["Y"], Y_wrong):
                fix = variant_fix
                break
        raise CheckFailed("Y", "Y differs from causal multi-head attention by up to "
                          f"{np.max(np.abs(got['Y'] - Y_ref)):.1e}", fix)
    C = saved["C"]
    fixes = {
        "dW_O": "dW_O = C^T dY, summed over the batch (C the concatenated heads)",
        "dW_V": "split dC = dY W_O^T into heads, dV_h = A_h^T dO_h, merge, then "
                "dW_V = X^T dV summed over the batch",
        "dW_Q": "dA_h = dO_h V_h^T, dS_h = A_h * (dA_h - rowsum(A_h * dA_h)), "
                "dQ_h = dS_h K_h / sqrt(d); merge; dW_Q = X^T dQ",
        "dW_K": "dK_h = dS_h^T Q_h / sqrt(d); merge; dW_K = X^T dK",
        "dX": "sum the three branches: dX = dQ W_Q^T + dK W_K^T + dV W_V^T",
    }
    for name in ("dW_O", "dW_V", "dW_Q", "dW_K", "dX"):
        if close(got[name], want[name]):
            continue
        fix = fixes[name]
        if _sign_flipped(got[name], want[name]):
            fix = f"{name} has the wrong sign: J grows along +{name}"
        elif name == "dW_O" and close(got[name], np.einsum("btd,bte->de", C, dY) / 2):
            fix = "sum over the batch, do not average: dW_O = C^T dY for every sequence"
        elif name == "dX":
            partial = _dX_branches(params, saved, dY)
            for missing in ("Q", "K", "V"):
                rest = sum(v for k, v in partial.items() if k != missing)
                if close(got[name], rest):
                    fix = (f"the {missing} branch is missing: dX also gets "
                           f"d{missing} W_{missing}^T")
        raise CheckFailed(name, f"{name} differs from the gradient of J = sum(dY * Y) "
                          f"by up to {np.max(np.abs(got[name] - want[name])):.1e}", fix)
    return MULTIHEAD_BACKWARD_PROPERTIES


def _dX_branches(params, saved, dY):
    """The three branches of ``dX`` (through ``Q``, ``K`` and ``V``), by name."""
    dC = dY @ params["W_O"].T  # (B, T, D_out) x (D_out, H r) -> (B, T, H r)
    heads = saved["heads"]
    attention = AttentionSaved(*(saved[n] for n in AttentionSaved._fields))
    grads = attention_backward(attention, split_heads(dC, heads))
    return {n: merge_heads(g) @ params["W_" + n].T  # (B, T, H w) x (H w, D)
            for n, g in zip(("Q", "K", "V"), grads)}
