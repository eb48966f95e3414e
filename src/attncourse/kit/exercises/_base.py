"""What several learner checkers share: the guarded call, the unfinished notice."""

import functools
import inspect

import numpy as np

from ..failed import CheckFailed

__all__ = ["UNFINISHED", "reports_unfinished"]

FORGOT_RETURN = "returned None — did you forget `return`?"


def _name(fn):
    """The learner's function as the message names it: its name, or ``fn``."""
    name = getattr(fn, "__name__", "")
    return name if name.isidentifier() else "fn"


def _describe(value, depth=0):
    """A short description of one argument: an array by its shape (and its dtype
    unless float64), a small scalar by its value, a container by its items."""
    if isinstance(value, np.ndarray) and value.ndim > 0:
        dtype = "" if value.dtype == np.float64 else f" {value.dtype}"
        return f"{value.shape}{dtype}"
    if isinstance(value, (np.ndarray, np.generic)):  # a 0-d array, a numpy scalar
        return repr(value.item())
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    if isinstance(value, str):
        return repr(value) if len(value) <= 30 else f"a string of {len(value)} chars"
    if callable(value):
        return f"<function {_name(value)}>"
    if isinstance(value, dict) and depth < 2:
        first = list(value.items())[:3]
        items = [f"{k!r}: {_describe(v, depth + 1)}" for k, v in first]
        more = f", … ({len(value)} entries)" if len(value) > 3 else ""
        return "{" + ", ".join(items) + more + "}"
    if isinstance(value, (tuple, list)) and depth < 2:
        items = [_describe(v, depth + 1) for v in value[:4]]
        more = f", … ({len(value)} items)" if len(value) > 4 else ""
        comma = "," if isinstance(value, tuple) and len(value) == 1 else ""
        inner = ", ".join(items) + comma + more
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    text = repr(value)
    return text if len(text) <= 60 else f"a {type(value).__name__}"


def _argument(name, value):
    """``name (3, 7)`` for an array or container, ``name=10`` for anything else."""
    text = _describe(value)
    if name is None:
        return text
    shaped = isinstance(value, (dict, tuple, list)) or (
        isinstance(value, np.ndarray) and value.ndim > 0
    )
    return f"{name} {text}" if shaped else f"{name}={text}"


def _describe_call(fn, args, kwargs):
    """The call as the learner would read it, e.g. ``my_top_k(logits (3, 7), k=10)``:
    each argument under the name of ``fn``'s parameter that receives it."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except (TypeError, ValueError):  # no signature, or the call does not fit it
        parts = [_argument(None, a) for a in args]
        parts += [_argument(k, v) for k, v in kwargs.items()]
    else:
        parts = []
        for name, value in bound.arguments.items():
            kind = bound.signature.parameters[name].kind
            if kind is inspect.Parameter.VAR_POSITIONAL:
                parts += [_argument(None, a) for a in value]
            elif kind is inspect.Parameter.VAR_KEYWORD:
                parts += [_argument(k, v) for k, v in value.items()]
            else:
                parts.append(_argument(name, value))
    return f"{_name(fn)}({', '.join(parts)})"


def _call(fn, property, *args, **kwargs):
    """Call the learner's ``fn(*args, **kwargs)``; return what it returns.

    Any exception but ``NotImplementedError`` becomes :class:`CheckFailed` naming
    ``property`` and the call, each argument under its parameter's name (arrays by
    their shape, small scalars by their value: ``my_top_k(logits (3, 7), k=10)``), the
    exception kept as the cause. A result ``None`` (a function without ``return``)
    is named as such.
    """
    __tracebackhide__ = True  # pytest and IPython leave this frame out
    try:
        result = fn(*args, **kwargs)
    except NotImplementedError:
        raise
    except Exception as e:  # the learner's code may fail in any way: name the property
        call = _describe_call(fn, args, kwargs)
        raise CheckFailed(
            property,
            f"calling {call} raised {type(e).__name__}: {e}",
            f"make {_name(fn)} accept these arguments: the traceback above ends at "
            "the line that raised",
        ) from e
    if result is None:
        raise CheckFailed(
            property,
            f"{_describe_call(fn, args, kwargs)} {FORGOT_RETURN}",
            f"end {_name(fn)} with `return` and its result",
        )
    return result


UNFINISHED = (
    "Exercise not done yet: {name} raises NotImplementedError — write it, "
    "then run this cell again"
)


def reports_unfinished(checker):
    """Wrap a learner checker: a stub raising ``NotImplementedError`` is reported, not
    raised.

    The wrapped checker prints :data:`UNFINISHED` (naming the function that raised) and
    returns ``None``; every other outcome, a :class:`CheckFailed` included, is
    unchanged. (IPython and Jupyter draw a :class:`CheckFailed` without the kit's own
    frames: :meth:`CheckFailed._render_traceback_`.)
    """

    @functools.wraps(checker)
    def wrapper(*args, **kwargs):
        __tracebackhide__ = True  # pytest and IPython leave this frame out
        try:
            return checker(*args, **kwargs)
        except NotImplementedError as e:
            tb = e.__traceback__
            while tb.tb_next is not None:  # the innermost frame: the stub itself
                tb = tb.tb_next
            print(UNFINISHED.format(name=tb.tb_frame.f_code.co_name))
            return None

    wrapper.reports_unfinished = True
    return wrapper


def _array(value, property, dtype=None):
    """Return the learner's result as an array, or raise CheckFailed if it is not
    one (``None``, the result of a function without ``return``, is named)."""
    if value is None:
        raise CheckFailed(
            property,
            "got None instead of an array — did you forget `return`?",
            "return the array itself (a function without `return` gives None)",
        )
    try:
        array = np.asarray(value)  # no dtype yet: None inside would become NaN
        if array.dtype == object:
            kinds = sorted({type(x).__name__ for x in array.flat})
            raise TypeError(f"it holds {', '.join(kinds)}")
        return array if dtype is None else np.asarray(array, dtype=dtype)
    except (TypeError, ValueError) as e:
        error = e
    raise CheckFailed(
        property,
        f"the result is not an array of numbers ({error})",
        "return a numpy array",
    )


def _sign_flipped(actual, desired):
    """True when ``actual`` is ``-desired`` (and not zero): a gradient off by a sign."""
    return bool(np.any(desired != 0)) and np.allclose(
        actual, -desired, rtol=1e-6, atol=1e-9
    )
