"""Tests of attncourse.kit.plots: the figure data, and that every figure draws (Agg
backend)."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from numpy.testing import assert_allclose  # noqa: E402

from attncourse.kit import plots  # noqa: E402


def test_scaling_experiment_shows_the_sqrt_d_law():
    dims = [2, 16, 128]
    st = plots.scaling_experiment(dims, n_queries=300, n_keys=8, seed=1)
    assert all(v.shape == (3,) for v in st.values())
    assert_allclose(st["spread_scaled"], 1.0, atol=0.1)
    assert_allclose(st["spread_unscaled"] / np.sqrt(dims), 1.0, atol=0.1)
    assert np.all(np.diff(st["max_weight_unscaled"]) > 0)
    assert st["max_weight_tied"][-1] > st["max_weight_scaled"][-1] + 0.5
    for v in ("max_weight_scaled", "max_weight_unscaled", "max_weight_tied"):
        # a largest weight lies between uniform and one-hot
        assert np.all((1 / 8 <= st[v]) & (st[v] <= 1))


def test_scaling_experiment_is_seeded():
    a = plots.scaling_experiment([4, 8], n_queries=50, n_keys=4, seed=3)
    b = plots.scaling_experiment([4, 8], n_queries=50, n_keys=4, seed=3)
    for k in a:
        assert_allclose(a[k], b[k], rtol=0, atol=0)
    # control: another seed
    c = plots.scaling_experiment([4, 8], n_queries=50, n_keys=4, seed=4)
    assert a.keys() == c.keys()
    for k in a:
        assert not np.allclose(a[k], c[k]), f"{k} does not depend on the seed"


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(dims=[]),
        dict(dims=[0, 2]),
        dict(dims=[2], n_keys=1),
        dict(dims=[2], n_queries=1),
    ],
)
def test_scaling_experiment_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError, match="need dims >= 1"):
        plots.scaling_experiment(**kwargs)


def test_step_size_errors_show_truncation_and_round_off():
    f = lambda x: float(np.sum(np.sin(x) * np.exp(x)))
    x = np.array([0.2, -0.7, 1.3])
    exact = np.cos(x) * np.exp(x) + np.sin(x) * np.exp(x)
    steps = np.logspace(-1, -12, 12)
    errs = plots.step_size_errors(f, x, exact, steps)
    assert errs[0] > 1e-4 and errs[-1] > 1e-6  # both ends are poor
    assert errs[4] < 1e-9  # h = 1e-5 is good
    with pytest.raises(
        ValueError, match=r"analytic gradient has shape \(2,\), x has shape \(3,\)"
    ):
        plots.step_size_errors(f, x, exact[:2], steps)


def test_figures_draw():
    st = plots.scaling_experiment([2, 4], n_queries=20, n_keys=4, seed=0)
    steps = np.logspace(-1, -3, 3)
    figs = [
        plots.weights_heatmap(
            [
                (
                    np.array([[0.75, 0.25], [0.25, 0.75]]),
                    "A",
                    [["3/4", "1/4"], ["1/4", "3/4"]],
                ),
                (np.full((2, 3), 1 / 3), "B"),
            ]
        ),
        plots.scaling_figure([2, 4], st, n_keys=4),
        plots.step_size_figure(steps, {"Q": np.array([1e-3, 1e-5, 1e-7])}),
        plots.graph_figure(),
    ]
    for fig in figs:
        assert isinstance(fig, Figure)
        fig.canvas.draw()
    heat_texts = [t.get_text() for t in figs[0].axes[0].texts]
    assert heat_texts == ["3/4", "1/4", "1/4", "3/4"]
    assert len(figs[1].axes) == 2
    graph_labels = {t.get_text() for t in figs[3].axes[0].texts}
    assert {"$X$", "$Q$", "$K$", "$V$", "$S$", "$A$", "$O$", "$J$"} <= graph_labels
    for fig in figs:
        plt.close(fig)


def test_cache_growth_follows_prefill_and_decode_steps():
    from attncourse.kvcache import decode_step, prefill
    from attncourse.model import ModelConfig, init_model

    config = ModelConfig(n_vocab=9, T_max=7, D=6, heads=3, layers=2, ratio=2)
    params = init_model(config, seed=1)
    caches = [prefill(params, np.array([4, 1, 7]), config=config)[1]]
    for token in (2, 8, 0):
        step = decode_step(params, caches[-1], np.array(token), config=config)
        caches.append(step[1])
    grid = plots.cache_growth(caches)
    assert grid.tolist() == [[1, 1, 1, 0, 0, 0], [1, 1, 1, 3, 0, 0],
                             [1, 1, 1, 2, 3, 0], [1, 1, 1, 2, 2, 3]]
    fig = plots.cache_growth_figure(caches, labels="abcdef")
    assert len(fig.axes) == config.layers
    assert np.array_equal(fig.axes[1].images[0].get_array(), grid)
    plt.close(fig)
    # a step that appended twice, or not at all, or rewrote the past, is refused
    last = caches[-1]
    twice = last._replace(position=7, blocks=tuple(
        b._replace(keys=np.concatenate([b.keys, b.keys[..., -2:, :]], -2))
        for b in last.blocks))
    with pytest.raises(ValueError, match=r"step 4, block 0: the cached keys went "
                       r"from 6 to 8 rows"):
        plots.cache_growth(caches + [twice])
    with pytest.raises(ValueError, match=r"step 4: the position went from 6 to 6"):
        plots.cache_growth(caches + [last])
    rewritten = [b._replace(keys=b.keys + 1.0) for b in caches[1].blocks]
    with pytest.raises(ValueError, match=r"step 1, block 0: the cached keys of "
                       r"positions 0..2 changed"):
        plots.cache_growth([caches[0], caches[1]._replace(blocks=tuple(rewritten))])


def test_multihead_figure_labels_every_step_with_its_shape():
    fig = plots.multihead_figure(T=5, D=7, heads=3, d=2, r=4)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "$X$\n$(T, D)$ = (5, 7)" in texts
    assert "$Q = X W_Q$\n$(T, Hd)$ = (5, 6)" in texts  # H d = 3 * 2
    assert "$V = X W_V$\n$(T, Hr)$ = (5, 12)" in texts  # H r = 3 * 4
    heads = [t for t in texts if t.startswith("head ")]
    assert [t.splitlines()[0] for t in heads] == ["head 0", "head 1", "head 2"]
    assert all("$(T, d)$ = (5, 2)" in t and "$(T, r)$ = (5, 4)" in t for t in heads)
    assert "$C$ = concatenate\n$(T, Hr)$ = (5, 12)" in texts
    assert any("$W_O$ $(Hr, D)$ = (12, 7)" in t for t in texts)
    assert [t for t in texts if t[:2] in ("1.", "2.", "3.", "4.", "5.")] == [
        "1. project", "2. split", "3. attend, each head", "4. concatenate",
        "5. mix: heads meet"]
    plt.close(fig)
    with pytest.raises(ValueError, match="positive integer sizes"):
        plots.multihead_figure(T=5, D=7, heads=0, d=2, r=4)


def test_block_figure_draws_both_residual_additions():
    fig = plots.block_figure(D=6, heads=3, ratio=2)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts.count("+") == 2  # two residual additions
    assert "LN$_1$" in texts and "LN$_2$" in texts
    assert texts.index("LN$_1$") < texts.index("LN$_2$")  # attention first
    assert "MLP  6 → 12 → 6\n(GELU)" in texts
    assert any(t.startswith("causal multi-head attention\n3 heads") for t in texts)
    assert "$X'$ = $X$ + attention" in texts and "$Y$ = $X'$ + MLP" in texts
    plt.close(fig)
    with pytest.raises(ValueError, match="positive integer sizes"):
        plots.block_figure(D=6, heads=3, ratio=0)


def test_query_key_figure_draws_the_vectors_and_their_weights():
    queries = np.array([[1.5, 0.5], [-0.5, 1.5]])
    keys = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.7, 0.7]])
    fig = plots.query_key_figure(queries, keys)
    fig.canvas.draw()
    vectors, bars = fig.axes
    # one arrow per key and per query, each labelled
    labels = {t.get_text() for t in vectors.texts} - {""}  # arrows: empty text
    assert labels == {"$k_1$", "$k_2$", "$k_3$", "$k_4$", "$q_1$", "$q_2$"}
    # the bars are each query's softmax over the keys, query by query
    heights = np.array([p.get_height() for p in bars.patches]).reshape(2, 4)
    scores = queries @ keys.T / np.sqrt(2)  # (2, 2) x (2, 4) -> (2, 4)
    expected = np.exp(scores) / np.exp(scores).sum(axis=1, keepdims=True)
    assert_allclose(heights, expected, rtol=1e-12)
    # the key closest in angle to each query gets its largest weight, the one
    # pointing most away its smallest
    assert list(heights.argmax(axis=1)) == [0, 1]
    assert list(heights.argmin(axis=1)) == [2, 0]
    plt.close(fig)
    with pytest.raises(ValueError, match="2-D vectors"):
        plots.query_key_figure(np.ones((2, 3)), keys)


def test_token_attention_figure_draws_each_panel_with_its_tokens():
    rng = np.random.default_rng(3)
    first = np.tril(rng.random((4, 4)))
    first /= first.sum(axis=1, keepdims=True)
    second = np.eye(4)
    fig = plots.token_attention_figure([(first, "one"), (second, "two")],
                                       ["t", "h", " ", "e"])
    assert [ax.get_title() for ax in fig.axes[:2]] == ["one", "two"]
    assert_allclose(fig.axes[0].images[0].get_array(), first)
    assert_allclose(fig.axes[1].images[0].get_array(), second)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["t", "h", "␣", "e"]
    assert not any(t.get_text() for t in fig.axes[1].get_yticklabels())  # first only
    plt.close(fig)
    with pytest.raises(ValueError, match="the 3 tokens need"):
        plots.token_attention_figure([(first, "one")], ["a", "b", "c"])
