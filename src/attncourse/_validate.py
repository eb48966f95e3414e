"""Input validators shared by the package (private): every message names the argument at
fault.

Validators raise ``ValueError``; they are named ``shaped``, ``as_*`` or ``require_*``.
The prefix ``check_`` is reserved for the learner checkers of
:mod:`attncourse.kit.exercises`. A public function of the core validates its arrays in
one declarative line, :func:`shaped`, with the shapes its docstring states; any other
constraint is one statement too: :func:`require_that` (a condition and its message,
formatted only on failure) or one of the named validators below. A check inside a loop
over every array of a model stays an inline ``if ...: raise`` (no call per array).
"""

import functools
import math
import numbers
import re

import numpy as np

__all__ = ["shaped", "require_that", "require_a", "require_broadcast",
           "as_float_array", "as_ids", "require_sizes", "require_params", "as_params",
           "as_number", "as_float_like", "require_like", "require_bool"]

_PASSED = set()  # the signatures shaped has seen pass unconverted (see shaped)
_ARRAY = re.compile(r"(\w+)\(([^)]*)\)(:int)?")


@functools.lru_cache(maxsize=None)
def _parse(spec):
    """``"Q(..., T, d) ids(B):int"`` -> one ``(name, want, tail, lead, integer)`` per
    array: the shape as written, the named trailing dimensions (a number as an int),
    whether ``...`` leads, whether integers are asked for."""
    parsed = []
    for name, dims, integer in _ARRAY.findall(spec):
        dims = [d.strip() for d in dims.split(",") if d.strip()]
        tail = tuple(int(d) if d.isdigit() else d for d in dims if d != "...")
        parsed.append((name, "(" + ", ".join(dims) + ")", tail, "..." in dims,
                       bool(integer)))
    if not parsed or "".join(_ARRAY.sub("", spec).split()):
        raise ValueError(f"not a shape spec: {spec!r}")
    return tuple(parsed)


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
    # The verdict depends only on the spec and the arrays' shapes and dtypes: float
    # arrays whose signature passed before pass again, returned as they are.
    signature = (spec, *((x.shape, x.dtype) if type(x) is np.ndarray else x.__class__
                         for x in arrays))
    if signature in _PASSED:
        return arrays[0] if len(arrays) == 1 else arrays
    parsed = _parse(spec)
    require_that(len(parsed) == len(arrays), "{!r} names {} arrays, got {}", spec,
                 len(parsed), len(arrays))
    sizes, owner, batches, out = {}, {}, [], []
    for (name, want, tail, lead, integer), x in zip(parsed, arrays):
        if x is not None and not (type(x) is np.ndarray and x.dtype.kind == "f"
                                  and not integer):
            x = np.asarray(x) if integer else as_float_array(name, x)
            require_that(not integer or x.dtype.kind in "iu", "{} must be an array of "
                         "integers (token ids), got dtype {}", name, x.dtype)
        out.append(x)
        shape, k = getattr(x, "shape", ()), len(tail)
        require_that(x is None or len(shape) == k or lead and len(shape) > k, "{} must "
                     "have shape {}, got shape {}", name, want, shape)
        for dim, n in zip(tail, shape[len(shape) - k:] if x is not None else ()):
            if dim.__class__ is int:  # a number: that size exactly
                require_that(n == dim, "{} must have shape {}, got shape {}", name,
                             want, shape)
            elif dim not in sizes:  # a size name, first seen here
                sizes[dim], owner[dim] = n, name
            else:  # a size name seen before: the same size
                require_that(n == sizes[dim], "{} must have shape {} with {}={} (as in "
                             "{}), got shape {}", name, want, dim, sizes[dim],
                             owner[dim], shape)
        batches += [(name, shape[:len(shape) - k])] if lead and len(shape) > k else []
    require_broadcast([b for _, b in batches], "leading batch dimensions do not "
                      "broadcast: {}", ", ".join(f"{n} {b}" for n, b in batches))
    if all(x is y for x, y in zip(out, arrays)) and len(_PASSED) < 4096:
        _PASSED.add(signature)  # nothing was converted: the same input passes as is
    return out[0] if len(out) == 1 else tuple(out)


def require_that(ok, message, *values):
    """Raise ``ValueError(message.format(*values))`` unless ``ok``: one constraint, one
    statement, the message formatted only when it fails.

    >>> require_that(2 > 1, "never shown {}", 0)
    >>> require_that(0 > 1, "n must be positive, got {}", 0)
    Traceback (most recent call last):
    ...
    ValueError: n must be positive, got 0
    """
    if not ok:
        raise ValueError(message.format(*values))


def require_a(name, x, kind, what=None):
    """Raise ``ValueError`` unless ``x`` is an instance of ``kind``, named ``what``
    (default: ``"a " + kind.__name__``).

    >>> require_a("config", {}, tuple)
    Traceback (most recent call last):
    ...
    ValueError: config must be a tuple, got dict
    """
    require_that(isinstance(x, kind), "{} must be {}, got {}", name,
                 what or f"a {kind.__name__}", type(x).__name__)


def require_broadcast(shapes, message, *values):
    """Return the broadcast shape of ``shapes``, or raise
    ``ValueError(message.format(*values))``.

    >>> require_broadcast([(2, 1), (3,)], "never shown")
    (2, 3)
    >>> require_broadcast([(2,), (4,)], "shapes do not broadcast: {}", [(2,), (4,)])
    Traceback (most recent call last):
    ...
    ValueError: shapes do not broadcast: [(2,), (4,)]
    """
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        raise ValueError(message.format(*values)) from None


def is_int(n):
    """Whether ``n`` is an integer (a numpy integer too) and not a bool."""
    return _is_a(n, (int, np.integer))


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
    require_that(x.dtype.kind in "biufc", "{} must be an array of numbers, got dtype "
                 "{}", name, x.dtype)
    x = x if x.dtype.kind in "fc" else x.astype(np.float64)
    require_that(ndim in (None, x.ndim), "{} must be {}-D, got shape {}", name, ndim,
                 x.shape)
    require_that(x.ndim >= min_ndim, "{} must be at least {}-D, got shape {}", name,
                 min_ndim, x.shape)
    return x


def as_ids(ids, n_vocab, name="ids", *, ndim=None):
    """Return token ``ids`` as an int64 array, or raise ``ValueError`` naming the values
    at fault.

    Valid ids are integers ``0 <= id < n_vocab`` (booleans are not ids); any shape is
    allowed unless ``ndim`` is given, and an empty array of any dtype is an empty array
    of ids.

    >>> as_ids([2, 0, 2], 3)
    array([2, 0, 2])
    >>> as_ids([1, 5, -1], 3)
    Traceback (most recent call last):
    ...
    ValueError: ids out of range for a vocabulary of 3 tokens (valid ids are 0..2):
    [-1, 5]
    >>> as_ids([[0, 1]], 3, ndim=1)
    Traceback (most recent call last):
    ...
    ValueError: ids must be 1-D, got shape (1, 2)
    """
    require_sizes(n_vocab=n_vocab)
    ids = np.asarray(ids)
    require_that(ndim in (None, ids.ndim), "{} must be {}-D, got shape {}", name, ndim,
                 ids.shape)
    require_that(ids.size == 0 or ids.dtype.kind in "iu", "{} must be integers, got "
                 "dtype {}", name, ids.dtype)
    bad = np.unique(ids[(ids < 0) | (ids >= n_vocab)]) if ids.size else ()
    require_that(len(bad) == 0, "{} out of range for a vocabulary of {} tokens (valid "
                 "ids are 0..{}): [{}]", name, n_vocab, n_vocab - 1, _listed(bad))
    return ids.astype(np.int64)


def _listed(values):
    """``"3, 4, ..."``: the first ten ``values`` (as ints), then an ellipsis."""
    return ", ".join([str(int(v)) for v in values[:10]] + ["..."] * (len(values) > 10))


def _is_a(x, kind):
    """Whether ``x`` is an instance of ``kind`` and not a bool: ``True`` is neither a
    size nor a number here (the one "int but not a bool" check of the package).

    >>> [_is_a(n, numbers.Integral) for n in (3, np.int64(3), True, np.bool_(True))]
    [True, True, False, False]
    """
    return isinstance(x, kind) and not isinstance(x, (bool, np.bool_))


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
    bad = {k: n for k, n in sizes.items() if not (is_int(n) and n >= lowest)}
    if bad:  # the message is built only on failure: sizes are checked on every call
        kind = "non-negative" if allow_zero else "positive"
        raise ValueError(f"sizes must be {kind} integers: {_pairs(bad)} "
                         f"(got {_pairs(sizes)})")


def _pairs(named):
    """``"T=5, heads=0"``: the items of the dict ``named``, their values as repr."""
    return ", ".join(f"{k}={v!r}" for k, v in named.items())


def require_params(layer, params, names):
    """Raise ``ValueError`` unless ``params`` is a dict holding every name in ``names``.

    >>> require_params("linear", {"b": 0.0}, ("W",))
    Traceback (most recent call last):
    ...
    ValueError: linear params lack ['W']; they need ['W'], got keys ['b']
    """
    require_a(f"{layer} params", params, dict, "a dict of named arrays")
    missing = [n for n in names if n not in params]
    require_that(not missing, "{} params lack {}; they need {}, got keys {}", layer,
                 missing, list(names), sorted(params))


def as_params(layer, params, names):
    """Return the values ``params`` holds at ``names``, dotted paths into nested dicts
    (``"gamma beta"``, ``"up.W down.W"``), or raise ``ValueError`` naming the missing.

    >>> as_params("mlp", {"up": {"W": 1.0}, "down": {}}, "up.W down.W")
    Traceback (most recent call last):
    ...
    ValueError: mlp params lack 'down.W'; they need ['up.W', 'down.W']
    """
    names = tuple(names.split()) if isinstance(names, str) else tuple(names)
    require_params(layer, params, tuple(dict.fromkeys(n.split(".")[0] for n in names)))
    values = []
    for name in names:
        node = params
        for key in name.split("."):  # (inline: this runs for every array of a layer)
            if not (isinstance(node, dict) and key in node):
                raise ValueError(
                    f"{layer} params lack {name!r}; they need {list(names)}")
            node = node[key]
        values.append(node)
    return tuple(values)


def as_number(name, x, interval="(-inf, inf)", *, integer=False, optional=False):
    """Return ``x`` as a float (an int if ``integer``) if it is a finite real number,
    not a bool, in ``interval`` (``"[0, 1)"``, ``"(0, inf)"``, ``f"[1, {total}]"``), or
    raise ``ValueError`` naming it; ``optional=True`` lets ``None`` through.

    >>> as_number("lr", 0.5, "[0, inf)"), as_number("step", 3, "[1, 8]", integer=True)
    (0.5, 3)
    >>> as_number("betas[1]", 1.0, "[0, 1)")
    Traceback (most recent call last):
    ...
    ValueError: betas[1] must be a finite number in [0, 1), got 1.0
    >>> as_number("top_k", True, "[1, inf)", integer=True, optional=True)
    Traceback (most recent call last):
    ...
    ValueError: top_k must be None or an integer in [1, inf), got True
    """
    if x is None and optional:
        return None
    low, high = (float(end) for end in interval[1:-1].split(","))
    ok = _is_a(x, numbers.Integral if integer else numbers.Real) and math.isfinite(x)
    require_that(ok and (low < x or (interval[0] == "[" and x == low))
                 and (x < high or (interval[-1] == "]" and x == high)),
                 "{} must be {}{} in {}, got {!r}", name, "None or " * optional,
                 "an integer" if integer else "a finite number", interval, x)
    return int(x) if integer else float(x)


def as_float_like(name, x, shape, of):
    """Return ``x`` as a float array of the given ``shape``, that of ``of`` (the array
    it is the gradient of), or raise ``ValueError``.

    >>> as_float_like("dY", np.ones((3, 2)), (2, 3), "Y (and X)")
    Traceback (most recent call last):
    ...
    ValueError: dY must have the shape of Y (and X), (2, 3), got (3, 2)
    """
    return require_like(name, as_float_array(name, x), shape, of)


def require_like(name, x, shape, of):
    """Return the array ``x`` if it has the given ``shape``, that of ``of``, or raise
    ``ValueError``; nothing is converted.

    >>> require_like("targets", np.zeros((2, 4), int), (2, 5), "ids")
    Traceback (most recent call last):
    ...
    ValueError: targets must have the shape of ids, (2, 5), got (2, 4)
    """
    require_that(x.shape == tuple(shape), "{} must have the shape of {}, {}, got {}",
                 name, of, tuple(shape), x.shape)
    return x


def require_bool(name, x):
    """Raise ``ValueError`` unless ``x`` is ``True`` or ``False`` (a numpy bool too).

    >>> require_bool("approximate", "tanh")
    Traceback (most recent call last):
    ...
    ValueError: approximate must be True or False, got 'tanh'
    """
    require_that(isinstance(x, (bool, np.bool_)), "{} must be True or False, got {!r}",
                 name, x)
