"""Input validators shared by the package (private): every message names the argument at
fault.

Validators raise ``ValueError``; they are named ``shaped``, ``as_*`` or ``require_*``.
The prefix ``check_`` is reserved for the learner checkers of
:mod:`attncourse.kit.exercises`. A public function of the core validates its arrays in
one declarative line, :func:`shaped`, with the shapes its docstring states.
"""

import functools
import re

import numpy as np

__all__ = ["shaped", "as_float_array", "require_sizes", "require_params"]

_ARRAY = re.compile(r"(\w+)\(([^)]*)\)(:int)?")


@functools.lru_cache(maxsize=None)
def _parse(spec):
    """``"Q(..., T, d) ids(B):int"`` -> ``(("Q", ("...", "T", "d"), False), ...)``."""
    parsed = tuple(
        (name, tuple(d.strip() for d in dims.split(",") if d.strip()), bool(integer))
        for name, dims, integer in _ARRAY.findall(spec)
    )
    if not parsed or "".join(_ARRAY.sub("", spec).split()):
        raise ValueError(f"not a shape spec: {spec!r}")
    return parsed


def shaped(spec, *arrays):
    """Return ``arrays`` as float arrays with the shapes ``spec`` names, or raise
    ``ValueError`` naming the argument, the expected and the actual shape.

    ``spec`` lists one ``name(dims)`` per array. A dimension is a size name (the same
    name means the same size in every array), a number, or ``...``: any leading batch
    dimensions, which must broadcast across the arrays. Integer and boolean input
    becomes float64, float input keeps its dtype; ``name(dims):int`` asks for an integer
    array instead (token ids) and returns it unchanged. ``None`` (an optional argument
    left out) passes through.

    >>> Q, K = shaped("Q(..., T, d) K(..., S, d)", [[1, 2]], [[0, 1], [1, 0]])
    >>> Q
    array([[1., 2.]])
    >>> shaped("Q(..., T, d) K(..., S, d)", np.ones((3, 2)), np.ones((4, 5)))
    Traceback (most recent call last):
    ...
    ValueError: K must have shape (..., S, d) with d=2 (as in Q), got shape (4, 5)
    >>> shaped("X(T, D)", np.ones(3))
    Traceback (most recent call last):
    ...
    ValueError: X must have shape (T, D), got shape (3,)
    >>> shaped("ids(B, T):int", np.ones((2, 3)))
    Traceback (most recent call last):
    ...
    ValueError: ids must be an array of integers (token ids), got dtype float64
    """
    parsed = _parse(spec)
    if len(parsed) != len(arrays):
        raise ValueError(f"{spec!r} names {len(parsed)} arrays, got {len(arrays)}")
    sizes, owner, batches, out = {}, {}, {}, []
    for (name, dims, integer), x in zip(parsed, arrays):
        if x is None:
            out.append(None)
            continue
        x = np.asarray(x)
        if integer:
            if x.dtype.kind not in "iu":
                raise ValueError(f"{name} must be an array of integers (token ids), "
                                 f"got dtype {x.dtype}")
        else:
            x = as_float_array(name, x)
        want = "(" + ", ".join(dims) + ")"
        tail = [d for d in dims if d != "..."]
        lead = "..." in dims
        if x.ndim < len(tail) or (not lead and x.ndim != len(tail)):
            raise ValueError(f"{name} must have shape {want}, got shape {x.shape}")
        for dim, n in zip(tail, x.shape[x.ndim - len(tail):]):
            if dim.isdigit() and n != int(dim):
                raise ValueError(f"{name} must have shape {want}, got shape {x.shape}")
            if dim in sizes and n != sizes[dim]:
                raise ValueError(f"{name} must have shape {want} with "
                                 f"{dim}={sizes[dim]} (as in {owner[dim]}), got shape "
                                 f"{x.shape}")
            sizes.setdefault(dim, n)
            owner.setdefault(dim, name)
        if lead:
            batches[name] = x.shape[:x.ndim - len(tail)]
        out.append(x)
    try:
        np.broadcast_shapes(*batches.values())
    except ValueError:
        listed = ", ".join(f"{n} {b}" for n, b in batches.items())
        raise ValueError(
            f"leading batch dimensions do not broadcast: {listed}"
        ) from None
    return out[0] if len(out) == 1 else tuple(out)


def as_float_array(name, x, *, min_ndim=0, ndim=None):
    """Return ``x`` as a float array (float64 unless it already is a float type).

    >>> as_float_array("X", [[1, 2]])
    array([[1., 2.]])
    >>> as_float_array("X", ["a"])
    Traceback (most recent call last):
    ...
    ValueError: X must be an array of numbers, got dtype <U1
    >>> as_float_array("W", [1.0], ndim=2)
    Traceback (most recent call last):
    ...
    ValueError: W must be 2-D, got shape (1,)
    """
    x = np.asarray(x)
    if x.dtype.kind not in "fc":
        if x.dtype.kind not in "biu":
            raise ValueError(f"{name} must be an array of numbers, got dtype {x.dtype}")
        x = x.astype(np.float64)
    if ndim is not None and x.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {x.shape}")
    if x.ndim < min_ndim:
        raise ValueError(f"{name} must be at least {min_ndim}-D, got shape {x.shape}")
    return x


def _is_int(n):
    return isinstance(n, (int, np.integer)) and not isinstance(n, (bool, np.bool_))


def require_sizes(*, allow_zero=False, **sizes):
    """Raise ``ValueError`` naming every size that is not a positive integer (booleans
    rejected).

    With ``allow_zero=True`` the sizes must be non-negative instead.

    >>> require_sizes(T=5, D=7)
    >>> require_sizes(T=5, heads=0)
    Traceback (most recent call last):
    ...
    ValueError: sizes must be positive integers: heads=0 (got T=5, heads=0)
    >>> require_sizes(T=True)
    Traceback (most recent call last):
    ...
    ValueError: sizes must be positive integers: T=True (got T=True)
    """
    lowest = 0 if allow_zero else 1
    bad = [k for k, n in sizes.items() if not (_is_int(n) and n >= lowest)]
    if bad:
        kind = "non-negative" if allow_zero else "positive"
        wrong = ", ".join(f"{k}={sizes[k]!r}" for k in bad)
        listed = ", ".join(f"{k}={v!r}" for k, v in sizes.items())
        raise ValueError(f"sizes must be {kind} integers: {wrong} (got {listed})")


def require_params(layer, params, names):
    """Raise ``ValueError`` unless ``params`` is a dict holding every name in ``names``.

    >>> require_params("linear", {"b": 0.0}, ("W",))
    Traceback (most recent call last):
    ...
    ValueError: linear params lack ['W']; they need ['W'], got keys ['b']
    """
    if not isinstance(params, dict):
        raise ValueError(
            f"{layer} params must be a dict of named arrays, got "
            f"{type(params).__name__}"
        )
    missing = [n for n in names if n not in params]
    if missing:
        raise ValueError(
            f"{layer} params lack {missing}; they need {list(names)}, got keys "
            f"{sorted(params)}"
        )
