"""Planted mistakes in :mod:`attncourse.layers.attention`, with their registry.

A missing transpose, the wrong normalisation axis, the numerator path alone, a dropped
``1/sqrt(d)``, a ``>=`` causal mask, a mask applied after the softmax, ``-inf`` for
hidden scores and padding on the wrong axis: each function has the signature of the
function it imitates (a forward returns ``O, saved``, a backward takes ``saved, G``).
:data:`FAULTS` says which of :data:`CHECKS` catch each one and which are blind to it;
:data:`CORRECT` holds the package functions that every check must pass.
"""

import functools
import math

import numpy as np

from ..._validate import shaped
from ..examples import example1, example2, random_head
from ...layers.attention import (QKV, AttentionSaved, _as_upstream, attention_backward,
                                 attention_forward, attention_scores, causal_attention,
                                 causal_mask, causal_visible, combine_masks,
                                 key_padding_mask, key_valid_from_lengths)
from ...layers.head import project
from ...softmax import softmax, softmax_backward
from ..conformance import causal_failures, padding_failures
from ..exercises import check_attention_mask, check_causal_attention
from ..failed import CheckFailed
from ..gradients import qkv_gradcheck
from ..prefix import assert_prefix_interface
from ..properties import assert_rows_sum_to_one, assert_transposed_scores
from ._registry import Check, Fault, learner_checker, require_close, require_gradcheck
from .softmax import (naive_masked_softmax, softmax_backward_numerator_only,
                      softmax_columnwise)

__all__ = [
    "FAULTS",
    "CHECKS",
    "CORRECT",
    "BUILDING_BLOCKS",
    "attention_scores_missing_transpose",
    "attention_forward_missing_transpose",
    "attention_backward_missing_transpose",
    "attention_forward_columnwise",
    "attention_backward_numerator_only",
    "attention_forward_unscaled",
    "attention_backward_unscaled",
    "attention_backward_unscaled_throughout",
    "causal_mask_geq",
    "causal_attention_geq",
    "causal_attention_mask_after_softmax",
    "naive_masked_attention_forward",
    "causal_attention_query_padding",
]


def attention_scores_missing_transpose(Q, K):
    """FAULT: ``Q K / sqrt(d)`` instead of ``Q K^T / sqrt(d)``.

    It only runs when ``d`` equals the number of keys, and agrees with the correct
    scores whenever ``K`` is symmetric (as in Example 1).

    >>> import numpy as np
    >>> Q = np.array([[1.0, 2.0], [0.0, 1.0]]); K = np.array([[1.0, 0.0], [2.0, 1.0]])
    >>> attention_scores_missing_transpose(Q, K) * np.sqrt(2)
    array([[5., 2.],
           [2., 1.]])
    """
    d = Q.shape[-1]
    # (..., T_q, d) x (..., T_k, d): runs only if d == T_k -- the fault
    return (Q @ K) / math.sqrt(d)


def attention_forward_missing_transpose(Q, K, V):
    """FAULT: :func:`attncourse.attention_forward` with the scores ``Q K / sqrt(d)``.

    >>> import numpy as np
    >>> Q = np.zeros((5, 3)); K = np.zeros((5, 3)); V = np.zeros((5, 4))
    >>> attention_forward_missing_transpose(
    ...     Q, K, V)  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    ...
    ValueError: numpy cannot multiply Q (5, 3) by K (5, 3)
    """
    Q, K, V = shaped(QKV, Q, K, V)
    S = attention_scores_missing_transpose(Q, K)
    A = softmax(S)
    O = A @ V  # (..., T_q, T_k) x (..., T_k, r) -> (..., T_q, r)
    return O, AttentionSaved(Q, K, V, A)


def _backward_pieces(saved, G, softmax_backward_fn=softmax_backward):
    """The correct ``dV, dS`` from ``saved`` (the first lines of
    :func:`attncourse.attention_backward`), for the backward faults."""
    G = _as_upstream(G, saved)
    Q, K, V, A = saved
    dV = np.swapaxes(A, -1, -2) @ G  # (..., T_k, T_q) x (..., T_q, r) -> (..., T_k, r)
    dA = G @ np.swapaxes(V, -1, -2)  # (..., T_q, r) x (..., r, T_k) -> (..., T_q, T_k)
    dS = softmax_backward_fn(A, dA)  # (..., T_q, T_k)
    return Q, K, V, dV, dS


def attention_backward_missing_transpose(saved, G):
    """FAULT: ``dK = dS Q / sqrt(d)``, not ``dS^T Q / sqrt(d)`` (runs if T_q == T_k).

    On Example 1 it gives ``ln 3 dS`` where the correct ``dK`` is ``ln 3 dS^T``:

    >>> import numpy as np
    >>> a = np.sqrt(2) * np.log(3)
    >>> Q, K, V, G = a * np.eye(2), np.eye(2), np.diag([2.0, 4.0]), np.diag([1.0, 2.0])
    >>> dK = attention_backward_missing_transpose(attention_forward(Q, K, V)[1], G)[1]
    >>> (dK / np.log(3)).round(6)
    array([[ 0.375, -0.375],
           [-1.5  ,  1.5  ]])
    """
    Q, K, V, dV, dS = _backward_pieces(saved, G)
    d = Q.shape[-1]
    dQ = dS @ K / math.sqrt(d)  # (..., T_q, T_k) x (..., T_k, d) -> (..., T_q, d)
    dK = dS @ Q / math.sqrt(d)  # the fault: dS should be transposed
    return dQ, dK, dV


def attention_forward_columnwise(Q, K, V):
    """FAULT: :func:`attncourse.attention_forward` with column-wise normalisation.

    >>> import numpy as np
    >>> Q, K, V = np.zeros((2, 3)), np.zeros((4, 3)), np.ones((4, 1))
    >>> A = attention_forward_columnwise(Q, K, V)[1].A
    >>> A.sum(axis=-1)  # rows of 4 keys, each weight 1/2
    array([2., 2.])
    """
    Q, K, V = shaped(QKV, Q, K, V)
    A = softmax_columnwise(attention_scores(Q, K))  # (..., T_q, T_k)
    O = A @ V  # (..., T_q, T_k) x (..., T_k, r) -> (..., T_q, r)
    return O, AttentionSaved(Q, K, V, A)


def attention_backward_numerator_only(saved, G):
    """FAULT: :func:`attncourse.attention_backward` with the numerator-only ``dS``.

    With identical keys the correct ``dQ`` is exactly zero; this one is not:

    >>> import numpy as np
    >>> Q, K = np.eye(2), np.ones((2, 2))
    >>> V, G = np.diag([2.0, 4.0]), np.diag([1.0, 2.0])
    >>> dQ = attention_backward_numerator_only(attention_forward(Q, K, V)[1], G)[0]
    >>> bool(np.abs(dQ).max() > 0.5)
    True
    """
    Q, K, V, dV, dS = _backward_pieces(saved, G, softmax_backward_numerator_only)
    d = Q.shape[-1]
    dQ = dS @ K / math.sqrt(d)  # (..., T_q, T_k) x (..., T_k, d) -> (..., T_q, d)
    # (..., T_k, T_q) x (..., T_q, d) -> (..., T_k, d)
    dK = np.swapaxes(dS, -1, -2) @ Q / math.sqrt(d)
    return dQ, dK, dV


def attention_forward_unscaled(Q, K, V):
    """FAULT: :func:`attncourse.attention_forward` with ``S = Q K^T`` (no 1/sqrt(d)).

    On Example 1 the scores are ``sqrt(2) ln 3`` instead of ``ln 3``:

    >>> import numpy as np
    >>> a = np.sqrt(2) * np.log(3)
    >>> A = attention_forward_unscaled(a * np.eye(2), np.eye(2),
    ...                                np.diag([2.0, 4.0]))[1].A
    >>> bool(A[0, 0] > 0.75)
    True
    """
    Q, K, V = shaped(QKV, Q, K, V)
    # (..., T_q, d) x (..., d, T_k) -> (..., T_q, T_k); the fault: no 1/sqrt(d)
    S = Q @ np.swapaxes(K, -1, -2)
    A = softmax(S)
    O = A @ V  # (..., T_q, T_k) x (..., T_k, r) -> (..., T_q, r)
    return O, AttentionSaved(Q, K, V, A)


def attention_backward_unscaled(saved, G):
    """FAULT: :func:`attncourse.attention_backward` without 1/sqrt(d) in ``dQ``, ``dK``.

    The weights it reads are the saved ones, so after the correct forward pass ``dQ``
    and ``dK`` come out ``sqrt(d)`` times too large:

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> Q, K = rng.standard_normal((3, 4)), rng.standard_normal((5, 4))
    >>> V, G = rng.standard_normal((5, 2)), rng.standard_normal((3, 2))
    >>> _, saved = attention_forward(Q, K, V)
    >>> bad = attention_backward_unscaled(saved, G)
    >>> np.allclose(bad[0], 2.0 * attention_backward(saved, G)[0])
    True
    """
    Q, K, V, dV, dS = _backward_pieces(saved, G)
    # (..., T_q, T_k) x (..., T_k, d) -> (..., T_q, d); the fault: no 1/sqrt(d)
    dQ = dS @ K
    # (..., T_k, T_q) x (..., T_q, d) -> (..., T_k, d); the same fault
    dK = np.swapaxes(dS, -1, -2) @ Q
    return dQ, dK, dV


def attention_backward_unscaled_throughout(saved, G):
    """FAULT: the exact backward of :func:`attention_forward_unscaled`: no 1/sqrt(d).

    It recomputes the weights ``softmax(Q K^T)`` from the saved ``Q`` and ``K`` (no
    scale, as its forward pass), then drops the scale in ``dQ``, ``dK`` too. Forward and
    backward drop the scale together, so they agree with each other and a gradient
    check of this pair passes; only values computed independently (Example 1) expose
    it.

    >>> import numpy as np
    >>> from attncourse.kit.gradients import qkv_gradcheck
    >>> rng = np.random.default_rng(0)
    >>> Q, K = rng.standard_normal((3, 2)), rng.standard_normal((4, 2))
    >>> V, G = rng.standard_normal((4, 5)), rng.standard_normal((3, 5))
    >>> qkv_gradcheck(attention_backward_unscaled_throughout, Q, K, V, G,
    ...               forward=attention_forward_unscaled).passed
    True
    """
    G = _as_upstream(G, saved)
    O, (Q, K, V, A) = attention_forward_unscaled(*saved[:3])  # the fault, forward too
    dV = np.swapaxes(A, -1, -2) @ G  # (..., T_k, T_q) x (..., T_q, r) -> (..., T_k, r)
    dA = G @ np.swapaxes(V, -1, -2)  # (..., T_q, r) x (..., r, T_k) -> (..., T_q, T_k)
    dS = softmax_backward(A, dA)  # (..., T_q, T_k)
    dQ = dS @ K  # (..., T_q, T_k) x (..., T_k, d) -> (..., T_q, d); no 1/sqrt(d)
    # (..., T_k, T_q) x (..., T_q, d) -> (..., T_k, d); no 1/sqrt(d)
    dK = np.swapaxes(dS, -1, -2) @ Q
    return dQ, dK, dV


def causal_mask_geq(T_q, T_k):
    """WRONG: hides key ``j`` when ``j >= i`` (the diagonal too), not only if ``j > i``.

    >>> causal_mask_geq(3, 3).astype(int)
    array([[0, 0, 0],
           [1, 0, 0],
           [1, 1, 0]])
    """
    future_or_self = np.arange(T_k)[None, :] >= np.arange(T_q)[:, None]
    return ~future_or_self


def causal_attention_geq(Q, K, V):
    """WRONG: causal attention with the ``>=`` mask. Returns ``(O, A)``."""
    Q, K, V = shaped(QKV, Q, K, V)
    visible = causal_mask_geq(Q.shape[-2], K.shape[-2])
    A = softmax(attention_scores(Q, K), visible)  # (..., T_q, T_k)
    return A @ V, A  # (..., T_q, T_k) x (..., T_k, r) -> (..., T_q, r)


def causal_attention_mask_after_softmax(Q, K, V):
    """WRONG: a softmax over all keys, then future weights zeroed. Returns (O, A)."""
    Q, K, V = shaped(QKV, Q, K, V)
    A = softmax(attention_scores(Q, K)) * causal_mask(Q.shape[-2], K.shape[-2])
    return A @ V, A  # (..., T_q, T_k) x (..., T_k, r) -> (..., T_q, r)


def naive_masked_attention_forward(Q, K, V, visible):
    """WRONG for rows with nothing visible: attention with :func:`naive_masked_softmax`.

    Returns ``(O, saved)``; a row with no visible key is NaN in ``O`` and ``saved.A``.
    :func:`attncourse.attention_backward` on that ``saved`` is the pair's backward
    (the fault "naive_masked_attention_backward"): a NaN row of ``A`` makes every row
    of ``dV = A^T G`` NaN, and a NaN row of ``dS`` every row of ``dK``. Wherever no row
    is empty the pair equals the package's.
    """
    Q, K, V = shaped(QKV, Q, K, V)
    A = naive_masked_softmax(attention_scores(Q, K), visible)  # (..., T_q, T_k)
    # (..., T_q, T_k) x (..., T_k, r) -> (..., T_q, r)
    return A @ V, AttentionSaved(Q, K, V, A)


def causal_attention_query_padding(Q, K, V, key_valid):
    """WRONG: padding hides the rows of padded queries, not the columns of padded keys.

    Returns ``(O, A)``.
    """
    Q, K, V = shaped(QKV, Q, K, V)
    T_q, T_k = Q.shape[-2], K.shape[-2]
    rows = np.asarray(key_valid)[..., :, None]  # (..., T, 1): the query axis, the fault
    visible = combine_masks(causal_mask(T_q, T_k), rows)
    A = softmax(attention_scores(Q, K), visible)  # (..., T_q, T_k)
    return A @ V, A  # (..., T_q, T_k) x (..., T_k, r) -> (..., T_q, r)


# --- the registry ---------------------------------------------------------------------


def _random_qkv(seed=0, scale=1.0):
    """``Q (5, 3), K (5, 3), V (5, 4)`` and ``G (5, 4)`` of a seeded random head."""
    h = random_head(seed=seed, scale=scale)
    return (*project(h.X, h.W_Q, h.W_K, h.W_V), h.G)


def _example_qkv(example):
    ex = example()
    return (*project(ex.X, ex.W_Q, ex.W_K, ex.W_V), ex.G)


@functools.lru_cache(maxsize=None)
def _example1_values():
    """Return Example 1's exact values in float64, from the closed forms of Chapter 3.

    ``S = ln3 I``, ``A``, ``O``, ``dA``, ``dS``, ``dQ = dS / sqrt(2)``,
    ``dK = ln3 dS^T``, ``dV`` and ``dX``; computed once, read-only.

    >>> _example1_values()["dS"]
    array([[ 0.375, -0.375],
           [-1.5  ,  1.5  ]])
    """
    ln3 = math.log(3.0)
    dS = np.array([[3 / 8, -3 / 8], [-3 / 2, 3 / 2]])
    values = {
        "S": ln3 * np.eye(2),
        "A": np.array([[3 / 4, 1 / 4], [1 / 4, 3 / 4]]),
        "O": np.array([[3 / 2, 1.0], [1 / 2, 3.0]]),
        "dA": np.array([[2.0, 0.0], [0.0, 8.0]]),
        "dS": dS,
        "dQ": dS / math.sqrt(2.0),
        "dK": ln3 * dS.T,
        "dV": np.array([[3 / 4, 1 / 2], [1 / 4, 3 / 2]]),
        "dX": np.array([[3 / 2 + 3 * ln3 / 4, 2 - 15 * ln3 / 8],
                        [1 / 2 - 15 * ln3 / 8, 6 + 3 * ln3]]),
    }
    for array in values.values():
        array.flags.writeable = False
    return values


def _example1_forward(forward):
    """Example 1's weights ``A`` and output ``O`` against their closed forms."""
    Q, K, V, _ = _example_qkv(example1)
    O, saved = forward(Q, K, V)
    require_close("Example 1 values", "A", saved.A, _example1_values()["A"])
    require_close("Example 1 values", "O", O, _example1_values()["O"])


def _example1_backward(backward, forward=attention_forward):
    """Example 1's ``dQ = dS/sqrt(2)``, ``dK = ln3 dS^T``, ``dV``: the closed forms,
    from the ``saved`` of ``forward`` (by default the package's)."""
    Q, K, V, G = _example_qkv(example1)
    for name, grad in zip(("dQ", "dK", "dV"), backward(forward(Q, K, V)[1], G)):
        require_close("Example 1 values", name, grad, _example1_values()[name])


def _example1_pair(pair):
    forward, backward = pair
    _example1_forward(forward)
    _example1_backward(backward, forward)


def _example2_backward(backward):
    """Example 2 (identical keys): ``dQ = 0``, ``dK = ln3 dS^T``, ``dV = A^T G``."""
    Q, K, V, G = _example_qkv(example2)
    ln3 = math.log(3.0)
    want = {"dQ": np.zeros((2, 2)),
            "dK": ln3 * np.array([[1 / 2, -2.0], [-1 / 2, 2.0]]),
            "dV": np.array([[1 / 2, 1.0], [1 / 2, 1.0]])}
    grads = backward(attention_forward(Q, K, V)[1], G)
    for name, grad in zip(("dQ", "dK", "dV"), grads):
        require_close("Example 2 values", name, grad, want[name])


def _rows_sum_to_one(forward):
    """The weights of the random head (5 queries, 5 keys, d = 3) are distributions."""
    Q, K, V, _ = _random_qkv(0)
    assert_rows_sum_to_one(forward(Q, K, V)[1].A)


def _random_head_shapes(forward):
    """The random head (T = 5, d = 3, r = 4) runs and gives O (5, 4) and A (5, 5)."""
    Q, K, V, _ = _random_qkv(0)
    try:
        O, saved = forward(Q, K, V)
        A = saved.A
    except ValueError as e:
        raise CheckFailed(
            "shapes on the random head",
            f"Q {Q.shape}, K {K.shape}, V {V.shape} raised ValueError: {e}") from e
    if np.shape(O) != (5, 4) or np.shape(A) != (5, 5):
        raise CheckFailed(
            "shapes on the random head",
            f"expected O (5, 4) and A (5, 5), got {np.shape(O)} and {np.shape(A)}")


def _gradcheck_qkv(backward):
    """Central differences on Q, K, V of the random head, with the correct forward."""
    report = qkv_gradcheck(backward, *_random_qkv(0))
    require_gradcheck("gradient check on Q, K, V", report)


def _gradcheck_pair(pair):
    """Central differences of the pair's own forward pass on ``Q``, ``K``, ``V``."""
    forward, backward = pair
    report = qkv_gradcheck(backward, *_random_qkv(0), forward=forward)
    require_gradcheck("gradient check of the pair on Q, K, V", report)


def _batch(seed=0, B=2, T=6, d=3, r=2):
    """A seeded batch ``Q, K (B, T, d)``, ``V, G (B, T, r)`` and ``key_valid (B, T)``.

    ``key_valid`` pads sequence 0 on the left with two tokens, so with the causal mask
    its queries 0 and 1 see no key at all.
    """
    rng = np.random.default_rng(seed)
    Q, K = rng.normal(size=(B, T, d)), rng.normal(size=(B, T, d))
    V, G = rng.normal(size=(B, T, r)), rng.normal(size=(B, T, r))
    return Q, K, V, G, key_valid_from_lengths([T - 2, T], T, side="left")


def _named_failures(property, failures):
    if failures:
        raise CheckFailed(property, "; ".join(failures))


def _causal_failures(attend):
    """The conformance suite's causal properties of ``attend(Q, K, V) -> (O, A)``."""
    Q, K, V, _, _ = _batch()
    with np.errstate(invalid="ignore"):
        failures = causal_failures(attend, Q, K, V)
    _named_failures("causal properties", failures)


def _padding_failures(attend):
    """The conformance suite's padding properties of ``attend(Q, K, V, key_valid)``."""
    Q, K, V, _, key_valid = _batch()
    with np.errstate(invalid="ignore"):
        failures = padding_failures(attend, Q, K, V, key_valid)
    _named_failures("padding properties", failures)


def _padding_via_visible(forward):
    """Padding failures of ``forward`` given causal and padding masks as ``visible``."""
    def attend(Q, K, V, key_valid):
        O, saved = forward(Q, K, V, causal_visible(Q, K, V, 0, key_valid))
        return O, saved.A

    _padding_failures(attend)


def _masked_gradcheck(pair):
    """Central differences of the pair on ``Q, K, V`` with causal and padding masks
    (empty rows)."""
    forward, backward = pair
    Q, K, V, G, key_valid = _batch()
    visible = causal_visible(Q, K, V, 0, key_valid)
    with np.errstate(invalid="ignore"):
        report = qkv_gradcheck(backward, Q, K, V, G,
                               forward=lambda Q, K, V: forward(Q, K, V, visible))
    require_gradcheck("gradient check on Q, K, V with causal and padding masks", report)


def _prefix_interface(attend):
    """The prefix interface of ``attend`` on ``X = [Q | K | V]``: no future read."""
    Q, K, V, _, _ = _batch()
    X = np.concatenate([Q, K, V], axis=-1)

    def outputs(X):
        return attend(X[..., :3], X[..., 3:6], X[..., 6:])[0]

    assert_prefix_interface(outputs, X, X + 1.0)


def _learner_mask_checker(mask):
    """The learner's mask checker on ``mask`` combined with key padding."""
    learner_checker(
        "learner mask checker", check_attention_mask,
        lambda T, key_valid: combine_masks(mask(T, T), key_padding_mask(key_valid, T)))


def _learner_causal_checker(attend):
    """The learner's checker of ``causal_attention``, on ``attend``."""
    learner_checker("learner checker", check_causal_attention, attend)


CHECKS = {c.name: c for c in (
    Check("transpose check", "attention_scores", assert_transposed_scores),
    Check("Example 1 forward", "attention_forward", _example1_forward),
    Check("rows of A sum to one", "attention_forward", _rows_sum_to_one),
    Check("shapes on the random head", "attention_forward", _random_head_shapes),
    Check("padding properties, mask", "attention_forward", _padding_via_visible),
    Check("gradcheck on Q, K, V", "attention_backward", _gradcheck_qkv),
    Check("Example 1 backward", "attention_backward", _example1_backward),
    Check("Example 2 backward", "attention_backward", _example2_backward),
    Check("gradcheck, padding mask", "attention pair", _masked_gradcheck),
    Check("pair gradcheck", "attention pair", _gradcheck_pair),
    Check("Example 1, both passes", "attention pair", _example1_pair),
    Check("learner mask checker", "causal_mask", _learner_mask_checker),
    Check("causal properties", "causal_attention", _causal_failures),
    Check("prefix interface", "causal_attention", _prefix_interface),
    Check("padding properties", "causal_attention", _padding_failures),
    Check("learner checker", "causal_attention", _learner_causal_checker),
)}
"""Check name -> :class:`~attncourse.kit.faults.Check`."""

_BACKWARD_CHECKS = ("gradcheck on Q, K, V", "Example 1 backward", "Example 2 backward")

FAULTS = (
    Fault("attention_scores_missing_transpose",
          "S = Q K / sqrt(d): K is not transposed",
          attention_scores_missing_transpose, "attention_scores",
          caught_by=("transpose check",)),
    Fault("attention_forward_missing_transpose",
          "the forward pass with S = Q K / sqrt(d)",
          attention_forward_missing_transpose, "attention_forward",
          caught_by=("shapes on the random head",), blind=("Example 1 forward",)),
    Fault("attention_forward_columnwise",
          "normalises each column of S, not each row",
          attention_forward_columnwise, "attention_forward",
          caught_by=("rows of A sum to one",), blind=("Example 1 forward",)),
    Fault("attention_forward_unscaled",
          "S = Q K^T: the 1/sqrt(d) is dropped",
          attention_forward_unscaled, "attention_forward",
          caught_by=("Example 1 forward",), blind=("rows of A sum to one",)),
    Fault("naive_masked_attention_forward",
          "-inf for hidden scores: an empty row is NaN",
          naive_masked_attention_forward, "attention_forward",
          caught_by=("padding properties, mask",)),
    Fault("attention_backward_missing_transpose",
          "dK = dS Q / sqrt(d): dS is not transposed",
          attention_backward_missing_transpose, "attention_backward",
          caught_by=_BACKWARD_CHECKS),
    Fault("attention_backward_numerator_only",
          "dS = A dA: the denominator path of the softmax is dropped",
          attention_backward_numerator_only, "attention_backward",
          caught_by=_BACKWARD_CHECKS),
    Fault("attention_backward_unscaled",
          "dQ, dK without the 1/sqrt(d) of the forward pass",
          attention_backward_unscaled, "attention_backward",
          caught_by=_BACKWARD_CHECKS),
    Fault("attention_backward_unscaled_throughout",
          "the backward of the unscaled forward pass, used for the correct one",
          attention_backward_unscaled_throughout, "attention_backward",
          caught_by=("gradcheck on Q, K, V", "Example 1 backward")),
    Fault("naive_masked_attention_backward",
          "-inf for hidden scores: NaN gradients",
          (naive_masked_attention_forward, attention_backward), "attention pair",
          caught_by=("gradcheck, padding mask",)),
    Fault("attention_unscaled_pair",
          "1/sqrt(d) dropped in both passes, consistently",
          (attention_forward_unscaled, attention_backward_unscaled_throughout),
          "attention pair",
          caught_by=("Example 1, both passes",), blind=("pair gradcheck",)),
    Fault("attention_mixed_scale_pair",
          "the correct forward pass with the backward of the unscaled one",
          (attention_forward, attention_backward_unscaled_throughout), "attention pair",
          caught_by=("pair gradcheck", "Example 1, both passes")),
    Fault("causal_mask_geq",
          "hides key j when j >= i: the diagonal too",
          causal_mask_geq, "causal_mask",
          caught_by=("learner mask checker",)),
    Fault("causal_attention_geq",
          "causal attention with the >= mask: query 0 reads nothing",
          causal_attention_geq, "causal_attention",
          caught_by=("causal properties", "learner checker"),
          blind=("prefix interface",)),
    Fault("causal_attention_mask_after_softmax",
          "future weights zeroed after the softmax: rows sum to less than one",
          causal_attention_mask_after_softmax, "causal_attention",
          caught_by=("causal properties", "prefix interface", "learner checker")),
    Fault("causal_attention_query_padding",
          "padding hides padded queries, not padded keys",
          causal_attention_query_padding, "causal_attention",
          caught_by=("padding properties",)),
)
"""The planted mistakes: the checks that catch each one, and those blind to it."""

CORRECT = {
    "attention_scores": attention_scores,
    "attention_forward": attention_forward,
    "attention_backward": attention_backward,
    "attention pair": (attention_forward, attention_backward),
    "causal_mask": causal_mask,
    "causal_attention": causal_attention,
}
"""Role -> the package function: every check must pass it."""

BUILDING_BLOCKS = {}
"""Public functions that are not faults themselves -> the fault they are part of."""
