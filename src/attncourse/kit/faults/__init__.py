"""Planted mistakes, one module per layer module, each with a registry of named faults.

A check is trusted only after it has been seen to reject the mistakes it exists to
catch. ``faults/<name>.py`` holds the wrong versions of the functions in
``layers/<name>.py`` (``softmax.py`` and ``loss.py`` those of the top-level modules of
the same name) and its registry: ``FAULTS`` (each :class:`Fault` names the checks that
catch it and those blind to it), ``CHECKS`` (name -> :class:`Check`) and ``CORRECT``
(role -> the package function every check must pass). :func:`verdicts` runs the stated
pairs, :func:`table` prints them.
"""

from . import attention, embedding, head, linear, loss, multihead, positions, softmax
from . import model
from . import block, gelu, layernorm
from . import sample
from . import optim
from . import tiled
from . import kvcache
from . import bpe
from ._registry import Check, Fault, table, verdicts

__all__ = [
    "Fault", "Check", "verdicts", "table",
    "attention", "embedding", "head", "linear", "loss",
    "multihead", "positions", "softmax",
    "model",
    "layernorm", "gelu", "block",
    "sample",
    "optim",
    "tiled",
    "kvcache",
    "bpe",
]
