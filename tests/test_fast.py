"""Tests of attncourse.fast beyond the conformance suite: the non-causal pass, padding,
the threads (over heads, and over the rows of one head), float32, the saved arrays,
bad input; and a smoke run of benchmarks/attention.py."""

import importlib.util
import pathlib
import time
import tracemalloc

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from attncourse.fast import (
    blas_threads,
    default_workers,
    fast_attention_backward,
    fast_attention_forward,
    fast_causal_attention,
    run_parallel,
)
from attncourse.layers.attention import (
    attention_backward,
    attention_forward,
    causal_attention,
    key_valid_from_lengths,
)

ROOT = pathlib.Path(__file__).resolve().parents[1]


def qkv(seed, batch_q=(2, 1), batch_k=(3,), batch_v=(1, 3), T_q=6, T_k=9, d=3, r=5):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((*batch_q, T_q, d)),
        rng.standard_normal((*batch_k, T_k, d)),
        rng.standard_normal((*batch_v, T_k, r)),
    )


def test_the_non_causal_pass_equals_the_reference():
    Q, K, V = qkv(0)  # T_q != T_k != d != r, broadcast batch axes
    O, saved = fast_attention_forward(Q, K, V)
    O_ref, A_ref = attention_forward(Q, K, V)
    assert_allclose(O, O_ref, rtol=1e-13, atol=1e-15)
    assert_allclose(
        saved.E * saved.inv_l[..., None],
        A_ref.reshape(-1, 6, 9),
        rtol=1e-13,
        atol=1e-16,
    )  # A = diag(1/l) E
    G = np.random.default_rng(1).standard_normal(O.shape)
    for got, want in zip(
        fast_attention_backward(saved, G), attention_backward(Q, K, V, G)
    ):
        assert got.shape == want.shape
        assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_padding_without_the_causal_mask():
    Q, K, V = qkv(2, (2,), (2,), (2,))
    key_valid = key_valid_from_lengths([0, 4], 9, side="left")  # sequence 0: no key
    O, saved = fast_attention_forward(Q, K, V, key_valid=key_valid)
    visible = np.broadcast_to(key_valid[:, None, :], (2, 6, 9))
    assert_allclose(O, attention_forward(Q, K, V, visible)[0], rtol=1e-13, atol=1e-15)
    assert np.all(O[0] == 0) and np.all(saved.inv_l[0] == 0)
    grads = fast_attention_backward(saved, np.ones_like(O))
    assert all(np.all(g[0] == 0) for g in grads)


@pytest.mark.parametrize("batch", [(2, 3), (1,)])  # threads over heads; over rows
def test_the_result_does_not_depend_on_the_threads(batch):
    Q, K, V = qkv(3, batch, batch, batch, T_q=37, T_k=37)
    G = np.random.default_rng(4).standard_normal(batch + (37, 5))
    results = []
    for workers in (1, 2, 3):
        O, saved = fast_attention_forward(Q, K, V, causal=True, workers=workers)
        results.append((O, *fast_attention_backward(saved, G, workers=workers)))
    for other in results[1:]:
        for x, y in zip(results[0], other):
            assert_allclose(x, y, rtol=1e-13, atol=1e-15)
    O, saved = fast_attention_forward(Q, K, V, causal=True, workers=3)
    for x, y in zip(results[-1][1:], fast_attention_backward(saved, G, workers=3)):
        assert_array_equal(x, y)  # the same threads: bit for bit


def test_float32_stays_float32_and_the_scores_are_stored_once():
    rng = np.random.default_rng(5)
    T, d = 256, 16
    Q, K, V = (rng.standard_normal((T, d)).astype(np.float32) for _ in range(3))
    tracemalloc.start()
    O, saved = fast_attention_forward(Q, K, V, workers=1)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert O.dtype == np.float32 and saved.E.dtype == np.float32
    assert T * T * 4 <= peak < 1.5 * T * T * 4  # E, and no second T x T array
    grads = fast_attention_backward(saved, np.ones_like(O))
    assert all(g.dtype == np.float32 for g in grads)
    O64, _ = attention_forward(*(x.astype(np.float64) for x in (Q, K, V)))
    assert_allclose(O, O64, rtol=1e-4, atol=1e-5)


def test_bad_input_is_named():
    Q, K, V = qkv(6, (), (), ())
    O, saved = fast_attention_forward(Q, K, V)
    with pytest.raises(
        ValueError,
        match=r"dO must have the shape of the output, "
        r"\(6, 5\), got \(6, 4\)",
    ):
        fast_attention_backward(saved, np.ones((6, 4)))
    for bad in (0, 1.5, True):
        with pytest.raises(
            ValueError,
            match=rf"workers must be a positive integer, got "
            rf"{repr(bad).replace('.', '[.]')}",
        ):
            fast_attention_forward(Q, K, V, workers=bad)
    with pytest.raises(ValueError, match=r"Q and K must share the key width d"):
        fast_attention_forward(Q, K[..., :2], V)
    with pytest.raises(NotImplementedError, match="Chapter 10"):
        fast_causal_attention(Q, K, V, query_offset=1)


def test_dropout_is_applied_to_the_probabilities_once():
    Q, K, V = qkv(7, (), (), (), T_q=5, T_k=5)
    calls = []

    def dropout(A):
        calls.append(A)
        return 2 * A

    O, A = fast_causal_attention(Q, K, V, dropout=dropout)
    O_ref, A_ref = causal_attention(Q, K, V)
    assert len(calls) == 1
    assert_allclose(A, A_ref, rtol=1e-13, atol=1e-16)
    assert_allclose(O, 2 * O_ref, rtol=1e-13, atol=1e-15)


def test_run_parallel_runs_every_unit_and_blas_threads_restores_the_count():
    seen = []
    run_parallel(seen.append, range(7), 3)
    assert sorted(seen) == list(range(7))
    assert default_workers() >= 1
    from threadpoolctl import threadpool_info

    def blas():
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    before = blas()
    with blas_threads(1):
        assert set(blas()) == {1}
    assert blas() == before


# --- the benchmark --------------------------------------------------------------------


def load_benchmark():
    path = ROOT / "benchmarks" / "attention.py"
    spec = importlib.util.spec_from_file_location("attention_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_benchmark_runs_on_tiny_sizes(tmp_path, capsys):
    bench = load_benchmark()
    start = time.process_time()  # CPU time: the test command runs files in parallel
    rows = bench.main(["--quick", "--no-torch", "--out", str(tmp_path)])
    # a guard against the quick mode growing into a real run (seconds of CPU at the
    # full sizes), not a timing claim: about 5 s is typical, 15 s leaves room for a
    # loaded machine
    assert time.process_time() - start < 15
    assert (tmp_path / "attention.png").stat().st_size > 0
    lines = (tmp_path / "attention.csv").read_text().splitlines()
    assert lines[0].split(",") == bench.FIELDS and len(lines) == 1 + len(rows)
    names = {r["implementation"] for r in rows}
    assert names == {"reference", "fast dense", "tiled", "tiled 32"}  # no torch
    tiled = [r for r in rows if r["part"] == "sweep" and r["implementation"] == "tiled"]
    assert all(r["peak_bytes"] > 0 and r["ratio_to_dense"] > 0 for r in tiled)
    out = capsys.readouterr().out
    assert "dense / tiled peak memory at T=64" in out and not out.startswith("torch")
    assert lines[0].endswith("ratio_to_dense,ratio_to_reference")
    assert "command: benchmarks/attention.py --quick --no-torch" in out
    names = [t[0] for t in bench.targets(rows)]  # no torch: no ratio to it
    assert names[:3] == [
        "fast dense / tiled peak memory at T=64 >= 40",
        "tiled / fast dense time at T=64 <= 0.7 (median)",
        "causal tiled / causal fast dense time at T=64 <= 0.5 (median)",
    ]
    assert (
        len(names) == 10 and names[5] == "reference / tiled peak memory at T=64 >= 40"
    )
    assert all(r["ratio_to_reference"] > 0 for r in tiled)
