"""Input validators shared by the package (private): every message names the argument at
fault.

Validators raise ``ValueError``; they are named ``as_*`` or ``require_*``. The prefix
``check_`` is reserved for the learner checkers of :mod:`attncourse.verify.exercises`.
"""

import numpy as np

__all__ = ["as_float_array", "require_sizes", "require_params"]


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
