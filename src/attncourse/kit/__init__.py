"""Verification: gradient checkers, property checks, the prefix interface, and the
learner checkers.

- :mod:`~attncourse.kit.gradients`: central differences and the one
  :func:`layer_gradcheck`;
- :mod:`~attncourse.kit.properties`: property checks of attention arrays
  (``assert_*``);
- :mod:`~attncourse.kit.prefix`: the prefix interface of a next-token model;
- :mod:`~attncourse.kit.conformance`: the attention conformance suite and the failure
  listers;
- :mod:`~attncourse.kit.exercises`: the learner checkers (``check_*``), one module
  per subject;
- :mod:`~attncourse.kit.sampling`: do many draws come from a stated distribution;
- :mod:`~attncourse.kit.kvcache`: incremental decoding equals full recomputation;
- :mod:`~attncourse.kit.source`: the package's own code shown on the page;
- :mod:`~attncourse.kit.failed`: :class:`CheckFailed`, raised by every check.
"""

from .failed import CheckFailed
from .gradients import (
    STEPS,
    TOLERANCE,
    GradcheckReport,
    compare,
    gradcheck,
    layer_gradcheck,
    numerical_gradient,
    numerical_jacobian,
    qkv_gradcheck,
)
from .properties import (
    assert_convex_hull,
    assert_rows_sum_to_one,
    assert_rows_sum_to_zero,
    assert_transposed_scores,
)
from .prefix import (
    PREFIX_TOLERANCE,
    PrefixReport,
    assert_prefix_interface,
    prefix_report,
)
from .conformance import causal_failures, padding_failures
from .exercises import (
    check_attention_mask,
    check_block_residual,
    check_causal_attention,
    check_cross_entropy,
    check_embedding_backward,
    check_layernorm_backward,
    check_one_hot,
    check_parameter_count,
    check_softmax_jacobian,
    check_tied_gradient,
)
from .exercises import check_top_k, check_top_p
from .exercises import check_clip_by_global_norm
from .source import source
from .sampling import DrawsReport, assert_draws_match, frequency_bound

__all__ = [
    "CheckFailed",
    "STEPS",
    "TOLERANCE",
    "GradcheckReport",
    "compare",
    "gradcheck",
    "layer_gradcheck",
    "numerical_gradient",
    "numerical_jacobian",
    "qkv_gradcheck",
    "assert_convex_hull",
    "assert_rows_sum_to_one",
    "assert_rows_sum_to_zero",
    "assert_transposed_scores",
    "PREFIX_TOLERANCE",
    "PrefixReport",
    "assert_prefix_interface",
    "prefix_report",
    "causal_failures",
    "padding_failures",
    "check_attention_mask",
    "check_causal_attention",
    "check_cross_entropy",
    "check_embedding_backward",
    "check_one_hot",
    "check_softmax_jacobian",
    "check_layernorm_backward",
    "check_block_residual",
    "check_parameter_count",
    "check_tied_gradient",
    "check_top_k",
    "check_top_p",
    "DrawsReport",
    "assert_draws_match",
    "frequency_bound",
    "source",
]
