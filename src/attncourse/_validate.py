"""Shape and value checks shared by the package (private)."""

import numpy as np

__all__ = ["as_float_array", "require_positive_sizes"]


def as_float_array(name, x):
    """Return ``x`` as a float array (float64 unless it already is a float type)."""
    x = np.asarray(x)
    if x.dtype.kind not in "fc":
        x = x.astype(np.float64)
    return x


def require_positive_sizes(**sizes):
    """Raise ``ValueError`` listing every size unless all are positive integers."""
    if not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n > 0 for n in sizes.values()):
        listed = ", ".join(f"{k}={v}" for k, v in sizes.items())
        raise ValueError(f"sizes must be positive integers, got {listed}")
