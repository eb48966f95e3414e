"""The worked examples of Chapter 3 in float64, and the probe objective
``J = sum(O * G)``.

Example 1 and Example 2 are hand-picked two-position inputs whose every intermediate
value has a closed form; the transpose pair is an asymmetric ``Q, K`` that exposes a
missing transpose; :func:`random_head` is the seeded, non-square case every gradient
check also runs on. :func:`multihead_reference` is Chapter 4's definition of multi-head
attention, head by head with explicit slices, that the layer must reproduce.

>>> ex = example1()
>>> O, saved = head_forward(ex.params, ex.X)
>>> saved["A"].round(12)
array([[0.75, 0.25],
       [0.25, 0.75]])
>>> round(probe_objective(O, ex.G), 12)
7.5
"""

import math
from typing import NamedTuple

import numpy as np

from .._validate import as_float_array, require_sizes
from ..layers.attention import attention_forward, causal_attention
from ..layers.head import head_forward
from ..layers.multihead import _as_inputs

__all__ = [
    "HeadExample",
    "example1",
    "example2",
    "transpose_pair",
    "random_head",
    "probe_objective",
    "attention_objective",
    "head_objective",
    "multihead_reference",
]

A_SCALE = math.sqrt(2.0) * math.log(3.0)  # the a = sqrt(2) ln 3 of Examples 1 and 2


class HeadExample(NamedTuple):
    """Inputs of one head: ``X (T, D)``, ``W_Q, W_K (D, d)``, ``W_V (D, r)`` and the
    probe ``G (T, r)``."""

    X: np.ndarray
    W_Q: np.ndarray
    W_K: np.ndarray
    W_V: np.ndarray
    G: np.ndarray

    @property
    def params(self):
        """The head's parameters as a layer dict ``{"W_Q", "W_K", "W_V"}``."""
        return {"W_Q": self.W_Q, "W_K": self.W_K, "W_V": self.W_V}


def example1():
    """Return Example 1: ``X = I``, ``W_Q = aI`` with ``a = sqrt(2) ln 3``, ``W_K = I``,
    ``W_V = diag(2, 4)``.

    The probe ``G = diag(1, 2)`` makes ``J = O_11 + 2 O_22``.

    >>> ex = example1()
    >>> ex.W_V
    array([[2., 0.],
           [0., 4.]])
    >>> ex.G
    array([[1., 0.],
           [0., 2.]])
    """
    I = np.eye(2)
    return HeadExample(
        X=I.copy(),
        W_Q=A_SCALE * I,
        W_K=I.copy(),
        W_V=np.diag([2.0, 4.0]),
        G=np.diag([1.0, 2.0]),
    )


def example2():
    """Return Example 2: Example 1 with both key rows equal to ``[1, 1]`` (``W_K`` all
    ones).

    >>> from attncourse.layers.head import project
    >>> ex = example2()
    >>> project(ex.X, ex.W_Q, ex.W_K, ex.W_V)[1]
    array([[1., 1.],
           [1., 1.]])
    """
    ex = example1()
    return ex._replace(W_K=np.ones((2, 2)))


def transpose_pair():
    """Return the asymmetric ``Q`` (rows ``[1,2],[0,1]``) and ``K`` (rows
    ``[1,0],[2,1]``).

    >>> Q, K = transpose_pair()
    >>> Q @ K.T  # (2, 2) x (2, 2) -> (2, 2)
    array([[1., 4.],
           [0., 1.]])
    """
    Q = np.array([[1.0, 2.0], [0.0, 1.0]])
    K = np.array([[1.0, 0.0], [2.0, 1.0]])
    return Q, K


def random_head(seed=0, T=5, D=7, d=3, r=4, scale=1.0):
    """Return a seeded random :class:`HeadExample` of unequal sizes, float64.

    ``X`` and ``G`` have standard normal entries; each weight matrix has entries of
    standard deviation ``scale / sqrt(D)``, so the scores stay of order one and the
    weights are not saturated for ``scale`` near 1.

    >>> ex = random_head(seed=1)
    >>> [m.shape for m in ex]
    [(5, 7), (7, 3), (7, 3), (7, 4), (5, 4)]
    >>> random_head(T=0)
    Traceback (most recent call last):
    ...
    ValueError: sizes must be positive integers: T=0 (got T=0, D=7, d=3, r=4)
    """
    require_sizes(T=T, D=D, d=d, r=r)
    rng = np.random.default_rng(seed)
    w = scale / math.sqrt(D)
    return HeadExample(
        X=rng.standard_normal((T, D)),
        W_Q=w * rng.standard_normal((D, d)),
        W_K=w * rng.standard_normal((D, d)),
        W_V=w * rng.standard_normal((D, r)),
        G=rng.standard_normal((T, r)),
    )


def probe_objective(O, G):
    """Return the probe ``J = sum_il O_il G_il``, whose gradient with respect to ``O``
    is ``G``.

    >>> probe_objective(np.array([[1.5, 1.0], [0.5, 3.0]]), np.diag([1.0, 2.0]))
    7.5
    >>> probe_objective(np.ones((2, 3)), np.ones((3, 2)))
    Traceback (most recent call last):
    ...
    ValueError: O and G must have the same shape, got O (2, 3) and G (3, 2)
    """
    O = as_float_array("O", O)
    G = as_float_array("G", G)
    if O.shape != G.shape:
        raise ValueError(
            f"O and G must have the same shape, got O {O.shape} and G {G.shape}"
        )
    return float(np.sum(O * G))


def attention_objective(Q, K, V, G, forward=attention_forward):
    """Return ``J`` of the attention output ``forward(Q, K, V)[0]`` under the probe
    ``G``.

    ``forward`` defaults to :func:`attncourse.attention_forward`; a planted fault of the
    same signature can be passed instead.

    >>> from attncourse.layers.head import project
    >>> ex = example1()
    >>> round(attention_objective(*project(ex.X, ex.W_Q, ex.W_K, ex.W_V), ex.G), 12)
    7.5
    """
    O, _ = forward(Q, K, V)
    return probe_objective(O, G)


def head_objective(X, W_Q, W_K, W_V, G):
    """Return ``J`` of the head output on input ``X`` under the probe ``G``.

    >>> round(head_objective(*example2()), 12)
    5.0
    """
    O, _ = head_forward({"W_Q": W_Q, "W_K": W_K, "W_V": W_V}, X)
    return probe_objective(O, G)


def multihead_reference(params, X, *, heads, key_valid=None):
    """Return the definition of causal multi-head attention,
    ``Y = sum_h causal_attention(X W_Q^(h), X W_K^(h), X W_V^(h)) W_O^(h)``, with
    explicit slices.

    ``W^(h)`` is head ``h``'s block of columns (rows, for ``W_O``). No reshape and no
    transpose: this is the definition that
    :func:`attncourse.layers.multihead.multihead_forward` must reproduce. Bad input
    raises the layer's own ``ValueError``.

    >>> from attncourse.layers.multihead import init_multihead, multihead_forward
    >>> rng = np.random.default_rng(1)
    >>> params = init_multihead(rng, D=5, heads=3, d=2, r=2)
    >>> X = rng.normal(size=(4, 5))
    >>> reference = multihead_reference(params, X, heads=3)
    >>> bool(np.allclose(reference, multihead_forward(params, X, heads=3)[0],
    ...                  rtol=1e-13, atol=1e-15))
    True
    """
    X, W_Q, W_K, W_V, W_O = _as_inputs(params, X, heads)
    d, r = W_Q.shape[1] // heads, W_V.shape[1] // heads
    Y = 0.0
    for h in range(heads):
        cols_k, cols_v = slice(h * d, (h + 1) * d), slice(h * r, (h + 1) * r)
        # (..., T, D) x (D, d), twice, and (..., T, D) x (D, r); O_h is (..., T, r)
        O_h, _ = causal_attention(
            X @ W_Q[:, cols_k],
            X @ W_K[:, cols_k],
            X @ W_V[:, cols_v],
            key_valid=key_valid,
        )
        Y = Y + O_h @ W_O[cols_v, :]  # (..., T, r) x (r, D_out) -> (..., T, D_out)
    return Y
