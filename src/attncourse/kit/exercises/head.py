"""Checker of Chapter 3's exercise on one head: the whole head, backward."""

import math

import numpy as np

from ...layers.attention import AttentionSaved, attention_backward
from ...layers.head import head_backward, head_forward, project
from ...layers.linear import matmul_backward
from ...softmax import softmax_backward
from ..failed import CheckFailed
from ..gradients import TOLERANCE
from ._base import _array, _call, reports_unfinished

__all__ = ["HEAD_BACKWARD_PROPERTIES", "check_head_backward"]


HEAD_BACKWARD_PROPERTIES = (
    "returns the seven gradients",
    "dV",
    "dQ",
    "dK",
    "dW_Q",
    "dW_K",
    "dW_V",
    "dX",
)


_HEAD_GRADIENT_SHAPES = {
    "dQ": "T d",
    "dK": "T d",
    "dV": "T r",
    "dW_Q": "D d",
    "dW_K": "D d",
    "dW_V": "D r",
    "dX": "T D",
}


def _head_case(seed):
    """A head with unequal sizes (T, D, d, r) = (5, 7, 3, 4), mild scores and a dense
    G."""
    rng = np.random.default_rng(seed)
    T, D, d, r = 5, 7, 3, 4
    X = rng.standard_normal((T, D))
    W_Q, W_K = (rng.standard_normal((D, d)) / math.sqrt(D) for _ in range(2))
    W_V = rng.standard_normal((D, r)) / math.sqrt(D)
    return X, W_Q, W_K, W_V, rng.standard_normal((T, r))


def _head_reference(X, W_Q, W_K, W_V, G):
    """Every intermediate of the head's backward pass, from the core's layers
    (:func:`~attncourse.layers.head.head_forward`, ``head_backward``,
    :func:`~attncourse.layers.attention.attention_backward`), for recognising the
    tempting wrong versions."""
    params = {"W_Q": W_Q, "W_K": W_K, "W_V": W_V}
    _, saved = head_forward(params, X)
    Q, K, V, A = (saved[name] for name in "QKVA")
    dQ, dK, dV = attention_backward(AttentionSaved(Q, K, V, A), G)
    dparams, _ = head_backward(params, saved, G)
    dA = G @ V.T  # (T, r) x (r, T) -> (T, T)
    g = {
        "Q": Q,
        "K": K,
        "V": V,
        "A": A,
        "G": G,
        "dS": softmax_backward(A, dA),  # (T, T), for dK without the transpose
        "dV": dV,
        "dQ": dQ,
        "dK": dK,
        **{"d" + name: dW for name, dW in dparams.items()},
    }
    g["branches"] = {  # dQ W_Q^T, dK W_K^T, dV W_V^T, each (T, D)
        label: matmul_backward(X, W, g["d" + letter])[0]
        for label, letter, W in (("query", "Q", W_Q), ("key", "K", W_K),
                                 ("value", "V", W_V))
    }
    return g


def _head_fix(name, got, ref):
    """The likely fix for a wrong gradient ``name``, recognising the classic
    mistakes."""
    close = lambda a, b: a.shape == b.shape and np.allclose(a, b, rtol=1e-6, atol=1e-9)
    s = math.sqrt(ref["Q"].shape[-1])
    if name == "dV":
        if close(got, ref["A"] @ ref["G"]):  # (T, T) x (T, r): A without the transpose
            return ("transpose A: dV = A^T G, key j collects G from every query i that "
                    "read it")
        return "dV = A^T G: key j collects G from every query i that read it"
    if name in ("dQ", "dK"):
        if close(got, ref[name] * s):
            return f"divide by sqrt(d): {name} = " + (
                "dS K / sqrt(d)" if name == "dQ" else "dS^T Q / sqrt(d)"
            )
        if name == "dK" and close(got, ref["dS"] @ ref["Q"] / s):
            return "transpose dS: dK = dS^T Q / sqrt(d) (key j sums over the queries i)"
        return (
            "dS = A * (dA - rowsum(A * dA)) with dA = G V^T (both softmax paths), then "
            + ("dQ = dS K / sqrt(d)" if name == "dQ" else "dK = dS^T Q / sqrt(d)")
        )
    if name.startswith("dW_"):
        for other in ("dQ", "dK", "dV"):
            want = "d" + name[-1]
            if other != want and close(got, ref["dW_" + other[-1]]):
                return f"{name} = X^T {want}, not X^T {other}"
        return f"{name} = X^T d{name[-1]}"
    branches = ref["branches"]
    for label, branch in branches.items():
        if close(got, branch):
            return (
                f"dX keeps only the {label} branch: add all three, "
                "dX = dQ W_Q^T + dK W_K^T + dV W_V^T"
            )
    for label in branches:
        rest = sum(b for other, b in branches.items() if other != label)
        if close(got, rest):
            return f"dX misses the {label} branch: dX = dQ W_Q^T + dK W_K^T + dV W_V^T"
    return "dX = dQ W_Q^T + dK W_K^T + dV W_V^T, the three branches summed"


@reports_unfinished
def check_head_backward(fn, seed=0):
    """Check a learner's ``fn(X, W_Q, W_K, W_V, G) -> grads`` for one attention head.

    ``grads`` is a dict with the seven gradients ``dQ, dK, dV`` (``Q, K, V`` taken as
    independent inputs of ``O = softmax(Q K^T / sqrt(d)) V``), ``dW_Q, dW_K, dW_V`` and
    ``dX`` (through the projections) of ``J = sum(G * O)``. Each is compared with
    central differences of that ``J`` over every coordinate (steps and tolerance of
    :mod:`~attncourse.kit.gradients`), in the order of the backward pass, and the
    first that differs is named, with the likely fix. Sizes are unequal
    (``T=5, D=7, d=3, r=4``) and ``G`` is dense. Returns the names of the properties
    checked.

    >>> from attncourse.layers.head import head_backward, head_forward
    >>> from attncourse.layers.attention import AttentionSaved, attention_backward
    >>> def grads(X, W_Q, W_K, W_V, G):
    ...     params = {"W_Q": W_Q, "W_K": W_K, "W_V": W_V}
    ...     O, saved = head_forward(params, X)
    ...     dparams, dX = head_backward(params, saved, G)
    ...     qkva = AttentionSaved(*(saved[name] for name in "QKVA"))
    ...     dQ, dK, dV = attention_backward(qkva, G)
    ...     return {"dQ": dQ, "dK": dK, "dV": dV, "dX": dX,
    ...             **{"d" + name: g for name, g in dparams.items()}}
    >>> check_head_backward(grads)[-1]
    'dX'
    """
    from ...layers.attention import attention_forward
    from ..gradients import gradcheck

    X, W_Q, W_K, W_V, G = _head_case(seed)
    ref = _head_reference(X, W_Q, W_K, W_V, G)
    prop = "returns the seven gradients"
    grads = _call(fn, prop, X.copy(), W_Q.copy(), W_K.copy(), W_V.copy(), G.copy())
    if not isinstance(grads, dict) or set(grads) != set(_HEAD_GRADIENT_SHAPES):
        got = sorted(grads) if isinstance(grads, dict) else type(grads).__name__
        raise CheckFailed(
            prop,
            f"expected a dict with keys {sorted(_HEAD_GRADIENT_SHAPES)}, got {got}",
            "return {'dQ': dQ, 'dK': dK, ..., 'dX': dX}",
        )
    grads = {name: _array(g, prop, dtype=np.float64) for name, g in grads.items()}
    sizes = dict(zip("TDdr", (X.shape[0], X.shape[1], W_Q.shape[1], W_V.shape[1])))
    for name, letters in _HEAD_GRADIENT_SHAPES.items():
        want = tuple(sizes[c] for c in letters.split())
        if grads[name].shape != want:
            raise CheckFailed(
                prop,
                f"{name} has shape {grads[name].shape}, expected {want} "
                f"({letters.replace(' ', ' x ')}, the shape of "
                f"{name[1:]})",
                f"{name} has the shape of {name[1:]}",
            )

    def J_qkv(Q, K, V):
        return float(np.sum(G * attention_forward(Q, K, V)[0]))

    def J_head(X, W_Q, W_K, W_V):
        return J_qkv(*project(X, W_Q, W_K, W_V))

    qkv = {"Q": ref["Q"], "K": ref["K"], "V": ref["V"]}
    head = {"X": X, "W_Q": W_Q, "W_K": W_K, "W_V": W_V}
    order = [
        ("dV", J_qkv, qkv),
        ("dQ", J_qkv, qkv),
        ("dK", J_qkv, qkv),
        ("dW_Q", J_head, head),
        ("dW_K", J_head, head),
        ("dW_V", J_head, head),
        ("dX", J_head, head),
    ]
    for name, J, inputs in order:
        report = gradcheck(J, inputs, {name[1:]: grads[name]})
        if not report.passed:
            raise CheckFailed(
                name,
                f"{name} differs from central differences of "
                f"J = sum(G * O) by up to {report.worst:.1e} (tolerance "
                f"{TOLERANCE:.0e})",
                _head_fix(name, grads[name], ref),
            )
    return HEAD_BACKWARD_PROPERTIES
