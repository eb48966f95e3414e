"""What several learner checkers share: the guarded call, the unfinished notice."""

import functools

import numpy as np

from ..failed import CheckFailed

__all__ = ["UNFINISHED", "reports_unfinished"]


def _call(fn, property, *args, **kwargs):
    """Call the learner's ``fn``; turn any failure but NotImplementedError into
    CheckFailed."""
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise
    except Exception as e:  # the learner's code may fail in any way: name the property
        shapes = ", ".join(str(np.shape(a)) for a in args)
        raise CheckFailed(
            property,
            f"calling it on inputs of shapes {shapes} raised {type(e).__name__}: {e}",
            "make the function run on these inputs (the traceback above shows where it "
            "failed)",
        ) from e


UNFINISHED = (
    "Exercise not done yet: {name} raises NotImplementedError — write it, "
    "then run this cell again"
)


def reports_unfinished(checker):
    """Wrap a learner checker: a stub raising ``NotImplementedError`` is reported, not
    raised.

    The wrapped checker prints :data:`UNFINISHED` (naming the function that raised) and
    returns ``None``; every other outcome, a :class:`CheckFailed` included, is
    unchanged.
    """

    @functools.wraps(checker)
    def wrapper(*args, **kwargs):
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
    one."""
    try:
        return np.asarray(value, dtype=dtype)
    except (TypeError, ValueError) as e:
        raise CheckFailed(
            property,
            f"the result is not an array of numbers ({e})",
            "return a numpy array",
        ) from e


def _sign_flipped(actual, desired):
    """True when ``actual`` is ``-desired`` (and not zero): a gradient off by a sign."""
    return bool(np.any(desired != 0)) and np.allclose(
        actual, -desired, rtol=1e-6, atol=1e-9
    )
