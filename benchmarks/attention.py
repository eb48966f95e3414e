"""Attention forward+backward, side by side: reference, fast dense, tiled (and PyTorch).

Measures, in one process and interleaved (every repeat runs every implementation once,
in turn, so that a busy machine slows all of them alike):

1. ``batch``: forward+backward time at ``B H T d`` (default 4 8 1024 64), float32 and
   float64, all positions visible, of the reference (``attention_forward``, then
   ``attention_backward`` on its ``saved``), the fast dense and the
   tiled versions, and PyTorch's ``scaled_dot_product_attention`` when it is importable;
   the ratio of each to PyTorch;
2. ``sweep``: one head, ``T = 256 ... 8192`` (float32), all visible and causal: time and
   peak memory (``tracemalloc``, which sees numpy's allocations; not PyTorch's) of each.

Writes ``attention.csv`` and ``attention.png`` into ``--out`` (default
``benchmarks/results``) and prints the tables and the targets of Chapter 9. PyTorch is
optional: without it, its rows are left out. Run from the repository root::

    .venv/bin/python benchmarks/attention.py
"""

import argparse
import csv
import gc
import math
import os
import pathlib
import statistics
import sys
import time
import tracemalloc

import numpy as np

from attncourse.fast import fast_attention_backward, fast_attention_forward
from attncourse.layers.attention import (attention_backward, attention_forward,
                                         causal_mask)
from attncourse.tiled import tiled_attention_backward, tiled_attention_forward

torch = None  # imported by main() when wanted: optional, the course never needs it


def import_torch():
    """Return the torch module, or None when it is not installed."""
    try:
        import torch as module
    except ImportError:
        return None
    return module

HERE = pathlib.Path(__file__).resolve().parent
FIELDS = ["part", "implementation", "dtype", "causal", "B", "H", "T", "d", "repeats",
          "seconds_median", "seconds_min", "peak_bytes", "ratio_to_torch",
          "ratio_to_dense", "ratio_to_reference"]


def make_inputs(B, H, T, d, dtype, seed=0):
    rng = np.random.default_rng(seed)
    shape = (B, H, T, d) if B * H > 1 else (T, d)
    return tuple(rng.standard_normal(shape).astype(dtype) for _ in range(4))


def numpy_runners(block, causal, reference=True, extra_blocks=()):
    """name -> f(Q, K, V, G) running forward+backward; ``tiled`` has tiles ``block``,
    ``tiled <b>`` tiles ``b`` for each of ``extra_blocks``."""

    def ref(Q, K, V, G):
        visible = causal_mask(Q.shape[-2], K.shape[-2]) if causal else None
        _, saved = attention_forward(Q, K, V, visible)
        return attention_backward(saved, G)

    def fast(Q, K, V, G):
        _, saved = fast_attention_forward(Q, K, V, causal=causal)
        return fast_attention_backward(saved, G)

    def tiled(b):
        def run(Q, K, V, G):
            _, saved = tiled_attention_forward(Q, K, V, causal=causal, block_q=b,
                                               block_k=b)
            return tiled_attention_backward(saved, G)

        return run

    runners = {"fast dense": fast, "tiled": tiled(block)}
    runners.update({f"tiled {b}": tiled(b) for b in extra_blocks})
    if reference:
        runners = {"reference": ref, **runners}
    return runners


def torch_runner(causal):
    def run(Q, K, V, G):
        q, k, v = (torch.from_numpy(x).requires_grad_() for x in (Q, K, V))
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        o.backward(torch.from_numpy(G))
        return q.grad, k.grad, v.grad

    return run


def timed(runners, inputs, repeats):
    """name -> list of seconds; every repeat runs every runner once, in turn."""
    times = {name: [] for name in runners}
    for name, run in runners.items():  # warm-up, not timed
        run(*inputs)
    for _ in range(repeats):
        for name, run in runners.items():
            gc.collect()
            start = time.perf_counter()
            run(*inputs)
            times[name].append(time.perf_counter() - start)
    return times


def peak_bytes(run, inputs):
    """Peak bytes numpy allocated during ``run(*inputs)``, the inputs excluded."""
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    run(*inputs)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return peak


def row(part, name, dtype, causal, B, H, T, d, times, peak=None):
    return {"part": part, "implementation": name, "dtype": np.dtype(dtype).name,
            "causal": causal, "B": B, "H": H, "T": T, "d": d, "repeats": len(times),
            "seconds_median": statistics.median(times), "seconds_min": min(times),
            "peak_bytes": peak, "ratio_to_torch": None, "ratio_to_dense": None,
            "ratio_to_reference": None}


def add_ratios(rows, key, against, field):
    base = {k: r["seconds_median"] for r in rows
            if r["implementation"] == against for k in [key(r)]}
    for r in rows:
        if key(r) in base:
            r[field] = r["seconds_median"] / base[key(r)]


def batch_part(B, H, T, d, dtypes, repeats, block, use_torch):
    rows = []
    for dtype in dtypes:
        runners = numpy_runners(block, causal=False)
        if use_torch:
            runners["torch sdpa"] = torch_runner(causal=False)
        inputs = make_inputs(B, H, T, d, dtype)
        for name, times in timed(runners, inputs, repeats).items():
            rows.append(row("batch", name, dtype, False, B, H, T, d, times))
    add_ratios(rows, lambda r: r["dtype"], "torch sdpa", "ratio_to_torch")
    add_ratios(rows, lambda r: r["dtype"], "fast dense", "ratio_to_dense")
    add_ratios(rows, lambda r: r["dtype"], "reference", "ratio_to_reference")
    return rows


def sweep_part(sizes, d, repeats, block, use_torch, reference_up_to, extra_blocks=()):
    rows = []
    for causal in (False, True):
        for T in sizes:
            runners = numpy_runners(block, causal, reference=T <= reference_up_to,
                                    extra_blocks=extra_blocks)
            inputs = make_inputs(1, 1, T, d, np.float32)
            peaks = {name: peak_bytes(run, inputs) for name, run in runners.items()}
            if use_torch:
                runners["torch sdpa"] = torch_runner(causal)
            for name, times in timed(runners, inputs, repeats).items():
                rows.append(row("sweep", name, np.float32, causal, 1, 1, T, d, times,
                                peaks.get(name)))
    key = lambda r: (r["causal"], r["T"])  # noqa: E731
    add_ratios(rows, key, "torch sdpa", "ratio_to_torch")
    add_ratios(rows, key, "fast dense", "ratio_to_dense")
    add_ratios(rows, key, "reference", "ratio_to_reference")
    return rows


def write_csv(rows, path):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        for r in rows:
            writer.writerow({k: ("" if v is None else v) for k, v in r.items()})


def figure(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweep = [r for r in rows if r["part"] == "sweep"]
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    styles = {"reference": "s:", "fast dense": "o-", "tiled": "^-", "torch sdpa": "x--"}
    styles.update({name: "v-." for name in sorted({r["implementation"] for r in sweep})
                   if name.startswith("tiled ")})
    for name, style in styles.items():
        for causal, colour in ((False, "C0"), (True, "C3")):
            pts = [r for r in sweep if r["implementation"] == name
                   and r["causal"] == causal]
            if not pts:
                continue
            label = f"{name}{', causal' if causal else ''}"
            ax_t.loglog([r["T"] for r in pts], [r["seconds_median"] for r in pts],
                        style, color=colour, label=label, base=2)
            mem = [r for r in pts if r["peak_bytes"] is not None]
            if mem:
                ax_m.loglog(
                    [r["T"] for r in mem],
                    [r["peak_bytes"] / 2**20 for r in mem],
                    style,
                    color=colour,
                    label=label,
                    base=2,
                )
    ax_t.set(xlabel="T (one head, float32)", ylabel="forward+backward time (s)")
    ax_m.set(xlabel="T (one head, float32)", ylabel="peak memory (MiB)")
    ax_t.legend(fontsize=7)
    ax_m.legend(fontsize=7)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def targets(rows):
    """(target, measured, met) for the targets of Chapter 9, from the medians; the
    dense comparisons against the fast dense version and, where it ran, the reference;
    each ratio also from the shortest times (``min``)."""

    def find(**want):
        hits = [r for r in rows if all(r[k] == v for k, v in want.items())]
        return hits[0] if hits else None

    def ratio(a, b, field="seconds_median"):
        return a[field] / b[field]

    out = []
    fast = find(part="batch", implementation="fast dense", dtype="float32")
    torch_row = find(part="batch", implementation="torch sdpa", dtype="float32")
    if fast and torch_row:
        for stat in ("median", "min"):
            value = ratio(fast, torch_row, f"seconds_{stat}")
            out.append(
                (
                    f"fast dense fp32 time / torch sdpa <= 1.2 ({stat})",
                    value,
                    value <= 1.2,
                )
            )
    T = max((r["T"] for r in rows if r["part"] == "sweep"), default=None)
    if T is None:
        return out
    for dense_name in ("fast dense", "reference"):
        dense = find(part="sweep", implementation=dense_name, causal=False, T=T)
        c_dense = find(part="sweep", implementation=dense_name, causal=True, T=T)
        if dense is None:
            continue
        tiled = find(part="sweep", implementation="tiled", causal=False, T=T)
        c_tiled = find(part="sweep", implementation="tiled", causal=True, T=T)
        memory = dense["peak_bytes"] / tiled["peak_bytes"]
        out.append(
            (f"{dense_name} / tiled peak memory at T={T} >= 40", memory, memory >= 40)
        )
        for stat in ("median", "min"):
            field = f"seconds_{stat}"
            value = ratio(tiled, dense, field)
            out.append(
                (
                    f"tiled / {dense_name} time at T={T} <= 0.7 ({stat})",
                    value,
                    value <= 0.7,
                )
            )
            value = ratio(c_tiled, c_dense, field)
            out.append(
                (
                    f"causal tiled / causal {dense_name} time at T={T} <= 0.5 ({stat})",
                    value,
                    value <= 0.5,
                )
            )
    return out


def print_rows(rows, file=sys.stdout):
    head = (
        f"{'part':6} {'implementation':15} {'dtype':8} {'causal':6} {'T':>5} "
        f"{'median s':>9} {'min s':>8} {'peak MiB':>9} {'/torch':>7} {'/dense':>7} "
        f"{'/ref':>7}"
    )
    print(head, file=file)
    for r in rows:
        peak = "" if r["peak_bytes"] is None else f"{r['peak_bytes'] / 2**20:.1f}"
        ratios = [
            ("" if r[k] is None else f"{r[k]:.2f}")
            for k in ("ratio_to_torch", "ratio_to_dense", "ratio_to_reference")
        ]
        print(
            f"{r['part']:6} {r['implementation']:15} {r['dtype']:8} "
            f"{str(r['causal']):6} {r['T']:>5} {r['seconds_median']:9.4f} "
            f"{r['seconds_min']:8.4f} {peak:>9} {ratios[0]:>7} {ratios[1]:>7} "
            f"{ratios[2]:>7}",
            file=file,
        )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=pathlib.Path,
        default=HERE / "results",
        help="folder for attention.csv and attention.png",
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--batch",
        type=int,
        nargs=4,
        default=[4, 8, 1024, 64],
        metavar=("B", "H", "T", "d"),
    )
    parser.add_argument(
        "--sweep",
        type=int,
        nargs="+",
        default=[256, 512, 1024, 2048, 4096, 8192],
        metavar="T",
    )
    parser.add_argument("--sweep-d", type=int, default=64)
    parser.add_argument("--block", type=int, default=256, help="tile size")
    parser.add_argument(
        "--extra-blocks",
        type=int,
        nargs="*",
        default=[512],
        help="more tile sizes for the sweep (rows 'tiled <b>')",
    )
    parser.add_argument(
        "--reference-up-to",
        type=int,
        default=2048,
        help="largest T of the sweep that runs the (slow) reference",
    )
    parser.add_argument(
        "--no-torch",
        action="store_true",
        help="leave PyTorch out even when it is importable",
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes, one repeat: a smoke run"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.batch, args.sweep = 1, [1, 2, 48, 8], [32, 64]
        args.sweep_d, args.block, args.extra_blocks = 8, 16, [32]
    global torch
    torch = None if args.no_torch else import_torch()
    use_torch = torch is not None
    if use_torch:
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    given = sys.argv[1:] if argv is None else argv
    print(
        f"numpy {np.__version__}, {os.cpu_count()} cores; command: "
        f"{' '.join(['benchmarks/attention.py', *given])}"
    )
    B, H, T, d = args.batch
    rows = batch_part(
        B, H, T, d, (np.float32, np.float64), args.repeats, args.block, use_torch
    )
    rows += sweep_part(
        args.sweep,
        args.sweep_d,
        args.repeats,
        args.block,
        use_torch,
        args.reference_up_to,
        args.extra_blocks,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(rows, args.out / "attention.csv")
    figure(rows, args.out / "attention.png")
    print_rows(rows)
    for name, value, met in targets(rows):
        print(f"{name}: {value:.3g} {'met' if met else 'MISSED'}")
    return rows


if __name__ == "__main__":
    main()
