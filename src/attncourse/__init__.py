"""attncourse: the numpy reference code of *Attention, Step by Step*.

This is the core: the mathematics, which a learner reads beside the chapters. Every name
the chapters use from the core is imported from here (``import attncourse as ac``, then
``ac.causal_attention``), listed in ``__all__``; the submodules are where each one is
written (``attncourse/layers/attention.py`` …), the files a learner opens. What
checks the core (the learner checkers, planted faults, the conformance suite, gradient
checkers, plots, symbolic helpers, the trained-model recipes) is the kit,
``attncourse.kit``: it imports the core, the core never imports it, and ``import
attncourse`` loads the core alone (numpy, no sympy or matplotlib).
``src/attncourse/README.md`` maps both.
"""

from importlib import metadata as _metadata
from types import ModuleType as _ModuleType

from . import bpe, layers  # bpe: its encode/decode parallel the characters' (text)
from .softmax import logsumexp, softmax, softmax_backward, softmax_jacobian
from .loss import (
    REDUCTION, cross_entropy, cross_entropy_backward, cross_entropy_forward,
)
from .params import flatten_params, unflatten_params
from .text import (
    RecallTask, build_vocab, decode, encode, make_corpus, recall_batch, recall_batches,
    recall_bigram_ceiling, recall_text,
)
from .bigram import (
    bigram_counts, bigram_loss_and_grads, bigram_pairs, bigram_probabilities,
    conditional_entropy, init_bigram, train_bigram,
)
from .layers.attention import (
    AttentionSaved, attention_backward, attention_forward, attention_scores,
    causal_attention, causal_mask, combine_masks, key_padding_mask,
    key_valid_from_lengths,
)
from .layers.embedding import embedding_backward, embedding_forward, one_hot
from .layers.linear import linear_backward, linear_forward, matmul_backward
from .layers.head import head_backward, head_forward, project
from .layers.multihead import (
    init_multihead, merge_heads, multihead_backward, multihead_forward, split_heads,
)
from .layers.positions import init_positions, positions_backward, positions_forward
from .layers.layernorm import init_layernorm, layernorm_backward, layernorm_forward
from .layers.gelu import gelu, gelu_backward, gelu_derivative, gelu_forward
from .layers.mlp import init_mlp, mlp_backward, mlp_forward
from .layers.block import block_backward, block_forward, init_block, residual_backward
from .model import (
    ModelConfig, count_parameters, init_model, load_model, model_backward,
    model_forward, model_loss, save_model, spread_params,
)
from .optim import (
    adamw_init, adamw_step, clip_by_global_norm, decays, global_norm, lr_at,
)
from .train import TrainingDiverged, as_dtype, train
from .sample import (
    TOP_P_TOLERANCE, draw, generate, greedy, probabilities, renormalise, sample,
    temperature_softmax, token_ranks, top_k_filter, top_p_filter,
)
from .tiled import (
    causal_tiles, empty_state, finish_state, merge_states, tile_state,
    tiled_attention_backward, tiled_attention_forward,
)
from .fast import blas_threads, fast_attention_backward, fast_attention_forward
from .kvcache import (
    BlockCache, KVCache, cache_nbytes, cache_numbers, decode_step, generate_cached,
    prefill,
)

try:  # the version is written once, in pyproject.toml
    __version__ = _metadata.version("attncourse")
# running from a source tree that was never installed
except _metadata.PackageNotFoundError:
    __version__ = "unknown"

# every function, class and constant imported above, and two subpackages
__all__ = ["bpe", "layers"] + [name for name, value in list(globals().items())
                        if not (name.startswith("_") or isinstance(value, _ModuleType))]
