"""attncourse: the numpy reference code of *Attention, Step by Step*.

Importing this package pulls in numpy only; ``attncourse.symbolic`` (sympy) and
``attncourse.plots`` (matplotlib) are imported explicitly by the chapters that use them.
"""

from .softmax import logsumexp, softmax, softmax_backward
from .attention import attention_backward, attention_forward, attention_scores, causal_attention, causal_mask, check_qkv
from .head import HeadGradients, head_backward, head_forward, project, projection_backward
from .gradcheck import STEPS, TOLERANCE, GradcheckReport, compare, gradcheck, numerical_gradient

__version__ = "0.1.0"

__all__ = [
    "logsumexp", "softmax", "softmax_backward",
    "attention_backward", "attention_forward", "attention_scores", "causal_attention", "causal_mask", "check_qkv",
    "HeadGradients", "head_backward", "head_forward", "project", "projection_backward",
    "STEPS", "TOLERANCE", "GradcheckReport", "compare", "gradcheck", "numerical_gradient",
]
