"""attncourse: the numpy reference code of *Attention, Step by Step*.

This is the core: the mathematics, which a learner reads beside the chapters. The names
below are the ones the chapters' prose uses; everything else lives in the submodules
(``attncourse.layers.multihead``, ``attncourse.tiled`` …). What checks the core (the
learner checkers, planted faults, the conformance suite, gradient checkers, plots,
symbolic helpers, the trained-model recipes) is the kit, ``attncourse.kit``: it imports
the core, the core never imports it, and ``import attncourse`` loads the core alone
(numpy, no sympy or matplotlib). ``src/attncourse/README.md`` maps both.
"""

from importlib import metadata as _metadata

from . import layers
from .layers.attention import (
    attention_backward,
    attention_forward,
    causal_attention,
    causal_mask,
)
from .layers.embedding import embedding_backward, embedding_forward, one_hot
from .layers.head import head_backward, head_forward
from .layers.linear import linear_backward, linear_forward
from .layers.multihead import multihead_backward, multihead_forward
from .layers.positions import positions_backward, positions_forward
from .loss import cross_entropy, cross_entropy_backward, cross_entropy_forward
from .params import flatten_params, unflatten_params
from .softmax import logsumexp, softmax, softmax_backward
from .text import build_vocab, decode, encode, make_corpus

try:  # the version is written once, in pyproject.toml
    __version__ = _metadata.version("attncourse")
# running from a source tree that was never installed
except _metadata.PackageNotFoundError:
    __version__ = "unknown"

__all__ = [
    "softmax",
    "softmax_backward",
    "logsumexp",
    "attention_forward",
    "attention_backward",
    "causal_attention",
    "causal_mask",
    "one_hot",
    "embedding_forward",
    "embedding_backward",
    "linear_forward",
    "linear_backward",
    "head_forward",
    "head_backward",
    "multihead_forward",
    "multihead_backward",
    "positions_forward",
    "positions_backward",
    "cross_entropy",
    "cross_entropy_forward",
    "cross_entropy_backward",
    "flatten_params",
    "unflatten_params",
    "build_vocab",
    "encode",
    "decode",
    "make_corpus",
    "layers",
]
