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
