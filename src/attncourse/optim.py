"""AdamW, gradient clipping and the learning-rate schedule, as pure functions.

Parameters nest like the model's (dicts, lists of dicts, arrays; see
:mod:`attncourse.params`); gradients and the optimiser's moments nest the same way. The
state is plain data, ``{"step": int, "m": nested arrays, "v": nested arrays}``, so it
can be printed, compared and saved like the parameters. Nothing is updated in place:
:func:`adamw_step` returns new parameters and a new state.

One step, with ``t = state["step"] + 1`` and ``g`` the gradient of one array ``p``:

- ``m <- b1 m + (1 - b1) g`` and ``v <- b2 v + (1 - b2) g^2`` (elementwise);
- ``m_hat = m / (1 - b1^t)``, ``v_hat = v / (1 - b2^t)`` (the bias correction: the
  moments start at zero, so without it the first steps are too short, or too long);
- ``p <- p - lr (m_hat / (sqrt(v_hat) + eps) + wd p)``, the ``wd p`` term only where
  ``decay(path, p)`` holds. The decay is *decoupled*: it never enters ``m`` or ``v``.

>>> import numpy as np
>>> params = {"W": np.array([[1.0, -2.0]]), "b": np.array([0.5])}
>>> grads = {"W": np.array([[0.1, -0.3]]), "b": np.array([2.0])}
>>> state = adamw_init(params)
>>> params, state = adamw_step(params, grads, state, lr=0.1, weight_decay=0.5)
>>> state["step"], params["b"]  # the first step moves each coordinate by lr
(1, array([0.4]))
>>> params["W"].round(6)  # ... and decays the matrix by lr * wd = 5 %
array([[ 0.85, -1.8 ]])
"""

import math

import numpy as np

from ._validate import as_number, require_bool, require_that
from .params import flatten_params, unflatten_params

__all__ = [
    "adamw_init",
    "adamw_step",
    "decays",
    "global_norm",
    "clip_by_global_norm",
    "lr_at",
]


# --- validation -----------------------------------------------------------------------


def _as_leaves(name, tree, like=None, kinds="biuf"):
    """Return ``{dotted path: array}`` of ``tree``, or raise ``ValueError`` naming the
    path of a leaf that is not an array of numbers (of the dtype ``kinds``) or, given
    ``like`` (flat parameters), a path or shape that differs from theirs."""
    flat = {path: np.asarray(leaf) for path, leaf in flatten_params(tree).items()}
    what = "a float array" if kinds == "f" else "an array of numbers"
    for path, a in flat.items():  # inline checks: these loops run for every array
        if a.dtype.kind not in kinds:
            raise ValueError(f"{name}[{path!r}] must be {what}, got dtype {a.dtype}")
    like = flat if like is None else like
    if flat.keys() != like.keys():
        raise ValueError(f"{name} must nest like params: it lacks "
                         f"{[p for p in like if p not in flat]} and has extra "
                         f"{[p for p in flat if p not in like]}")
    for path, array in like.items():
        if flat[path].shape != array.shape:
            raise ValueError(f"{name}[{path!r}] has shape {flat[path].shape}, "
                             f"params[{path!r}] has {array.shape}")
    return flat


def _as_state(state, like):
    """Return ``step, m, v`` (flat) of an AdamW state for the flat parameters ``like``,
    or raise ``ValueError`` naming what does not match."""
    mapping = isinstance(state, dict)
    require_that(mapping and {"step", "m", "v"} <= set(state), "state must be a dict "
                 "with keys 'step', 'm', 'v' (from adamw_init), got {}",
                 sorted(state) if mapping else type(state).__name__)
    return (as_number("state['step']", state["step"], "[0, inf)", integer=True),
            _as_leaves("state['m']", state["m"], like),
            _as_leaves("state['v']", state["v"], like))


def _as_settings(lr, betas, eps, weight_decay, decay):
    """Return ``lr, b1, b2, eps, weight_decay`` as floats and the decay rule, or raise
    ``ValueError`` naming the bad one."""
    require_that(isinstance(betas, (tuple, list)) and len(betas) == 2, "betas must be "
                 "a pair (b1, b2), got {!r}", betas)
    require_that(decay is None or callable(decay), "decay must be None or a callable, "
                 "got {!r}", decay)
    return (as_number("lr", lr, "[0, inf)"),
            *(as_number(f"betas[{i}]", b, "[0, 1)") for i, b in enumerate(betas)),
            as_number("eps", eps, "(0, inf)"),
            as_number("weight_decay", weight_decay, "[0, inf)"),
            decays if decay is None else decay)


# --- AdamW ----------------------------------------------------------------------------


def decays(path, array):
    """The default rule: decay arrays of two or more axes, not 1-D ones.

    Decayed: the token table, the position table, every weight matrix, the
    unembedding. Not decayed: LayerNorm gains and shifts, biases (1-D). A gain pulled
    towards zero would shrink a normalised activation for no reason; a bias has no
    scale to regularise. ``path`` is the dotted name (unused by this rule; a custom
    rule may read it).

    >>> decays("blocks.0.attn.W_Q", np.zeros((4, 4)))
    True
    >>> decays("blocks.0.ln1.gamma", np.ones(4))
    False
    """
    require_that(isinstance(path, str), "path must be a dotted name (str), got {!r}",
                 path)
    return np.ndim(array) >= 2


def adamw_init(params):
    """Return a fresh AdamW state: step 0, moments ``m``, ``v`` zero, like params.

    The moments take each parameter's float dtype.

    >>> state = adamw_init({"blocks": [{"W": np.ones((2, 3), dtype=np.float32)}]})
    >>> state["step"], state["m"]["blocks"][0]["W"].dtype, state["v"]["blocks"][0]["W"]
    (0, dtype('float32'), array([[0., 0., 0.],
           [0., 0., 0.]], dtype=float32))
    """
    flat = _as_leaves("params", params, kinds="f")
    zeros = {path: np.zeros(p.shape, dtype=p.dtype) for path, p in flat.items()}
    return {"step": 0, "m": unflatten_params(zeros, params),
            "v": unflatten_params({k: z.copy() for k, z in zeros.items()}, params)}


def adamw_step(params, grads, state, *, lr, betas=(0.9, 0.999), eps=1e-8,
               weight_decay=0.0, decay=None):
    """Return ``(params, state)`` after one AdamW step; the inputs are left untouched.

    For every array ``p`` with gradient ``g``, at step ``t = state["step"] + 1``::

        m = b1 m + (1 - b1) g,   v = b2 v + (1 - b2) g^2      the moments
        m_hat = m / (1 - b1^t),  v_hat = v / (1 - b2^t)       the bias correction
        p = p - lr (m_hat / (sqrt(v_hat) + eps) + wd p)       wd p where decay(path, p)

    ``grads`` nests like ``params``; ``state`` comes from :func:`adamw_init` or an
    earlier step. ``decay(path, array) -> bool`` says which arrays take the decoupled
    decay ``lr * weight_decay * p`` (``None``: the rule :func:`decays`, matrices yes,
    1-D gains and biases no); it is scaled by ``lr``, so ``lr = 0`` (where the cosine
    schedule ends) leaves every parameter as it is. Each new parameter keeps its
    input's dtype (float32 in, float32 out). A ``ValueError`` names a bad
    hyperparameter, or the dotted path where ``grads`` or the state does not match
    ``params``.

    The first step moves every coordinate by ``lr g / (|g| + eps)``, about ``lr``,
    whatever the size of ``g``:

    >>> p = {"W": np.array([[3.0, -1.0], [0.0, 2.0]]), "gamma": np.array([1.0, 1.0])}
    >>> g = {"W": np.array([[1e-3, -50.0], [0.0, 2.0]]), "gamma": np.array([4.0, -4.0])}
    >>> new, state = adamw_step(p, g, adamw_init(p), lr=0.5, weight_decay=0.1)
    >>> np.round(new["W"], 4)  # (1 - lr wd) p - lr sign(g)
    array([[ 2.35, -0.45],
           [ 0.  ,  1.4 ]])
    >>> new["gamma"]  # a gain: not decayed
    array([0.5, 1.5])
    >>> state["m"]["gamma"], p["gamma"]  # the decay is not in m; the input is unchanged
    (array([ 0.4, -0.4]), array([1., 1.]))
    >>> adamw_step(p, {"W": g["W"]}, state, lr=0.5)
    Traceback (most recent call last):
    ...
    ValueError: grads must nest like params: it lacks ['gamma'] and has extra []
    """
    lr, b1, b2, eps, wd, decay = _as_settings(lr, betas, eps, weight_decay, decay)
    flat_p = _as_leaves("params", params, kinds="f")
    flat_g = _as_leaves("grads", grads, like=flat_p)
    step, flat_m, flat_v = _as_state(state, like=flat_p)
    t = step + 1
    new_p, new_m, new_v = {}, {}, {}
    for path, p in flat_p.items():
        g = flat_g[path].astype(p.dtype, copy=False)
        m = b1 * flat_m[path] + (1.0 - b1) * g  # the moments, elementwise
        v = b2 * flat_v[path] + (1.0 - b2) * (g * g)
        m_hat, v_hat = m / (1.0 - b1**t), v / (1.0 - b2**t)  # the bias correction
        update = m_hat / (np.sqrt(v_hat) + eps)
        decayed = bool(wd) and decay(path, p)
        require_bool(f"decay({path!r}, array)", decayed)
        if decayed:
            update = update + wd * p  # decoupled: never enters m or v
        new_p[path] = (p - lr * update).astype(p.dtype, copy=False)
        new_m[path], new_v[path] = m, v
    return unflatten_params(new_p, params), {
        "step": t, "m": unflatten_params(new_m, params),
        "v": unflatten_params(new_v, params)}


# --- clipping -------------------------------------------------------------------------


def global_norm(grads):
    """Return the Euclidean norm of all arrays of ``grads`` together, as a float.

    ``sqrt(sum of g^2 over every coordinate of every array)``, in float64, computed
    with the largest magnitude factored out so that large gradients do not overflow
    (NaN or infinity in ``grads`` give a NaN or infinite norm).

    >>> global_norm({"W": np.array([[3.0]]), "blocks": [{"b": np.array([0.0, 4.0])}]})
    5.0
    >>> global_norm({"W": np.array([3.0, 4.0]) * 2.0**700}) == 5 * 2.0**700
    True
    """
    return _norm(_as_leaves("grads", grads))


def _norm(flat):
    """The global norm of the (validated) flat arrays ``flat``: see global_norm."""
    arrays = [a.astype(np.float64, copy=False) for a in flat.values() if a.size]
    if not arrays:
        return 0.0
    peaks = [float(np.max(np.abs(a))) for a in arrays]
    if any(math.isnan(x) for x in peaks):
        return math.nan
    largest = max(peaks)
    if largest == 0.0 or math.isinf(largest):
        return largest
    total = sum(float(np.sum(np.square(a / largest))) for a in arrays)
    return largest * math.sqrt(total)


def clip_by_global_norm(grads, max_norm):
    """Return ``(clipped, norm)``: every array scaled by ``min(1, max_norm / norm)``.

    ``norm`` is :func:`global_norm` before clipping. One factor for all arrays keeps the
    direction of the whole gradient (clipping each array to its own norm would turn
    it); a zero gradient is returned unchanged. New arrays, each of its input's dtype.
    A non-finite norm (NaN or infinity in ``grads``) cannot be clipped: ``ValueError``.

    >>> grads = {"a": np.array([3.0]), "b": np.array([4.0])}
    >>> clipped, norm = clip_by_global_norm(grads, max_norm=1.0)
    >>> norm, clipped
    (5.0, {'a': array([0.6]), 'b': array([0.8])})
    >>> clip_by_global_norm({"a": np.array([np.nan])}, max_norm=1.0)
    Traceback (most recent call last):
    ...
    ValueError: grads must be finite to be clipped, their global norm is nan
    """
    max_norm = as_number("max_norm", max_norm, "(0, inf)")
    flat = _as_leaves("grads", grads)
    norm = _norm(flat)  # global_norm(grads), the arrays validated once
    require_that(math.isfinite(norm), "grads must be finite to be clipped, their "
                 "global norm is {}", norm)
    scale = min(1.0, max_norm / norm) if norm > 0 else 1.0
    clipped = {path: (g if g.dtype.kind == "f" else g.astype(np.float64)) * scale
               for path, g in flat.items()}
    return unflatten_params(clipped, grads), norm


# --- the schedule ---------------------------------------------------------------------


def lr_at(step, *, lr, warmup, total, min_lr=0.0):
    """Return the learning rate of step ``step`` (counted from 1): warm-up, then cosine.

    Steps ``1 .. warmup``: linear, ``lr * step / warmup`` (``lr / warmup`` at step 1,
    ``lr`` at step ``warmup``). Steps ``warmup .. total``: cosine from ``lr`` down to
    ``min_lr``, ``min_lr + (lr - min_lr) (1 + cos(pi s)) / 2`` with ``s = (step -
    warmup) / (total - warmup)``, so ``min_lr`` at step ``total``. ``warmup = 0``: no
    warm-up (the cosine starts from ``lr`` at step 0). ``ValueError`` unless
    ``1 <= step <= total``, ``0 <= warmup <= total`` and ``0 <= min_lr <= lr``.

    >>> [lr_at(s, lr=1.0, warmup=4, total=8) for s in range(1, 9)]
    [0.25, 0.5, 0.75, 1.0, 0.8535533905932737, 0.5, 0.14644660940672627, 0.0]
    >>> lr_at(9, lr=1.0, warmup=4, total=8)
    Traceback (most recent call last):
    ...
    ValueError: step must be an integer in [1, 8], got 9
    """
    total = as_number("total", total, "[1, inf)", integer=True)
    warmup = as_number("warmup", warmup, f"[0, {total}]", integer=True)
    step = as_number("step", step, f"[1, {total}]", integer=True)
    lr = as_number("lr", lr, "[0, inf)")
    min_lr = as_number("min_lr", min_lr, f"[0, {lr}]")
    if step <= warmup:
        return lr * step / warmup
    s = (step - warmup) / (total - warmup)
    return min_lr + (lr - min_lr) * (1.0 + math.cos(math.pi * s)) / 2.0
