"""Shared test setup: eight emulated CPU devices and a deterministic Hypothesis profile."""

import os

import inferbook

# Before any test touches JAX: the device count is fixed once a backend starts.
inferbook.setup(8)

from hypothesis import HealthCheck, settings  # noqa: E402

# Compiling a new shape takes longer than Hypothesis' default deadline on a 2-core machine,
# and CI must not be flaky: examples come from a fixed seed unless HYPOTHESIS_RANDOM is set.
settings.register_profile(
    "book", deadline=None, max_examples=15, derandomize=not os.environ.get("HYPOTHESIS_RANDOM"),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile("book")
