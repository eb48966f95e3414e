"""The attention conformance suite: every implementation x every property, and its fault
controls.

Chapter 9's tiled and fast dense versions and Chapter 10's cached version are added to
IMPLEMENTATIONS; they get no tests of their own for what the suite covers.
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

from attncourse._validate import shaped
from attncourse.kit.faults import attention as fa
from attncourse.kit.faults import softmax as fs
from attncourse.layers import attention as la
from attncourse.kit import CheckFailed
from attncourse.kit import conformance as cf
from attncourse.kit.conformance import FAST, tiled_implementation
from strategies import matrices

# Chapter 9's tiled and fast dense versions and Chapter 10's cached version join this
# list (each an attncourse.kit.conformance.Implementation); what the suite covers
# gets no tests of their own.
IMPLEMENTATIONS = [
    cf.REFERENCE,
    FAST,
    tiled_implementation(1),  # one query and one key per tile
    tiled_implementation(2),  # divides T = 4 and 6, not 3 and 5
    tiled_implementation(3, 2),  # rectangular; 3 divides T = 3 and 6, not 4 and 5
    tiled_implementation(4, 5),  # 5 divides T_k = 5 of T_q < T_k, not T = 4 and 6
    tiled_implementation(64),  # one tile larger than any T of the suite
    cf.CACHED,  # Chapter 10: one query at a time, keys so far
]


@pytest.mark.parametrize("prop", list(cf.PROPERTIES))
@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=lambda impl: impl.name)
def test_implementation_has_the_property(impl, prop):
    assert cf.conformance_failures(impl, [prop]) == {}


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=lambda impl: impl.name)
def test_implementation_conforms(impl):
    assert cf.assert_conforms(impl) == list(cf.PROPERTIES)
    assert cf.conformance_failures(impl) == {}


@settings(max_examples=25)
@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=lambda impl: impl.name)
@given(data=st.data(), B=st.integers(1, 3), T=st.integers(1, 6), d=st.integers(1, 4),
       r=st.integers(1, 4), side=st.sampled_from(["left", "right"]))
def test_padding_properties_hold_on_random_batches(impl, data, B, T, d, r, side):
    lengths = data.draw(st.lists(st.integers(0, T), min_size=B, max_size=B))
    key_valid = la.key_valid_from_lengths(lengths, T, side=side)
    Q, K, V = (data.draw(matrices(s)) for s in ((B, T, d), (B, T, d), (B, T, r)))
    G = data.draw(matrices((B, T, r)))
    cf.assert_padded_case(impl, Q, K, V, G, key_valid)


def test_the_suite_names_its_properties():
    assert list(cf.PROPERTIES) == [
        "values",
        "gradients",
        "causality",
        "padding",
        "prefix interface",
        "extreme scores",
        "bad input",
        "dropout contract",
        "query offset",
    ]


# --- the definition, the suite's independent witness ----------------------------------


def test_the_definition_agrees_with_the_reference_and_with_the_elementwise_formula():
    rng = np.random.default_rng(0)
    Q, K, V = rng.normal(size=(3, 3)), rng.normal(size=(5, 3)), rng.normal(size=(5, 2))
    O, A = cf.definition(Q, K, V)
    for i in range(3):
        s = [
            sum(Q[i, a] * K[j, a] for a in range(3)) / math.sqrt(3)
            for j in range(i + 1)
        ]
        w = np.exp(s) / np.sum(np.exp(s))
        assert_allclose(A[i, : i + 1], w, rtol=1e-14)
        assert np.all(A[i, i + 1 :] == 0.0)
        assert_allclose(O[i], w @ V[: i + 1], rtol=1e-13)  # (i+1,) x (i+1, 2) -> (2,)
    O_ref, A_ref = la.causal_attention(Q, K, V)
    assert_allclose(O, O_ref, rtol=1e-13, atol=1e-15)
    assert_allclose(A, A_ref, rtol=1e-13, atol=1e-15)


def test_the_definition_gives_empty_rows_zero_and_broadcasts():
    rng = np.random.default_rng(1)
    Q, K, V = (
        rng.normal(size=(2, 1, 4, 3)),
        rng.normal(size=(3, 4, 3)),
        rng.normal(size=(1, 3, 4, 2)),
    )
    key_valid = np.array([False, True, True, False])
    O, A = cf.definition(Q, K, V, key_valid)
    assert O.shape == (2, 3, 4, 2) and A.shape == (2, 3, 4, 4)
    # query 0 sees no key
    assert np.all(A[..., 0, :] == 0.0) and np.all(O[..., 0, :] == 0.0)
    O_ref, A_ref = la.causal_attention(Q, K, V, key_valid=key_valid)
    assert_allclose(O, O_ref, rtol=1e-13, atol=1e-15)
    assert_array_equal(A == 0, A_ref == 0)


# --- the cache's attention pattern (Chapter 10) ---------------------------------------

ATOL = 1024 * np.finfo(np.float64).eps  # ~2.3e-13: rounding of a few hundred operations


def test_incremental_attention_broadcasts_a_batch_held_by_the_keys_alone():
    rng = np.random.default_rng(8)
    T_q, T_k, d, r, offset = 3, 5, 4, 2, 2
    Q, K = rng.normal(size=(T_q, d)), rng.normal(size=(2, T_k, d))
    V, G = rng.normal(size=(T_k, r)), rng.normal(size=(2, T_q, r))
    O, A = cf.incremental_attention(Q, K, V, offset)
    O_ref, A_ref = la.causal_attention(Q, K, V, offset)
    assert O.shape == (2, T_q, r) and A.shape == (2, T_q, T_k)
    assert_allclose(O, O_ref, rtol=0, atol=ATOL)
    assert_allclose(A, A_ref, rtol=0, atol=ATOL)
    for got, want in zip(cf.incremental_attention_backward(Q, K, V, G, offset),
                         la.causal_attention_backward(Q, K, V, G, offset)):
        assert got.shape == want.shape
        assert_allclose(got, want, rtol=0, atol=ATOL)


F32, F64 = np.float32, np.float64


@pytest.mark.parametrize("dtypes", [(F64, F64, F64, F32), (F32, F32, F32, F32),
                                    (F32, F32, F32, F64), (F32, F64, F32, F32)])
def test_incremental_attention_backward_takes_a_float32_G_as_the_reference_does(dtypes):
    # G in float32 (a float32 model's upstream gradient): the gradients are the
    # reference's, in the reference's dtype -- float32 only if Q, K, V and G all are;
    # a float64 G, or one float64 input among float32 ones, makes them float64
    rng = np.random.default_rng(9)
    T_q, T_k, d, r, offset = 3, 5, 4, 2, 2
    Q, K, V, G = (rng.normal(size=(2, n, w)).astype(dtype) for (n, w), dtype in
                  zip(((T_q, d), (T_k, d), (T_k, r), (T_q, r)), dtypes))
    dtype = np.result_type(*dtypes)
    # the rounding is float32's wherever two float32 arrays meet in a product
    eps = np.finfo(F32 if dtypes.count(F32) >= 2 else F64).eps
    for got, want in zip(cf.incremental_attention_backward(Q, K, V, G, offset),
                         la.causal_attention_backward(Q, K, V, G, offset)):
        assert got.dtype == want.dtype == dtype
        assert_allclose(got, want, rtol=0, atol=64 * eps)
    with pytest.raises(ValueError, match=r"G must have the shape of the output, "
                                         r"\(2, 3, 2\), got \(2, 3, 3\)"):
        cf.incremental_attention_backward(Q, K, V, G[..., [0, 1, 1]], offset)
    with pytest.raises(ValueError, match=r"^G must be an array of numbers"):
        cf.incremental_attention_backward(Q, K, V, np.full((2, T_q, r), "a"), offset)


# --- the failure listers of Chapter 4 -------------------------------------------------


@pytest.fixture
def qkv():
    rng = np.random.default_rng(0)
    B, T, d, r = 2, 6, 3, 2
    return (
        rng.normal(size=(B, T, d)),
        rng.normal(size=(B, T, d)),
        rng.normal(size=(B, T, r)),
    )


def test_causal_failures_names_the_properties(qkv):
    assert cf.causal_failures(la.causal_attention, *qkv) == []
    assert cf.causal_failures(fa.causal_attention_geq, *qkv) == [
        "every row sums to one",
        "every position reads itself",
    ]
    assert cf.causal_failures(fa.causal_attention_mask_after_softmax, *qkv) == [
        "every row sums to one"
    ]
    assert cf.causal_failures(all_visible, *qkv) == [
        "future keys get weight exactly 0"
    ]


def test_causal_failures_row_sum_tolerance_is_t_epsilons(qkv):
    T = qkv[0].shape[-2]
    eps = np.finfo(np.float64).eps

    def off_by(delta):
        def attend(Q, K, V):
            O, A = la.causal_attention(Q, K, V)
            A = A.copy()
            A[..., 0, 0] += delta  # row 0 reads key 0 only
            return O, A

        return attend

    assert cf.causal_failures(off_by(T * eps / 2), *qkv) == []
    assert cf.causal_failures(off_by(2 * T * eps), *qkv) == ["every row sums to one"]


def test_padding_failures_names_the_properties(qkv):
    key_valid = la.key_valid_from_lengths([4, 6], 6, side="left")
    assert cf.padding_failures(la.causal_attention, *qkv, key_valid) == []

    def keys_padded(Q, K, V, key_valid):  # the wrapper Chapter 4 passes
        return la.causal_attention(Q, K, V, key_valid=key_valid)

    assert cf.padding_failures(keys_padded, *qkv, key_valid) == []
    assert cf.padding_failures(fa.causal_attention_query_padding, *qkv, key_valid) == [
        "padded keys get weight exactly 0",
        "real outputs ignore the padding",
    ]


def test_padding_failures_separates_its_two_properties(qkv):
    key_valid = la.key_valid_from_lengths([4, 6], 6, side="left")

    # right weights, output ignores the padding mask
    def weights_only(Q, K, V, key_valid):
        O, A = la.causal_attention(Q, K, V, key_valid=key_valid)
        return la.causal_attention(Q, K, V)[0], A

    # right output, weights that still show the padding
    def output_only(Q, K, V, key_valid):
        O, _ = la.causal_attention(Q, K, V, key_valid=key_valid)
        return O, la.causal_attention(Q, K, V)[1]

    assert cf.padding_failures(weights_only, *qkv, key_valid) == [
        "real outputs ignore the padding"
    ]
    assert cf.padding_failures(output_only, *qkv, key_valid) == [
        "padded keys get weight exactly 0"
    ]


# --- planted wrong implementations ----------------------------------------------------


def attend_from(forward):
    """Wrap ``forward(Q, K, V) -> (O, A)`` to the causal_attention signature (padding by
    the reference)."""

    def attend(query, key, value, query_offset=0, dropout=None, *, key_valid=None):
        if query_offset != 0:
            raise NotImplementedError("Chapter 10")
        if key_valid is not None or dropout is not None:
            return la.causal_attention(
                query, key, value, dropout=dropout, key_valid=key_valid
            )
        return forward(query, key, value)

    attend.__name__ = getattr(forward, "__name__", "attend")
    return attend


def implementation(
    name, attend=la.causal_attention, backward=la.causal_attention_backward
):
    return cf.Implementation(name, attend, backward, offsets=True)


def query_padding(query, key, value, query_offset=0, dropout=None, *, key_valid=None):
    if key_valid is None:
        return la.causal_attention(query, key, value)
    return fa.causal_attention_query_padding(query, key, value, key_valid)


def naive_minus_inf(query, key, value, query_offset=0, dropout=None, *, key_valid=None):
    Q, K, V = shaped(la.QKV, query, key, value)
    O, saved = fa.naive_masked_attention_forward(
        Q, K, V, la.causal_visible(Q, K, V, 0, key_valid)
    )
    return O, saved.A


def naive_minus_inf_backward(query, key, value, G, query_offset=0, *, key_valid=None):
    Q, K, V = shaped(la.QKV, query, key, value)
    _, saved = fa.naive_masked_attention_forward(
        Q, K, V, la.causal_visible(Q, K, V, 0, key_valid)
    )
    return la.attention_backward(saved, G)


def unscaled(query, key, value, query_offset=0, dropout=None, *, key_valid=None):
    d = np.shape(query)[-1]  # scores q.k instead of q.k / sqrt(d)
    return la.causal_attention(
        np.asarray(query) * math.sqrt(d),
        key,
        value,
        query_offset,
        dropout,
        key_valid=key_valid,
    )


def unscaled_backward(query, key, value, G, query_offset=0, *, key_valid=None):
    # the exact gradient of `unscaled`: a consistent wrong pair
    c = math.sqrt(np.shape(query)[-1])
    dQ, dK, dV = la.causal_attention_backward(
        np.asarray(query) * c, key, value, G, key_valid=key_valid
    )
    return dQ * c, dK, dV


def mask_right_aligned(
    query, key, value, query_offset=0, dropout=None, *, key_valid=None
):
    # the last query reads every key: right for a cache, wrong at offset 0 when T_q <
    # T_k
    Q, K, V = shaped(la.QKV, query, key, value)
    visible = la.causal_mask(Q.shape[-2], K.shape[-2], K.shape[-2] - Q.shape[-2])
    O, saved = la.attention_forward(Q, K, V, visible)
    return O, saved.A


def key_dot_T(query, key, value, query_offset=0, dropout=None, *, key_valid=None):
    # key.T reverses every axis: right for one sequence, wrong with batch axes
    Q, K, V = shaped(la.QKV, query, key, value)
    S = (
        Q @ np.transpose(K) / math.sqrt(Q.shape[-1])
        if K.ndim == 2
        else Q
        @ np.transpose(K, (*range(K.ndim - 2)[::-1], K.ndim - 1, K.ndim - 2))
        / math.sqrt(Q.shape[-1])
    )
    A = la.softmax(S, la.causal_mask(Q.shape[-2], K.shape[-2]))  # (..., T_q, T_k)
    return A @ V, A  # (..., T_q, T_k) x (..., T_k, r) -> (..., T_q, r)


def _visible_backward(softmax_backward=None, scale=True, mask=True, unbroadcast=True):
    """The reference backward with one chosen defect."""

    def backward(query, key, value, G, query_offset=0, *, key_valid=None):
        Q, K, V = shaped(la.QKV, query, key, value)
        visible = la.causal_visible(Q, K, V, 0, key_valid) if mask else None
        _, saved = la.attention_forward(Q, K, V, visible)
        A = saved.A
        if softmax_backward is None and scale and unbroadcast:
            return la.attention_backward(saved, G)
        d = Q.shape[-1]
        # (..., T_k, T_q) x (..., T_q, r) -> (..., T_k, r)
        dV = np.swapaxes(A, -1, -2) @ G
        # (..., T_q, r) x (..., r, T_k) -> (..., T_q, T_k)
        dA = G @ np.swapaxes(V, -1, -2)
        dS = (softmax_backward or la.softmax_backward)(A, dA)
        c = 1 / math.sqrt(d) if scale else 1.0
        dQ = dS @ K * c  # (..., T_q, T_k) x (..., T_k, d) -> (..., T_q, d)
        # (..., T_k, T_q) x (..., T_q, d) -> (..., T_k, d)
        dK = np.swapaxes(dS, -1, -2) @ Q * c
        if unbroadcast:
            return tuple(
                la._unbroadcast(g, x.shape) for g, x in ((dQ, Q), (dK, K), (dV, V))
            )
        return dQ, dK, dV

    return backward


def no_max_subtraction(
    query, key, value, query_offset=0, dropout=None, *, key_valid=None
):
    Q, K, V = shaped(la.QKV, query, key, value)
    visible = la.causal_visible(Q, K, V, 0, key_valid)
    E = np.exp(la.attention_scores(Q, K)) * visible  # overflows for scores above 709
    A = E / np.maximum(E.sum(axis=-1, keepdims=True), np.finfo(float).tiny)
    return A @ V, A  # (..., T_q, T_k) x (..., T_k, r) -> (..., T_q, r)


def max_before_masking(
    query, key, value, query_offset=0, dropout=None, *, key_valid=None
):
    Q, K, V = shaped(la.QKV, query, key, value)
    visible = np.broadcast_to(
        la.causal_visible(Q, K, V, 0, key_valid),
        (*np.broadcast_shapes(Q.shape[:-2], K.shape[:-2]), Q.shape[-2], K.shape[-2]),
    )
    S = la.attention_scores(Q, K)
    # the maximum of hidden scores too
    E = np.exp(S - S.max(axis=-1, keepdims=True)) * visible
    Z = E.sum(axis=-1, keepdims=True)
    A = np.divide(E, Z, out=np.zeros_like(E), where=visible.any(axis=-1, keepdims=True))
    return A @ V, A  # (..., T_q, T_k) x (..., T_k, r) -> (..., T_q, r)


def unvalidated(query, key, value, query_offset=0, dropout=None, *, key_valid=None):
    Q, K, V = (np.asarray(x, dtype=float) for x in (query, key, value))
    S = Q @ np.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1])  # numpy's own errors only
    visible = la.causal_mask(S.shape[-2], S.shape[-1])
    if key_valid is not None:
        visible = visible & np.asarray(key_valid, dtype=bool)[..., None, :]
    A = la.softmax(S, visible)
    return A @ V, A  # (..., T_q, T_k) x (..., T_k, r) -> (..., T_q, r)


def unvalidated_backward(query, key, value, G, query_offset=0, *, key_valid=None):
    Q, K, V = (np.asarray(x, dtype=float) for x in (query, key, value))
    _, A = unvalidated(Q, K, V, key_valid=key_valid)
    return la.attention_backward(la.AttentionSaved(Q, K, V, A), G)


def dropout_variant(mode):
    def attend(query, key, value, query_offset=0, dropout=None, *, key_valid=None):
        O, A = la.causal_attention(query, key, value, key_valid=key_valid)
        if dropout is None:
            return O, A
        if mode == "returned dropped":
            A = dropout(A)
            return A @ np.asarray(value), A  # (..., T, T) x (..., T, r) -> (..., T, r)
        if mode == "called twice":
            dropout(A)
        if mode == "before the softmax":
            Q, K, V = shaped(la.QKV, query, key, value)
            S = dropout(la.attention_scores(Q, K))
            return la.softmax(S, la.causal_mask(*S.shape[-2:])) @ V, A
        dropped = dropout(A)
        # "ignored": called, its result unused
        used = A if mode == "ignored" else dropped
        return used @ np.asarray(value), A  # (..., T, T) x (..., T, r) -> (..., T, r)

    return attend


def offset_ignored(query, key, value, query_offset=0, dropout=None, *, key_valid=None):
    return la.causal_attention(query, key, value, 0, dropout, key_valid=key_valid)


def offset_value_error(
    query, key, value, query_offset=0, dropout=None, *, key_valid=None
):
    if query_offset != 0:
        raise ValueError("no offsets")
    return la.causal_attention(query, key, value, 0, dropout, key_valid=key_valid)


def backward_offset_ignored(query, key, value, G, query_offset=0, *, key_valid=None):
    return la.causal_attention_backward(query, key, value, G, key_valid=key_valid)


def offset_one_short(
    query, key, value, query_offset=0, dropout=None, *, key_valid=None
):
    return la.causal_attention(
        query, key, value, max(query_offset - 1, 0), dropout, key_valid=key_valid
    )


def offset_unvalidated(
    query, key, value, query_offset=0, dropout=None, *, key_valid=None
):
    # no check of query_offset + T_q <= T_k
    Q, K, V = shaped(la.QKV, query, key, value)
    O, saved = la.attention_forward(
        Q, K, V, la.causal_visible(Q, K, V, query_offset, key_valid)
    )
    return O, saved.A


def all_visible(Q, K, V):
    """Chapter 3's attention_forward, every key visible, as ``(O, A)``."""
    O, saved = la.attention_forward(Q, K, V)
    return O, saved.A


ALL_VISIBLE = attend_from(all_visible)
UNMASKED_BACKWARD = _visible_backward(mask=False)

# (property, wrong implementation, words the failure must contain)
FAULT_CONTROLS = [
    (
        "values",
        implementation(">= mask", attend_from(fa.causal_attention_geq)),
        "unbatched",
    ),
    (
        "values",
        implementation(
            "mask after softmax", attend_from(fa.causal_attention_mask_after_softmax)
        ),
        "probabilities differ",
    ),
    ("values", implementation("unscaled", unscaled), "probabilities differ"),
    (
        "values",
        implementation("mask aligned to the last key", mask_right_aligned),
        "T_q < T_k",
    ),
    ("values", implementation("key.T", key_dot_T), "batched"),
    ("values", implementation("query padding", query_padding), "batched, padded"),
    (
        "gradients",
        implementation(
            "numerator-only backward",
            backward=_visible_backward(fs.softmax_backward_numerator_only),
        ),
        "dQ",
    ),
    (
        "gradients",
        implementation(
            "dropped 1/sqrt(d) in the backward", backward=_visible_backward(scale=False)
        ),
        "dQ",
    ),
    (
        "gradients",
        implementation(
            "broadcast axes not summed back",
            backward=_visible_backward(unbroadcast=False),
        ),
        "broadcasting added",
    ),
    (
        "gradients",
        implementation("unmasked backward", backward=UNMASKED_BACKWARD),
        "unbatched",
    ),
    (
        "causality",
        implementation("all visible", ALL_VISIBLE),
        "future keys get weight exactly 0",
    ),
    (
        "causality",
        implementation(">= mask", attend_from(fa.causal_attention_geq)),
        "every row sums to one, every position reads itself",
    ),
    (
        "causality",
        implementation(
            "mask after softmax", attend_from(fa.causal_attention_mask_after_softmax)
        ),
        "every row sums to one",
    ),
    (
        "causality",
        implementation("unmasked backward", backward=UNMASKED_BACKWARD),
        "non-zero gradient with respect to keys or values after 0",
    ),
    (
        "padding",
        implementation("query padding", query_padding),
        "padded keys get weight exactly 0",
    ),
    (
        "padding",
        implementation("naive -inf", naive_minus_inf, naive_minus_inf_backward),
        "floating-point error",
    ),
    (
        "padding",
        implementation("backward ignores key_valid", backward=UNMASKED_BACKWARD),
        "non-zero gradient",
    ),
    (
        "prefix interface",
        implementation(
            "mask after softmax", attend_from(fa.causal_attention_mask_after_softmax)
        ),
        "(i) outputs up to t changed",
    ),
    (
        "prefix interface",
        implementation("unmasked backward", backward=UNMASKED_BACKWARD),
        "(iii) the output at t has a non-zero gradient",
    ),
    (
        "extreme scores",
        implementation("no max subtraction", no_max_subtraction),
        "floating-point error",
    ),
    (
        "extreme scores",
        implementation("maximum taken before masking", max_before_masking),
        "hidden future keys scoring 900",
    ),
    (
        "bad input",
        implementation("no validation", unvalidated, unvalidated_backward),
        "mismatched d",
    ),
    (
        "dropout contract",
        implementation("returns dropped", dropout_variant("returned dropped")),
        "not the undropped",
    ),
    (
        "dropout contract",
        implementation("ignores dropout", dropout_variant("ignored")),
        "not dropout",
    ),
    (
        "dropout contract",
        implementation("dropout twice", dropout_variant("called twice")),
        "2 times",
    ),
    (
        "dropout contract",
        implementation("dropout on scores", dropout_variant("before the softmax")),
        "not applied to the probabilities",
    ),
    (
        "dropout contract",
        implementation(
            "no dropout argument",
            lambda q, k, v, query_offset=0, *, key_valid=None: la.causal_attention(
                q, k, v, key_valid=key_valid
            ),
        ),
        "TypeError",
    ),
    (
        "query offset",
        implementation("offset ignored", offset_ignored),
        "attend with query_offset=4",
    ),
    (
        "query offset",
        implementation("offset one short", offset_one_short),
        "probabilities differ from rows 4..4",
    ),
    (
        "query offset",
        implementation("offset not validated", offset_unvalidated),
        "accepted query_offset=3 (an offset past the last key)",
    ),
    (
        "query offset",
        cf.Implementation(
            "declares no offsets, ignores them",
            offset_ignored,
            la.causal_attention_backward,
        ),
        "returned a result, although it declares no offsets",
    ),
    (
        "query offset",
        implementation("offset ValueError", offset_value_error),
        "raised ValueError",
    ),
    (
        "query offset",
        implementation("backward offset ignored", backward=backward_offset_ignored),
        "backward with query_offset=4",
    ),
]


@pytest.mark.parametrize(
    "prop, impl, words",
    FAULT_CONTROLS,
    ids=[f"{p}-{i.name}" for p, i, _ in FAULT_CONTROLS],
)
def test_each_planted_fault_fails_its_property(prop, impl, words):
    with pytest.raises(CheckFailed) as info:
        cf.PROPERTIES[prop](impl)
    assert info.value.property == prop
    assert words in str(info.value), str(info.value)
    assert info.value.fix  # every failure suggests a fix


def test_every_property_has_a_fault_control():
    assert {prop for prop, _, _ in FAULT_CONTROLS} == set(cf.PROPERTIES)


def test_a_fault_fails_only_where_expected():
    # the >= mask is not a leak: the prefix interface is blind to it, values and
    # causality are not
    geq = implementation(">= mask", attend_from(fa.causal_attention_geq))
    assert set(
        cf.conformance_failures(geq, ["values", "causality", "prefix interface"])
    ) == {"values", "causality"}
    # a consistent wrong pair passes the gradients (which is why values are checked
    # separately)
    unscaled_pair = implementation("unscaled pair", unscaled, unscaled_backward)
    assert set(cf.conformance_failures(unscaled_pair, ["values", "gradients"])) == {
        "values"
    }


def test_assert_conforms_names_every_failed_property():
    impl = implementation("offset ignored", offset_ignored)
    with pytest.raises(
        CheckFailed, match=r"^conformance of offset ignored: query offset: attend"
    ):
        cf.assert_conforms(impl)
    assert cf.assert_conforms(impl, ["values", "padding"]) == ["values", "padding"]


def test_an_implementation_that_crashes_is_reported_by_property():
    def crashes(query, key, value, query_offset=0, dropout=None, *, key_valid=None):
        raise RuntimeError("boom")

    impl = implementation("crashes", crashes)
    with pytest.raises(
        CheckFailed,
        match=r"^values: crashes on inputs of shapes .* raised RuntimeError: boom",
    ):
        cf.assert_values(impl)
    with pytest.raises(
        CheckFailed, match=r"^values: must return a pair \(output, probabilities\)"
    ):
        cf.assert_values(
            implementation(
                "single", lambda q, k, v, *a, **kw: la.causal_attention(q, k, v)[0]
            )
        )
    with pytest.raises(
        CheckFailed, match=r"^gradients: backward must return three gradients"
    ):
        cf.assert_gradients(implementation("pair", backward=lambda *a, **kw: (1, 2)))


def test_extreme_scores_fault_controls_pass_where_scores_are_moderate():
    # both extreme-score faults give the right values on moderate scores
    for attend in (no_max_subtraction, max_before_masking):
        cf.assert_values(implementation(attend.__name__, attend))
    cf.assert_causality(implementation("no max subtraction", no_max_subtraction))
    # a maximum over hidden scores changes the rounding when future keys change: caught
    # exactly
    with pytest.raises(CheckFailed, match="outputs at positions 0..1 changed"):
        cf.assert_causality(implementation("max before masking", max_before_masking))
