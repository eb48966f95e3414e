"""attncourse: the numpy reference code of *Attention, Step by Step*.

Importing this package pulls in numpy only; ``attncourse.symbolic`` (sympy) and
``attncourse.plots`` (matplotlib) are imported explicitly by the chapters that use them.
"""

from .softmax import logsumexp, softmax, softmax_backward
from .attention import attention_backward, attention_forward, attention_scores, causal_attention, causal_mask, check_qkv
from .head import HeadGradients, head_backward, head_forward, project, projection_backward
from .gradcheck import STEPS, TOLERANCE, GradcheckReport, compare, gradcheck, numerical_gradient
from .examples import HeadExample, attention_objective, example1, example2, head_objective, probe_objective, random_head, transpose_pair
from . import faults
from .checks import check_causal_attention, check_convex_hull, check_rows_sum_to_one, check_rows_sum_to_zero, check_transpose
from .cost import AttentionCost, attention_cost, counted_head_forward
from .masks import check_attention_mask, combine_masks, key_padding_mask, key_valid_from_lengths
from .multihead import init_multihead, merge_heads, multihead_backward, multihead_by_loop, multihead_forward, split_heads
from .positions import init_positions, positions_backward, positions_forward
from .prefix import PREFIX_TOLERANCE, PrefixReport, assert_prefix_interface, prefix_report
from .tokenizer import build_vocab, check_ids, check_vocab, decode, encode
from .embedding import check_embedding_backward, check_one_hot, embedding_backward, embedding_forward, one_hot
from .jacobian import check_softmax_jacobian, softmax_jacobian
from .cross_entropy import REDUCTION, check_cross_entropy, check_logits_targets, cross_entropy, cross_entropy_backward
from .unembedding import check_unembedding, unembedding_backward, unembedding_forward
from .bigram import bigram_counts, bigram_loss_and_grads, bigram_pairs, bigram_probabilities, conditional_entropy, init_bigram, train_bigram
from .corpus import make_corpus

__version__ = "0.1.0"

__all__ = [
    "logsumexp", "softmax", "softmax_backward",
    "attention_backward", "attention_forward", "attention_scores", "causal_attention", "causal_mask", "check_qkv",
    "HeadGradients", "head_backward", "head_forward", "project", "projection_backward",
    "STEPS", "TOLERANCE", "GradcheckReport", "compare", "gradcheck", "numerical_gradient",
    "HeadExample", "attention_objective", "example1", "example2", "head_objective", "probe_objective", "random_head", "transpose_pair",
    "faults",
    "check_causal_attention", "check_convex_hull", "check_rows_sum_to_one", "check_rows_sum_to_zero", "check_transpose",
    "AttentionCost", "attention_cost", "counted_head_forward",
    "check_attention_mask", "combine_masks", "key_padding_mask", "key_valid_from_lengths",
    "init_multihead", "merge_heads", "multihead_backward", "multihead_by_loop", "multihead_forward", "split_heads",
    "init_positions", "positions_backward", "positions_forward",
    "PREFIX_TOLERANCE", "PrefixReport", "assert_prefix_interface", "prefix_report",
    "build_vocab", "check_ids", "check_vocab", "decode", "encode",
    "check_embedding_backward", "check_one_hot", "embedding_backward", "embedding_forward", "one_hot",
    "check_softmax_jacobian", "softmax_jacobian",
    "REDUCTION", "check_cross_entropy", "check_logits_targets", "cross_entropy", "cross_entropy_backward",
    "check_unembedding", "unembedding_backward", "unembedding_forward",
    "bigram_counts", "bigram_loss_and_grads", "bigram_pairs", "bigram_probabilities", "conditional_entropy", "init_bigram", "train_bigram",
    "make_corpus",
]
