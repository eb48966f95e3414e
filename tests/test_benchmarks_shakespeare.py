"""Smoke run of benchmarks/shakespeare.py: a few steps, a tiny evaluation, no torch."""

import csv
import importlib.util
import math
import pathlib
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def load_benchmark():
    path = ROOT / "benchmarks" / "shakespeare.py"
    spec = importlib.util.spec_from_file_location("shakespeare_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_benchmark_trains_a_few_steps(tmp_path, capsys):
    bench = load_benchmark()
    start = time.process_time()
    rows = bench.main(["--iterations", "8", "--warmup", "2", "--eval-every", "4",
                       "--eval-batches", "1", "--no-torch", "--out", str(tmp_path)])
    cpu = time.process_time() - start
    # a guard against the smoke run growing into a real one (a full run takes minutes
    # of CPU), not a timing claim: about 2 s is typical
    assert cpu < 30
    assert (tmp_path / "shakespeare.png").stat().st_size > 0
    with open(tmp_path / "shakespeare.csv", newline="") as f:
        reader = csv.DictReader(f)
        table = list(reader)
    assert reader.fieldnames == bench.FIELDS
    assert [(r["implementation"], int(r["step"])) for r in table] == [
        ("numpy", 0), ("numpy", 4), ("numpy", 8)]
    assert len(rows) == len(table)
    loss = [float(r["heldout_loss"]) for r in table]
    seconds = [float(r["seconds"]) for r in table]
    assert all(math.isfinite(x) for x in loss + seconds)
    assert seconds[0] == 0 < seconds[1] < seconds[2]
    # from about ln 65 = 4.17 at the start; 8 steps of AdamW already lower it
    assert abs(loss[0] - math.log(65)) < 0.1 and loss[2] < loss[1] < loss[0] - 0.3
    out = capsys.readouterr().out
    assert "command: benchmarks/shakespeare.py --iterations 8" in out
    assert "BLAS threads:" in out and "PyTorch left out (--no-torch)" in out
    names = [name for name, _, _ in bench.targets(rows)]
    assert names == ["numpy final held-out loss <= 1.90 nats/char"]  # no torch
