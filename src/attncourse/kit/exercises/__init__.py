"""The learner checkers: call one on your own function and it names the first property
that fails.

Each ``check_<exercise>(fn)`` runs the learner's ``fn`` on seeded, non-square inputs and
either returns the names of the properties it checked or raises
:class:`~attncourse.kit.failed.CheckFailed` naming the property that failed, what was
seen, and the likely fix. Every failure is raised explicitly (no bare ``assert``), so
the checkers hold under ``python -O``. Any exception other than ``NotImplementedError``
raised by ``fn`` becomes a :class:`CheckFailed` naming the property being checked. The
prefix ``check_`` is reserved for these checkers.

An unfinished exercise is not a wrong one. Each exercise cell defines a stub whose body
is ``raise NotImplementedError("your code here")`` and passes it to its checker. Every
checker is wrapped by :func:`reports_unfinished`: when the learner's function raises
``NotImplementedError``, the checker prints one line, ::

    Exercise not done yet: my_top_k raises NotImplementedError — write it, then run
    this cell again

(on one line) and returns ``None`` instead of raising, so "Run All" goes on past every
unfinished exercise, while a wrong answer still raises :class:`CheckFailed`.

The checkers live in one module per subject, named after the package module the
exercise is about (as in :mod:`attncourse.kit.faults`); this package re-exports them
all:

- ``_base``: what several checkers share (the guarded call, :data:`UNFINISHED`,
  :func:`reports_unfinished`);
- ``embedding`` (Chapter 1): ``check_one_hot``, ``check_embedding_backward``;
- ``softmax``, ``loss`` (Chapter 2): ``check_softmax_jacobian``,
  ``check_cross_entropy``;
- ``attention``: ``check_causal_attention``, ``check_attention_backward`` (Chapter 3),
  ``check_attention_mask``
  (Chapter 4), ``check_query_offset`` (Chapter 10's edit of ``layers/attention.py``);
- ``head`` (Chapter 3): ``check_head_backward``;
- ``multihead``, ``positions`` (Chapter 4): ``check_split_merge``,
  ``check_multihead_backward``, ``check_positions_backward``;
- ``layernorm``, ``block`` (Chapter 5): ``check_layernorm_backward``,
  ``check_block_residual``, ``check_prenorm_residual``;
- ``model`` (Chapter 6): ``check_parameter_count``, ``check_tied_gradient``,
  ``check_model_backward``;
- ``optim`` (Chapter 7): ``check_adamw_step``, ``check_clip_by_global_norm``,
  ``check_training_loop``;
- ``sample`` (Chapter 8): ``check_top_k``, ``check_top_p``;
- ``tiled`` (Chapter 9): ``check_merge_states``, ``check_tile_loop``;
- ``kvcache`` (Chapter 10): ``check_cache_memory``, ``check_decode_step``;
- ``bpe`` (Chapter 11): ``check_bpe_merge_step``, ``check_bpe_encode``.
"""

from ..failed import CheckFailed
from ._base import UNFINISHED, reports_unfinished
from .embedding import ONE_HOT_PROPERTIES, check_embedding_backward, check_one_hot
from .softmax import check_softmax_jacobian
from .loss import check_cross_entropy
from .attention import (
    ATTENTION_BACKWARD_PROPERTIES,
    QUERY_OFFSET_PROPERTIES,
    check_attention_backward,
    check_attention_mask,
    check_causal_attention,
    check_query_offset,
)
from .head import HEAD_BACKWARD_PROPERTIES, check_head_backward
from .multihead import (
    MULTIHEAD_BACKWARD_PROPERTIES,
    SPLIT_MERGE_PROPERTIES,
    check_multihead_backward,
    check_split_merge,
)
from .positions import POSITIONS_BACKWARD_PROPERTIES, check_positions_backward
from .layernorm import check_layernorm_backward
from .block import (
    PRENORM_RESIDUAL_PROPERTIES,
    check_block_residual,
    check_prenorm_residual,
)
from .model import (
    MODEL_BACKWARD_PROPERTIES,
    PARAMETER_COUNT_PROPERTIES,
    TIED_GRADIENT_PROPERTIES,
    check_model_backward,
    check_parameter_count,
    check_tied_gradient,
)
from .optim import (
    ADAMW_STEP_PROPERTIES,
    CLIP_BY_GLOBAL_NORM_PROPERTIES,
    TRAINING_LOOP_PROPERTIES,
    check_adamw_step,
    check_clip_by_global_norm,
    check_training_loop,
)
from .sample import TOP_K_PROPERTIES, TOP_P_PROPERTIES, check_top_k, check_top_p
from .tiled import (
    MERGE_STATES_PROPERTIES,
    TILE_LOOP_PROPERTIES,
    check_merge_states,
    check_tile_loop,
)
from .kvcache import (
    CACHE_MEMORY_PROPERTIES,
    DECODE_STEP_PROPERTIES,
    check_cache_memory,
    check_decode_step,
)
from .bpe import (
    ENCODE_PROPERTIES,
    MERGE_STEP_PROPERTIES,
    check_bpe_encode,
    check_bpe_merge_step,
)

__all__ = [
    "CheckFailed",
    "UNFINISHED",
    "reports_unfinished",
    "check_one_hot",
    "check_embedding_backward",
    "check_softmax_jacobian",
    "check_cross_entropy",
    "check_causal_attention",
    "check_attention_backward",
    "check_attention_mask",
    "check_query_offset",
    "check_head_backward",
    "check_split_merge",
    "check_multihead_backward",
    "check_positions_backward",
    "check_layernorm_backward",
    "check_block_residual",
    "check_prenorm_residual",
    "check_parameter_count",
    "check_tied_gradient",
    "check_model_backward",
    "check_adamw_step",
    "check_clip_by_global_norm",
    "check_training_loop",
    "check_top_k",
    "check_top_p",
    "check_merge_states",
    "check_tile_loop",
    "check_cache_memory",
    "check_decode_step",
    "check_bpe_merge_step",
    "check_bpe_encode",
]
