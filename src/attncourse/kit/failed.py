"""The failure every course check raises: :class:`CheckFailed`, which names the property
and the likely fix.

It is an ``AssertionError`` (so pytest and nbval report it as a failed check), raised
explicitly, so a check keeps working under ``python -O``, which strips bare ``assert``.

>>> raise CheckFailed("rows summing to one", "row 1 of A sums to 1.5",
...                   fix="normalise over the last axis")
Traceback (most recent call last):
...
attncourse.kit.failed.CheckFailed: rows summing to one: row 1 of A sums to 1.5
(likely fix: normalise over the last axis)

In IPython and Jupyter the traceback of a :class:`CheckFailed` leaves out the frames of
the kit's own code (:meth:`CheckFailed._render_traceback_`): the reader sees the line
that called the check, the message, and, when their own function raised, that
function's frames; the exception keeps its whole traceback (``%debug`` walks it).
"""

import os
import types

__all__ = ["CheckFailed"]

_KIT = os.path.dirname(os.path.abspath(__file__)) + os.sep  # .../attncourse/kit/


def _outside_kit(tb):
    """A copy of the traceback ``tb`` without the frames of files under ``kit/``."""
    frames = []
    while tb is not None:
        if not os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_KIT):
            frames.append(tb)
        tb = tb.tb_next
    kept = None
    for tb in reversed(frames):
        kept = types.TracebackType(kept, tb.tb_frame, tb.tb_lasti, tb.tb_lineno)
    return kept


class CheckFailed(AssertionError):
    """A check found a property that does not hold; ``.property`` names it, ``.fix``
    suggests a repair."""

    def __init__(self, property, detail, fix=None):
        self.property, self.detail, self.fix = property, detail, fix
        super().__init__(
            f"{property}: {detail}" + (f" (likely fix: {fix})" if fix else "")
        )

    def _render_traceback_(self):
        """IPython's hook for drawing this exception (Jupyter's kernel uses it): the
        traceback as IPython draws it, without the kit's frames, here and in the
        exceptions chained to it (the cause: the reader's function that raised)."""
        from IPython import get_ipython

        shell = get_ipython()
        if shell is None:  # called outside IPython: the standard lines
            import traceback

            return traceback.format_exception(type(self), self, self.__traceback__)
        chain, seen, exc = [], set(), self
        while exc is not None and id(exc) not in seen:  # as IPython walks it
            seen.add(id(exc))
            chain.append((exc, exc.__traceback__))
            exc = exc.__cause__ or (
                None if exc.__suppress_context__ else exc.__context__
            )
        try:
            for exc, tb in chain:
                exc.__traceback__ = _outside_kit(tb)
            return shell.InteractiveTB.structured_traceback(
                type(self), self, self.__traceback__
            )
        finally:
            for exc, tb in chain:  # the exceptions keep their whole tracebacks
                exc.__traceback__ = tb
