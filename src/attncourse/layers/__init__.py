"""The layers: one module per layer, each a forward/backward pair.

``y, saved = <layer>_forward(params, x, *, hyperparameters)`` and
``dparams, dx = <layer>_backward(params, saved, dy)``, with ``dparams`` holding exactly
the keys of ``params`` and ``dx`` the shape of ``x`` (``None`` for integer token ids).
"""

from . import attention, embedding, head, linear, multihead, positions
from . import block, gelu, layernorm, mlp

__all__ = ["attention", "embedding", "head", "linear", "multihead", "positions",
           "layernorm", "gelu", "mlp", "block"]
