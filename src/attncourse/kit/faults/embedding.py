"""Planted mistakes in :mod:`attncourse.layers.embedding`, with their registry.

A backward pass that overwrites repeated tokens instead of adding their gradients. Each
fault is the correct forward pass with another backward: it has the signature of
:func:`attncourse.embedding_backward`, ``(params, saved, dX) -> ({"E": dE}, None)``.
:data:`FAULTS` says which of :data:`CHECKS` catch each one and which are blind to it;
:data:`CORRECT` holds the package function every check must pass.
"""

import numpy as np

from ...layers.embedding import embedding_backward, embedding_forward
from ..exercises import check_embedding_backward
from ..gradients import layer_gradcheck
from ._registry import Check, Fault, learner_checker, require_gradcheck

__all__ = [
    "FAULTS",
    "CHECKS",
    "CORRECT",
    "BUILDING_BLOCKS",
    "embedding_backward_overwrite",
    "embedding_backward_fancy_iadd",
]


def _zero_table_and_rows(params, saved, dX):
    """Return a zero table of ``E``'s shape, the flat ids and their rows of ``dX``."""
    E = np.asarray(params["E"], dtype=np.float64)
    ids = np.asarray(saved["ids"]).reshape(-1)
    # row i belongs to token ids[i]
    rows = np.asarray(dX, dtype=np.float64).reshape(ids.size, E.shape[1])
    return np.zeros_like(E), ids, rows


def embedding_backward_overwrite(params, saved, dX):
    """FAULT: ``dE[ids] = dX`` (assignment): a repeated token keeps one gradient.

    >>> params, saved = {"E": np.zeros((2, 1))}, {"ids": np.array([0, 0])}
    >>> embedding_backward_overwrite(params, saved, np.ones((2, 1)))[0]["E"]
    array([[1.],
           [0.]])
    """
    dE, ids, rows = _zero_table_and_rows(params, saved, dX)
    dE[ids] = rows  # the fault: the last occurrence of a repeated id wins
    return {"E": dE}, None


def embedding_backward_fancy_iadd(params, saved, dX):
    """FAULT: ``dE[ids] += dX``: numpy adds once per distinct id, not per occurrence.

    >>> params, saved = {"E": np.zeros((2, 1))}, {"ids": np.array([0, 0])}
    >>> embedding_backward_fancy_iadd(params, saved, np.ones((2, 1)))[0]["E"]
    array([[1.],
           [0.]])
    """
    dE, ids, rows = _zero_table_and_rows(params, saved, dX)
    dE[ids] += rows  # the fault: buffered, so a repeated id is added once
    return {"E": dE}, None


# --- the registry ---------------------------------------------------------------------


def _learner_signature(backward):
    """Adapt a layer backward to the learner's ``fn(dX, ids, n_vocab) -> dE``."""
    def fn(dX, ids, n_vocab):
        params = {"E": np.zeros((n_vocab, np.shape(dX)[-1]))}
        _, saved = embedding_forward(params, ids)
        return backward(params, saved, dX)[0]["E"]
    return fn


def _learner_checker(backward):
    """The learner's checker, through the adapter to ``fn(dX, ids, n_vocab)``."""
    fn = _learner_signature(backward)
    learner_checker("learner checker", check_embedding_backward, fn)


def _gradcheck(backward):
    """The layer gradient check of the embedding, with tokens 1 and 4 repeated."""
    E = np.random.default_rng(11).normal(size=(6, 4))
    ids = np.array([1, 4, 1, 0, 4, 4, 2])
    report = layer_gradcheck(embedding_forward, backward, {"E": E}, ids)
    require_gradcheck("gradient check of the embedding", report)


CHECKS = {c.name: c for c in (
    Check("learner checker", "embedding_backward", _learner_checker),
    Check("layer gradcheck", "embedding_backward", _gradcheck),
)}
"""Check name -> :class:`~attncourse.kit.faults.Check`."""

FAULTS = (
    Fault("embedding_backward_overwrite",
          "dE[ids] = dX: a repeated token keeps one gradient",
          embedding_backward_overwrite, "embedding_backward",
          caught_by=("learner checker", "layer gradcheck")),
    Fault("embedding_backward_fancy_iadd",
          "dE[ids] += dX: buffered, a repeated token is added once",
          embedding_backward_fancy_iadd, "embedding_backward",
          caught_by=("learner checker", "layer gradcheck")),
)
"""The planted mistakes: the checks that catch each one, and those blind to it."""

CORRECT = {"embedding_backward": embedding_backward}
"""Role -> the package function: every check must pass it."""

BUILDING_BLOCKS = {}
"""Public functions that are not faults themselves -> the fault they are part of."""
