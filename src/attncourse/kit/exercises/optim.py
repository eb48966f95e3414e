"""Checkers of Chapter 7's optimiser exercises: one AdamW step, global-norm clipping,
the training loop."""

import math

import numpy as np

from ...optim import adamw_step, global_norm
from ..failed import CheckFailed
from ._base import _array, _call, reports_unfinished

__all__ = [
    "ADAMW_STEP_PROPERTIES",
    "check_adamw_step",
    "CLIP_BY_GLOBAL_NORM_PROPERTIES",
    "check_clip_by_global_norm",
    "TRAINING_LOOP_PROPERTIES",
    "check_training_loop",
]


# --- Chapter 7: one AdamW step --------------------------------------------------------

ADAMW_STEP_PROPERTIES = (
    "purity",
    "returns (params, state)",
    "moment update",
    "bias correction",
    "decoupled weight decay",
    "which parameters decay",
)


def _adamw_case(seed):
    """Parameters ``{"W": (3, 4), "b": (4,)}`` and three gradients of mixed scales.

    Each gradient coordinate is ``N(0, 1)`` times ``10^u``, ``u`` uniform in [-2, 2]:
    Adam's division by ``sqrt(v_hat)`` shows only when the scales differ.
    """
    rng = np.random.default_rng(seed)
    params = {"W": rng.normal(size=(3, 4)), "b": rng.normal(size=4)}
    grads = [
        {
            name: rng.normal(size=p.shape) * 10.0 ** rng.uniform(-2, 2, size=p.shape)
            for name, p in params.items()
        }
        for _ in range(3)
    ]
    return params, grads


def _uncorrected(start, moments, hyper, *, correct_m, correct_v):
    """The step ``start - lr m_hat / (sqrt(v_hat) + eps)`` (no decay) from the moments
    ``adamw_step`` returned, with the bias correction of ``m`` or ``v`` left out: the
    mistakes the checker names."""
    (b1, b2), t = hyper["betas"], moments["step"]
    wrong = {}
    for name, p in start.items():
        m_hat = moments["m"][name] / ((1 - b1**t) if correct_m else 1.0)
        v_hat = moments["v"][name] / ((1 - b2**t) if correct_v else 1.0)
        wrong[name] = p - hyper["lr"] * (m_hat / (np.sqrt(v_hat) + hyper["eps"]))
    return wrong


def _copied(tree):
    """A deep copy of a flat dict of arrays, or of an AdamW state of flat dicts."""
    if isinstance(tree, dict):
        return {k: _copied(v) for k, v in tree.items()}
    return np.array(tree, copy=True) if isinstance(tree, np.ndarray) else tree


def _same_tree(a, b):
    """True if two nested dicts of arrays and ints hold identical values."""
    if isinstance(a, dict) or isinstance(b, dict):
        return (
            isinstance(a, dict)
            and isinstance(b, dict)
            and set(a) == set(b)
            and all(_same_tree(a[k], b[k]) for k in a)
        )
    return np.array_equal(a, b)


def _adamw_call(fn, property, params, grads, state, **hyper):
    """Call the learner's AdamW step on copies; check it returns (params, state)."""
    result = _call(fn, property, _copied(params), _copied(grads), _copied(state),
                   **hyper)
    prop, fix = (
        "returns (params, state)",
        (
            "return new_params (a dict like params) and new_state, a dict with 'step' "
            "and the moments 'm' and 'v', each a dict like params"
        ),
    )
    if not (isinstance(result, tuple) and len(result) == 2):
        raise CheckFailed(prop, f"fn returned {type(result).__name__}, not a pair", fix)
    new, new_state = result
    ok = isinstance(new, dict) and set(new) == set(params)
    ok = ok and isinstance(new_state, dict) and {"step", "m", "v"} <= set(new_state)
    ok = ok and all(
        isinstance(new_state[k], dict) and set(new_state[k]) == set(params)
        for k in ("m", "v")
    )
    if not ok:
        raise CheckFailed(
            prop, "the result does not have the keys of (params, state)", fix
        )
    arrays = {}
    for where, tree in (
        ("params", new),
        ("state['m']", new_state["m"]),
        ("state['v']", new_state["v"]),
    ):
        arrays[where] = {name: _array(tree[name], prop, np.float64) for name in params}
        for name, value in arrays[where].items():
            if value.shape != params[name].shape:
                raise CheckFailed(
                    prop,
                    f"{where}[{name!r}] has shape {value.shape}, "
                    f"params[{name!r}] {params[name].shape}",
                    fix,
                )
    return arrays["params"], {
        "step": new_state["step"],
        "m": arrays["state['m']"],
        "v": arrays["state['v']"],
    }


def _close(a, b):
    """Equal to the rounding of a few operations in float64, entry by entry."""
    return all(np.allclose(a[k], b[k], rtol=1e-10, atol=1e-13) for k in a)


def _largest_gap(a, b):
    return max(float(np.max(np.abs(a[k] - b[k]))) for k in a)


@reports_unfinished
def check_adamw_step(fn, seed=0):
    """Check a learner's ``fn(params, grads, state, *, lr, betas, eps, weight_decay)``.

    ``fn`` has the signature of :func:`attncourse.optim.adamw_step` (``decay`` is never
    passed: the default rule applies). It is called on a flat dict, ``params = {"W": W,
    "b": b}`` (``W`` a (3, 4) weight matrix, ``b`` a (4,) bias), ``grads`` of the same
    keys and shapes, and ``state = {"step": 0, "m": zeros like params, "v": zeros like
    params}``; it must return ``(new_params, new_state)`` in the same format,
    ``new_state`` fed back to the next call. Properties, in order: **purity** (the
    inputs are not modified); **returns (params, state)**; **moment update** (``m``,
    ``v`` are the running averages of ``g``, ``g^2``; the step counts up); **bias
    correction** (two steps without decay equal ``p - lr m_hat / (sqrt(v_hat) + eps)``);
    **decoupled weight decay** (with ``weight_decay > 0`` the matrix moves by ``lr wd
    W`` more, and ``m``, ``v`` do not change); **which parameters decay** (the 1-D bias
    does not). Values are compared with :func:`attncourse.optim.adamw_step` (float64)
    within ``rtol = 1e-10``.

    Raises :class:`CheckFailed` naming the first failed property; reports a stub
    (``NotImplementedError``) as unfinished. Returns the properties checked.

    >>> from attncourse.optim import adamw_step
    >>> check_adamw_step(adamw_step)[-1]
    'which parameters decay'
    >>> def no_correction(params, grads, state, *, lr, betas, eps, weight_decay):
    ...     (b1, b2), new, m, v = betas, {}, {}, {}
    ...     for k, p in params.items():
    ...         m[k] = b1 * state["m"][k] + (1 - b1) * grads[k]
    ...         v[k] = b2 * state["v"][k] + (1 - b2) * grads[k] ** 2
    ...         new[k] = p - lr * (m[k] / (np.sqrt(v[k]) + eps)
    ...                            + (weight_decay * p if p.ndim >= 2 else 0))
    ...     return new, {"step": state["step"] + 1, "m": m, "v": v}
    >>> check_adamw_step(no_correction)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    attncourse.kit.failed.CheckFailed: bias correction: ...
    """
    params, (g1, g2, g3) = _adamw_case(seed)
    hyper = {"lr": 0.1, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0}
    zeros = {name: np.zeros_like(p) for name, p in params.items()}
    state0 = {"step": 0, "m": zeros, "v": _copied(zeros)}
    inputs = (params, g1, state0)
    snapshot = tuple(_copied(x) for x in inputs)
    try:
        result = fn(*inputs, **hyper)
    except NotImplementedError:
        raise
    except Exception:
        result = None  # reported by the call below, on copies
    changed = [
        name
        for name, a, b in zip(("params", "grads", "state"), inputs, snapshot)
        if not _same_tree(a, b)
    ]
    if changed:
        raise CheckFailed(
            "purity",
            f"fn modified its input {' and '.join(changed)}",
            "compute new arrays (p - lr * update, b1 * m + ...) instead "
            "of updating in place (-=, *=, +=, out=)",
        )
    del result
    p1, s1 = _adamw_call(fn, "returns (params, state)", *inputs, **hyper)
    r1, t1 = adamw_step(params, g1, state0, **hyper)
    prop = "moment update"
    if s1["step"] != 1:
        raise CheckFailed(
            prop,
            f"after the first step state['step'] is {s1['step']!r}, not 1",
            "return state['step'] + 1: the bias correction needs t",
        )
    p2, s2 = _adamw_call(fn, prop, p1, g2, s1, **hyper)
    r2, t2 = adamw_step(r1, g2, t1, **hyper)
    for name, (b, which) in {"m": (0.9, "g"), "v": (0.999, "g^2")}.items():
        for got, want, t in ((s1, t1, 1), (s2, t2, 2)):
            if not _close(got[name], want[name]):
                raise CheckFailed(
                    prop,
                    f"after step {t}, {name} differs from the "
                    f"running average by up to "
                    f"{_largest_gap(got[name], want[name]):.2e}",
                    f"{name} = {b} {name} + (1 - {b}) {which}, starting "
                    f"from zero; store it without the bias correction",
                )
    if s2["step"] != 2:
        raise CheckFailed(
            prop,
            f"after two steps state['step'] is {s2['step']!r}",
            "return state['step'] + 1",
        )
    prop = "bias correction"
    for got, start, want, moments, t in (
        (p1, params, r1, t1, 1),
        (p2, r1, r2, t2, 2),
    ):
        if _close(got, want):
            continue
        for correct_m, correct_v, missing in (
            (False, False, "m and v"),
            (False, True, "m"),
            (True, False, "v"),
        ):
            wrong = _uncorrected(
                start, moments, hyper, correct_m=correct_m, correct_v=correct_v
            )
            if _close(got, wrong):
                raise CheckFailed(
                    prop,
                    f"step {t} uses {missing} without the bias correction",
                    "m_hat = m / (1 - b1^t), v_hat = v "
                    "/ (1 - b2^t) with t = state['step'] + 1",
                )
        raise CheckFailed(
            prop,
            f"step {t} (no decay) differs from p - lr m_hat / "
            f"(sqrt(v_hat) + eps) by up to {_largest_gap(got, want):.2e}",
            "p - lr * m_hat / (np.sqrt(v_hat) + eps), with m_hat = m / "
            "(1 - b1**t), v_hat = v / (1 - b2**t), t = state['step'] + 1",
        )
    decayed = dict(hyper, weight_decay=0.5)
    p3, s3 = _adamw_call(fn, "decoupled weight decay", p2, g3, s2, **decayed)
    r3, t3 = adamw_step(r2, g3, t2, **hyper)  # no decay
    prop = "decoupled weight decay"
    if not (_close(s3["m"], t3["m"]) and _close(s3["v"], t3["v"])):
        raise CheckFailed(
            prop,
            "with weight_decay > 0, m or v change: the decay went "
            "into the gradient (L2 regularisation)",
            "keep g as it is; add weight_decay * p to the update, after m_hat / (sqrt("
            "v_hat) + eps)",
        )
    shift = {"W": p3["W"] - r3["W"]}
    # the package's decayed step minus its undecayed one: -lr wd W
    want = {"W": adamw_step(r2, g3, t2, **decayed)[0]["W"] - r3["W"]}
    if not _close(shift, want):
        raise CheckFailed(
            prop,
            f"weight_decay = 0.5 moves W by a term that differs "
            f"from -lr wd W by up to {_largest_gap(shift, want):.2e}",
            "p - lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * p)",
        )
    if not _close({"b": p3["b"]}, {"b": r3["b"]}):
        raise CheckFailed(
            "which parameters decay",
            "the bias b (1-D) is decayed",
            "decay only arrays with ndim >= 2 (matrices); gains and "
            "biases are left alone",
        )
    return ADAMW_STEP_PROPERTIES


# --- Chapter 7: clipping by the global norm -------------------------------------------

CLIP_BY_GLOBAL_NORM_PROPERTIES = (
    "returns (grads, norm)",
    "the norm",
    "one factor for all arrays",
    "clipped norm equals max_norm",
    "small gradients unchanged",
    "input untouched",
    "zero gradient",
)


def _clip_case(seed):
    """Nested float64 gradients: a dict holding a list of dicts; unequal shapes."""
    rng = np.random.default_rng(seed)

    def g(*shape):
        return rng.normal(size=shape) * 10.0 ** rng.uniform(-1, 1)

    return {
        "embed": g(5, 3),
        "blocks": [{"W": g(3, 4), "b": g(4)}, {"W": g(4, 2), "b": g(2)}],
        "gain": g(6),
    }


def _nested_copy(tree):
    """A copy of a nesting of dicts and lists of arrays, every array copied."""
    if isinstance(tree, dict):
        return {k: _nested_copy(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_nested_copy(v) for v in tree)
    return np.array(tree, copy=True)


def _same_nesting(a, b):
    """True if two nestings hold the same arrays at the same paths, value for value."""
    from ...params import flatten_params

    fa, fb = flatten_params(a), flatten_params(b)
    return set(fa) == set(fb) and all(np.array_equal(fa[k], fb[k]) for k in fa)


def _norm_of(flat):
    """The package's :func:`~attncourse.optim.global_norm` of the arrays of a flat
    dict."""
    return global_norm(list(flat.values()))


def _clip_call(fn, property, grads, max_norm):
    """Call ``fn(grads, max_norm)`` on a copy; return (flat clipped, norm, kept)."""
    from ...params import flatten_params

    given = _nested_copy(grads)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        result = _call(fn, property, given, max_norm)
    fix = (
        "return (clipped, norm): clipped nested like grads (the same keys, list "
        "lengths and array shapes), norm one number"
    )
    if not (isinstance(result, tuple) and len(result) == 2):
        raise CheckFailed(
            property, f"fn returned {type(result).__name__}, not a pair", fix
        )
    clipped, norm = result
    want = flatten_params(grads)
    try:
        got = flatten_params(clipped)
    except ValueError as e:
        raise CheckFailed(
            property, f"clipped is not nested like grads ({e})", fix
        ) from e
    if set(got) != set(want):
        raise CheckFailed(
            property,
            f"clipped ({type(clipped).__name__}) lacks "
            f"{sorted(set(want) - set(got))} and has extra "
            f"{sorted(set(got) - set(want))}",
            fix,
        )
    out = {path: _array(got[path], property, np.float64) for path in want}
    for path, value in out.items():
        if value.shape != want[path].shape:
            raise CheckFailed(
                property,
                f"clipped {path!r} has shape {value.shape}, "
                f"grads {path!r} {want[path].shape}",
                fix,
            )
    try:
        if np.ndim(norm) != 0:
            raise TypeError(f"an array of shape {np.shape(norm)}")
        norm = float(norm)
    except (TypeError, ValueError) as e:
        raise CheckFailed(property, f"norm is not one number: {e}", fix) from e
    return out, norm, _same_nesting(given, grads)


def _norm_hint(got, flat, norm, max_norm):
    """A likely cause of a wrong ``norm``, or ''."""
    first = next(iter(flat))
    causes = (
        (
            global_norm(flat[first]),
            f"the norm of the first array, {first!r}, only",
        ),
        (norm**2, "the sum of squares, without the square root"),
        (
            sum(global_norm(a) for a in flat.values()),
            "the sum of the arrays' own norms",
        ),
        (max_norm, "the norm after clipping"),
    )
    for value, cause in causes:
        if math.isclose(got, value, rel_tol=1e-9):
            return f" ({cause})"
    return ""


@reports_unfinished
def check_clip_by_global_norm(fn, seed=0):
    """Check a learner's ``fn(grads, max_norm) -> (clipped, norm)``: one global clip.

    ``fn`` has the signature of :func:`attncourse.optim.clip_by_global_norm`. It is
    called on nested float64 gradients (a dict holding a list of dicts of arrays of
    unequal shapes, seeded by ``seed``) with ``max_norm`` a quarter of their norm,
    then twice their norm, then on all-zero gradients. Properties, in order:
    **returns (grads, norm)** (a pair; ``clipped`` nests like ``grads``, with the same
    shapes); **the norm** (``sqrt`` of the sum of squares over all arrays, before
    clipping); **one factor for all arrays** (``clipped`` is ``c * grads``, one
    ``c > 0``: the direction kept; clipping each array to its own norm fails here);
    **clipped norm equals max_norm** (when the norm exceeds it; within ``1e-6``,
    so an ``eps`` of ``1e-6`` added to the norm passes); **small gradients
    unchanged** (when the norm is below ``max_norm``); **input untouched**;
    **zero gradient** (all zeros give zeros and a norm of 0, no NaN).

    Raises :class:`CheckFailed` naming the first failed property; reports a stub
    (``NotImplementedError``) as unfinished. Returns the properties checked.

    >>> from attncourse.optim import clip_by_global_norm, global_norm
    >>> check_clip_by_global_norm(clip_by_global_norm)[-1]
    'zero gradient'
    >>> from attncourse.params import flatten_params, unflatten_params
    >>> def no_min(grads, max_norm):  # max_norm / norm without min(1, ...)
    ...     norm = global_norm(grads)
    ...     flat = {k: g * (max_norm / norm) for k, g in flatten_params(grads).items()}
    ...     return unflatten_params(flat, grads), norm
    >>> check_clip_by_global_norm(no_min)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    attncourse.kit.failed.CheckFailed: small gradients unchanged: ...
    """
    from ...params import flatten_params

    grads = _clip_case(seed)
    flat = {p: np.asarray(a, np.float64) for p, a in flatten_params(grads).items()}
    norm = global_norm(grads)
    results = {}
    for case, max_norm in (("large", norm / 4), ("small", 2 * norm)):
        results[case] = (max_norm,) + _clip_call(
            fn, "returns (grads, norm)", grads, max_norm
        )
    for max_norm, _, got, _ in results.values():
        if not math.isclose(got, norm, rel_tol=1e-9):
            raise CheckFailed(
                "the norm",
                f"with max_norm={max_norm:.4g} fn returned "
                f"norm {got:.6g}, the global norm is {norm:.6g}"
                + _norm_hint(got, flat, norm, max_norm),
                "norm = sqrt(sum of g**2 over every coordinate of every "
                "array), before clipping",
            )
    prop, fix = (
        "one factor for all arrays",
        (
            "compute one scale = min(1, max_norm / norm) from the global norm and "
            "multiply every array by it"
        ),
    )
    peak = max(float(np.max(np.abs(a))) for a in flat.values())
    for max_norm, out, _, _ in results.values():
        if not all(np.all(np.isfinite(a)) for a in out.values()):
            raise CheckFailed(
                prop, f"with max_norm={max_norm:.4g} clipped holds NaN or inf", fix
            )
        c = sum(float(np.sum(out[p] * flat[p])) for p in flat) / norm**2
        gap = max(float(np.max(np.abs(out[p] - c * flat[p]))) for p in flat)
        if c > 0 and gap <= 1e-9 * c * peak:
            continue
        if all(not np.any(a) for a in out.values()):
            detail = "clipped is all zeros: it has no direction"
        elif c <= 0 and gap <= 1e-9 * abs(c) * peak:
            detail = "clipped points against grads (a negative factor)"
        else:
            own = [global_norm(out[p]) for p in flat]
            kept = [
                min(global_norm(a), max_norm)
                for a in flat.values()
            ]
            detail = (
                "the arrays are scaled by different factors, not one multiple of grads"
            )
            if np.allclose(own, kept, rtol=1e-6):
                detail += ": each array was clipped to its own norm"
        raise CheckFailed(prop, f"with max_norm={max_norm:.4g}: {detail}", fix)
    max_norm, out, _, _ = results["large"]
    clipped = _norm_of(out)
    if not math.isclose(clipped, max_norm, rel_tol=1e-6):
        raise CheckFailed(
            "clipped norm equals max_norm",
            f"grads of norm {norm:.4g} "
            f"with max_norm={max_norm:.4g} come back with norm "
            f"{clipped:.4g}",
            "when norm > max_norm scale every array by max_norm / norm",
        )
    max_norm, out, _, _ = results["small"]
    if not all(np.allclose(out[p], flat[p], rtol=1e-12, atol=0) for p in flat):
        scale = _norm_of(out) / norm
        raise CheckFailed(
            "small gradients unchanged",
            f"grads of norm {norm:.4g}, "
            f"below max_norm={max_norm:.4g}, come back scaled by "
            f"{scale:.4g}",
            "scale by min(1, max_norm / norm): 1 when the norm is below max_norm",
        )
    for max_norm, _, _, kept in results.values():
        if not kept:
            raise CheckFailed(
                "input untouched",
                f"with max_norm={max_norm:.4g} fn modified the grads it was given",
                "return new arrays "
                "(g * scale), not g *= scale or np.multiply(..., out=g)",
            )
    prop = "zero gradient"
    zeros = _nested_copy(grads)
    for a in flatten_params(zeros).values():
        a[...] = 0.0
    out, got, _ = _clip_call(fn, prop, zeros, 1.0)
    fix = (
        "a zero gradient has nothing to clip: use the scale 1 when norm is 0 "
        "(max_norm / 0 is inf, 0 / 0 is NaN)"
    )
    if got != 0.0:
        raise CheckFailed(prop, f"all-zero grads give norm {got!r}, not 0.0", fix)
    if not all(np.all(a == 0.0) for a in out.values()):
        bad = "NaN" if any(np.any(np.isnan(a)) for a in out.values()) else "nonzero"
        raise CheckFailed(prop, f"all-zero grads come back with {bad} entries", fix)
    return CLIP_BY_GLOBAL_NORM_PROPERTIES


# --- Chapter 7: the training loop -----------------------------------------------------

TRAINING_LOOP_PROPERTIES = (
    "returns (params, losses)",
    "purity",
    "the first loss",
    "one loss per step",
    "the parameters after training",
)

_LOOP = dict(steps=6, lr=0.05, warmup=2, clip=0.05, weight_decay=0.1, betas=(0.9, 0.99))


def _loop_case():
    """A small float64 model (non-square tables) and a batch function seeded by the
    step."""
    from ...model import ModelConfig, init_model

    config = ModelConfig(n_vocab=7, T_max=5, D=6, heads=2, layers=1, ratio=2)
    params = init_model(config, seed=3, std=0.3)

    def batch(step):
        rng = np.random.default_rng([7, step])
        ids = rng.integers(0, config.n_vocab, size=(3, 5))
        return ids[:, :-1], ids[:, 1:], None

    return config, params, batch


def _loop(params, batch, *, config, steps, lr, warmup, clip, weight_decay, betas,
          slip=None):
    """The loop of ``attncourse.train`` in a few lines, or with one typical ``slip``."""
    from ...model import model_loss
    from ...optim import adamw_init, clip_by_global_norm, lr_at

    state, losses, summed = adamw_init(params), [], None
    for step in range(1, steps + 1):
        if slip == "state reset every step":
            state = adamw_init(params)
        ids, targets, counted = batch(step)
        loss, grads = model_loss(params, ids, targets, config=config, counted=counted)
        if slip == "gradients summed over steps":
            summed = grads if summed is None else _add(summed, grads)
            grads = summed
        if slip != "no clipping (or clipping after the step)":
            grads, _ = clip_by_global_norm(grads, clip)
        rate = lr if slip == "a constant learning rate" else lr_at(
            step, lr=lr, warmup=warmup, total=steps)
        params, state = adamw_step(params, grads, state, lr=rate, betas=betas,
                                   weight_decay=weight_decay)
        losses.append(loss)
    return params, np.array(losses)


def _add(a, b):
    if isinstance(a, dict):
        return {k: _add(a[k], b[k]) for k in a}
    if isinstance(a, list):
        return [_add(x, y) for x, y in zip(a, b)]
    return a + b


_LOOP_SLIPS = {
    "no clipping (or clipping after the step)":
        "clip the gradients (clip_by_global_norm) before adamw_step uses them",
    "state reset every step":
        "create the AdamW state once, before the loop, and carry the state each step "
        "returns into the next",
    "gradients summed over steps":
        "use each step's own gradients: model_loss returns fresh ones, add nothing up",
    "a constant learning rate":
        "take the rate of step s from lr_at(s, lr=lr, warmup=warmup, total=steps)",
}


@reports_unfinished
def check_training_loop(fn):
    """Check a learner's ``fn(params, batch, *, config, steps, lr, warmup, clip,
    weight_decay, betas) -> (params, losses)``: the training loop.

    ``batch(step)`` gives ``(ids, targets, counted)`` for ``step = 1 .. steps``;
    ``losses[s - 1]`` is the loss of step ``s``, before its update. Each step clips the
    gradients by their global norm, then takes an AdamW step at the rate ``lr_at``
    gives. The checker trains a small float64 model for six steps, with a clip that is
    active, against the package's pieces, and names a typical slip (no clipping or
    clipping after the step, the optimiser state reset, gradients summed over steps, a
    constant rate) when the result matches it. Returns the names of the properties
    checked.
    """
    from ...params import flatten_params

    config, params, batch = _loop_case()
    before = {k: v.copy() for k, v in flatten_params(params).items()}
    result = _call(fn, "returns (params, losses)", params, batch, config=config,
                   **_LOOP)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise CheckFailed("returns (params, losses)",
                          f"fn returned {type(result).__name__}",
                          "return the trained params and the list of losses")
    got_params, got_losses = result
    if any(not np.array_equal(v, before[k]) for k, v in flatten_params(params).items()):
        raise CheckFailed("purity", "the params passed in were changed",
                          "adamw_step returns new params: assign them, change nothing "
                          "in place")
    want_params, want_losses = _loop(params, batch, config=config, **_LOOP)
    losses = _array(got_losses, "one loss per step", dtype=np.float64).ravel()
    if losses.shape != want_losses.shape:
        raise CheckFailed("one loss per step",
                          f"got {losses.size} losses for {_LOOP['steps']} steps",
                          "append the loss of every step, steps 1 .. steps")
    if not math.isclose(losses[0], want_losses[0], rel_tol=1e-12):
        raise CheckFailed("the first loss",
                          f"got {losses[0]!r}, the loss of batch(1) is "
                          f"{want_losses[0]!r}",
                          "steps count from 1: call batch(1) first, record the loss "
                          "before the update")
    try:
        flat = {k: _array(v, "the parameters after training", dtype=np.float64)
                for k, v in flatten_params(got_params).items()}
    except (TypeError, ValueError, AttributeError) as e:
        raise CheckFailed("the parameters after training",
                          f"the params could not be read ({e})",
                          "return the params adamw_step returned last") from e
    want = flatten_params(want_params)
    right = set(flat) == set(want) and all(
        flat[k].shape == want[k].shape and np.allclose(flat[k], want[k], rtol=1e-9,
                                                       atol=1e-12) for k in want)
    if right and np.allclose(losses, want_losses, rtol=1e-9):
        return TRAINING_LOOP_PROPERTIES
    for slip, fix in _LOOP_SLIPS.items():
        slip_params, slip_losses = _loop(params, batch, config=config, **_LOOP,
                                         slip=slip)
        slipped = flatten_params(slip_params)
        if set(flat) == set(slipped) and np.allclose(losses, slip_losses, rtol=1e-9) \
                and all(np.allclose(flat[k], slipped[k], rtol=1e-9) for k in slipped):
            raise CheckFailed("the parameters after training",
                              f"the result is that of a loop with {slip}", fix)
    prop = "one loss per step" if not np.allclose(losses, want_losses, rtol=1e-9) \
        else "the parameters after training"
    raise CheckFailed(prop, "the losses or the final parameters differ from the "
                      "package's loop",
                      "each step: batch(step), model_loss, clip_by_global_norm, "
                      "adamw_step at lr_at(step, ...) with the carried state")
