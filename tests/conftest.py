"""Shared test settings: hypothesis runs a fixed, derandomised set of examples."""

from hypothesis import settings

settings.register_profile(
    "course", max_examples=40, deadline=None, derandomize=True, database=None
)
settings.load_profile("course")
