"""Incremental decoding equals full recomputation: the check of the key/value cache.

:func:`assert_decoding_equals_recompute` runs a ``(prefill, decode_step)`` pair with the
signatures of :mod:`attncourse.kvcache` on given token sequences: it prefills a prompt,
then feeds the remaining tokens one at a time, and compares the logits of the prefill
and of **every** decode step with :func:`attncourse.model.model_forward` on the whole
prefix so far (float64, maximum absolute difference at most :data:`DECODE_TOLERANCE`,
fixed before any check runs). An exception raised by the pair is reported as a failure
of the step that raised it.
"""

import numpy as np

from ..model import model_forward
from .failed import CheckFailed

__all__ = ["DECODE_TOLERANCE", "PROPERTY", "assert_decoding_equals_recompute"]

DECODE_TOLERANCE = 1e-12
"""The largest absolute difference allowed between cached and recomputed logits."""

PROPERTY = "decoding equals recomputation"


def _call(where, fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except CheckFailed:
        raise
    except Exception as e:  # the implementation may fail in any way
        raise CheckFailed(PROPERTY, f"{where} raised {type(e).__name__}: {e}",
                          "store both the keys and the values of every step") from e


def assert_decoding_equals_recompute(prefill, decode_step, params, ids, prompt_length,
                                     *, config, key_valid=None, steps=None,
                                     tolerance=DECODE_TOLERANCE):
    """Prefill ``ids[..., :prompt_length]``, decode the next tokens of ``ids`` one at a
    time (``steps`` of them, default all), and compare every logit with the full forward
    pass on the prefix. Return the largest absolute difference seen.

    ``ids (..., T)`` are token ids; ``key_valid`` (boolean, the shape of ``ids``) marks
    the real tokens of a padded batch, whose padding must lie in the prompt. Raises
    :class:`CheckFailed` naming the position and the difference on the first step whose
    logits differ by more than ``tolerance``, or whose call raised.
    """
    ids = np.asarray(ids)
    T, p = ids.shape[-1], prompt_length
    if not 1 <= p <= T:
        raise ValueError(f"prompt_length must lie in 1..{T}, got {p}")
    if key_valid is not None and not np.all(np.asarray(key_valid)[..., p:]):
        raise ValueError("the padding must lie in the prompt: key_valid[..., "
                         f"prompt_length:] must be all True (prompt_length={p})")
    last = T if steps is None else min(T, p + steps)

    def recomputed(t):  # the logits of the whole prefix ids[..., :t]
        kv = None if key_valid is None else np.asarray(key_valid)[..., :t]
        return model_forward(params, ids[..., :t], config=config, key_valid=kv)[0]

    def compare(where, actual, desired, fix):
        actual = np.asarray(actual, dtype=np.float64)
        if actual.shape != desired.shape:
            raise CheckFailed(PROPERTY, f"{where}: logits of shape {actual.shape}, "
                              f"recomputation gives {desired.shape}", fix)
        diff = float(np.max(np.abs(actual - desired)))
        if not diff <= tolerance:
            raise CheckFailed(PROPERTY, f"{where}: the logits differ from the full "
                              f"forward pass on the prefix by {diff:.2e} (> "
                              f"{tolerance:.0e})", fix)
        return diff

    kv = None if key_valid is None else np.asarray(key_valid)[..., :p]
    logits, cache = _call("prefill", prefill, params, ids[..., :p], config=config,
                          key_valid=kv)
    worst = compare(f"prefill of {p} tokens", logits, recomputed(p),
                    "prefill is the model's forward pass on the prompt")
    for t in range(p, last):
        where = f"decode step at position {t} (prompt of {p})"
        logits, cache = _call(where, decode_step, params, cache, ids[..., t],
                              config=config)
        worst = max(worst, compare(
            where, logits, recomputed(t + 1)[..., -1, :],
            "add the position row t, attend with query_offset = t over the keys "
            "0..t, keep each sequence's own keys and values"))
    return worst
