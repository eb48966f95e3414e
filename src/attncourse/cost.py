"""A counting model of the cost of one dense attention head, and a reference that counts.

The model counts multiply-adds of the matrix products and the numbers stored for the
weights: ``T D (2d + r)`` for the three projections, ``T^2 d`` for ``Q K^T``, ``T^2 r``
for ``A V``, and ``T^2`` stored weights. It is a count, not a device timing: the scale
``1/sqrt(d)``, the exponentials and the normalisations (all of order ``T^2``) are left out.

>>> attention_cost(T=5, D=7, d=3, r=4)
AttentionCost(projections=350, scores=75, output=100, weights_stored=25)
"""

import math
from typing import NamedTuple

import numpy as np

from .layers.head import validate_projections
from ._validate import require_sizes

__all__ = ["AttentionCost", "attention_cost", "counted_head_forward"]


class AttentionCost(NamedTuple):
    """Multiply-adds of each product, and the number of attention weights stored."""

    projections: int
    scores: int
    output: int
    weights_stored: int

    @property
    def multiply_adds(self):
        """All multiply-adds of the head: projections, scores and output."""
        return self.projections + self.scores + self.output


def attention_cost(T, D, d, r):
    """Return the :class:`AttentionCost` of one head on ``T`` positions of width ``D``.

    >>> attention_cost(T=5, D=7, d=3, r=0)
    Traceback (most recent call last):
    ...
    ValueError: sizes must be positive integers: r=0 (got T=5, D=7, d=3, r=0)
    """
    require_sizes(T=T, D=D, d=d, r=r)
    return AttentionCost(projections=T * D * (2 * d + r), scores=T * T * d, output=T * T * r, weights_stored=T * T)


def counted_head_forward(X, W_Q, W_K, W_V):
    """Run one head with explicit loops, counting every multiply-add; return ``O, A, AttentionCost``.

    Only 2-D input ``X (T, D)``. The loops are written for counting, not for speed.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X, W_Q, W_K, W_V = (rng.standard_normal(s) for s in [(5, 7), (7, 3), (7, 3), (7, 4)])
    >>> O, A, counted = counted_head_forward(X, W_Q, W_K, W_V)
    >>> counted == attention_cost(T=5, D=7, d=3, r=4)
    True
    """
    X, W_Q, W_K, W_V = validate_projections(X, W_Q, W_K, W_V)
    if X.ndim != 2:
        raise ValueError(f"counted_head_forward takes a 2-D X (T, D), got shape {X.shape}")
    T, D = X.shape
    d = W_Q.shape[1]
    madds = {"projections": 0, "scores": 0, "output": 0}

    def matmul(M, N, kind):
        out = np.zeros((M.shape[0], N.shape[1]))
        for i in range(M.shape[0]):
            for j in range(N.shape[1]):
                total = 0.0
                for m in range(M.shape[1]):
                    total += M[i, m] * N[m, j]
                    madds[kind] += 1
                out[i, j] = total
        return out

    Q = matmul(X, W_Q, "projections")  # (T, D) x (D, d) -> (T, d)
    K = matmul(X, W_K, "projections")  # (T, D) x (D, d) -> (T, d)
    V = matmul(X, W_V, "projections")  # (T, D) x (D, r) -> (T, r)
    S = matmul(Q, K.T, "scores") / math.sqrt(d)  # (T, d) x (d, T) -> (T, T)
    A = np.zeros((T, T))
    stored = 0
    for i in range(T):
        m = max(S[i])
        e = [math.exp(S[i, j] - m) for j in range(T)]
        z = sum(e)
        for j in range(T):
            A[i, j] = e[j] / z
            stored += 1
    O = matmul(A, V, "output")  # (T, T) x (T, r) -> (T, r)
    return O, A, AttentionCost(weights_stored=stored, **madds)
