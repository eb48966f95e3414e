"""Tests of attncourse.kit.gradients: central differences, gradcheck, the one layer
checker ``layer_gradcheck``, the attention checker ``qkv_gradcheck`` and ``compare``."""

import numpy as np
import pytest
from numpy.testing import assert_allclose

from attncourse.kit.faults import attention as fa
from attncourse.kit.faults.embedding import embedding_backward_overwrite
from attncourse.kit.faults.multihead import multihead_backward_reversed
from attncourse.layers import attention, embedding, linear, multihead, positions
from attncourse.loss import cross_entropy_backward, cross_entropy_forward
from attncourse.kit.gradients import (
    STEPS,
    TOLERANCE,
    GradcheckReport,
    compare,
    gradcheck,
    layer_gradcheck,
    numerical_gradient,
    numerical_jacobian,
    qkv_gradcheck,
)


def test_fixed_steps_and_tolerance():
    assert STEPS == (1e-5, 1e-6) and TOLERANCE == 1e-7


def test_numerical_gradient_of_a_cubic_visits_every_coordinate():
    x = np.random.default_rng(0).normal(size=(3, 4))
    f = lambda x: float(np.sum(x ** 3))  # noqa: E731
    # central differences of a cubic are off by exactly h^2 per coordinate
    assert_allclose(
        numerical_gradient(f, x, 1e-3), 3 * x**2 + 1e-6, rtol=1e-8, atol=1e-8
    )


def test_numerical_gradient_leaves_its_input_alone():
    x = np.arange(6.0).reshape(2, 3)
    before = x.copy()
    numerical_gradient(lambda x: float(np.sum(x**2)), x, 1e-5)
    assert np.array_equal(x, before)


def test_numerical_jacobian_of_a_non_square_map():
    A = np.random.default_rng(5).normal(size=(3, 4))
    z = np.random.default_rng(6).normal(size=4)
    J = numerical_jacobian(lambda v: np.tanh(A @ v), z, 1e-5)  # (3, 4) x (4,) -> (3,)
    assert J.shape == (3, 4)
    assert np.max(np.abs(J - (1 - np.tanh(A @ z)[:, None] ** 2) * A)) < TOLERANCE
    with pytest.raises(ValueError, match=r"z must be 1-D \(n,\), got shape \(2, 2\)"):
        numerical_jacobian(np.tanh, np.zeros((2, 2)), 1e-5)


def test_gradcheck_passes_true_gradients_and_catches_wrong_ones():
    rng = np.random.default_rng(1)
    A, B = rng.normal(size=(3, 4)), rng.normal(size=(4, 2))
    C = rng.normal(size=(3, 2))
    f = lambda A, B: float(np.sum((A @ B) * C))  # noqa: E731
    good = {"A": C @ B.T, "B": A.T @ C}
    assert gradcheck(f, {"A": A, "B": B}, good).passed
    # fault controls: a sign error, a single wrong coordinate, a transposed factor
    one_off = good["A"].copy()
    one_off[2, 3] += 1e-5
    for wrong in ({"A": -good["A"]}, {"A": one_off}, {"B": (C.T @ A).T * 1.5}):
        report = gradcheck(f, {"A": A, "B": B}, wrong)
        assert not report.passed and report.worst > TOLERANCE


def test_report_lists_every_input_and_step():
    f = lambda a: float(np.sum(a**2))  # noqa: E731
    report = gradcheck(f, {"a": np.ones(3)}, {"a": 2 * np.ones(3)})
    assert set(report.errors) == {("a", 1e-5), ("a", 1e-6)}
    assert "passed" in str(report)
    failed = gradcheck(f, {"a": np.ones(3)}, {"a": np.ones(3)})
    assert "FAILED" in str(failed) and "h=1e-05" in str(failed)


def test_gradcheck_rejects_a_gradient_of_the_wrong_shape():
    with pytest.raises(
        ValueError, match=r"gradient for a has shape \(3, 1\), input has \(3,\)"
    ):
        gradcheck(lambda a: float(a.sum()), {"a": np.ones(3)}, {"a": np.ones((3, 1))})


def test_compare_says_exact_approximate_or_wrong():
    x = np.array([0.1, 0.2])
    assert "exact: True" in compare("x", x, x.copy())
    line = compare("x", x + 1e-14, x)
    assert "exact: False" in line and "approximate: True" in line
    assert "approximate: False" in compare("x", x + 1e-3, x)


# --- layer_gradcheck: the one layer checker -------------------------------------------


def keys(report):
    """The names a report checked (each at every step)."""
    assert {h for _, h in report.errors} == set(STEPS)
    return {name for name, _ in report.errors}


def failing(report):
    """The names whose error exceeds the tolerance at some step."""
    return {name for (name, _), err in report.errors.items() if err >= report.tolerance}


def chain(*layers):
    """Compose layer pairs ``(name, forward, backward, hyperparameters)`` into one pair.

    The parameters nest by layer name, ``{name: params of that layer}``, as a model's
    do.
    """

    def forward(params, x):
        saved = []
        for name, fwd, _, hyper in layers:
            x, s = fwd(params[name], x, **hyper)
            saved.append(s)
        return x, saved

    def backward(params, saved, dy):
        dparams = {}
        for (name, _, bwd, _), s in reversed(list(zip(layers, saved))):
            dparams[name], dy = bwd(params[name], s, dy)
        return dparams, dy

    return forward, backward


def test_layer_gradcheck_passes_the_linear_layer_with_its_bias():
    rng = np.random.default_rng(20)
    params = linear.init_linear(rng, 4, 3, bias=True)
    params["b"] = rng.normal(size=3)
    report = layer_gradcheck(
        linear.linear_forward,
        linear.linear_backward,
        params,
        rng.normal(size=(2, 5, 4)),
    )
    assert isinstance(report, GradcheckReport) and report.tolerance == TOLERANCE
    assert report.passed, report
    assert keys(report) == {"W", "b", "x"}


def test_layer_gradcheck_of_an_embedding_has_no_input_gradient():
    rng = np.random.default_rng(21)
    params = embedding.init_embedding(rng, 6, 3)
    ids = np.array([[0, 5, 5, 2], [2, 2, 1, 0]])
    report = layer_gradcheck(
        embedding.embedding_forward, embedding.embedding_backward, params, ids
    )
    assert report.passed, report
    assert keys(report) == {"E"}  # token ids have no gradient: "x" is not checked


def test_layer_gradcheck_of_the_loss_a_scalar_output_without_parameters():
    rng = np.random.default_rng(22)
    Z, y = rng.normal(size=(3, 4, 5)), rng.integers(0, 5, size=(3, 4))
    report = layer_gradcheck(
        cross_entropy_forward, cross_entropy_backward, {}, Z, targets=y
    )
    assert report.passed, report
    assert keys(report) == {"x"}
    report = layer_gradcheck(
        cross_entropy_forward, cross_entropy_backward, {}, Z, targets=y, dy=1.0
    )
    assert report.passed, report


def test_layer_gradcheck_of_positions_and_of_multihead_attention():
    rng = np.random.default_rng(23)
    P = positions.init_positions(rng, T_max=6, D=4)
    report = layer_gradcheck(
        positions.positions_forward,
        positions.positions_backward,
        P,
        rng.normal(size=(2, 5, 4)),
    )
    assert report.passed, report
    assert keys(report) == {"P", "x"}
    mh = multihead.init_multihead(rng, 4, heads=2, d=3, r=2, D_out=5)
    X = rng.normal(size=(2, 5, 4))
    key_valid = attention.key_valid_from_lengths([3, 5], 5)
    report = layer_gradcheck(
        multihead.multihead_forward,
        multihead.multihead_backward,
        mh,
        X,
        heads=2,
        key_valid=key_valid,
    )
    assert report.passed, report
    assert keys(report) == {"W_Q", "W_K", "W_V", "W_O", "x"}


def test_layer_gradcheck_keys_nested_parameters_by_dotted_path():
    rng = np.random.default_rng(24)
    B, T, D, H, d, r = 2, 4, 5, 2, 3, 2
    forward, backward = chain(
        ("pos", positions.positions_forward, positions.positions_backward, {}),
        (
            "attn",
            multihead.multihead_forward,
            multihead.multihead_backward,
            {"heads": H},
        ),
    )
    params = {
        "pos": positions.init_positions(rng, 6, D),
        "attn": multihead.init_multihead(rng, D, heads=H, d=d, r=r),
    }
    X = rng.normal(size=(B, T, D))
    report = layer_gradcheck(forward, backward, params, X)
    assert report.passed, report
    assert keys(report) == {
        "pos.P",
        "attn.W_Q",
        "attn.W_K",
        "attn.W_V",
        "attn.W_O",
        "x",
    }
    # lists nest too: blocks.0, blocks.1
    stack = {
        "blocks": [
            linear.init_linear(rng, D, 3),
            linear.init_linear(rng, 3, 4, bias=True),
        ]
    }

    def stack_forward(params, x):
        h, s0 = linear.linear_forward(params["blocks"][0], x)
        y, s1 = linear.linear_forward(params["blocks"][1], np.tanh(h))
        return y, (s0, s1, h)

    def stack_backward(params, saved, dy):
        s0, s1, h = saved
        d1, dt = linear.linear_backward(params["blocks"][1], s1, dy)
        d0, dx = linear.linear_backward(
            params["blocks"][0], s0, dt * (1 - np.tanh(h) ** 2)
        )
        return {"blocks": [d0, d1]}, dx

    report = layer_gradcheck(stack_forward, stack_backward, stack, X)
    assert report.passed, report
    assert keys(report) == {"blocks.0.W", "blocks.1.W", "blocks.1.b", "x"}


def test_layer_gradcheck_attributes_a_fault_to_its_key():
    # fault control: the same forward with another backward fails, and only where it is
    # wrong
    rng = np.random.default_rng(25)
    params = {**linear.init_linear(rng, 4, 3), "b": rng.normal(size=3)}
    X = rng.normal(size=(5, 4))

    def backward_bias_mean(params, saved, dY):
        dparams, dX = linear.linear_backward(params, saved, dY)
        # the fault: mean instead of sum over positions
        return {**dparams, "b": dY.mean(axis=0)}, dX

    report = layer_gradcheck(linear.linear_forward, backward_bias_mean, params, X)
    assert not report.passed and failing(report) == {"b"}
    emb = embedding.init_embedding(rng, 5, 3)
    report = layer_gradcheck(
        embedding.embedding_forward,
        embedding_backward_overwrite,
        emb,
        np.array([1, 3, 1, 1]),
    )
    assert not report.passed and failing(report) == {"E"}


def test_layer_gradcheck_attributes_a_nested_fault_to_its_dotted_key():
    # multihead_backward_reversed splits dC into heads in reverse order: dW_O stays
    # right, every gradient below the merge is wrong, down to the positions' P and the
    # input
    rng = np.random.default_rng(26)
    layers = [
        ("pos", positions.positions_forward, positions.positions_backward, {}),
        (
            "attn",
            multihead.multihead_forward,
            multihead.multihead_backward,
            {"heads": 2},
        ),
    ]
    params = {
        "pos": positions.init_positions(rng, 5, 4),
        "attn": multihead.init_multihead(rng, 4, heads=2, d=3, r=2),
    }
    X = rng.normal(size=(2, 5, 4))
    good = layer_gradcheck(*chain(*layers), params, X)
    assert good.passed, good
    layers[1] = (
        "attn",
        multihead.multihead_forward,
        multihead_backward_reversed,
        {"heads": 2},
    )
    bad = layer_gradcheck(*chain(*layers), params, X)
    assert not bad.passed
    assert failing(bad) == {"pos.P", "attn.W_Q", "attn.W_K", "attn.W_V", "x"}


def test_layer_gradcheck_uses_the_given_probe_and_a_seeded_default():
    rng = np.random.default_rng(27)
    params, X = linear.init_linear(rng, 3, 2), rng.normal(size=(4, 3))
    a = layer_gradcheck(
        linear.linear_forward, linear.linear_backward, params, X, seed=1
    )
    b = layer_gradcheck(
        linear.linear_forward, linear.linear_backward, params, X, seed=1
    )
    assert a.errors == b.errors
    seen = []

    def recording_backward(params, saved, dY):
        seen.append(dY)
        return linear.linear_backward(params, saved, dY)

    dy = rng.normal(size=(4, 2))
    assert layer_gradcheck(
        linear.linear_forward, recording_backward, params, X, dy=dy
    ).passed
    assert_allclose(seen[-1], dy, rtol=0, atol=0)
    layer_gradcheck(linear.linear_forward, recording_backward, params, X, seed=5)
    assert_allclose(
        seen[-1], np.random.default_rng(5).standard_normal((4, 2)), rtol=0, atol=0
    )


def test_layer_gradcheck_rejects_a_malformed_backward():
    rng = np.random.default_rng(28)
    params, X = linear.init_linear(rng, 3, 2, bias=True), rng.normal(size=(4, 3))

    def drops_the_bias(params, saved, dY):
        dparams, dX = linear.linear_backward(params, saved, dY)
        return {"W": dparams["W"]}, dX

    with pytest.raises(
        ValueError,
        match=r"dparams must have exactly the keys of params: params \['W', 'b'\], "
            r"dparams \['W'\]",
    ):
        layer_gradcheck(linear.linear_forward, drops_the_bias, params, X)
    with pytest.raises(
        ValueError, match="backward returned dx = None for a float input x"
    ):
        layer_gradcheck(
            linear.linear_forward,
            lambda p, s, dY: (linear.linear_backward(p, s, dY)[0], None),
            params,
            X,
        )
    emb = embedding.init_embedding(rng, 4, 2)
    with pytest.raises(
        ValueError, match=r"a gradient for an input of integers \(token ids have none\)"
    ):
        layer_gradcheck(
            embedding.embedding_forward,
            lambda p, s, dX: (embedding.embedding_backward(p, s, dX)[0], dX),
            emb,
            np.array([0, 3]),
        )
    with pytest.raises(
        ValueError,
        match=r"dy must have the shape of the output, \(4, 2\), got \(2, 4\)",
    ):
        layer_gradcheck(
            linear.linear_forward, linear.linear_backward, params, X, dy=np.ones((2, 4))
        )
    with pytest.raises(ValueError, match="a parameter may not be called 'x'"):
        layer_gradcheck(
            lambda p, x: (x * p["x"], x),
            lambda p, x, dy: ({"x": np.sum(dy * x)}, dy * p["x"]),
            {"x": np.array(2.0)},
            X,
        )
    with pytest.raises(
        ValueError, match=r"gradient for W has shape \(2, 3\), input has \(3, 2\)"
    ):
        layer_gradcheck(
            linear.linear_forward,
            lambda p, s, dY: ({"W": dY.T @ s["X"], "b": dY.sum(0)}, dY @ p["W"].T),
            params,
            X,
        )


# --- qkv_gradcheck: Q, K and V as three independent inputs ----------------------------


def random_qkv(seed, T_q=4, T_k=6, d=3, r=5, batch=()):
    rng = np.random.default_rng(seed)
    return (
        rng.normal(size=(*batch, T_q, d)),
        rng.normal(size=(*batch, T_k, d)),
        rng.normal(size=(*batch, T_k, r)),
        rng.normal(size=(*batch, T_q, r)),
    )


def test_qkv_gradcheck_passes_the_reference_and_checks_each_input():
    Q, K, V, G = random_qkv(30, batch=(2,))
    report = qkv_gradcheck(attention.attention_backward, Q, K, V, G)
    assert report.passed, report
    assert keys(report) == {"Q", "K", "V"}


def test_qkv_gradcheck_catches_the_numerator_only_backward_in_dQ_and_dK():
    # fault control: dV does not pass through the softmax, so only dQ and dK are wrong
    Q, K, V, G = random_qkv(31)
    report = qkv_gradcheck(fa.attention_backward_numerator_only, Q, K, V, G)
    assert not report.passed and failing(report) == {"Q", "K"}


def test_qkv_gradcheck_takes_the_forward_it_differentiates():
    Q, K, V, G = random_qkv(32, T_q=5, T_k=5)
    # the unscaled pair is consistent with itself: checked against its own forward it
    # passes
    assert qkv_gradcheck(
        fa.attention_backward_unscaled_throughout,
        Q,
        K,
        V,
        G,
        forward=fa.attention_forward_unscaled,
    ).passed
    report = qkv_gradcheck(fa.attention_backward_unscaled_throughout, Q, K, V, G)
    assert not report.passed and failing(report) == {"Q", "K", "V"}
    # the causal pair: attention_backward of the forward pass under the causal mask
    causal = attention.causal_mask(5, 5)
    assert qkv_gradcheck(
        attention.attention_backward,
        Q,
        K,
        V,
        G,
        forward=lambda Q, K, V: attention.attention_forward(Q, K, V, causal),
    ).passed
    # a backward that applies the causal mask whatever the forward pass did is the
    # gradient of the causal forward only

    def causal_backward(saved, G):
        return attention.causal_attention_backward(saved.Q, saved.K, saved.V, G)

    assert not qkv_gradcheck(causal_backward, Q, K, V, G).passed
