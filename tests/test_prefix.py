"""The prefix interface check: (i) future changes, (ii) prefix runs, (iii) exact-zero
future gradients."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attncourse.kit.faults import attention as fa
from attncourse.layers.attention import causal_attention, key_valid_from_lengths
from attncourse.layers.head import head_backward, head_forward
from attncourse.layers.multihead import (
    init_multihead,
    multihead_backward,
    multihead_forward,
)
from attncourse.layers.positions import (
    init_positions,
    positions_backward,
    positions_forward,
)
from attncourse.kit import CheckFailed
from attncourse.kit.prefix import (
    PREFIX_TOLERANCE,
    assert_prefix_interface,
    prefix_report,
)
from strategies import matrices


def model(seed=0, B=2, T=5, D=7, H=2, d=3, r=2, T_max=8, vocab=11):
    rng = np.random.default_rng(seed)
    params = {
        "attn": init_multihead(rng, D, heads=H, d=d, r=r),
        "pos": init_positions(rng, T_max, D),
    }
    E = rng.normal(size=(vocab, D))

    def forward(X):
        X_pos, pos_saved = positions_forward(params["pos"], X)
        Y, attn_saved = multihead_forward(params["attn"], X_pos, heads=H)
        return Y, (pos_saved, attn_saved)

    def input_gradient(X, dY):
        _, (pos_saved, attn_saved) = forward(X)
        _, dX_pos = multihead_backward(params["attn"], attn_saved, dY)
        return positions_backward(params["pos"], pos_saved, dX_pos)[1]

    ids = rng.integers(0, vocab, size=(B, T))
    other = (ids + rng.integers(1, vocab, size=ids.shape)) % vocab
    return rng, E, forward, input_gradient, ids, other


def test_the_multihead_model_passes_on_vectors_and_on_token_ids():
    _, E, forward, input_gradient, ids, other = model()
    report = prefix_report(lambda X: forward(X)[0], E[ids], E[other], input_gradient)
    assert report.passed, report
    assert report.future_gradient == 0.0  # exactly
    assert (
        report.future_change <= report.tolerance
        and report.prefix_change <= report.tolerance
    )
    assert PREFIX_TOLERANCE <= report.tolerance <= PREFIX_TOLERANCE * 10
    report_ids = prefix_report(
        lambda ids: forward(E[ids])[0], ids, other, position_axis=-1
    )
    assert report_ids.passed, report_ids
    assert np.isnan(report_ids.future_gradient)
    assert "not checked" in str(report_ids)


def test_a_single_unbatched_sequence():
    _, E, forward, input_gradient, ids, other = model(B=1)
    assert prefix_report(
        lambda X: forward(X)[0], E[ids[0]], E[other[0]], input_gradient
    ).passed


def test_padded_model_passes():
    rng = np.random.default_rng(5)
    params = init_multihead(rng, 4, heads=2, d=2, r=3)
    # a prefix run uses the first t+1 columns
    key_valid = key_valid_from_lengths([3, 6], 6, side="left")
    X, X2 = rng.normal(size=(2, 6, 4)), rng.normal(size=(2, 6, 4))
    forward = lambda X: multihead_forward(
        params, X, heads=2, key_valid=key_valid[:, : X.shape[-2]]
    )[0]
    assert prefix_report(forward, X, X2).passed


def test_all_visible_attention_fails_every_property():
    rng = np.random.default_rng(1)
    params = {
        "W_Q": rng.normal(size=(4, 3)),
        "W_K": rng.normal(size=(4, 3)),
        "W_V": rng.normal(size=(4, 2)),
    }
    X, X2 = rng.normal(size=(2, 5, 4)), rng.normal(size=(2, 5, 4))
    forward = lambda X: head_forward(params, X)[0]
    input_gradient = lambda X, dY: head_backward(
        params, head_forward(params, X)[1], dY
    )[1]
    report = prefix_report(forward, X, X2, input_gradient)
    assert [f[:4] for f in report.failures] == ["(i) ", "(ii)", "(iii"]
    assert report.future_gradient > 1e-3
    with pytest.raises(
        CheckFailed,
        match=r"prefix interface: \(i\) outputs up to t changed .*; \(ii\) .*; \(iii\) "
            r"",
    ):
        assert_prefix_interface(forward, X, X2, input_gradient)


def test_mask_after_softmax_fails_and_geq_mask_passes():
    rng = np.random.default_rng(2)
    W = [rng.normal(size=(4, w)) for w in (3, 3, 2)]
    X, X2 = rng.normal(size=(2, 5, 4)), rng.normal(size=(2, 5, 4))
    # (B, T, 4) x (4, w)
    head = lambda attend: lambda X: attend(X @ W[0], X @ W[1], X @ W[2])[0]
    after = prefix_report(head(fa.causal_attention_mask_after_softmax), X, X2)
    assert [f[:4] for f in after.failures] == ["(i) ", "(ii)"]
    assert prefix_report(head(fa.causal_attention_geq), X, X2).passed  # not a leak
    assert prefix_report(head(causal_attention), X, X2).passed


def test_a_gradient_that_leaks_is_caught_by_iii_alone():
    x = np.arange(4.0)[:, None] + 1.0
    forward = lambda x: np.cumsum(x, axis=-2)
    # d/dx_s of sum_t dY_t . cumsum_t = sum_{t>=s} dY_t
    honest = lambda x, dY: np.cumsum(dY[::-1], axis=-2)[::-1]
    leaky = lambda x, dY: np.broadcast_to(dY.sum(axis=-2, keepdims=True), x.shape)
    assert prefix_report(forward, x, x + 1.0, honest).passed
    report = prefix_report(forward, x, x + 1.0, leaky)
    assert [f[:5] for f in report.failures] == ["(iii)"]


@settings(max_examples=15)
@given(
    st.data(),
    st.integers(1, 2),
    st.integers(1, 5),
    st.integers(1, 4),
    st.integers(1, 3),
)
def test_multihead_passes_property(data, B, T, D, H):
    W = {
        "W_Q": data.draw(matrices((D, 2 * H))),
        "W_K": data.draw(matrices((D, 2 * H))),
        "W_V": data.draw(matrices((D, H))),
        "W_O": data.draw(matrices((H, 3))),
    }
    X = data.draw(matrices((B, T, D)))
    X2 = X + data.draw(st.sampled_from([1.0, -0.5, 2.0]))
    forward = lambda X: multihead_forward(W, X, heads=H)[0]
    grad = lambda X, dY: multihead_backward(W, multihead_forward(W, X, heads=H)[1], dY)[
        1
    ]
    report = prefix_report(forward, X, X2, grad)
    assert report.passed, report
    assert report.future_gradient == 0.0


def test_bad_input_is_named():
    x = np.zeros((3, 2))
    f = lambda x: x
    with pytest.raises(
        ValueError,
        match=r"x and x_other must have the same shape, got \(3, 2\) and \(2, 2\)",
    ):
        prefix_report(f, x, np.ones((2, 2)))
    x_other = np.ones((3, 2))
    x_other[1] = 0.0
    with pytest.raises(
        ValueError,
        match=r"x_other must differ from x at every position; it agrees at positions "
            r"\[1\]",
    ):
        prefix_report(f, x, x_other)
    with pytest.raises(
        ValueError,
        match=r"forward must return outputs of shape \(\.\.\., T=3, n\), got shape "
            r"\(2,\)",
    ):
        prefix_report(lambda x: x.sum(axis=0), x, np.ones((3, 2)))
