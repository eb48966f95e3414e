"""Tiny Shakespeare, side by side: the course's numpy model and the same in PyTorch.

Trains nanoGPT's CPU "baby GPT" on characters: 4 layers, 4 heads, width 128, context
64, batch 12, 2,000 iterations, AdamW (learning rate 1e-3, 100 warm-up steps, cosine
decay to 1e-4, betas 0.9 and 0.99, weight decay 0.1 on matrices only), gradients
clipped to global norm 1.0, no dropout, nanoGPT's split (the first 90 % of the
characters train, the last 10 % are held out). The model is the course's own
(:mod:`attncourse.model`, tied unembedding, the tanh form of GELU, float32), with
nanoGPT's initialisation (:func:`attncourse.model.init_model`: weights ``N(0, 0.02^2)``,
the residual projections ``N(0, 0.02^2 / (2 L))``); one step is the four lines of
:mod:`attncourse.train` (``model_loss``, ``clip_by_global_norm``, ``adamw_step``,
``lr_at``). It differs from nanoGPT's in one respect: the course's LayerNorms have a
shift and its MLP has biases (zero at the start, never decayed); nanoGPT's baby GPT has
neither.

When PyTorch is importable, the same model (the same arrays, the same biases) runs in
PyTorch in the same process, from the same initial weights and on the same batches,
interleaved: chunks of ``--chunk`` steps (10) alternate between the two (who goes
first alternates too), so a busy machine slows both alike. Every ``--eval-every``
steps (100) both are evaluated on the same held-out windows (``--eval-batches``
batches of 12 windows of 64 characters, drawn once). Training time excludes the
evaluations.

Prints, and writes into ``--out`` (default ``benchmarks/results``) as
``shakespeare.csv`` and ``shakespeare.png``, the held-out loss against training time
for both, and the three targets: the numpy model's final held-out loss <= 1.90 nats per
character (nanoGPT publishes about 1.88); its wall time <= 1.5 x PyTorch's; the two
curves agree within their noise (at every evaluation, ``|loss_numpy - loss_torch|``
at most twice the standard error of the difference of two held-out estimates,
``sqrt(se_numpy^2 + se_torch^2)``, each ``se`` from the spread of the per-window
losses). Thread counts: numpy's BLAS uses what the environment sets
(``OPENBLAS_NUM_THREADS`` etc.; threadpoolctl reports it), PyTorch gets
``torch.set_num_threads(os.cpu_count())``; both are printed.

PyTorch is optional, never a dependency of the course: give the benchmark a Python of
its own that has it (a CPU build of torch), with the course installed into it. The
quiet rerun, from the repository root, with nothing else running on the machine::

    python3 -m venv /tmp/torchenv
    /tmp/torchenv/bin/pip install numpy threadpoolctl matplotlib torch
    /tmp/torchenv/bin/pip install -e . --no-deps
    /tmp/torchenv/bin/python benchmarks/shakespeare.py --profile 20

It writes ``benchmarks/results/shakespeare.csv`` and ``.png``. Two runs here gave the
same numpy losses bit for bit (PyTorch's differed in the seventh decimal); the times
vary.
On a 2-core machine under load from other work it took 14 minutes. Without PyTorch,
``.venv/bin/python benchmarks/shakespeare.py`` trains the numpy model alone. A smoke
run: ``--iterations 8 --warmup 2 --eval-every 4 --eval-batches 1 --out /tmp/x``.
``--profile N`` then profiles ``N`` numpy steps (cProfile: the functions that take the
time).
"""

import argparse
import cProfile
import csv
import io
import math
import os
import pathlib
import pstats
import sys
import time

import numpy as np
import threadpoolctl

from attncourse import bpe, text
from attncourse.model import ModelConfig, count_parameters, init_model, model_forward
from attncourse.model import model_loss
from attncourse.optim import adamw_init, adamw_step, clip_by_global_norm, lr_at
from attncourse.params import flatten_params
from attncourse.softmax import logsumexp
from attncourse.train import as_dtype

torch = None  # imported by main() when wanted: optional, the course never needs it


def import_torch():
    """Return the torch module, or None when it is not installed."""
    try:
        import torch as module
    except ImportError:
        return None
    return module


HERE = pathlib.Path(__file__).resolve().parent
FIELDS = ["implementation", "step", "seconds", "cpu_seconds", "heldout_loss",
          "heldout_se", "train_loss", "lr", "threads"]
PUBLISHED = 1.88  # nanoGPT's validation loss for this configuration (README of data)
TARGET_LOSS, TARGET_RATIO, TARGET_AGREEMENT = 1.90, 1.5, 2.0
BATCH, CONTEXT = 12, 64
BETAS, WEIGHT_DECAY, CLIP, EPS = (0.9, 0.99), 0.1, 1.0, 1e-8


def load_data():
    """Return ``train_ids, heldout_ids, vocab``: nanoGPT's split, characters."""
    corpus = bpe.shakespeare()
    train, held_out = bpe.split_text(corpus)
    vocab = text.build_vocab(corpus)  # nanoGPT's vocabulary: every character, 65
    return text.encode(train, vocab), text.encode(held_out, vocab), vocab


def eval_windows(ids, batches, seed):
    """The held-out windows of every evaluation: ``(batches * 12, 64)`` ids, targets."""
    batch = text.window_batches(ids, CONTEXT, BATCH, seed)
    pairs = [batch(step)[:2] for step in range(1, batches + 1)]
    return (np.concatenate([x for x, _ in pairs]),
            np.concatenate([y for _, y in pairs]))


def mean_and_se(per_window):
    """The mean of the per-window losses and its standard error."""
    n = per_window.size
    se = per_window.std(ddof=1) / math.sqrt(n) if n > 1 else math.nan
    return float(per_window.mean()), float(se)


# --- numpy: the course's code --------------------------------------------------------


class NumpyRun:
    """The course's model, trained by the steps of :func:`attncourse.train.train`."""

    name = "numpy"

    def __init__(self, params, config, schedule):
        self.params, self.config, self.schedule = params, config, schedule
        self.state = adamw_init(params)

    def step(self, step, ids, targets):
        loss, grads = model_loss(self.params, ids, targets, config=self.config)
        grads, norm = clip_by_global_norm(grads, CLIP)
        self.params, self.state = adamw_step(
            self.params, grads, self.state, lr=self.schedule(step), betas=BETAS,
            eps=EPS, weight_decay=WEIGHT_DECAY)  # decay: the default, matrices only
        return loss, norm

    def evaluate(self, X, Y, chunk=120):
        losses = []
        for i in range(0, len(X), chunk):
            Z, _ = model_forward(self.params, X[i:i + chunk], config=self.config)
            z_y = np.take_along_axis(Z, Y[i:i + chunk, :, None], axis=-1)[..., 0]
            losses.append((logsumexp(Z) - z_y).astype(np.float64).mean(axis=-1))
        return mean_and_se(np.concatenate(losses))


# --- PyTorch: the same model, the same arrays ----------------------------------------


class TorchRun:
    """The course's model written in PyTorch, from the same flat arrays."""

    name = "torch"

    def __init__(self, params, config, schedule):
        self.config, self.schedule = config, schedule
        self.p = {path: torch.tensor(np.array(x), requires_grad=True)
                  for path, x in flatten_params(params).items()}
        decay = [t for t in self.p.values() if t.ndim >= 2]
        rest = [t for t in self.p.values() if t.ndim < 2]
        self.opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": WEIGHT_DECAY},
             {"params": rest, "weight_decay": 0.0}],
            lr=schedule(1), betas=BETAS, eps=EPS)

    def forward(self, idx):
        F, p, c = torch.nn.functional, self.p, self.config
        B, T = idx.shape
        x = p["embed.E"][idx] + p["pos.P"][:T]
        for b in (f"blocks.{i}." for i in range(c.layers)):
            h = F.layer_norm(x, (c.D,), p[b + "ln1.gamma"], p[b + "ln1.beta"], c.eps)
            q, k, v = (
                (h @ p[b + f"attn.W_{n}"]).view(B, T, c.heads, c.d).transpose(1, 2)
                for n in "QKV")
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + o.transpose(1, 2).reshape(B, T, c.D) @ p[b + "attn.W_O"]
            h = F.layer_norm(x, (c.D,), p[b + "ln2.gamma"], p[b + "ln2.beta"], c.eps)
            u = F.gelu(h @ p[b + "mlp.up.W"] + p[b + "mlp.up.b"], approximate="tanh")
            x = x + u @ p[b + "mlp.down.W"] + p[b + "mlp.down.b"]
        x = F.layer_norm(x, (c.D,), p["ln_f.gamma"], p["ln_f.beta"], c.eps)
        return x @ p["embed.E"].T  # tied: U = E^T

    def step(self, step, ids, targets):
        logits = self.forward(torch.from_numpy(ids))
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), torch.from_numpy(targets).reshape(-1))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(list(self.p.values()), CLIP)
        for group in self.opt.param_groups:
            group["lr"] = self.schedule(step)
        self.opt.step()
        return float(loss.detach()), float(norm)

    def evaluate(self, X, Y, chunk=120):
        losses = []
        with torch.no_grad():
            for i in range(0, len(X), chunk):
                logits = self.forward(torch.from_numpy(X[i:i + chunk]))
                nll = torch.nn.functional.cross_entropy(
                    logits.transpose(1, 2), torch.from_numpy(Y[i:i + chunk]),
                    reduction="none")
                losses.append(nll.double().mean(dim=-1).numpy())
        return mean_and_se(np.concatenate(losses))


# --- the run -------------------------------------------------------------------------


def numpy_threads():
    """The BLAS libraries numpy's process has loaded, with their thread counts."""
    info = threadpoolctl.threadpool_info()
    return ", ".join(f"{i['internal_api']} {i['num_threads']}" for i in info
                     if i["user_api"] == "blas") or "unknown"


def run(runs, batch, iterations, eval_every, chunk, X, Y, lines=True):
    """Train every run in ``runs`` for ``iterations`` steps, in interleaved chunks of
    ``chunk`` steps, evaluating all every ``eval_every`` steps and after the last;
    return ``rows, first`` (the CSV rows; step 1's losses and gradient norms)."""
    clock = {r.name: [0.0, 0.0] for r in runs}  # wall, cpu seconds of training
    recent = {r.name: [] for r in runs}
    first = {}
    rows = []

    def record(r, step, threads):
        loss, se = r.evaluate(X, Y)
        train = float(np.mean(recent[r.name])) if recent[r.name] else math.nan
        rows.append({"implementation": r.name, "step": step,
                     "seconds": clock[r.name][0], "cpu_seconds": clock[r.name][1],
                     "heldout_loss": loss,
                     "heldout_se": se, "train_loss": train,
                     "lr": r.schedule(step) if step else 0.0, "threads": threads})
        recent[r.name].clear()
        return loss

    threads = {r.name: (numpy_threads() if r.name == "numpy"
                        else f"torch {torch.get_num_threads()}") for r in runs}
    for r in runs:
        record(r, 0, threads[r.name])
    start, turn = 1, 0
    while start <= iterations:
        boundary = ((start - 1) // eval_every + 1) * eval_every  # the next evaluation
        stop = min(start + chunk - 1, boundary, iterations)
        order = runs if turn % 2 == 0 else runs[::-1]
        for r in order:
            wall, cpu = time.perf_counter(), time.process_time()
            for step in range(start, stop + 1):
                ids, targets, _ = batch(step)
                loss, norm = r.step(step, ids, targets)
                if not math.isfinite(loss):
                    raise ValueError(f"{r.name}: the loss is {loss} at step {step}")
                if step == 1:
                    first[r.name] = (loss, norm)
                recent[r.name].append(loss)
            clock[r.name][0] += time.perf_counter() - wall
            clock[r.name][1] += time.process_time() - cpu
        start, turn = stop + 1, turn + 1
        if stop % eval_every and stop != iterations:
            continue
        shown = []
        for r in runs:
            loss = record(r, stop, threads[r.name])
            shown.append(f"{r.name} {loss:.4f} ({clock[r.name][0]:.1f} s)")
        if lines:
            print(f"step {stop:>{len(str(iterations))}}/{iterations}  held-out: "
                  + "  ".join(shown), flush=True)
    return rows, first


def targets(rows):
    """``(target, measured, met)`` for the three targets, from the last evaluation
    (``met`` is None for a number given for information)."""
    last = {}
    for r in rows:
        last[r["implementation"]] = r
    final = last["numpy"]["heldout_loss"]
    out = [("numpy final held-out loss <= 1.90 nats/char", final, final <= TARGET_LOSS)]
    if "torch" not in last:
        return out
    ratio = last["numpy"]["seconds"] / last["torch"]["seconds"]
    out.append(("numpy wall / torch wall <= 1.5", ratio, ratio <= TARGET_RATIO))
    cpu = last["numpy"]["cpu_seconds"] / last["torch"]["cpu_seconds"]
    out.append(("numpy CPU time / torch CPU time (for information)", cpu, None))
    by_step = {}
    for r in rows:
        by_step.setdefault(r["step"], {})[r["implementation"]] = r
    z = max(abs(a["heldout_loss"] - b["heldout_loss"])
            / math.hypot(a["heldout_se"], b["heldout_se"])
            for pair in by_step.values() for a, b in [(pair["numpy"], pair["torch"])])
    out.append(("max |numpy - torch| held-out / noise <= 2", z, z <= TARGET_AGREEMENT))
    return out


def write_csv(rows, path):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)


def figure(rows, path):
    """Left: held-out loss against training time. Right: ``|numpy - torch|`` at each
    evaluation against twice the noise of a held-out estimate (when torch ran)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_d) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    curves = {name: [r for r in rows if r["implementation"] == name]
              for name in ("numpy", "torch")}
    for (name, pts), style in zip(curves.items(), ("o-", "x--")):
        if pts:
            ax_t.plot([r["seconds"] for r in pts], [r["heldout_loss"] for r in pts],
                      style, label=name, ms=4)
    ax_t.axhline(PUBLISHED, color="grey", lw=0.8, ls=":",
                 label=f"nanoGPT published, {PUBLISHED}")
    ax_t.set(xlabel="training wall time (s)",
             ylabel="held-out loss (nats per character)")
    ax_t.legend(fontsize=8)
    if curves["torch"]:
        steps = [a["step"] for a in curves["numpy"]]
        pairs = list(zip(curves["numpy"], curves["torch"]))
        gap = [max(abs(a["heldout_loss"] - b["heldout_loss"]), 1e-9) for a, b in pairs]
        noise = [2 * math.hypot(a["heldout_se"], b["heldout_se"]) for a, b in pairs]
        ax_d.semilogy(steps, gap, "o-", ms=4, label="|numpy - torch|")
        ax_d.semilogy(steps, noise, "k:", label="2 x noise of a held-out estimate")
        ax_d.legend(fontsize=8)
    ax_d.set(xlabel="step", ylabel="held-out loss gap (nats per character)",
             title="same weights, same batches" if curves["torch"] else "no torch")
    fig.savefig(path, dpi=120)
    plt.close(fig)


def profile(run_, batch, steps, last_step, top=20):
    """Profile ``steps`` more numpy steps (on the batches and learning rates of the
    last ones); return the cProfile table, by the time spent in each function."""
    profiler = cProfile.Profile()
    profiler.enable()
    for step in range(max(1, last_step - steps + 1), last_step + 1):
        ids, targets_, _ = batch(step)
        run_.step(step, ids, targets_)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=HERE / "results",
                        help="folder for shakespeare.csv and shakespeare.png")
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=100, help="warm-up steps")
    parser.add_argument("--eval-every", type=int, default=100,
                        help="steps between two evaluations of both")
    parser.add_argument("--chunk", type=int, default=10,
                        help="steps each side runs before the other takes its turn")
    parser.add_argument("--eval-batches", type=int, default=50,
                        help="held-out batches of 12 windows per evaluation")
    parser.add_argument("--seed", type=int, default=0,
                        help="initial weights, training batches, held-out windows")
    parser.add_argument("--no-torch", action="store_true",
                        help="leave PyTorch out even when it is importable")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="after the run, profile N more numpy steps (cProfile)")
    args = parser.parse_args(argv)
    for name in ("iterations", "eval_every", "eval_batches", "chunk"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if not 0 <= args.warmup <= args.iterations:
        parser.error("--warmup must lie in [0, --iterations]")
    global torch
    torch = None if args.no_torch else import_torch()
    given = sys.argv[1:] if argv is None else argv
    print(f"command: {' '.join(['benchmarks/shakespeare.py', *given])}")
    print(f"numpy {np.__version__}, BLAS threads: {numpy_threads()} (as the "
          f"environment sets them); {os.cpu_count()} cores; load average "
          f"{os.getloadavg()[0]:.2f}")
    if torch is not None:
        torch.set_num_threads(os.cpu_count())
        print(f"torch {torch.__version__}, torch.set_num_threads({os.cpu_count()}): "
              f"{torch.get_num_threads()} threads")
    else:
        why = "left out (--no-torch)" if args.no_torch else "not importable"
        print(f"PyTorch {why}: the numpy model alone")

    train_ids, heldout_ids, vocab = load_data()
    config = ModelConfig(n_vocab=len(vocab), T_max=CONTEXT, D=128, heads=4, layers=4,
                         tied=True)
    params = as_dtype(init_model(config, seed=args.seed), np.float32)
    print(f"{count_parameters(params):,} parameters; {train_ids.size:,} training and "
          f"{heldout_ids.size:,} held-out characters; vocabulary {len(vocab)}")

    def schedule(step):
        return lr_at(step, lr=1e-3, warmup=args.warmup, total=args.iterations,
                     min_lr=1e-4)

    batch = text.window_batches(train_ids, CONTEXT, BATCH, args.seed)
    X, Y = eval_windows(heldout_ids, args.eval_batches, seed=args.seed + 1)
    runs = [NumpyRun(params, config, schedule)]
    if torch is not None:
        runs.append(TorchRun(params, config, schedule))
    rows, first = run(runs, batch, args.iterations, args.eval_every, args.chunk, X,
                      Y)

    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(rows, args.out / "shakespeare.csv")
    figure(rows, args.out / "shakespeare.png")
    last = {r["implementation"]: r for r in rows}
    for name, r in last.items():
        print(f"{name}: {r['step']} steps in {r['seconds']:.1f} s wall "
              f"({1000 * r['seconds'] / r['step']:.1f} ms per step), "
              f"{r['cpu_seconds']:.1f} s CPU, held-out loss {r['heldout_loss']:.4f} "
              f"+- {r['heldout_se']:.4f}, threads: {r['threads']}")
    if "torch" in first:
        (a, na), (b, nb) = first["numpy"], first["torch"]
        print(f"step 1, same weights and batch: training loss numpy {a:.6f}, torch "
              f"{b:.6f}; gradient norm numpy {na:.6f}, torch {nb:.6f}")
    for name, value, met in targets(rows):
        verdict = "" if met is None else " met" if met else " MISSED"
        print(f"{name}: {value:.3g}{verdict}")
    if args.profile:
        print(profile(runs[0], batch, args.profile, args.iterations))
    return rows


if __name__ == "__main__":
    main()
