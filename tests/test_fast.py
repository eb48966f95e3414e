"""Tests of attncourse.fast beyond the conformance suite: the non-causal pass, padding,
the threads (over heads, and over the rows of one head), float32, the saved arrays,
bad input; and a smoke run of benchmarks/attention.py."""

import gc
import importlib.util
import os
import pathlib
import threading
import time
import tracemalloc

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import attncourse.fast as fast
from attncourse.fast import (
    blas_threads,
    default_workers,
    fast_attention_backward,
    fast_attention_forward,
    fast_causal_attention,
    fast_causal_attention_backward,
    run_parallel,
)
from attncourse.layers.attention import (
    attention_backward,
    attention_forward,
    causal_attention,
    key_valid_from_lengths,
)

ROOT = pathlib.Path(__file__).resolve().parents[1]


def reference_backward(Q, K, V, G, visible=None):
    """``dQ, dK, dV`` of the reference pair: the forward's ``saved``, then the
    backward."""
    return attention_backward(attention_forward(Q, K, V, visible)[1], G)


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
    O_ref, saved_ref = attention_forward(Q, K, V)
    A_ref = saved_ref.A
    assert_allclose(O, O_ref, rtol=1e-13, atol=1e-15)
    assert_allclose(
        saved.E * saved.inv_l[..., None],
        A_ref.reshape(-1, 6, 9),
        rtol=1e-13,
        atol=1e-16,
    )  # A = diag(1/l) E
    G = np.random.default_rng(1).standard_normal(O.shape)
    for got, want in zip(
        fast_attention_backward(saved, G), reference_backward(Q, K, V, G)
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
        match=r"^G must have the shape of the output O, \(6, 5\), got \(6, 4\)$",
    ):
        fast_attention_backward(saved, np.ones((6, 4)))
    for bad in (0, 1.5, True):
        with pytest.raises(
            ValueError,
            match=rf"^sizes must be positive integers: workers="
            rf"{repr(bad).replace('.', '[.]')} ",
        ):
            fast_attention_forward(Q, K, V, workers=bad)
    with pytest.raises(ValueError, match=r"^K must have shape \(\.\.\., T_k, d\) "
                                         r"with d=3 \(as in Q\)"):
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
    # The benchmark calls gc.collect() before each of its 38 runs, as it should in a
    # process of its own. Here every call would also walk the test session's objects
    # (hundreds of thousands: the collected tests, hypothesis, sympy, matplotlib), about
    # 0.3 s each; frozen, they are left out and the collector sees the benchmark's own
    # objects, as in a standalone run.
    gc.freeze()
    try:
        start = time.process_time()  # CPU time: the test command runs files in parallel
        rows = bench.main(["--quick", "--no-torch", "--out", str(tmp_path)])
        cpu = time.process_time() - start
    finally:
        gc.unfreeze()
    # a guard against the quick mode growing into a real run (seconds of CPU at the
    # full sizes), not a timing claim: about 2 s is typical, 15 s leaves room for a
    # loaded machine
    assert cpu < 15
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


# --- the threads: defaults, units of work, run_parallel -------------------------------


def test_default_workers_is_the_cpu_count_or_one(monkeypatch):
    assert default_workers() == os.cpu_count()
    monkeypatch.setattr(os, "cpu_count", lambda: None)  # undeterminable
    assert default_workers() == 1


def test_run_parallel_with_one_worker_or_one_unit_runs_in_order_on_this_thread():
    for units, workers in ((range(5), 1), (range(1), 3), (range(0), 3)):
        seen = []
        run_parallel(lambda u: seen.append((u, threading.get_ident())), units, workers)
        assert seen == [(u, threading.get_ident()) for u in units]


@pytest.mark.parametrize("workers, n_units", [(2, 2), (2, 4), (3, 6)])
def test_run_parallel_runs_on_exactly_workers_threads_with_one_blas_thread(
    workers, n_units
):
    from threadpoolctl import threadpool_info

    together = threading.Barrier(workers, timeout=10)  # only if `workers` run at once
    seen, idents, blas = [], set(), set()

    def work(unit):
        together.wait()
        seen.append(unit)
        idents.add(threading.get_ident())
        blas.update(i["num_threads"] for i in threadpool_info()
                    if i["user_api"] == "blas")

    run_parallel(work, range(n_units), workers)
    assert sorted(seen) == list(range(n_units))
    assert len(idents) == workers and threading.get_ident() not in idents
    assert blas == {1}


def test_run_parallel_defaults_to_the_machines_cores(monkeypatch):
    monkeypatch.setattr(fast, "default_workers", lambda: 2)
    together, seen = threading.Barrier(2, timeout=10), []

    def work(unit):
        together.wait()  # two at once: the default of 2 threads, not 1
        seen.append(unit)

    run_parallel(work, range(4), None)
    assert sorted(seen) == list(range(4))


def test_a_small_pass_runs_on_one_thread_by_default(monkeypatch):
    monkeypatch.setattr(fast, "default_workers", lambda: 6)
    below = fast.SEQUENTIAL_BELOW
    assert fast._small_is_sequential(None, below - 1) == 1
    assert fast._small_is_sequential(None, below) == 6
    assert fast._small_is_sequential(4, 10) == 4
    assert fast._small_is_sequential(1, below) == 1


def test_the_units_of_work_are_whole_heads_or_the_rows_split_evenly(monkeypatch):
    monkeypatch.setattr(fast, "default_workers", lambda: 4)
    chunks = fast._row_chunks
    assert chunks(4, 6, 2) == [(h, 0, 6) for h in range(4)]  # enough heads
    assert chunks(1, 10, 3) == [(0, 0, 3), (0, 3, 6), (0, 6, 10)]
    assert chunks(2, 5, 3) == [(0, 0, 2), (0, 2, 5), (1, 0, 2), (1, 2, 5)]
    assert chunks(1, 2, 5) == [(0, 0, 1), (0, 1, 2)]  # no more parts than rows
    assert chunks(2, 5, None) == chunks(2, 5, 4)  # the default: default_workers()
    assert chunks(1, 6, np.int64(3)) == chunks(1, 6, 3)


def spy_on_run_parallel(monkeypatch):
    """Record ``(units, workers)`` of every call of ``attncourse.fast.run_parallel``."""
    calls, real = [], fast.run_parallel

    def spy(work, units, workers):
        calls.append((list(units), workers))
        return real(work, units, workers)

    monkeypatch.setattr(fast, "run_parallel", spy)
    return calls


def test_the_passes_share_the_rows_of_one_head_between_the_threads(monkeypatch):
    monkeypatch.setattr(fast, "default_workers", lambda: 3)
    calls = spy_on_run_parallel(monkeypatch)
    rng = np.random.default_rng(8)
    T_q, T_k = 128, fast.SEQUENTIAL_BELOW // 128  # T_q x T_k = SEQUENTIAL_BELOW
    Q, K, V = (rng.standard_normal(s) for s in ((T_q, 3), (T_k, 3), (T_k, 5)))
    G = rng.standard_normal((T_q, 5))
    O, saved = fast_attention_forward(Q, K, V)  # the default: 3 threads
    fast_attention_backward(saved, G)
    fast_attention_backward(saved, G, workers=2)
    O_small, saved_small = fast_attention_forward(Q[:5], K[:7], V[:7])  # 1 thread
    fast_attention_backward(saved_small, G[:5])
    fast_attention_backward(saved_small, G[:5], workers=2)
    thirds, halves = [(0, 0, 42), (0, 42, 85), (0, 85, 128)], [(0, 0, 64), (0, 64, 128)]
    assert calls == [(thirds, 3), (thirds, 3), (halves, 2), ([(0, 0, 5)], 1),
                     ([(0, 0, 5)], 1), ([(0, 0, 2), (0, 2, 5)], 2)]


# --- dtypes, broadcasting, names ------------------------------------------------------


@pytest.mark.parametrize("wide", ["Q", "K", "V"])
def test_mixed_precision_inputs_compute_in_the_widest(wide):
    Q, K, V = qkv(9, (), (), ())
    args = {n: x if n == wide else x.astype(np.float32)
            for n, x in zip("QKV", (Q, K, V))}
    O, saved = fast_attention_forward(*args.values())
    assert O.dtype == np.float64 and saved.E.dtype == np.float64
    ref = attention_forward(*(x.astype(np.float64) for x in args.values()))[0]
    assert_allclose(O, ref, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("batched", ["K", "V"])
def test_one_batched_key_or_value_input_broadcasts_the_others(batched):
    rng = np.random.default_rng(10)
    T_q, T_k, d, r = 6, 9, 3, 5
    shapes = {"Q": (T_q, d), "K": (T_k, d), "V": (T_k, r)}
    shapes[batched] = (2,) + shapes[batched]
    Q, K, V = (rng.standard_normal(shapes[n]) for n in "QKV")
    O, saved = fast_attention_forward(Q, K, V)
    whole = [np.broadcast_to(x, (2,) + x.shape[-2:]) for x in (Q, K, V)]
    assert_allclose(O, attention_forward(*whole)[0], rtol=1e-13, atol=1e-15)
    G = rng.standard_normal(O.shape)
    for got, want, x in zip(fast_attention_backward(saved, G),
                            reference_backward(*whole, G), (Q, K, V)):
        assert got.shape == x.shape
        assert_allclose(got, want if x.ndim == 3 else want.sum(axis=0), rtol=1e-12,
                        atol=1e-14)


def test_the_backward_names_an_upstream_gradient_that_is_not_numbers():
    Q, K, V = qkv(11, (), (), ())
    O, saved = fast_attention_forward(Q, K, V)
    with pytest.raises(ValueError, match=r"^G must be an array of numbers"):
        fast_attention_backward(saved, O.astype(str))


@pytest.mark.parametrize("workers", [1, 2])  # one unit per head; rows split
def test_the_float32_backward_works_in_float32_with_one_t_by_t_buffer(workers):
    rng = np.random.default_rng(12)
    T, d = 512, 8
    Q, K, V, G = (rng.standard_normal((T, d)).astype(np.float32) for _ in range(4))
    O, saved = fast_attention_forward(Q, K, V, workers=workers)
    tracemalloc.start()
    grads = fast_attention_backward(saved, G, workers=workers)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert all(g.dtype == np.float32 for g in grads)
    # T x T float32 in all over the threads, plus the T x d arrays: not T x T float64,
    # nor a buffer of more rows than a unit has
    assert peak < 1.3 * T * T * 4
    want = reference_backward(*(x.astype(np.float64) for x in (Q, K, V, G)))
    for got, w in zip(grads, want):
        assert_allclose(got, w, rtol=1e-3, atol=1e-4)


def test_a_float64_upstream_gradient_of_a_float32_pass_is_rounded_to_float32():
    rng = np.random.default_rng(13)
    Q, K, V = (x.astype(np.float32) for x in qkv(13, (), (), ()))
    O, saved = fast_attention_forward(Q, K, V)
    G = rng.standard_normal(O.shape)
    for got, want in zip(fast_attention_backward(saved, G),
                         fast_attention_backward(saved, G.astype(np.float32))):
        assert got.dtype == np.float32
        assert_array_equal(got, want)


def test_a_query_offset_is_refused_with_the_reason():
    Q, K, V = qkv(14, (), (), ())
    with pytest.raises(
        NotImplementedError,
        match=r"^query_offset != 0 needs the key/value cache of Chapter 10$",
    ):
        fast_causal_attention(Q, K, V, query_offset=2)


@pytest.mark.parametrize("T_q, T_k", [(0, 5), (4, 0)], ids=["no queries", "no keys"])
def test_no_queries_or_no_keys_give_empty_or_zero_results_in_every_version(T_q, T_k):
    # With no keys every query reads nothing (Chapter 4): output 0, gradients 0.
    from attncourse.tiled import tiled_attention_backward, tiled_attention_forward
    rng = np.random.default_rng(12)
    Q, K, V = (rng.standard_normal((2, T_q, 3)), rng.standard_normal((T_k, 3)),
               rng.standard_normal((T_k, 2)))
    G = rng.standard_normal((2, T_q, 2))
    O_f, saved_f = fast_attention_forward(Q, K, V)
    O_t, saved_t = tiled_attention_forward(Q, K, V, block_q=2, block_k=2)
    versions = {"reference": (attention_forward(Q, K, V)[0],
                              reference_backward(Q, K, V, G)),
                "fast": (O_f, fast_attention_backward(saved_f, G)),
                "tiled": (O_t, tiled_attention_backward(saved_t, G))}
    for name, (O, grads) in versions.items():
        assert O.shape == (2, T_q, 2), name
        assert_array_equal(O, np.zeros_like(O), err_msg=name)
        for g, x in zip(grads, (Q, K, V)):
            assert g.shape == x.shape, name
            assert_array_equal(g, np.zeros_like(g), err_msg=name)


def test_two_threads_never_share_a_row_buffer():
    # Each thread of the backward pass owns its buffer of dS rows; one buffer shared by
    # two threads that run their products at the same time would mix their heads' rows.
    rng = np.random.default_rng(21)
    Q, K, V = (rng.standard_normal((2, 384, w)) for w in (24, 24, 40))
    G = rng.standard_normal((2, 384, 40))
    _, saved = fast_attention_forward(Q, K, V, workers=1)
    want = fast_attention_backward(saved, G, workers=1)
    for _ in range(8):
        got = fast_attention_backward(saved, G, workers=2)  # one head per thread
        for x, y in zip(want, got):
            assert_array_equal(x, y)
