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
"""

__all__ = ["CheckFailed"]


class CheckFailed(AssertionError):
    """A check found a property that does not hold; ``.property`` names it, ``.fix``
    suggests a repair."""

    def __init__(self, property, detail, fix=None):
        self.property, self.detail, self.fix = property, detail, fix
        super().__init__(
            f"{property}: {detail}" + (f" (likely fix: {fix})" if fix else "")
        )
