"""Planted mistakes in :mod:`attncourse.layers.head`, with their registry.

A ``dX`` that keeps one branch instead of the sum of three; weight gradients swapped.
Each fault has the signature of :func:`attncourse.head_backward` and pairs with the
correct forward pass. :data:`FAULTS` says which of :data:`CHECKS` catch each one and
which are blind to it: a check of ``dX`` sees only the first, a check of the weight
gradients only the second. :data:`CORRECT` holds the package function every check must
pass.
"""

from ..examples import example1, random_head
from ...layers.attention import AttentionSaved, attention_backward
from ..._validate import shaped
from ...layers.head import PROJECTIONS, head_backward, head_forward
from ...layers.linear import matmul_backward
from ..gradients import layer_gradcheck
from ._registry import Check, Fault, require_close, require_gradcheck
from .attention import _example1_values

__all__ = [
    "FAULTS",
    "CHECKS",
    "CORRECT",
    "BUILDING_BLOCKS",
    "head_backward_last_branch",
    "head_backward_swapped_weights",
]


def head_backward_last_branch(params, saved, G):
    """FAULT: :func:`attncourse.head_backward` whose ``dX`` keeps only the value branch.

    Each branch overwrites the previous one instead of adding to it. ``dW_Q``, ``dW_K``
    and ``dW_V`` are still correct, so only a check that perturbs ``X`` sees it.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> params = {"W_Q": rng.standard_normal((5, 2)),
    ...           "W_K": rng.standard_normal((5, 2)),
    ...           "W_V": rng.standard_normal((5, 3))}
    >>> _, saved = head_forward(params, rng.standard_normal((4, 5)))
    >>> G = rng.standard_normal((4, 3))
    >>> bad, bad_dX = head_backward_last_branch(params, saved, G)
    >>> good, good_dX = head_backward(params, saved, G)
    >>> bool(np.allclose(bad["W_Q"], good["W_Q"])), bool(np.allclose(bad_dX, good_dX))
    (True, False)
    """
    X, W_Q, W_K, W_V = shaped(PROJECTIONS, saved["X"], params["W_Q"], params["W_K"],
                              params["W_V"])
    dQ, dK, dV = attention_backward(AttentionSaved(*(saved[n] for n in "QKVA")), G)
    dX, dW_Q = matmul_backward(X, W_Q, dQ)
    dX, dW_K = matmul_backward(X, W_K, dK)  # the fault: overwrites the query branch
    dX, dW_V = matmul_backward(X, W_V, dV)  # ... and the key branch
    return {"W_Q": dW_Q, "W_K": dW_K, "W_V": dW_V}, dX


def head_backward_swapped_weights(params, saved, G):
    """FAULT: :func:`attncourse.head_backward` with ``dW_Q`` and ``dW_K`` swapped.

    ``dX`` is correct.

    ``W_Q`` and ``W_K`` have the same shape ``(D, d)``, so nothing
    complains; only a check of the weight gradients can see the mistake.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> params = {"W_Q": rng.standard_normal((5, 2)),
    ...           "W_K": rng.standard_normal((5, 2)),
    ...           "W_V": rng.standard_normal((5, 3))}
    >>> _, saved = head_forward(params, rng.standard_normal((4, 5)))
    >>> G = rng.standard_normal((4, 3))
    >>> bad, bad_dX = head_backward_swapped_weights(params, saved, G)
    >>> good, good_dX = head_backward(params, saved, G)
    >>> bool(np.allclose(bad["W_Q"], good["W_K"])), bool(np.allclose(bad_dX, good_dX))
    (True, True)
    """
    X, W_Q, W_K, W_V = shaped(PROJECTIONS, saved["X"], params["W_Q"], params["W_K"],
                              params["W_V"])
    dQ, dK, dV = attention_backward(AttentionSaved(*(saved[n] for n in "QKVA")), G)
    dX_Q, dW_K = matmul_backward(X, W_Q, dQ)  # the fault: the query branch goes to dW_K
    dX_K, dW_Q = matmul_backward(X, W_K, dK)  # ... and the key branch as dW_Q
    dX_V, dW_V = matmul_backward(X, W_V, dV)
    return {"W_Q": dW_Q, "W_K": dW_K, "W_V": dW_V}, dX_Q + dX_K + dX_V


# --- the registry ---------------------------------------------------------------------


def _layer_report(backward):
    """The layer gradient check of a seeded head with T=4, D=6, d=2, r=5."""
    h = random_head(seed=3, T=4, D=6, d=2, r=5)
    return layer_gradcheck(head_forward, backward, h.params, h.X, dy=h.G)


def _gradcheck_all(backward):
    require_gradcheck("gradient check of the head", _layer_report(backward))


def _gradcheck_x(backward):
    require_gradcheck("gradient check on X", _layer_report(backward), names=("x",))


def _gradcheck_weights(backward):
    report = _layer_report(backward)
    weights = ("W_Q", "W_K", "W_V")
    require_gradcheck("gradient check on the weights", report, names=weights)


def _example1_grads(backward):
    ex = example1()
    _, saved = head_forward(ex.params, ex.X)
    return backward(ex.params, saved, ex.G)


def _example1_dX(backward):
    """Example 1's ``dX`` against its closed form (three branches summed)."""
    _, dX = _example1_grads(backward)
    require_close("Example 1 values", "dX", dX, _example1_values()["dX"])


def _example1_dW(backward):
    """Example 1's weight gradients: ``X = I``, so ``dW_Q = dQ``, ``dW_K = dK``, ..."""
    dparams, _ = _example1_grads(backward)
    for W, M in (("W_Q", "dQ"), ("W_K", "dK"), ("W_V", "dV")):
        require_close("Example 1 values", f"d{W}", dparams[W], _example1_values()[M])


CHECKS = {c.name: c for c in (
    Check("layer gradcheck", "head_backward", _gradcheck_all),
    Check("gradcheck on X", "head_backward", _gradcheck_x),
    Check("gradcheck on the weights", "head_backward", _gradcheck_weights),
    Check("Example 1 dX", "head_backward", _example1_dX),
    Check("Example 1 dW", "head_backward", _example1_dW),
)}
"""Check name -> :class:`~attncourse.kit.faults.Check`."""

FAULTS = (
    Fault("head_backward_last_branch", "dX keeps the value branch only (overwritten)",
          head_backward_last_branch, "head_backward",
          caught_by=("layer gradcheck", "gradcheck on X", "Example 1 dX"),
          blind=("gradcheck on the weights", "Example 1 dW")),
    Fault("head_backward_swapped_weights", "dW_Q and dW_K swapped; dX is correct",
          head_backward_swapped_weights, "head_backward",
          caught_by=("layer gradcheck", "gradcheck on the weights", "Example 1 dW"),
          blind=("gradcheck on X", "Example 1 dX")),
)
"""The planted mistakes: the checks that catch each one, and those blind to it."""

CORRECT = {"head_backward": head_backward}
"""Role -> the package function: every check must pass it."""

BUILDING_BLOCKS = {}
"""Public functions that are not faults themselves -> the fault they are part of."""
