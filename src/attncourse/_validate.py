"""Shape and value checks shared by the package (private)."""

import numpy as np

__all__ = ["as_float_array", "require_ndim", "require_same", "require_finite", "require_positive_sizes"]


def as_float_array(name, x):
    """Return ``x`` as a float array (float64 unless it already is a float type)."""
    x = np.asarray(x)
    if x.dtype.kind not in "fc":
        x = x.astype(np.float64)
    return x


def require_ndim(name, x, allowed):
    """Raise ``ValueError`` unless ``x.ndim`` is one of ``allowed``."""
    if x.ndim not in allowed:
        wanted = " or ".join(f"{n}-D" for n in allowed)
        raise ValueError(f"{name} must be {wanted}, got shape {x.shape}")


def require_same(what, name_a, a, name_b, b):
    """Raise ``ValueError`` naming both shapes unless ``a == b``."""
    if a != b:
        raise ValueError(f"{what} differ: {name_a} gives {a}, {name_b} gives {b}")


def require_finite(name, x):
    """Raise ``ValueError`` if ``x`` holds NaN or infinity."""
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} contains NaN or infinity")


def require_positive_sizes(**sizes):
    """Raise ``ValueError`` listing every size unless all are positive integers."""
    if not all(isinstance(n, (int, np.integer)) and n > 0 for n in sizes.values()):
        listed = ", ".join(f"{k}={v}" for k, v in sizes.items())
        raise ValueError(f"sizes must be positive integers, got {listed}")
