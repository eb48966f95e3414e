"""Hypothesis strategies shared by the tests: float64 arrays of moderate scale."""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

__all__ = ["masks", "matrices", "sizes"]

sizes = st.integers(min_value=1, max_value=5)


def matrices(shape, scale=3.0):
    """Float64 arrays of ``shape`` with entries in [-scale, scale]."""
    return arrays(
        np.float64, shape, elements=st.floats(-scale, scale, allow_nan=False, width=64)
    )


def masks(shape):
    """Boolean arrays of ``shape`` (rows with nothing visible included)."""
    return arrays(np.bool_, shape, elements=st.booleans())
