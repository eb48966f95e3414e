"""Fast dense attention: the reference's mathematics, arranged for speed.

The same values and gradients as :mod:`attncourse.layers.attention`, with five changes:

- the ``T x d`` operand is scaled, ``Q / sqrt(d)``, never the ``T x T`` scores;
- the forward pass keeps the exponentials ``E = exp(S - m)`` and ``1 / l``
  (``A = diag(1/l) E``) for the backward pass instead of recomputing them, and never
  normalises the ``T x T`` matrix: ``1/l`` scales the ``T x r`` output instead;
- the row sums ``l`` come out of the product with the values, ``E [V | 1]``;
- the backward pass uses ``rowsum(dA * A) = rowsum(G * O)`` (an ``O(T r)`` reduction)
  and folds ``1/l`` into ``G``: ``dS = E * ((G/l) V^T - delta/l)``;
- one head at a time into preallocated buffers, written in place (``out=``), so the
  ``T x T`` work of one head stays in the cache between the steps; the heads (or the
  rows of one head) shared by ``workers`` threads, each with a single-threaded BLAS.

:func:`fast_causal_attention` and :func:`fast_causal_attention_backward` have the
``causal_attention`` signature and pass the attention conformance suite.

>>> import numpy as np
>>> from attncourse.layers.attention import attention_forward
>>> rng = np.random.default_rng(0)
>>> Q, K, V = rng.normal(size=(4, 3)), rng.normal(size=(5, 3)), rng.normal(size=(5, 2))
>>> O, saved = fast_attention_forward(Q, K, V)
>>> bool(np.allclose(O, attention_forward(Q, K, V)[0], rtol=1e-13, atol=1e-15))
True
"""

import contextlib
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np

from ._validate import as_float_like, require_sizes, shaped
from .layers.attention import QKV, _unbroadcast, causal_mask, key_padding_mask

__all__ = [
    "FastSaved",
    "fast_attention_forward",
    "fast_attention_backward",
    "fast_causal_attention",
    "fast_causal_attention_backward",
    "blas_threads",
    "default_workers",
    "run_parallel",
]


SEQUENTIAL_BELOW = 1 << 16
"""By default a pass with fewer score entries than this runs on one thread."""


class FastSaved(NamedTuple):
    """The backward stash: heads flattened to one axis ``n``."""

    Qs: np.ndarray  # (n, T_q, d): Q / sqrt(d)
    K: np.ndarray  # (n, T_k, d)
    V: np.ndarray  # (n, T_k, r)
    E: np.ndarray  # (n, T_q, T_k): exp(S - m), exact zeros where hidden
    inv_l: np.ndarray  # (n, T_q): 1 / l, 0 for a query that sees no key
    O: np.ndarray  # (n, T_q, r)
    batch: tuple  # the broadcast batch shape
    shapes: tuple  # the shapes of Q, K, V as given


_CONTROLLER = []  # the threadpoolctl controller, made once on first use


@contextlib.contextmanager
def blas_threads(n):
    """Within the block, let the BLAS behind numpy's matmul use ``n`` threads.

    The workers of :func:`fast_attention_forward` and of the tiled pass each run their
    own products, so BLAS runs single-threaded inside them (``threadpoolctl``).
    """
    if not _CONTROLLER:
        from threadpoolctl import ThreadpoolController

        _CONTROLLER.append(ThreadpoolController())
    with _CONTROLLER[0].limit(limits=int(n), user_api="blas"):
        yield


def default_workers():
    """The number of threads a pass uses by default: the machine's cores."""
    return os.cpu_count() or 1


def run_parallel(work, units, workers):
    """Run ``work(unit)`` for every unit; with ``workers > 1`` on that many threads,
    BLAS single-threaded in each (numpy releases the GIL in its loops and products)."""
    workers = default_workers() if workers is None else workers
    require_sizes(workers=workers)
    units = list(units)
    if workers == 1 or len(units) <= 1:
        for unit in units:
            work(unit)
        return
    with blas_threads(1), ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(work, units))


def _small_is_sequential(workers, size):
    """The default for a pass of ``size`` score entries: one thread when it is small."""
    if workers is None:
        return 1 if size < SEQUENTIAL_BELOW else default_workers()
    return workers


def _row_chunks(n, T_q, workers):
    """Units of work ``(h, i0, i1)``: every head whole, or split by rows when there are
    fewer heads than workers."""
    workers = default_workers() if workers is None else workers
    parts = (max(1, min(T_q, -(-workers // n)))
             if isinstance(workers, (int, np.integer)) else 1)
    bounds = [T_q * p // parts for p in range(parts + 1)]
    return [(h, bounds[p], bounds[p + 1]) for h in range(n) for p in range(parts)
            if bounds[p + 1] > bounds[p]]


def _flat(x, batch):
    """``x (..., T, w)`` broadcast to ``batch`` and flattened to ``(n, T, w)``."""
    return np.ascontiguousarray(np.broadcast_to(x, batch + x.shape[-2:])).reshape(
        (math.prod(batch),) + x.shape[-2:])  # not -1: T may be 0


def fast_attention_forward(Q, K, V, *, causal=False, key_valid=None, workers=None):
    """Return ``O, saved`` for ``O = softmax(Q K^T / sqrt(d)) V``.

    ``causal`` hides keys ``j > i``; ``key_valid`` (optional, boolean ``(..., T_k)``)
    hides padded keys; a query with no visible key reads nothing. Batch axes broadcast.
    ``workers`` threads (default: the machine's cores) share the heads, or the rows of
    a head when there are fewer heads than workers.
    """
    Q, K, V = shaped(QKV, Q, K, V)
    batch = np.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    (T_q, d), (T_k, r) = Q.shape[-2:], V.shape[-2:]
    dtype = np.result_type(Q, K, V)
    hidden = ~causal_mask(T_q, T_k) if causal else None  # (T_q, T_k)
    kv = None
    if key_valid is not None:
        kv = key_padding_mask(key_valid, T_k, batch)[..., 0, :]  # (..., T_k)
        kv = np.broadcast_to(kv, batch + (T_k,)).reshape(-1, T_k)
    Qs = _flat(Q, batch) * dtype.type(1 / math.sqrt(d))  # (n, T_q, d): scaled once
    Kf = _flat(K.astype(dtype, copy=False), batch)
    Vf = _flat(V.astype(dtype, copy=False), batch)
    n = Qs.shape[0]
    workers = _small_is_sequential(workers, n * T_q * T_k)
    E = np.empty((n, T_q, T_k), dtype)
    O = np.empty((n, T_q, r), dtype)
    inv_l = np.zeros((n, T_q), dtype)
    V1 = np.ones((n, T_k, r + 1), dtype)  # [V | 1]: the row sums come with the output
    V1[..., :r] = Vf

    def rows(unit):
        h, i0, i1 = unit
        S = E[h, i0:i1]
        np.matmul(Qs[h, i0:i1], Kf[h].T, out=S)  # (rows, d) x (d, T_k) -> (rows, T_k)
        mask = None if hidden is None else hidden[i0:i1]
        if kv is not None:
            mask = ~kv[h] if mask is None else mask | ~kv[h]
        if mask is not None:
            np.copyto(S, -np.inf, where=mask)
        m = S.max(axis=1, initial=-np.inf)  # (rows,); -inf when there are no keys
        m[~np.isfinite(m)] = 0.0  # a query that sees no key: its row stays -inf
        np.subtract(S, m[:, None], out=S)
        np.exp(S, out=S)  # E, in place
        Ol = S @ V1[h]  # (rows, T_k) x (T_k, r + 1) -> (rows, r + 1)
        np.divide(1.0, Ol[:, r], out=inv_l[h, i0:i1], where=Ol[:, r] > 0)
        np.multiply(Ol[:, :r], inv_l[h, i0:i1, None], out=O[h, i0:i1])

    run_parallel(rows, _row_chunks(n, T_q, workers), workers)
    saved = FastSaved(Qs, Kf, Vf, E, inv_l, O, batch, (Q.shape, K.shape, V.shape))
    return O.reshape(batch + (T_q, r)), saved


def fast_attention_backward(saved, G, *, workers=None):
    """Return ``dQ, dK, dV`` for the upstream gradient ``G = dJ/dO`` from the saved
    exponentials.

    ``delta = rowsum(G * O)``, ``dS = E * ((G/l) V^T - delta/l)``,
    ``dV = E^T (G/l)``, ``dQ = dS K / sqrt(d)``, ``dK = dS^T (Q / sqrt(d))``; one
    ``T x T`` buffer per thread, reused head after head. Batch axes that were broadcast
    are summed back.
    """
    Qs, K, V, E, inv_l, O, batch, shapes = saved
    n, T_q, r = O.shape
    G = as_float_like("G", G, batch + (T_q, r), "the output O")
    dtype = O.dtype
    Gf = G.astype(dtype, copy=False).reshape(O.shape)  # (n, T_q, r)
    d, T_k = Qs.shape[-1], K.shape[-2]
    scale = dtype.type(1 / math.sqrt(d))
    workers = _small_is_sequential(workers, n * T_q * T_k)
    units = _row_chunks(n, T_q, workers)
    whole = len(units) == n  # one unit per head: dK, dV written, not summed
    dQ = np.empty(Qs.shape, dtype)
    dK = np.empty(K.shape, dtype) if whole else np.zeros(K.shape, dtype)
    dV = np.empty(V.shape, dtype) if whole else np.zeros(V.shape, dtype)
    buffers, parts = {}, {}

    def rows(unit):
        h, i0, i1 = unit
        key = threading.get_ident()
        if key not in buffers:  # as many rows as the largest unit
            buffers[key] = np.empty((max(b - a for _, a, b in units), T_k), dtype)
        buf = buffers[key][: i1 - i0]
        G_h, E_h, inv_h = Gf[h, i0:i1], E[h, i0:i1], inv_l[h, i0:i1]
        delta = np.einsum("ij,ij->i", G_h, O[h, i0:i1])  # rowsum(dA * A), O(T r)
        G_l = G_h * inv_h[:, None]  # (rows, r): G / l, as A = diag(1/l) E
        np.matmul(G_l, V[h].T, out=buf)  # (rows, r) x (r, T_k) -> (rows, T_k)
        np.subtract(buf, (delta * inv_h)[:, None], out=buf)
        np.multiply(buf, E_h, out=buf)  # buf holds dS = E * ((G/l) V^T - delta/l)
        np.matmul(buf, K[h], out=dQ[h, i0:i1])  # (rows, T_k) x (T_k, d) -> (rows, d)
        dQ[h, i0:i1] *= scale
        if whole:
            np.matmul(E_h.T, G_l, out=dV[h])  # (T_k, rows) x (rows, r) -> (T_k, r)
            np.matmul(buf.T, Qs[h], out=dK[h])  # (T_k, rows) x (rows, d) -> (T_k, d)
            return
        parts[unit] = (
            E_h.T @ G_l,  # (T_k, rows) x (rows, r) -> (T_k, r)
            buf.T @ Qs[h, i0:i1],
        )  # (T_k, rows) x (rows, d) -> (T_k, d)

    run_parallel(rows, units, workers)
    for unit in units if not whole else ():  # summed in a fixed order: deterministic
        dV[unit[0]] += parts[unit][0]
        dK[unit[0]] += parts[unit][1]
    grads = []
    for g, shape in zip((dQ, dK, dV), shapes):
        grads.append(_unbroadcast(g.reshape(batch + g.shape[-2:]), shape))
    return tuple(grads)


def _no_offset(query_offset):
    if query_offset != 0:
        raise NotImplementedError(
            "query_offset != 0 needs the key/value cache of Chapter 10"
        )


def _probabilities(saved):
    """``A = diag(1/l) E`` with the batch shape: formed only for the signature."""
    A = saved.E * saved.inv_l[..., None]  # (n, T_q, T_k)
    return A.reshape(saved.batch + A.shape[-2:])


def fast_causal_attention(
    query, key, value, query_offset=0, dropout=None, *, key_valid=None
):
    """Causal attention, fast dense, with the ``causal_attention`` signature."""
    _no_offset(query_offset)
    O, saved = fast_attention_forward(
        query, key, value, causal=True, key_valid=key_valid
    )
    A = _probabilities(saved)
    if dropout is None:
        return O, A
    V = saved.V.reshape(saved.batch + saved.V.shape[-2:])
    return dropout(A) @ V, A  # (..., T_q, T_k) x (..., T_k, r) -> (..., T_q, r)


def fast_causal_attention_backward(
    query, key, value, G, query_offset=0, *, key_valid=None
):
    """``dquery, dkey, dvalue`` of :func:`fast_causal_attention` (no dropout)."""
    _no_offset(query_offset)
    _, saved = fast_attention_forward(
        query, key, value, causal=True, key_valid=key_valid
    )
    return fast_attention_backward(saved, G)
