"""Shared test setup: eight emulated CPU devices and a deterministic Hypothesis profile."""

import os

# Unit tests compile hundreds of tiny programs and time none of them: compile them without
# LLVM's expensive optimisations (a third less CPU time). Results are the same programs'
# results; only their speed differs, and no unit test measures speed. Set before JAX starts.
_FAST_COMPILE = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_FAST_COMPILE}".strip()

import inferbook  # noqa: E402
from inferbook.book.claims import strict_by_default  # noqa: E402

# Measured claims fail a test unless INFERBOOK_STRICT_CLAIMS=0 (a test that wants a reader's
# note sets that itself).
strict_by_default()

# Before any test touches JAX: the device count is fixed once a backend starts.
inferbook.setup(8)

from hypothesis import HealthCheck, settings  # noqa: E402

# Compiling a new shape takes longer than Hypothesis' default deadline on a 2-core machine,
# and CI must not be flaky: examples come from a fixed seed unless HYPOTHESIS_RANDOM is set.
# Most examples compile a program of new shapes, so each costs seconds: ten per property.
# The "compat" profile (HYPOTHESIS_PROFILE=compat) is for the second run of the suite under
# the oldest supported JAX, which checks that the library works there, not the properties
# again: three examples each.
_common = dict(deadline=None, derandomize=not os.environ.get("HYPOTHESIS_RANDOM"),
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("book", max_examples=10, **_common)
settings.register_profile("compat", max_examples=3, **_common)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "book"))
