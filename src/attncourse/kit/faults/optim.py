"""Planted mistakes in :mod:`attncourse.optim`, with their registry.

AdamW without the bias correction; the decay folded into the gradient (L2
regularisation, which Adam then rescales coordinate by coordinate); the decay applied
to LayerNorm gains and biases too; the update done in place. Clipping each array to
its own norm instead of all arrays by one factor. The AdamW faults have the signature
of :func:`attncourse.optim.adamw_step`, the clipping fault that of
:func:`attncourse.optim.clip_by_global_norm`. :data:`FAULTS` says which of
:data:`CHECKS` catch each one and which are blind to it; :data:`CORRECT` holds the
package functions every check must pass.
"""

import math
from fractions import Fraction

import numpy as np

from ...optim import adamw_init, adamw_step, clip_by_global_norm, global_norm
from ...params import flatten_params, unflatten_params
from ..exercises import check_adamw_step
from ..failed import CheckFailed
from ._registry import Check, Fault, learner_checker, require_close

__all__ = [
    "FAULTS",
    "CHECKS",
    "CORRECT",
    "BUILDING_BLOCKS",
    "adamw_no_bias_correction",
    "adamw_l2_in_gradient",
    "adamw_decays_gains",
    "adamw_in_place",
    "clip_per_tensor",
]


def _adamw(params, grads, state, lr, betas, eps, weight_decay, decay, *,
           bias_correction=True, l2=False, decay_all=False, in_place=False):
    """AdamW with each planted mistake as an option (no input validation)."""
    b1, b2 = betas
    t = state["step"] + 1
    decay = decay or (lambda path, array: np.ndim(array) >= 2)
    flat_p, flat_g = flatten_params(params), flatten_params(grads)
    flat_m, flat_v = flatten_params(state["m"]), flatten_params(state["v"])
    new_p, new_m, new_v = {}, {}, {}
    for path, p in flat_p.items():
        decayed = decay_all or decay(path, p)
        g = flat_g[path]
        if l2 and decayed:
            g = g + weight_decay * p
        if in_place:
            m, v = flat_m[path], flat_v[path]
            m *= b1
            m += (1 - b1) * g
            v *= b2
            v += (1 - b2) * g * g
        else:
            m = b1 * flat_m[path] + (1 - b1) * g
            v = b2 * flat_v[path] + (1 - b2) * g * g
        c1, c2 = (1 - b1 ** t, 1 - b2 ** t) if bias_correction else (1.0, 1.0)
        update = (m / c1) / (np.sqrt(v / c2) + eps)
        if decayed and not l2:
            update = update + weight_decay * p
        if in_place:
            p -= lr * update
        new_p[path], new_m[path], new_v[path] = p if in_place else p - lr * update, m, v
    if in_place:
        state["step"] = t
        return params, state
    return unflatten_params(new_p, params), {
        "step": t, "m": unflatten_params(new_m, params),
        "v": unflatten_params(new_v, params)}


def adamw_no_bias_correction(params, grads, state, *, lr, betas=(0.9, 0.999),
                             eps=1e-8, weight_decay=0.0, decay=None):
    """FAULT: ``p - lr m / (sqrt(v) + eps)``: the moments used as they are.

    ``m`` and ``v`` start at zero, so early on they are too small by the factors
    ``1 - b1^t`` and ``1 - b2^t``: the first step is ``(1 - b1) / sqrt(1 - b2)``,
    about 3.16, times too long with the default betas.

    >>> p, g = {"W": np.array([[1.0]])}, {"W": np.array([[2.0]])}
    >>> new, _ = adamw_no_bias_correction(p, g, adamw_init(p), lr=0.1)
    >>> round(float(1.0 - new["W"][0, 0]), 4)  # lr = 0.1 expected
    0.3162
    """
    return _adamw(params, grads, state, lr, betas, eps, weight_decay, decay,
                  bias_correction=False)


def adamw_l2_in_gradient(params, grads, state, *, lr, betas=(0.9, 0.999), eps=1e-8,
                         weight_decay=0.0, decay=None):
    """FAULT: ``g + wd p`` enters ``m`` and ``v`` (L2), no decoupled decay term.

    Adam divides the decay by ``sqrt(v_hat)`` too: a coordinate with large gradients
    is barely decayed, one with tiny gradients is pulled to zero at speed ``lr``.
    """
    return _adamw(params, grads, state, lr, betas, eps, weight_decay, decay, l2=True)


def adamw_decays_gains(params, grads, state, *, lr, betas=(0.9, 0.999), eps=1e-8,
                       weight_decay=0.0, decay=None):
    """FAULT: every array decays, LayerNorm gains and biases (1-D) included.

    The ``decay`` rule is ignored. A gain pulled towards zero shrinks a normalised
    activation that the next layer expects at its scale.
    """
    return _adamw(params, grads, state, lr, betas, eps, weight_decay, decay,
                  decay_all=True)


def adamw_in_place(params, grads, state, *, lr, betas=(0.9, 0.999), eps=1e-8,
                   weight_decay=0.0, decay=None):
    """FAULT: right values, but ``params`` and ``state`` are updated in place.

    The caller's arrays change under it: a saved checkpoint, a copy kept to compare
    two runs, or the parameters before the step all silently move with it.
    """
    return _adamw(params, grads, state, lr, betas, eps, weight_decay, decay,
                  in_place=True)


def clip_per_tensor(grads, max_norm):
    """FAULT: each array clipped to its own norm; returns the global norm as ``norm``.

    Every array ends up with norm at most ``max_norm``, but the arrays are scaled by
    different factors: the whole gradient turns, and its norm can exceed
    ``max_norm``.

    >>> clipped, norm = clip_per_tensor({"a": np.array([3.0]), "b": np.array([4.0])},
    ...                                 max_norm=1.0)
    >>> norm, clipped
    (5.0, {'a': array([1.]), 'b': array([1.])})
    """
    flat = flatten_params(grads)
    clipped = {}
    for path, g in flat.items():
        g = np.asarray(g, dtype=np.float64)
        n = float(np.sqrt(np.sum(g * g)))
        clipped[path] = g * (min(1.0, max_norm / n) if n > 0 else 1.0)
    return unflatten_params(clipped, grads), global_norm(grads)


# --- the registry: AdamW --------------------------------------------------------------

# The tiny problem of the exact check: J(p) = sum of w |p - c| over a weight matrix and
# a gain, nested as in the model. Its gradient w sign(p - c) has one magnitude per
# coordinate, so v_hat = w^2 exactly and sqrt(v_hat) = |w| is rational.
_EXACT_START = {"blocks": [{"W": np.array([[0.3, -1.2, 0.7], [2.0, -0.05, 1.5]]),
                            "gamma": np.array([1.0, 0.4, -0.6])}]}
_EXACT_TARGET = {"blocks.0.W": np.array([[0.0, -1.0, 1.0], [1.5, 0.25, 1.4]]),
                 "blocks.0.gamma": np.array([0.6, 0.45, 0.0])}
_EXACT_WEIGHT = {"blocks.0.W": np.array([[1.0, 2.0, 0.5], [0.25, 3.0, 1.0]]),
                 "blocks.0.gamma": np.array([2.0, 0.5, 1.5])}
_EXACT_HYPER = {"lr": 0.25, "betas": (0.75, 0.875), "eps": 1e-8, "weight_decay": 0.1}
_EXACT_TOLERANCE = 4 * 2.0 ** -52  # 4 ulps of 1; every value lies in [-2.5, 2.5]


def _exact_sqrt(q):
    """The square root of a rational that is a rational's square; else ValueError."""
    n, d = q.numerator, q.denominator
    rn, rd = math.isqrt(n), math.isqrt(d)
    if rn * rn != n or rd * rd != d:
        raise ValueError(f"{q} is not the square of a rational")
    return Fraction(rn, rd)


def _exact_steps(n_steps=3):
    """AdamW on the exact problem in rationals: ``{path: [Fraction]}`` per step.

    Every float input (start, targets, weights, hyperparameters) is read as the exact
    rational it stores (``Fraction(0.1)`` is the double nearest 0.1), so the float64
    run and this one start from identical numbers. Returns the parameters, ``m`` and
    ``v`` after each step, as flat lists per dotted path.
    """
    h = _EXACT_HYPER
    lr, eps, wd = (Fraction(h[k]) for k in ("lr", "eps", "weight_decay"))
    b1, b2 = (Fraction(b) for b in h["betas"])
    start = flatten_params(_EXACT_START)
    p = {k: [Fraction(x) for x in a.ravel()] for k, a in start.items()}
    m = {k: [Fraction(0)] * len(x) for k, x in p.items()}
    v = {k: [Fraction(0)] * len(x) for k, x in p.items()}
    steps = []
    for t in range(1, n_steps + 1):
        for k, values in p.items():
            decayed = start[k].ndim >= 2
            targets = _EXACT_TARGET[k].ravel()
            weights = _EXACT_WEIGHT[k].ravel()
            for i, x in enumerate(values):
                c, w = Fraction(targets[i]), Fraction(weights[i])
                g = w if x > c else -w  # x == c does not occur on this path
                m[k][i] = b1 * m[k][i] + (1 - b1) * g
                v[k][i] = b2 * v[k][i] + (1 - b2) * g * g
                m_hat, v_hat = m[k][i] / (1 - b1 ** t), v[k][i] / (1 - b2 ** t)
                update = m_hat / (_exact_sqrt(v_hat) + eps)
                values[i] = x - lr * (update + (wd * x if decayed else 0))
        steps.append(tuple({k: list(x) for k, x in d.items()} for d in (p, m, v)))
    return steps


def _l1_gradient(params):
    """``w sign(p - c)`` of the exact problem, nested like ``params``, in float64."""
    flat = flatten_params(params)
    return unflatten_params({k: _EXACT_WEIGHT[k] * np.sign(p - _EXACT_TARGET[k])
                             for k, p in flat.items()}, params)


def _three_steps_exact(step):
    """Three steps in float64 equal the exact rational computation within 4 ulps of 1.

    Why this problem. ``sqrt`` makes AdamW irrational in general; here the loss
    ``sum w |p - c|`` has gradients ``+-w`` of one magnitude per coordinate, so
    ``v_hat`` is exactly ``w^2`` at every step (a weighted mean of equal squares) and
    the whole computation stays in the rationals: no symbolic algebra, no evaluation
    to high precision, every digit exact. The signs change as coordinates cross their
    targets, so ``m_hat`` varies and its bias correction matters at each step. The
    betas ``0.75`` and ``0.875`` have short binary expansions, so ``1 - b^t`` is exact
    in float64 too: with ``b2 = 0.999``, ``1 - b2^t`` loses about 9 bits to
    cancellation, a property of the formula, not a mistake, and the tolerance would
    have to be hundreds of ulps. Every ``p - c`` on the path stays above 0.019, so
    rounding cannot flip a sign. Blind spot: ``v_hat`` does not depend on how ``v``
    averages past gradients (the moment check covers that).
    """
    params = _copy(_EXACT_START)  # a step that writes in place must not reach it
    state = adamw_init(params)
    for t, (exact_p, exact_m, exact_v) in enumerate(_exact_steps(3), start=1):
        params, state = step(params, _l1_gradient(params), state, **_EXACT_HYPER)
        got = {"params": params, "m": state["m"], "v": state["v"]}
        for name, exact in (("params", exact_p), ("m", exact_m), ("v", exact_v)):
            for path, values in flatten_params(got[name]).items():
                values = np.asarray(values, dtype=np.float64).ravel()
                gaps = [abs(Fraction(float(x)) - e)
                        for x, e in zip(values, exact[path])]
                worst = float(max(gaps))
                if not worst <= _EXACT_TOLERANCE:
                    raise CheckFailed(
                        "three steps equal exact rationals",
                        f"after step {t}, {name} {path} differs from the exact value "
                        f"by {worst:.2e} (> 4 ulps of 1)")
    if state["step"] != 3:
        raise CheckFailed("three steps equal exact rationals",
                          f"state['step'] is {state['step']!r} after three steps")


def _case(seed=3):
    """A model-like nesting (matrices, gains, a bias) and a mixed-scale gradient."""
    rng = np.random.default_rng(seed)
    params = {"embed": {"E": rng.normal(size=(5, 3))},
              "blocks": [{"ln1": {"gamma": rng.uniform(0.5, 1.5, size=3),
                                  "beta": rng.normal(size=3)},
                          "mlp": {"W": rng.normal(size=(3, 4)),
                                  "b": rng.normal(size=4)}}]}
    grads = unflatten_params(
        {k: rng.normal(size=p.shape) * 10.0 ** rng.uniform(-2, 2, size=p.shape)
         for k, p in flatten_params(params).items()}, params)
    return params, grads


def _copy(tree):
    return unflatten_params({k: np.array(v, copy=True)
                             for k, v in flatten_params(tree).items()}, tree)


def _first_step(step):
    """No decay: the first step moves each coordinate by ``lr g / (|g| + eps)``."""
    params, grads = _case()
    new, _ = step(_copy(params), _copy(grads), adamw_init(params), lr=0.1)
    for path, p in flatten_params(params).items():
        g = flatten_params(grads)[path]
        require_close("first step moves each coordinate by lr",
                      f"the first step of {path}", flatten_params(new)[path],
                      p - 0.1 * g / (np.abs(g) + 1e-8))


def _moments(step):
    """Two steps with decay: m, v are the running averages of g, g^2, undecayed."""
    params, g1 = _case(3)
    _, g2 = _case(4)
    state = adamw_init(params)
    for g in (g1, g2):
        params, state = step(params, _copy(g), state, lr=0.1, weight_decay=0.5)
    for path, a in flatten_params(g1).items():
        b = flatten_params(g2)[path]
        m = 0.9 * (0.1 * a) + 0.1 * b
        v = 0.999 * (0.001 * a * a) + 0.001 * b * b
        require_close("moments are running averages of g", f"m of {path}",
                      flatten_params(state["m"])[path], m)
        require_close("moments are running averages of g", f"v of {path}",
                      flatten_params(state["v"])[path], v)


def _decoupled(step):
    """On the matrices: decay adds exactly ``-lr wd p``; ``m``, ``v`` do not change."""
    params, grads = _case()
    runs = [step(_copy(params), _copy(grads), adamw_init(params), lr=0.1,
                 weight_decay=wd) for wd in (0.0, 0.5)]
    (plain, s0), (decayed, s1) = [
        (flatten_params(p), s) for p, s in runs]
    for path, p in flatten_params(params).items():
        if p.ndim < 2:
            continue
        require_close("decoupled decay", f"the decay's share in {path}",
                      decayed[path] - plain[path], -0.1 * 0.5 * p)
        for name in ("m", "v"):
            require_close("decoupled decay", f"{name} of {path} with decay",
                          flatten_params(s1[name])[path],
                          flatten_params(s0[name])[path], rtol=0, atol=0)


def _gains(step):
    """Zero gradient, ``wd > 0``: the 1-D arrays (gains, shifts, biases) stay put."""
    params, grads = _case()
    zero = unflatten_params({k: np.zeros_like(g)
                             for k, g in flatten_params(grads).items()}, grads)
    new, _ = step(_copy(params), zero, adamw_init(params), lr=0.1, weight_decay=0.5)
    new = flatten_params(new)
    for path, p in flatten_params(params).items():
        if p.ndim == 1:
            require_close("gains and biases not decayed", f"{path} after a step",
                          new[path], p, rtol=0, atol=0)


def _untouched(step):
    """The inputs (params, grads, state) hold the same values after a step."""
    params, grads = _case()
    state = step(_copy(params), _copy(grads), adamw_init(params), lr=0.1)[1]
    inputs = {"params": params, "grads": grads, "state['m']": state["m"],
              "state['v']": state["v"]}
    before = {k: _copy(v) for k, v in inputs.items()}
    step(params, grads, state, lr=0.1, weight_decay=0.5)
    for name, tree in inputs.items():
        for path, value in flatten_params(tree).items():
            require_close("inputs untouched", f"{name}[{path!r}]", value,
                          flatten_params(before[name])[path], rtol=0, atol=0)
    if state["step"] != 1:
        raise CheckFailed("inputs untouched", "state['step'] of the input changed")


def _learner(step):
    """The learner checker on the step (a flat dict: a matrix W and a bias b)."""
    learner_checker("learner checker", check_adamw_step, step)


# --- the registry: clipping -----------------------------------------------------------


def _clip_case():
    """Arrays of very different norms (0.3, 4, 12) in a nesting; global norm 12.65."""
    rng = np.random.default_rng(8)
    parts = {"embed.E": (rng.normal(size=(4, 3)), 0.3),
             "blocks.0.mlp.W": (rng.normal(size=(3, 5)), 4.0),
             "blocks.0.mlp.b": (rng.normal(size=5), 12.0)}
    flat = {k: a * (n / np.linalg.norm(a)) for k, (a, n) in parts.items()}
    like = {"embed": {"E": 0}, "blocks": [{"mlp": {"W": 0, "b": 0}}]}
    return unflatten_params(flat, like)


def _direction(clip):
    """Clipped to 5: every array scaled by the one factor 5 / norm (same direction)."""
    grads = _clip_case()
    clipped, norm = clip(grads, max_norm=5.0)
    require_close("global clipping preserves direction", "norm",
                  norm, math.sqrt(0.3 ** 2 + 4.0 ** 2 + 12.0 ** 2))
    for path, g in flatten_params(grads).items():
        require_close("global clipping preserves direction", f"clipped {path}",
                      flatten_params(clipped)[path], g * (5.0 / norm))


def _clipped_norm(clip):
    """Clipped to 5, the global norm of the result is 5."""
    clipped, _ = clip(_clip_case(), max_norm=5.0)
    require_close("clipped global norm equals max_norm", "global norm after clipping",
                  global_norm(clipped), 5.0)


CHECKS = {c.name: c for c in (
    Check("three steps equal exact rationals", "adamw_step", _three_steps_exact),
    Check("first step moves each coordinate by lr", "adamw_step", _first_step),
    Check("moments are running averages of g", "adamw_step", _moments),
    Check("decoupled decay", "adamw_step", _decoupled),
    Check("gains and biases not decayed", "adamw_step", _gains),
    Check("inputs untouched", "adamw_step", _untouched),
    Check("learner checker", "adamw_step", _learner),
    Check("global clipping preserves direction", "clip_by_global_norm", _direction),
    Check("clipped global norm equals max_norm", "clip_by_global_norm", _clipped_norm),
)}
"""Check name -> :class:`~attncourse.kit.faults.Check`."""

FAULTS = (
    Fault("adamw_no_bias_correction",
          "m and v used without dividing by 1 - b^t: early steps of the wrong size",
          adamw_no_bias_correction, "adamw_step",
          caught_by=("three steps equal exact rationals",
                     "first step moves each coordinate by lr", "learner checker"),
          blind=("moments are running averages of g", "decoupled decay",
                 "gains and biases not decayed", "inputs untouched")),
    Fault("adamw_l2_in_gradient",
          "wd p added to g before m, v (L2): the decay is rescaled by Adam",
          adamw_l2_in_gradient, "adamw_step",
          caught_by=("three steps equal exact rationals",
                     "moments are running averages of g", "decoupled decay",
                     "learner checker"),
          blind=("first step moves each coordinate by lr",
                 "gains and biases not decayed", "inputs untouched")),
    Fault("adamw_decays_gains",
          "every array decays, LayerNorm gains and biases (1-D) included",
          adamw_decays_gains, "adamw_step",
          caught_by=("three steps equal exact rationals",
                     "gains and biases not decayed", "learner checker"),
          blind=("first step moves each coordinate by lr",
                 "moments are running averages of g", "decoupled decay",
                 "inputs untouched")),
    Fault("adamw_in_place",
          "right values, but params and state are modified in place",
          adamw_in_place, "adamw_step",
          caught_by=("inputs untouched", "learner checker"),
          blind=("three steps equal exact rationals",
                 "first step moves each coordinate by lr",
                 "moments are running averages of g", "decoupled decay",
                 "gains and biases not decayed")),
    Fault("clip_per_tensor",
          "each array clipped to its own norm: the gradient's direction turns",
          clip_per_tensor, "clip_by_global_norm",
          caught_by=("global clipping preserves direction",
                     "clipped global norm equals max_norm")),
)
"""The planted mistakes: the checks that catch each one, and those blind to it."""

CORRECT = {"adamw_step": adamw_step, "clip_by_global_norm": clip_by_global_norm}
"""Role -> the package function: every check must pass it."""

BUILDING_BLOCKS = {}
"""Public functions that are not faults themselves -> the fault they are part of."""
