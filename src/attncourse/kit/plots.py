"""The figures of Chapter 3, and the small experiments whose data they show.

Drawing functions return a matplotlib ``Figure``; data functions return numpy arrays so
that the chapter can assert what a figure claims. This module imports matplotlib;
``import attncourse`` does not import it.

>>> stats = scaling_experiment([4, 64], n_queries=200, n_keys=8, seed=0)
>>> sorted(stats)
['max_weight_scaled', 'max_weight_tied', 'max_weight_unscaled', 'spread_scaled',
 'spread_unscaled']
"""

import math

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Circle, FancyArrowPatch

from .gradients import STEPS, TOLERANCE, numerical_gradient
from ..softmax import softmax

__all__ = [
    "weights_heatmap",
    "scaling_experiment",
    "scaling_figure",
    "step_size_errors",
    "step_size_figure",
    "graph_figure",
    "masks_figure",
    "head_weights_figure",
    "char_labels",
    "show_matrix",
    "lookup_figure",
    "scatter_add_figure",
    "model_figure",
    "BUDGET_COLORS",
    "parameter_budget_figure",
    "gelu_figure",
    "depth_profile",
    "depth_figure",
]


def weights_heatmap(panels, cmap="Blues"):
    """Draw attention weights as heatmaps, one panel per ``(A, title, labels)``; return
    the Figure.

    ``labels`` (optional, same shape as ``A``) holds the text written in each cell; by
    default the weights rounded to three decimals.

    >>> fig = weights_heatmap([(np.full((2, 3), 1 / 3), "uniform")])
    >>> [t.get_text() for t in fig.axes[0].texts][:2]
    ['0.333', '0.333']
    >>> plt.close(fig)
    """
    fig, axes = plt.subplots(
        1,
        len(panels),
        figsize=(3.2 * len(panels) + 1.4, 3.0),
        squeeze=False,
        constrained_layout=True,
    )
    for n, (ax, panel) in enumerate(zip(axes[0], panels)):
        A, title = np.asarray(panel[0]), panel[1]
        labels = panel[2] if len(panel) > 2 else np.vectorize(lambda w: f"{w:.3f}")(A)
        im = ax.imshow(A, cmap=cmap, vmin=0.0, vmax=1.0)
        T_q, T_k = A.shape
        for i in range(T_q):
            for j in range(T_k):
                ax.text(
                    j,
                    i,
                    labels[i][j],
                    ha="center",
                    va="center",
                    fontsize=12,
                    color="white" if A[i, j] > 0.6 else "black",
                )
        ax.set_xticks(range(T_k), [f"key {j + 1}" for j in range(T_k)])
        ax.set_yticks(
            range(T_q), [f"query {i + 1}" for i in range(T_q)] if n == 0 else []
        )
        ax.set_title(title, fontsize=11)
    fig.colorbar(im, ax=list(axes[0]), shrink=0.85, label="weight $A_{ij}$")
    return fig


def scaling_experiment(dims, n_queries=400, n_keys=16, seed=0):
    """Monte-Carlo statistics of scores and weights against the key width ``d``.

    For each ``d`` draws ``n_queries`` queries and ``n_queries x n_keys`` keys with
    independent standard normal coordinates. Returns arrays (one entry per ``d``):
    ``spread_unscaled`` and ``spread_scaled`` (standard deviation of ``q.k`` and
    ``q.k / sqrt(d)``), ``max_weight_unscaled`` and ``max_weight_scaled`` (mean largest
    softmax weight of a query over its keys), and ``max_weight_tied``: the same, scaled,
    when the first key of each query is the query itself (tied ``W_Q = W_K``).
    """
    dims = [int(d) for d in dims]
    if not dims or min(dims) < 1 or n_queries < 2 or n_keys < 2:
        raise ValueError(
            f"need dims >= 1, n_queries >= 2, n_keys >= 2, got dims={dims}, "
            f"n_queries={n_queries}, n_keys={n_keys}"
        )
    rng = np.random.default_rng(seed)
    out = {
        k: []
        for k in (
            "spread_unscaled",
            "spread_scaled",
            "max_weight_unscaled",
            "max_weight_scaled",
            "max_weight_tied",
        )
    }
    for d in dims:
        q = rng.standard_normal((n_queries, 1, d))
        k = rng.standard_normal((n_queries, n_keys, d))
        # (n, 1, d) * (n, n_keys, d) summed over d -> (n, n_keys)
        raw = np.sum(q * k, axis=-1)
        scaled = raw / math.sqrt(d)
        out["spread_unscaled"].append(raw.std())
        out["spread_scaled"].append(scaled.std())
        out["max_weight_unscaled"].append(softmax(raw).max(axis=-1).mean())
        out["max_weight_scaled"].append(softmax(scaled).max(axis=-1).mean())
        tied = scaled.copy()
        # the query's own key: |q|^2 / sqrt(d)
        tied[:, 0] = np.sum(q[:, 0] * q[:, 0], axis=-1) / math.sqrt(d)
        out["max_weight_tied"].append(softmax(tied).max(axis=-1).mean())
    return {k: np.array(v) for k, v in out.items()}


def scaling_figure(dims, stats, n_keys=16):
    """Two panels: score spread against ``d``, and the mean largest weight against
    ``d``.

    >>> stats = scaling_experiment([2, 8], n_queries=20, n_keys=4)
    >>> fig = scaling_figure([2, 8], stats, n_keys=4)
    >>> [ax.get_title() for ax in fig.axes]
    ['score spread', 'softmax concentration (4 keys)']
    >>> plt.close(fig)
    """
    dims = np.asarray(dims)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    ax1.loglog(dims, stats["spread_unscaled"], "o-", label=r"unscaled $q\cdot k$")
    ax1.loglog(dims, stats["spread_scaled"], "s-", label=r"scaled $q\cdot k/\sqrt{d}$")
    ax1.loglog(dims, np.sqrt(dims), "k:", label=r"$\sqrt{d}$")
    ax1.set_xlabel("key width $d$")
    ax1.set_ylabel("standard deviation of the score")
    ax1.set_title("score spread")
    ax1.legend(fontsize=9)
    ax2.semilogx(dims, stats["max_weight_unscaled"], "o-", label="unscaled")
    ax2.semilogx(dims, stats["max_weight_scaled"], "s-", label="scaled")
    ax2.semilogx(dims, stats["max_weight_tied"], "^--", label=r"scaled, tied $q=k$")
    ax2.axhline(
        1.0 / n_keys, color="grey", lw=0.8, ls=":", label=f"uniform, 1/{n_keys}"
    )
    ax2.set_ylim(0, 1.05)
    ax2.set_xlabel("key width $d$")
    ax2.set_ylabel("mean largest weight of a row")
    ax2.set_title(f"softmax concentration ({n_keys} keys)")
    ax2.legend(fontsize=8, loc="lower right", bbox_to_anchor=(1.0, 0.3))
    for ax in (ax1, ax2):
        ax.set_xticks(dims, [str(d) for d in dims])
        ax.minorticks_off()
    fig.tight_layout()
    return fig


def step_size_errors(f, x, analytic, steps):
    """Return the max absolute error of central differences of ``f`` at ``x``, one entry
    per step.

    >>> import numpy as np
    >>> x = np.array([0.3, 1.1])
    >>> errs = step_size_errors(lambda x: float(np.sum(np.sin(x))), x, np.cos(x),
    ...                         [1e-2, 1e-5])
    >>> bool(errs[0] > errs[1])
    True
    """
    analytic = np.asarray(analytic, dtype=np.float64)
    if analytic.shape != np.shape(x):
        raise ValueError(
            f"analytic gradient has shape {analytic.shape}, x has shape {np.shape(x)}"
        )
    return np.array(
        [np.max(np.abs(numerical_gradient(f, x, h) - analytic)) for h in steps]
    )


def step_size_figure(steps, errors, chosen=STEPS, tolerance=TOLERANCE):
    """Log-log plot of the finite-difference error against the step, one line per
    ``errors`` entry.

    >>> fig = step_size_figure([1e-2, 1e-5, 1e-8], {"Q": np.array([1e-4, 1e-11, 1e-8])})
    >>> fig.axes[0].get_xscale(), fig.axes[0].get_yscale()
    ('log', 'log')
    >>> plt.close(fig)
    """
    steps = np.asarray(steps)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for (name, errs), marker in zip(errors.items(), "os^vD"):
        ax.loglog(steps, errs, marker + "-", label=name)
    ax.axhline(tolerance, color="k", ls="--", lw=1, label=f"tolerance {tolerance:.0e}")
    for h in chosen:
        ax.axvline(h, color="tab:green", ls=":", lw=1.5)
    ax.axvspan(
        min(chosen), max(chosen), color="tab:green", alpha=0.12, label="chosen steps"
    )
    ax.set_xlabel("step $h$")
    ax.set_ylabel("max |central difference - formula|")
    ax.invert_xaxis()
    ax.text(
        0.03,
        0.06,
        "truncation\n(error ~ $h^2$)",
        transform=ax.transAxes,
        fontsize=9,
        va="bottom",
    )
    ax.text(
        0.97,
        0.06,
        "round-off\n(error ~ $\\epsilon/h$)",
        transform=ax.transAxes,
        fontsize=9,
        ha="right",
        va="bottom",
    )
    ax.legend(fontsize=9, loc="upper center")
    fig.tight_layout()
    return fig


def char_labels(chars):
    """Return axis labels for characters, with the space shown as a visible ``␣``.

    >>> char_labels("a b")
    ['a', '␣', 'b']
    """
    return ["␣" if c == " " else c for c in chars]


def show_matrix(ax, M, title, rows=None, cols=None, signed=True):
    """Draw ``M`` on ``ax`` with one labelled tick per row and column; return the image.

    ``signed`` uses a diverging map centred on 0 (red positive, blue negative);
    otherwise a grey scale from 0 to 1, for one-hot matrices and probabilities.

    >>> fig, ax = plt.subplots()
    >>> im = show_matrix(ax, np.array([[1.0, -2.0]]), "M", cols=char_labels("a "))
    >>> [t.get_text() for t in ax.get_xticklabels()], [float(v) for v in im.get_clim()]
    (['a', '␣'], [-2.0, 2.0])
    >>> plt.close(fig)
    """
    M = np.asarray(M)
    if signed:
        vmax = np.abs(M).max()
        im = ax.imshow(M, cmap="RdBu_r", vmin=-vmax, vmax=vmax)
    else:
        im = ax.imshow(M, cmap="Greys", vmin=0, vmax=1)
    ax.set_title(title, fontsize=10)
    n_rows, n_cols = M.shape
    ax.set_yticks(range(n_rows), range(n_rows) if rows is None else rows, fontsize=8)
    ax.set_xticks(range(n_cols), range(n_cols) if cols is None else cols, fontsize=8)
    return im


def _connect(fig, ax_a, xy_a, ax_b, xy_b):
    """Draw an arrow from the point ``xy_a`` of ``ax_a`` to ``xy_b`` of ``ax_b``."""
    from matplotlib.patches import ConnectionPatch

    fig.add_artist(
        ConnectionPatch(
            xyA=xy_a,
            coordsA="data",
            axesA=ax_a,
            xyB=xy_b,
            coordsB="data",
            axesB=ax_b,
            arrowstyle="->",
            color="black",
            linewidth=1,
        )
    )


def _outline_rows(ax, rows, width):
    """Outline whole rows of an image ``width`` cells wide."""
    from matplotlib.patches import Rectangle

    for i in rows:
        ax.add_patch(
            Rectangle((-0.5, i - 0.5), width, 1, fill=False, edgecolor="black", lw=2)
        )


def lookup_figure(E, ids, X, vocab):
    """Draw the lookup ``X = onehot(ids) E`` as a row gather; return the Figure.

    Left, the one-hot matrix of ``ids``; middle, the table ``E (n_vocab, D)``, the
    rows that are read outlined; right, ``X``, one row per position, with an arrow
    from the row of ``E`` it copies. ``vocab`` holds the character of each id.

    >>> E = np.arange(8.0).reshape(4, 2)
    >>> fig = lookup_figure(E, np.array([2, 0, 2]), E[[2, 0, 2]], "abcd")
    >>> len(fig.artists), len(fig.axes[2].patches)  # arrows, outlined rows
    (3, 2)
    >>> plt.close(fig)
    """
    from ..layers.embedding import one_hot

    ids = np.asarray(ids)
    n_vocab, D = np.shape(E)
    word_labels = char_labels(vocab[v] for v in ids)
    layout = {"width_ratios": [16, 1.6, 6, 4.5, 6], "wspace": 0.05}
    fig, axes = plt.subplots(1, 5, figsize=(10.5, 4.4), gridspec_kw=layout)
    ax_h, ax_times, ax_e, ax_gap, ax_x = axes
    for ax in (ax_times, ax_gap):
        ax.axis("off")
    ax_times.text(
        0.5,
        0.5,
        "×",
        fontsize=22,
        ha="center",
        va="center",
        transform=ax_times.transAxes,
    )
    show_matrix(
        ax_h,
        one_hot(ids, n_vocab),
        "onehot(x)  (T × n_vocab)",
        rows=word_labels,
        cols=char_labels(vocab),
        signed=False,
    )
    ax_h.set_xticks(np.arange(n_vocab + 1) - 0.5, minor=True)
    ax_h.set_yticks(np.arange(len(ids) + 1) - 0.5, minor=True)
    ax_h.grid(which="minor", color="0.85", linewidth=0.6)
    ax_h.tick_params(which="minor", length=0)
    show_matrix(ax_e, E, "E  (n_vocab × D)", rows=char_labels(vocab))
    show_matrix(ax_x, X, "X = E[x]  (T × D)", rows=word_labels)
    ax_x.yaxis.tick_right()  # labels away from the arrows
    _outline_rows(ax_e, sorted(set(ids.tolist())), D)
    for i, v in enumerate(ids):
        _connect(fig, ax_e, (D - 0.5, v), ax_x, (-0.5, i))
    return fig


def scatter_add_figure(dX, dE, ids, vocab):
    """Draw the backward pass of a lookup, the scatter-add; return the Figure.

    Each arrow adds row ``i`` of ``dX`` to row ``ids[i]`` of ``dE``. Rows of ``dE``
    that receive nothing are white; a token read more than once is outlined in
    ``dE``, and so are its positions in ``dX``.

    >>> ids, dX = np.array([2, 0, 2]), np.ones((3, 2))
    >>> dE = np.zeros((4, 2))
    >>> np.add.at(dE, ids, dX)
    >>> fig = scatter_add_figure(dX, dE, ids, "abcd")
    >>> len(fig.artists), len(fig.axes[0].patches), len(fig.axes[2].patches)
    (3, 2, 1)
    >>> plt.close(fig)
    """
    ids, dX, dE = np.asarray(ids), np.asarray(dX), np.asarray(dE)
    D = dX.shape[1]
    cmap = plt.get_cmap("RdBu_r").with_extremes(bad="white")  # rows that get nothing
    vmax = np.abs(dE).max()
    layout = {"width_ratios": [6, 5, 6], "wspace": 0.05}
    fig, (ax_g, ax_gap, ax_d) = plt.subplots(
        1, 3, figsize=(7.0, 4.6), gridspec_kw=layout
    )
    ax_gap.axis("off")
    untouched = np.broadcast_to((dE == 0).all(axis=1, keepdims=True), dE.shape)
    shown = np.ma.masked_where(untouched, dE)
    panels = [
        (ax_g, dX, "dX  (T × D)", char_labels(vocab[v] for v in ids)),
        (ax_d, shown, "dE  (n_vocab × D)", char_labels(vocab)),
    ]
    for ax, M, title, rows in panels:
        ax.imshow(M, cmap=cmap, vmin=-vmax, vmax=vmax)
        ax.set_title(title, fontsize=10)
        ax.set_yticks(range(M.shape[0]), rows, fontsize=8)
        ax.set_xticks(range(D), range(D), fontsize=8)
    ax_d.yaxis.tick_right()
    tokens, counts = np.unique(ids, return_counts=True)
    repeated = tokens[counts > 1]
    _outline_rows(ax_d, repeated, D)
    _outline_rows(ax_g, np.flatnonzero(np.isin(ids, repeated)), D)
    for i, v in enumerate(ids):
        _connect(fig, ax_g, (D - 0.5, i), ax_d, (-0.5, v))
    return fig


def _node(ax, xy, text, color):
    ax.add_patch(Circle(xy, 0.36, facecolor=color, edgecolor="black", lw=1.2, zorder=3))
    ax.text(*xy, text, ha="center", va="center", fontsize=15, zorder=4)


def _arrow(ax, a, b, style="-|>", color="black", ls="-", rad=0.0, lw=1.4):
    ax.add_patch(
        FancyArrowPatch(
            a,
            b,
            arrowstyle=style,
            mutation_scale=14,
            color=color,
            ls=ls,
            lw=lw,
            shrinkA=16,
            shrinkB=16,
            connectionstyle=f"arc3,rad={rad}",
            zorder=2,
        )
    )


def graph_figure():
    """Draw the computational graph ``X -> Q, K, V -> S -> A -> O -> J`` and the three
    branches back to ``X``.

    >>> fig = graph_figure()
    >>> # the nodes, and G
    >>> sorted(t.get_text() for t in fig.axes[0].texts if len(t.get_text()) == 3)
    ['$A$', '$G$', '$J$', '$K$', '$O$', '$Q$', '$S$', '$V$', '$X$']
    >>> plt.close(fig)
    """
    pos = {
        "X": (0.6, 2.0),
        "Q": (3.4, 3.8),
        "K": (3.4, 2.0),
        "V": (3.4, 0.2),
        "S": (5.4, 2.9),
        "A": (7.2, 2.9),
        "O": (9.0, 1.6),
        "J": (10.8, 1.6),
    }
    colors = {
        "X": "#fde2b5",
        "Q": "#cfe3f7",
        "K": "#cfe3f7",
        "V": "#cfe3f7",
        "S": "#e3e3e3",
        "A": "#e3e3e3",
        "O": "#e3e3e3",
        "J": "#d7f0d2",
    }
    red = "tab:red"
    fig, ax = plt.subplots(figsize=(10.5, 5.0))
    for name, xy in pos.items():
        _node(ax, xy, f"${name}$", colors[name])
    for a, b in [
        ("X", "Q"),
        ("X", "K"),
        ("X", "V"),
        ("Q", "S"),
        ("K", "S"),
        ("S", "A"),
        ("A", "O"),
        ("V", "O"),
        ("O", "J"),
    ]:
        _arrow(ax, pos[a], pos[b])
    forward_labels = [
        ((2.25, 2.75), r"$XW_Q$"),
        ((2.0, 1.68), r"$XW_K$"),
        ((2.25, 1.2), r"$XW_V$"),
        ((6.3, 3.1), "softmax"),
        ((9.9, 1.8), r"$\langle G, O\rangle$"),
    ]
    for xy, label in forward_labels:
        ax.text(*xy, label, ha="center", fontsize=11)
    grad_labels = [
        ((9.9, 1.2), "$G$"),
        ((8.55, 2.5), r"$dA=GV^\top$"),
        ((6.4, 0.75), r"$dV=A^\top G$"),
        ((6.3, 2.5), "$dS$"),
        ((4.6, 3.75), r"$dQ=dS\,K/\sqrt{d}$"),
        ((4.55, 2.05), r"$dK=dS^\top Q/\sqrt{d}$"),
    ]
    for xy, label in grad_labels:
        ax.text(*xy, label, ha="center", fontsize=10, color=red)
    _arrow(ax, pos["Q"], pos["X"], color=red, ls="--", rad=0.3)
    _arrow(ax, pos["K"], pos["X"], color=red, ls="--", rad=0.22)
    _arrow(ax, pos["V"], pos["X"], color=red, ls="--", rad=-0.3)
    ax.text(1.25, 3.65, r"$dQ\,W_Q^\top$", color=red, fontsize=10, ha="center")
    ax.text(2.0, 2.42, r"$dK\,W_K^\top$", color=red, fontsize=10, ha="center")
    ax.text(1.25, 0.2, r"$dV\,W_V^\top$", color=red, fontsize=10, ha="center")
    ax.text(
        0.2,
        1.5,
        "$dX$ = sum\nof all three",
        color=red,
        fontsize=10,
        ha="center",
        va="top",
    )
    ax.text(
        7.6,
        0.0,
        "black: forward pass\nred, dashed: gradients flowing back",
        fontsize=10,
        ha="left",
        va="center",
        color="dimgray",
    )
    ax.set_xlim(-0.2, 11.4)
    ax.set_ylim(-0.4, 4.5)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.tight_layout()
    return fig


def masks_figure(panels):
    """Draw boolean masks (blue: visible, white: hidden); return the Figure.

    ``panels`` is a list of ``(mask, title)``, each mask ``(T_q, T_k)`` and True where
    query ``i`` may read key ``j``. A row with nothing visible is marked in red.

    >>> causal = np.tril(np.ones((3, 3), dtype=bool))
    >>> fig = masks_figure([(causal, "causal"), (causal & [False, True, True], "both")])
    >>> [t.get_text() for t in fig.axes[1].texts]  # query 0 may read nothing
    ['nothing visible']
    >>> plt.close(fig)
    """
    from matplotlib.colors import ListedColormap

    fig, axes = plt.subplots(
        1,
        len(panels),
        figsize=(10 / 3 * len(panels), 3.6),
        squeeze=False,
        constrained_layout=True,
    )
    for ax, (mask, title) in zip(axes[0], panels):
        mask = np.asarray(mask, dtype=bool)
        ax.imshow(mask, cmap=ListedColormap(["white", "tab:blue"]), vmin=0, vmax=1)
        n_q, n_k = mask.shape
        ax.set_xticks(range(n_k))
        ax.set_yticks(range(n_q))
        ax.set_xticks(np.arange(-0.5, n_k), minor=True)
        ax.set_yticks(np.arange(-0.5, n_q), minor=True)
        ax.grid(which="minor", color="0.6", linewidth=0.6)
        ax.tick_params(which="minor", length=0)
        ax.set_xlabel("key j")
        ax.set_title(title, fontsize=10)
        for i in np.flatnonzero(~mask.any(axis=1)):
            ax.annotate(
                "nothing visible",
                xy=(n_k - 0.5, i),
                xytext=(n_k - 0.3, i),
                va="center",
                fontsize=8,
                color="tab:red",
                annotation_clip=False,
            )
    axes[0, 0].set_ylabel("query i")
    return fig


def head_weights_figure(A, labels, hidden):
    """Draw the weights ``A (H, T, T)`` of each head as a heat map; return the Figure.

    ``labels`` (length ``T``) names the positions on both axes; entries where ``hidden``
    (``(T, T)``, boolean) is True are drawn grey.

    >>> A = np.array([[[1.0, 0.0], [0.5, 0.5]], [[1.0, 0.0], [0.9, 0.1]]])
    >>> hidden = np.triu(np.ones((2, 2), dtype=bool), 1)
    >>> fig = head_weights_figure(A, ["a", "b"], hidden)
    >>> [ax.get_title() for ax in fig.axes[:2]]
    ['head 0', 'head 1']
    >>> plt.close(fig)
    """
    A = np.asarray(A)
    H, T, _ = A.shape
    fig, axes = plt.subplots(
        1, H, figsize=(3.25 * H, 3.8), squeeze=False, constrained_layout=True
    )
    cmap = plt.get_cmap("viridis").with_extremes(bad="0.85")  # hidden entries: grey
    for h, ax in enumerate(axes[0]):
        shown = np.ma.masked_array(A[h], mask=hidden)
        im = ax.imshow(shown, cmap=cmap, vmin=0, vmax=1)
        ax.set_xticks(range(T), labels)
        ax.set_yticks(range(T), labels)
        ax.set_title(f"head {h}", fontsize=10)
        ax.set_xlabel("key (read)")
    axes[0, 0].set_ylabel("query (reading)")
    fig.colorbar(im, ax=list(axes[0]), shrink=0.8, label="weight $A_{ij}$")
    return fig


# --- Chapter 6: the whole model -------------------------------------------------------


def _diagram_box(ax, xy, text, color, width=2.3, height=0.62, fontsize=9):
    """A rounded box centred at ``xy`` holding ``text``."""
    from matplotlib.patches import FancyBboxPatch

    x, y = xy
    ax.add_patch(
        FancyBboxPatch(
            (x - width / 2, y - height / 2),
            width,
            height,
            boxstyle="round,pad=0.04,rounding_size=0.12",
            facecolor=color,
            edgecolor="black",
            lw=1.0,
            zorder=3,
        )
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize, zorder=4)


def _diagram_line(ax, points, color="black", ls="-"):
    """A polyline through ``points`` with an arrow head at the last point."""
    xs, ys = zip(*points)
    ax.plot(xs[:-1], ys[:-1], color=color, ls=ls, lw=1.3, zorder=2)
    ax.add_patch(
        FancyArrowPatch(
            points[-2],
            points[-1],
            arrowstyle="-|>",
            mutation_scale=12,
            color=color,
            ls=ls,
            lw=1.3,
            shrinkA=0,
            shrinkB=0,
            zorder=2,
        )
    )


def _diagram_plus(ax, xy):
    """The circled plus where a branch is added to the residual stream."""
    ax.add_patch(
        Circle(xy, 0.2, facecolor="white", edgecolor="black", lw=1.1, zorder=3)
    )
    ax.text(*xy, "+", ha="center", va="center", fontsize=12, zorder=4)


def _diagram_branch(ax, y, name, text, color, out):
    """A branch: from the stream at ``y`` through LN and ``text``, back at ``out``."""
    _diagram_line(ax, [(0.0, y), (1.8, y)])
    _diagram_box(ax, (2.3, y), f"LN{name}", "#e3e3e3", width=1.0)
    _diagram_line(ax, [(2.84, y), (3.3, y)])
    _diagram_box(ax, (4.9, y), text, color, width=3.1)
    _diagram_line(ax, [(4.9, y + 0.35), (4.9, out), (0.2, out)])
    _diagram_plus(ax, (0.0, out))


def model_figure(config, *, max_blocks=3):
    """Draw the model of ``config`` as boxes on its residual stream; return the Figure.

    ``config`` has the fields of :class:`attncourse.model.ModelConfig` (``n_vocab,
    T_max, D, heads, layers, ratio, tied``). Up to ``max_blocks`` blocks are drawn in
    full; a deeper model shows its first blocks, a gap, and its last block. A tied model
    draws a dashed link from the token table to the unembedding.

    >>> from attncourse.model import ModelConfig
    >>> fig = model_figure(ModelConfig(n_vocab=7, T_max=6, D=4, heads=2, layers=5,
    ...                                tied=True))
    >>> [t.get_text() for t in fig.axes[0].texts if t.get_text().startswith("block")]
    ['block 1', 'block 2', 'blocks 3 to 4', 'block 5']
    >>> [t.get_text() for t in fig.axes[0].texts if "tied" in t.get_text()]
    ['tied: the same E']
    >>> plt.close(fig)
    """
    if max_blocks < 2:
        raise ValueError(f"max_blocks must be at least 2, got {max_blocks}")
    L, D, n_vocab = config.layers, config.D, config.n_vocab
    drawn = list(range(1, L + 1))
    if L > max_blocks:
        drawn = list(range(1, max_blocks)) + [L]
    height = 3.0 + 3.0 * len(drawn) + (0.9 if L > max_blocks else 0.0) + 4.2
    fig, ax = plt.subplots(figsize=(7.2, 0.6 * height))
    _diagram_box(ax, (0.0, 0.0), r"token ids $x$  $(B, T)$", "#fde2b5")
    _diagram_line(ax, [(0.0, 0.31), (0.0, 0.8)])
    _diagram_box(
        ax, (0.0, 1.2), f"token embedding $E$\n{n_vocab} × {D}", "#cfe3f7", height=0.8
    )
    _diagram_box(
        ax,
        (4.9, 1.2),
        f"positions $P$\n{config.T_max} × {D}",
        "#cfe3f7",
        width=3.1,
        height=0.8,
    )
    _diagram_line(ax, [(0.0, 1.6), (0.0, 2.1)])
    _diagram_line(ax, [(4.9, 1.6), (4.9, 2.3), (0.2, 2.3)])
    _diagram_plus(ax, (0.0, 2.3))
    y = 2.3
    attention = f"causal attention\n{config.heads} heads of width {D // config.heads}"
    mlp = f"MLP  {D} → {config.ratio * D} → {D}\n(GELU)"
    for k in drawn:
        if k == L and L > max_blocks:
            ax.text(0.0, y + 0.5, "⋮", ha="center", va="center", fontsize=16)
            ax.text(
                0.5,
                y + 0.5,
                f"blocks {max_blocks} to {L - 1}",
                va="center",
                fontsize=9,
                color="dimgray",
            )
            y += 0.9
        _diagram_branch(ax, y + 0.7, "$_1$", attention, "#d7f0d2", y + 1.5)
        _diagram_branch(ax, y + 2.2, "$_2$", mlp, "#f7d9cf", y + 3.0)
        ax.add_patch(
            plt.Rectangle(
                (-0.45, y + 0.3),
                7.0,
                2.95,
                fill=False,
                edgecolor="0.55",
                ls="--",
                lw=0.9,
                zorder=1,
            )
        )
        ax.text(
            6.45, y + 3.15, f"block {k}", fontsize=9, ha="right", va="top", color="0.35"
        )
        y += 3.0
    top = y + 0.9
    ax.plot(
        [0.0, 0.0],
        [2.3, top],
        color="0.45",
        lw=5,
        alpha=0.35,
        zorder=0,
        solid_capstyle="butt",
    )
    ax.text(
        -0.6,
        (2.3 + top) / 2,
        "residual stream",
        rotation=90,
        ha="right",
        va="center",
        fontsize=9,
        color="0.35",
    )
    _diagram_line(ax, [(0.0, y + 0.2), (0.0, top - 0.31)])
    _diagram_box(ax, (0.0, top), "final LN", "#e3e3e3", width=1.4)
    unembed = (
        f"unembedding $E^\\top$\n{D} × {n_vocab}"
        if config.tied
        else (f"unembedding $U$\n{D} × {n_vocab}")
    )
    _diagram_line(ax, [(0.0, top + 0.31), (0.0, top + 0.7)])
    _diagram_box(ax, (0.0, top + 1.1), unembed, "#cfe3f7", height=0.8)
    _diagram_line(ax, [(0.0, top + 1.5), (0.0, top + 1.89)])
    _diagram_box(
        ax,
        (0.0, top + 2.2),
        r"logits $Z$  $(B, T, n_{\mathrm{vocab}})$",
        "#e3e3e3",
        width=3.0,
    )
    _diagram_line(ax, [(0.0, top + 2.51), (0.0, top + 2.9)])
    _diagram_box(
        ax,
        (0.0, top + 3.3),
        "mean cross-entropy\nagainst the next tokens",
        "#d7f0d2",
        width=3.0,
        height=0.8,
    )
    if config.tied:
        link = [(-1.15, 1.2), (-1.6, 1.2), (-1.6, top + 1.1), (-1.15, top + 1.1)]
        _diagram_line(ax, link, color="tab:blue", ls="--")
        ax.text(
            -1.75,
            (1.2 + top) / 2,
            "tied: the same E",
            rotation=90,
            ha="right",
            va="center",
            fontsize=9,
            color="tab:blue",
        )
    ax.set_xlim(-2.4, 6.8)
    ax.set_ylim(-0.6, top + 3.9)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.tight_layout()
    return fig


BUDGET_COLORS = {
    "token embedding": "#4c72b0",
    "positions": "#8fb0d9",
    "attention": "#55a868",
    "MLP": "#dd8452",
    "norms and biases": "#999999",
    "unembedding": "#8172b3",
}
"""The components of a parameter budget, in the order drawn, and their colours."""


def parameter_budget_figure(budgets):
    """Draw each model's parameters as a bar split by component; return the Figure.

    ``budgets`` maps a model's label to ``{component: count}`` with the components of
    :data:`BUDGET_COLORS` (a missing one counts 0). Each bar shows fractions of that
    model's total, written at its end.

    >>> fig = parameter_budget_figure({"tiny": {"attention": 30, "MLP": 60,
    ...                                          "token embedding": 10}})
    >>> fig.axes[0].texts[-1].get_text()
    'N = 100'
    >>> plt.close(fig)
    """
    unknown = sorted({c for b in budgets.values() for c in b} - set(BUDGET_COLORS))
    if unknown:
        raise ValueError(f"unknown components {unknown}; known: {list(BUDGET_COLORS)}")
    labels = list(budgets)
    fig, ax = plt.subplots(figsize=(8.4, 0.7 * len(labels) + 1.7), layout="constrained")
    for i, label in enumerate(labels):
        total = sum(budgets[label].values())
        left = 0.0
        for component, color in BUDGET_COLORS.items():
            share = budgets[label].get(component, 0) / total
            ax.barh(
                i,
                share,
                left=left,
                color=color,
                edgecolor="white",
                label=component if i == 0 else None,
            )
            if share >= 0.08:
                ax.text(
                    left + share / 2,
                    i,
                    f"{share:.0%}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white",
                )
            left += share
        ax.text(1.01, i, f"N = {_short_count(total)}", va="center", fontsize=9)
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("fraction of the parameters")
    fig.legend(ncol=3, fontsize=8, loc="outside lower center", frameon=False)
    return fig


def _short_count(n):
    """``1234567`` -> ``'1.23M'``; small counts as they are."""
    for size, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return str(int(n))


# --- Chapter 5: the block ------------------------------------------------------------


def gelu_figure(x, gelu, gelu_tanh, slope, slope_tanh):
    """Three panels: GELU and ReLU; their derivatives; the gaps between its two forms.

    ``gelu`` and ``slope`` are the exact form and its derivative on the grid ``x``,
    ``gelu_tanh`` and ``slope_tanh`` the tanh form's; ReLU ``max(x, 0)`` and its step
    derivative are drawn for comparison. The third panel shows ``gelu - gelu_tanh`` and
    ``slope - slope_tanh`` in units of ``1e-4``.

    >>> x = np.linspace(-3, 3, 7)
    >>> fig = gelu_figure(x, x, x, np.ones(7), np.ones(7))
    >>> [ax.get_title() for ax in fig.axes]
    ['GELU and ReLU', 'derivatives', 'exact minus tanh form']
    >>> plt.close(fig)
    """
    x = np.asarray(x, dtype=np.float64)
    fig, (ax1, ax2, ax3) = plt.subplots(
        1, 3, figsize=(11, 3.4), constrained_layout=True
    )
    ax1.plot(x, np.maximum(x, 0.0), color="0.6", ls="--", label="ReLU")
    ax1.plot(x, gelu, color="tab:blue", label=r"GELU $x\,\Phi(x)$")
    ax1.plot(x, gelu_tanh, color="tab:orange", ls=":", lw=2.2, label="tanh form")
    ax1.set_title("GELU and ReLU")
    ax2.plot(x, np.where(x > 0, 1.0, 0.0), color="0.6", ls="--", label="ReLU' (step)")
    ax2.plot(x, slope, color="tab:blue", label=r"GELU' $=\Phi(x) + x\,\varphi(x)$")
    ax2.plot(x, slope_tanh, color="tab:orange", ls=":", lw=2.2, label="tanh form'")
    ax2.set_title("derivatives")
    scale = 1e-4
    ax3.plot(
        x, (np.asarray(gelu) - gelu_tanh) / scale, color="tab:green", label="value"
    )
    ax3.plot(
        x,
        (np.asarray(slope) - slope_tanh) / scale,
        color="tab:red",
        ls="--",
        label="slope",
    )
    ax3.axhline(0.0, color="0.6", lw=0.8)
    ax3.set_ylabel(r"difference, units of $10^{-4}$")
    ax3.set_title("exact minus tanh form")
    for ax in (ax1, ax2, ax3):
        ax.set_xlabel("$x$")
        ax.legend(fontsize=8, loc="upper left")
    return fig


def _rms_norm(M):
    """The root-mean-square over positions of the per-position norm ``|m_t|``."""
    M = np.asarray(M, dtype=np.float64)
    return float(np.sqrt(np.mean(np.sum(M * M, axis=-1))))


def _position_spread(M):
    """``|M - mean over positions| / |M|`` (Frobenius norms): 0 when all rows agree."""
    M = np.asarray(M, dtype=np.float64)
    centred = M - M.mean(axis=-2, keepdims=True)
    return float(np.linalg.norm(centred) / np.linalg.norm(M))


def depth_profile(layers, X, dY):
    """Run a stack of layer pairs forward, then backward, measuring every depth.

    ``layers`` is a list of ``(forward, backward, params)`` with any hyperparameters
    already bound: ``y, saved = forward(params, x)``, ``dparams, dx = backward(params,
    saved, dy)``. The probe is ``J = sum(Y * dY)`` at the top. Returns arrays of length
    ``L + 1`` (index 0 is the input ``X``, index ``l`` the output of layer ``l``):
    ``norm``, the root-mean-square per-position norm of the stream; ``spread``,
    ``|X - mean over positions| / |X|``, 0 when every position holds the same vector;
    ``grad_norm``, the root-mean-square per-position norm of ``dJ/dX`` at that depth.

    >>> from attncourse.layers.linear import linear_backward, linear_forward
    >>> double = (linear_forward, linear_backward, {"W": 2.0 * np.eye(2)})
    >>> profile = depth_profile([double, double], np.ones((3, 2)), np.ones((3, 2)))
    >>> profile["norm"] / profile["norm"][0]
    array([1., 2., 4.])
    >>> profile["grad_norm"] / profile["grad_norm"][-1]
    array([4., 2., 1.])
    """
    stream, stashes = [np.asarray(X, dtype=np.float64)], []
    for forward, _, params in layers:
        Y, saved = forward(params, stream[-1])
        stream.append(np.asarray(Y, dtype=np.float64))
        stashes.append(saved)
    grads = [np.asarray(dY, dtype=np.float64)]
    for (_, backward, params), saved in zip(reversed(layers), reversed(stashes)):
        grads.append(backward(params, saved, grads[-1])[1])
    return {
        "norm": np.array([_rms_norm(M) for M in stream]),
        "spread": np.array([_position_spread(M) for M in stream]),
        "grad_norm": np.array([_rms_norm(g) for g in reversed(grads)]),
    }


def depth_figure(profiles):
    """Three panels against depth: stream norm, gradient norm, spread over positions.

    ``profiles`` maps a label to a :func:`depth_profile` result; every axis is
    logarithmic.

    >>> flat = {"norm": np.ones(3), "spread": np.ones(3), "grad_norm": np.ones(3)}
    >>> fig = depth_figure({"flat": flat})
    >>> [ax.get_title() for ax in fig.axes]
    ['the stream', 'its gradient', 'how different the positions stay']
    >>> plt.close(fig)
    """
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.6), constrained_layout=True)
    panels = [
        ("norm", "the stream", "RMS per-position norm of the stream"),
        ("grad_norm", "its gradient", "RMS per-position norm of $dJ/dX$"),
        (
            "spread",
            "how different the positions stay",
            r"$\|X - \bar X\| \,/\, \|X\|$ over positions",
        ),
    ]
    styles = ["o-", "s--", "^-.", "v:"]
    for ax, (key, title, ylabel) in zip(axes, panels):
        for n, (label, profile) in enumerate(profiles.items()):
            values = np.asarray(profile[key])
            ax.semilogy(
                np.arange(values.size),
                values,
                styles[n % len(styles)],
                ms=3,
                label=label,
            )
        ax.set_xlabel("depth (blocks)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
    axes[0].legend(fontsize=8)
    return fig


# --- Chapter 3: the geometry of queries and keys --------------------------------------


def query_key_figure(queries, keys):
    """Draw 2-D queries and keys as arrows, and the weights their dot products give.

    Left: each key ``k_j`` (solid) and each query ``q_i`` (dashed) as an arrow from the
    origin. Right: for each query, the bars of its weights
    ``softmax(q_i . k_j / sqrt(2))`` over the keys, labelled with their values. A key
    pointing along a query scores high; one at a right angle scores 0; one pointing
    away scores below 0. Return the Figure.

    >>> fig = query_key_figure(np.array([[1.0, 0.0]]), np.array([[1.0, 0.0], [0, 1]]))
    >>> [round(float(p.get_height()), 3) for p in fig.axes[1].patches]
    [0.67, 0.33]
    >>> plt.close(fig)
    """
    queries, keys = np.asarray(queries, float), np.asarray(keys, float)
    if queries.ndim != 2 or keys.ndim != 2 or queries.shape[1] != 2 or keys.shape[
            1] != 2:
        raise ValueError(f"queries and keys must be (n, 2) arrays of 2-D vectors, got "
                         f"{queries.shape} and {keys.shape}")
    weights = softmax(queries @ keys.T / math.sqrt(2))  # (n_q, 2) x (2, n_k)
    fig, (ax, bars) = plt.subplots(1, 2, figsize=(9.5, 4.0), constrained_layout=True,
                                   gridspec_kw={"width_ratios": [1, 1.15]})
    key_color, query_colors = "0.35", ["tab:blue", "tab:orange", "tab:green"]
    for j, k in enumerate(keys):
        ax.annotate("", xy=k, xytext=(0, 0),
                    arrowprops=dict(arrowstyle="-|>", color=key_color, lw=1.8))
        ax.text(*(k * 1.12), f"$k_{j + 1}$", ha="center", va="center", fontsize=12)
    for i, q in enumerate(queries):
        color = query_colors[i % len(query_colors)]
        ax.annotate("", xy=q, xytext=(0, 0),
                    arrowprops=dict(arrowstyle="-|>", color=color, lw=2.2, ls="--"))
        ax.text(*(q * 1.14), f"$q_{i + 1}$", ha="center", va="center", fontsize=12,
                color=color)
    reach = 1.3 * max(np.abs(keys).max(), np.abs(queries).max())
    ax.set_xlim(-reach, reach)
    ax.set_ylim(-reach, reach)
    ax.set_aspect("equal")
    ax.axhline(0, color="0.85", lw=0.8, zorder=0)
    ax.axvline(0, color="0.85", lw=0.8, zorder=0)
    ax.set_title("queries (dashed) and keys (solid)", fontsize=10)
    n_q, n_k = weights.shape
    width = 0.8 / n_q
    for i in range(n_q):
        x = np.arange(n_k) + (i - (n_q - 1) / 2) * width
        drawn = bars.bar(x, weights[i], width, color=query_colors[i % 3],
                         label=f"$q_{i + 1}$")
        bars.bar_label(drawn, fmt="%.2f", fontsize=8)
    bars.set_xticks(range(n_k), [f"$k_{j + 1}$" for j in range(n_k)])
    bars.set_ylim(0, 1)
    bars.set_ylabel(r"weight $\mathrm{softmax}(q_i\cdot k_j/\sqrt{2})$")
    bars.set_title("each query's weights over the keys", fontsize=10)
    bars.legend(fontsize=9)
    return fig


__all__ += ["query_key_figure"]


def cache_growth(caches):
    """The growth of a key/value cache, step by step, as an integer grid.

    ``caches`` is the sequence of :class:`attncourse.kvcache.KVCache` objects a
    ``prefill`` and the decode steps after it returned, in order. Row ``s`` of the grid
    (``(len(caches), positions of the last cache)``) says, for each position, where its
    cached key and value came from: 0 not cached yet, 1 the prefill, 2 an earlier decode
    step, 3 this step. Raise ``ValueError`` unless each cache is the previous one with
    exactly one position appended to every block's keys and values, the old rows
    unchanged (bit for bit).

    >>> from attncourse.kvcache import BlockCache, KVCache
    >>> a = KVCache((BlockCache(np.zeros((1, 2, 3)), np.zeros((1, 2, 3))),), 2)
    >>> b = KVCache((BlockCache(np.ones((1, 3, 3)), np.zeros((1, 3, 3))),), 3)
    >>> cache_growth([a, b])
    Traceback (most recent call last):
    ...
    ValueError: step 1, block 0: the cached keys of positions 0..1 changed
    """
    caches = list(caches)
    if not caches:
        raise ValueError("cache_growth needs at least the prefill's cache")
    prompt, last = caches[0].position, caches[-1].position
    grid = np.zeros((len(caches), last), dtype=int)
    grid[:, :prompt] = 1
    for s in range(1, len(caches)):
        old, new = caches[s - 1], caches[s]
        if new.position != old.position + 1:
            raise ValueError(f"step {s}: the position went from {old.position} to "
                             f"{new.position}; a decode step appends one position")
        for b, (was, now) in enumerate(zip(old.blocks, new.blocks)):
            for name, before, after in (("keys", was.keys, now.keys),
                                        ("values", was.values, now.values)):
                if after.shape[-2] != before.shape[-2] + 1:
                    raise ValueError(
                        f"step {s}, block {b}: the cached {name} went from "
                        f"{before.shape[-2]} to {after.shape[-2]} rows; a decode step "
                        f"appends one")
                if not np.array_equal(after[..., :-1, :], before):
                    raise ValueError(
                        f"step {s}, block {b}: the cached {name} of positions "
                        f"0..{before.shape[-2] - 1} changed")
        grid[s, prompt:old.position] = 2
        grid[s, old.position] = 3
    return grid


def cache_growth_figure(caches, labels=None):
    """Draw :func:`cache_growth`: one panel per block, one row per call (the prefill,
    then each decode step), one cell per cached position. Grey: keys and values the
    prefill computed; blue: appended by an earlier step; orange: appended by this step.
    ``labels`` (optional) names the token of each position on the x axis. Return the
    Figure.

    >>> from attncourse.kvcache import prefill, decode_step
    >>> from attncourse.model import ModelConfig, init_model
    >>> config = ModelConfig(n_vocab=7, T_max=6, D=4, heads=2, layers=2)
    >>> params = init_model(config)
    >>> caches = [prefill(params, np.array([1, 2]), config=config)[1]]
    >>> caches.append(decode_step(params, caches[-1], np.array(3), config=config)[1])
    >>> fig = cache_growth_figure(caches)
    >>> len(fig.axes), fig.axes[0].images[0].get_array().tolist()
    (2, [[1, 1, 0], [1, 1, 3]])
    >>> plt.close(fig)
    """
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    grid = cache_growth(caches)
    n_blocks = len(caches[0].blocks)
    colors = ["white", "0.7", "tab:blue", "tab:orange"]
    steps, positions = grid.shape
    fig, axes = plt.subplots(1, n_blocks, figsize=(0.3 * positions * n_blocks + 2.5,
                                                   0.3 * steps + 1.6),
                             squeeze=False, sharey=True, constrained_layout=True)
    rows = ["prefill"] + [f"step {s}" for s in range(1, steps)]
    for b, ax in enumerate(axes[0]):
        ax.imshow(grid, cmap=ListedColormap(colors), vmin=0, vmax=3, aspect="equal")
        ax.set_xticks(np.arange(positions + 1) - 0.5, minor=True)
        ax.set_yticks(np.arange(steps + 1) - 0.5, minor=True)
        ax.grid(which="minor", color="white", lw=1.2)
        ax.tick_params(which="minor", length=0)
        ax.set_yticks(range(steps), rows, fontsize=8)
        if labels is None:
            ax.set_xticks(range(positions), range(positions), fontsize=7)
        else:
            shown = ["\u2423" if c == " " else repr(str(c))[1:-1] for c in labels]
            ax.set_xticks(range(positions), shown[:positions], fontsize=8,
                          family="monospace")
        ax.set_xlabel("cached position")
        H, d = caches[-1].blocks[b].keys.shape[-3], caches[-1].blocks[b].keys.shape[-1]
        ax.set_title(f"block {b + 1}: a key and a value per head\n({H} heads of width "
                     f"{d}) at each position", fontsize=9)
    fig.legend(handles=[Patch(color=c, label=n) for c, n in zip(
        colors[1:], ("from the prefill", "appended earlier", "appended by this step"))],
        loc="outside lower center", ncol=3, fontsize=8, frameon=False)
    return fig


__all__ += ["cache_growth", "cache_growth_figure"]


# --- Chapters 4 and 5: the multi-head layer and the block, as diagrams ----------------


def multihead_figure(*, T, D, heads, d, r):
    """Draw multi-head attention as split, attend, concatenate and ``W_O``, every array
    labelled with its shape; return the Figure.

    ``T`` positions of width ``D``, ``heads`` heads of query/key width ``d`` and value
    width ``r``. The shapes are printed both as symbols and with these numbers.

    >>> fig = multihead_figure(T=5, D=7, heads=2, d=3, r=2)
    >>> texts = [t.get_text() for t in fig.axes[0].texts]
    >>> [t for t in texts if t.startswith("$C$")]
    ['$C$ = concatenate\\n$(T, Hr)$ = (5, 4)']
    >>> plt.close(fig)
    """
    require = {"T": T, "D": D, "heads": heads, "d": d, "r": r}
    bad = {k: v for k, v in require.items() if not (isinstance(v, int) and v > 0)}
    if bad:
        raise ValueError(f"multihead_figure needs positive integer sizes, got {bad}")
    rows = [1.6 * (heads - 1 - h) for h in range(heads)]  # one row per head
    mid = (rows[0] + rows[-1]) / 2
    fig, ax = plt.subplots(figsize=(11.5, 1.3 + 1.05 * max(heads, 3)))
    _diagram_box(ax, (0.0, mid), f"$X$\n$(T, D)$ = ({T}, {D})", "#fde2b5",
                 width=1.7, height=0.9)
    projected = [(mid + 1.0, f"$Q = X W_Q$\n$(T, Hd)$ = ({T}, {heads * d})"),
                 (mid, f"$K = X W_K$\n$(T, Hd)$ = ({T}, {heads * d})"),
                 (mid - 1.0, f"$V = X W_V$\n$(T, Hr)$ = ({T}, {heads * r})")]
    for y, text in projected:
        _diagram_line(ax, [(0.85, mid), (1.3, mid), (1.3, y), (1.75, y)])
        _diagram_box(ax, (2.8, y), text, "#cfe3f7", width=2.1, height=0.8)
    for h, y in enumerate(rows):
        for y_p, _ in projected:
            _diagram_line(ax, [(3.85, y_p), (4.4, y_p), (4.4, y), (4.95, y)],
                          color="0.45")
        _diagram_box(ax, (6.25, y),
                     f"head {h}\n"
                     f"$Q^{{({h})}}, K^{{({h})}}$ $(T, d)$ = ({T}, {d})\n"
                     f"$V^{{({h})}}$ $(T, r)$ = ({T}, {r})",
                     "#e3e3e3", width=2.6, height=1.15, fontsize=8)
        _diagram_line(ax, [(7.55, y), (8.0, y)])
        _diagram_box(ax, (9.05, y),
                     f"$O^{{({h})}}$ = softmax$_M$(·)$V^{{({h})}}$\n"
                     f"$(T, r)$ = ({T}, {r})",
                     "#d7f0d2", width=2.1, height=0.8, fontsize=8)
        _diagram_line(ax, [(10.1, y), (10.55, y), (10.55, mid), (11.0, mid)])
    _diagram_box(ax, (12.05, mid), f"$C$ = concatenate\n$(T, Hr)$ = ({T}, {heads * r})",
                 "#f7d9cf", width=2.1, height=0.8)
    _diagram_line(ax, [(13.1, mid), (13.55, mid)])
    _diagram_box(ax, (14.6, mid),
                 f"$Y = C W_O$\n$W_O$ $(Hr, D)$ = ({heads * r}, {D})\n"
                 f"$Y$ $(T, D)$ = ({T}, {D})",
                 "#fde2b5", width=2.1, height=1.15, fontsize=8)
    top = max(rows[0], mid + 1.0) + 0.95
    steps = [(2.8, "1. project"), (4.4, "2. split"), (7.6, "3. attend, each head"),
             (12.05, "4. concatenate"), (14.6, "5. mix: heads meet")]
    for x, step in steps:
        ax.text(x, top, step, ha="center", va="bottom", fontsize=9, color="0.3")
    ax.text(7.6, min(rows[-1], mid - 1.0) - 0.95,
            f"$H$ = {heads} heads, $d$ = {d}, $r$ = {r}: no head reads another "
            "before $W_O$", ha="center", va="top", fontsize=9, color="0.3")
    ax.set_xlim(-1.0, 15.8)
    ax.set_ylim(min(rows[-1], mid - 1.0) - 1.4, top + 0.5)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.tight_layout()
    return fig


def block_figure(*, D, heads, ratio=4):
    """Draw the pre-norm block: ``X -> LN1 -> attention -> + -> LN2 -> MLP -> +``, with
    the residual stream carrying ``X`` around each sublayer; return the Figure.

    >>> fig = block_figure(D=8, heads=2)
    >>> [t.get_text() for t in fig.axes[0].texts if t.get_text().startswith("$")][:3]
    ['$X$  $(T, D)$', "$X'$ = $X$ + attention", "$Y$ = $X'$ + MLP"]
    >>> plt.close(fig)
    """
    if not all(isinstance(v, int) and v > 0 for v in (D, heads, ratio)):
        raise ValueError(f"block_figure needs positive integer sizes, got D={D}, "
                         f"heads={heads}, ratio={ratio}")
    fig, ax = plt.subplots(figsize=(6.4, 5.6))
    _diagram_box(ax, (0.0, 0.0), "$X$  $(T, D)$", "#fde2b5", width=1.8)
    _diagram_line(ax, [(0.0, 0.31), (0.0, 0.9)])
    attention = f"causal multi-head attention\n{heads} heads, $W_O$ back to $D$ = {D}"
    mlp = f"MLP  {D} → {ratio * D} → {D}\n(GELU)"
    _diagram_branch(ax, 1.0, "$_1$", attention, "#d7f0d2", 1.9)
    ax.text(0.3, 2.15, "$X'$ = $X$ + attention", fontsize=9, va="bottom")
    _diagram_line(ax, [(0.0, 2.1), (0.0, 2.8)])
    _diagram_branch(ax, 2.9, "$_2$", mlp, "#f7d9cf", 3.8)
    ax.text(0.3, 4.05, "$Y$ = $X'$ + MLP", fontsize=9, va="bottom")
    _diagram_line(ax, [(0.0, 4.0), (0.0, 4.59)])
    _diagram_box(ax, (0.0, 4.9), "$Y$  $(T, D)$", "#fde2b5", width=1.8)
    ax.plot([0.0, 0.0], [0.31, 4.59], color="0.45", lw=5, alpha=0.35, zorder=0,
            solid_capstyle="butt")
    ax.text(-0.45, 2.45, "residual stream: the identity path", rotation=90,
            ha="right", va="center", fontsize=9, color="0.35")
    ax.set_xlim(-1.4, 6.8)
    ax.set_ylim(-0.6, 5.5)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.tight_layout()
    return fig


__all__ += ["multihead_figure", "block_figure"]


def token_attention_figure(panels, tokens):
    """Draw a trained model's attention on a real input: one ``T x T`` heatmap per
    ``(A, title)`` in ``panels``, queries down, keys across, both axes labelled with
    ``tokens`` (the input's ``T`` tokens, as text); return the Figure.

    >>> A = np.tril(np.ones((3, 3))) / np.arange(1, 4)[:, None]
    >>> fig = token_attention_figure([(A, "uniform past")], ["a", "b", "c"])
    >>> [t.get_text() for t in fig.axes[0].get_xticklabels()]
    ['a', 'b', 'c']
    >>> plt.close(fig)
    """
    tokens = [str(t) for t in tokens]
    if not panels:
        raise ValueError("token_attention_figure needs at least one (A, title) panel")
    for A, title in panels:
        if np.shape(A) != (len(tokens), len(tokens)):
            T = len(tokens)
            raise ValueError(f"panel {title!r}: A has shape {np.shape(A)}, the "
                             f"{T} tokens need ({T}, {T})")
    size = 0.16 * len(tokens) + 1.2
    fig, axes = plt.subplots(1, len(panels), figsize=(size * len(panels) + 1.0, size),
                             squeeze=False, constrained_layout=True)
    shown = [t if t != " " else "␣" for t in tokens]
    for n, (ax, (A, title)) in enumerate(zip(axes[0], panels)):
        im = ax.imshow(np.asarray(A), cmap="Blues", vmin=0.0, vmax=1.0)
        ax.set_xticks(range(len(tokens)), shown, fontsize=7)
        ax.set_yticks(range(len(tokens)), shown if n == 0 else [], fontsize=7)
        ax.set_xlabel("key")
        ax.set_title(title, fontsize=10)
    axes[0][0].set_ylabel("query")
    fig.colorbar(im, ax=list(axes[0]), shrink=0.8, label="weight")
    return fig


__all__ += ["token_attention_figure"]
