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
import numbers

import numpy as np

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


def _real(name, value):
    """Return ``value`` as a float if it is a finite real number (not a bool)."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
    if not ok or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite real number, got {value!r}")
    return float(value)


def _int(name, value, lowest):
    """Return ``value`` as an int if it is an integer >= ``lowest`` (not a bool)."""
    ok = isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))
    if not ok or value < lowest:
        raise ValueError(f"{name} must be an integer >= {lowest}, got {value!r}")
    return int(value)


def _hyper(lr, betas, eps, weight_decay):
    """Validate AdamW's hyperparameters; return them as Python floats."""
    lr = _real("lr", lr)
    if lr < 0:
        raise ValueError(f"lr must be >= 0, got {lr!r}")
    if not (isinstance(betas, (tuple, list)) and len(betas) == 2):
        raise ValueError(f"betas must be a pair (b1, b2), got {betas!r}")
    b1, b2 = (_real(f"betas[{i}]", b) for i, b in enumerate(betas))
    for i, b in enumerate((b1, b2)):
        if not 0.0 <= b < 1.0:
            raise ValueError(f"betas[{i}] must satisfy 0 <= b < 1, got {b!r}")
    eps = _real("eps", eps)
    if not eps > 0:
        raise ValueError(f"eps must be > 0, got {eps!r}")
    weight_decay = _real("weight_decay", weight_decay)
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")
    return lr, b1, b2, eps, weight_decay


def _float_leaves(name, tree):
    """Return ``{path: array}`` of ``tree``; every leaf must be a float array."""
    flat = flatten_params(tree)
    out = {}
    for path, leaf in flat.items():
        array = np.asarray(leaf)
        if array.dtype.kind != "f":
            raise ValueError(f"{name}[{path!r}] must be a float array, got dtype "
                             f"{array.dtype}")
        out[path] = array
    return out


def _numeric_leaves(name, tree):
    """Return ``{path: array}`` of ``tree``; every leaf must be an array of numbers."""
    flat = flatten_params(tree)
    out = {}
    for path, leaf in flat.items():
        array = np.asarray(leaf)
        if array.dtype.kind not in "biuf":
            raise ValueError(f"{name}[{path!r}] must be an array of numbers, got "
                             f"dtype {array.dtype}")
        out[path] = array
    return out


def _like(name, tree, flat_params):
    """Return ``tree`` flattened; ValueError naming the dotted path if it differs.

    ``tree`` must hold an array of the same shape at every path of ``flat_params``.
    """
    flat = _numeric_leaves(name, tree)
    missing = [p for p in flat_params if p not in flat]
    extra = [p for p in flat if p not in flat_params]
    if missing or extra:
        raise ValueError(f"{name} must nest like params: it lacks {missing} and has "
                         f"extra {extra}")
    for path, array in flat.items():
        want = flat_params[path].shape
        if array.shape != want:
            raise ValueError(f"{name}[{path!r}] has shape {array.shape}, "
                             f"params[{path!r}] has {want}")
    return flat


def _state(state, flat_params):
    """Validate an AdamW state against the parameters; return (step, flat m, flat v)."""
    if not (isinstance(state, dict) and {"step", "m", "v"} <= set(state)):
        got = sorted(state) if isinstance(state, dict) else type(state).__name__
        raise ValueError(f"state must be a dict with keys 'step', 'm', 'v' (from "
                         f"adamw_init), got {got}")
    step = _int("state['step']", state["step"], 0)
    m = _like("state['m']", state["m"], flat_params)
    v = _like("state['v']", state["v"], flat_params)
    return step, m, v


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
    if not isinstance(path, str):
        raise ValueError(f"path must be a dotted name (str), got {path!r}")
    return np.ndim(array) >= 2


def adamw_init(params):
    """Return a fresh AdamW state: step 0, moments ``m``, ``v`` zero, like params.

    The moments take each parameter's float dtype.

    >>> state = adamw_init({"blocks": [{"W": np.ones((2, 3), dtype=np.float32)}]})
    >>> state["step"], state["m"]["blocks"][0]["W"].dtype, state["v"]["blocks"][0]["W"]
    (0, dtype('float32'), array([[0., 0., 0.],
           [0., 0., 0.]], dtype=float32))
    """
    flat = _float_leaves("params", params)
    zeros = {path: np.zeros(p.shape, dtype=p.dtype) for path, p in flat.items()}
    return {"step": 0, "m": unflatten_params(zeros, params),
            "v": unflatten_params({k: z.copy() for k, z in zeros.items()}, params)}


def adamw_step(params, grads, state, *, lr, betas=(0.9, 0.999), eps=1e-8,
               weight_decay=0.0, decay=None):
    """Return ``(params, state)`` after one AdamW step; the inputs are left untouched.

    ``grads`` nests like ``params``; ``state`` comes from :func:`adamw_init` or an
    earlier step. ``decay(path, array) -> bool`` says which arrays take the decoupled
    decay ``lr * weight_decay * p`` (``None``: the rule :func:`decays`, matrices yes,
    1-D gains and biases no). Each new parameter keeps its input's dtype (float32 in,
    float32 out). A ``ValueError`` names a bad hyperparameter, or the dotted path where
    ``grads`` or the state does not match ``params``.

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
    lr, b1, b2, eps, weight_decay = _hyper(lr, betas, eps, weight_decay)
    if decay is None:
        decay = decays
    elif not callable(decay):
        raise ValueError(f"decay must be None or a callable (path, array) -> bool, "
                         f"got {decay!r}")
    flat_p = _float_leaves("params", params)
    flat_g = _like("grads", grads, flat_p)
    step, flat_m, flat_v = _state(state, flat_p)
    t = step + 1
    c1, c2 = 1.0 - b1 ** t, 1.0 - b2 ** t  # the bias corrections
    new_p, new_m, new_v = {}, {}, {}
    for path, p in flat_p.items():
        g = flat_g[path].astype(p.dtype, copy=False)
        m = b1 * flat_m[path] + (1.0 - b1) * g
        v = b2 * flat_v[path] + (1.0 - b2) * (g * g)
        update = (m / c1) / (np.sqrt(v / c2) + eps)
        if weight_decay:
            decayed = decay(path, p)
            if not isinstance(decayed, (bool, np.bool_)):
                raise ValueError(f"decay({path!r}, array) must return a bool, got "
                                 f"{decayed!r}")
            if decayed:
                update = update + weight_decay * p
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
    flat = _numeric_leaves("grads", grads)
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
    max_norm = _real("max_norm", max_norm)
    if not max_norm > 0:
        raise ValueError(f"max_norm must be > 0, got {max_norm!r}")
    flat = _numeric_leaves("grads", grads)
    norm = global_norm(grads)
    if not math.isfinite(norm):
        raise ValueError(f"grads must be finite to be clipped, their global norm is "
                         f"{norm}")
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
    ValueError: step must satisfy 1 <= step <= total = 8, got 9
    """
    total = _int("total", total, 1)
    warmup = _int("warmup", warmup, 0)
    step = _int("step", step, 1)
    lr, min_lr = _real("lr", lr), _real("min_lr", min_lr)
    if warmup > total:
        raise ValueError(f"warmup must be <= total = {total}, got {warmup}")
    if step > total:
        raise ValueError(f"step must satisfy 1 <= step <= total = {total}, got {step}")
    if lr < 0:
        raise ValueError(f"lr must be >= 0, got {lr!r}")
    if not 0 <= min_lr <= lr:
        raise ValueError(f"min_lr must satisfy 0 <= min_lr <= lr = {lr!r}, "
                         f"got {min_lr!r}")
    if step <= warmup:
        return lr * step / warmup
    s = (step - warmup) / (total - warmup)
    return min_lr + (lr - min_lr) * (1.0 + math.cos(math.pi * s)) / 2.0
