"""Shared test setup: eight emulated CPU devices and a deterministic Hypothesis profile; or,
for the tests marked `no_jax`, a run in which JAX cannot be imported at all.

A test module that never reaches JAX — the estimator's arithmetic, grading, argument parsing,
the book's machinery — carries ``pytestmark = pytest.mark.no_jax``. Such tests cannot behave
differently under another JAX version, so `make test` runs them once, in a run of their own
with JAX unimportable (``INFERBOOK_TESTS_WITHOUT_JAX=1``: this file then deselects every other
test and puts `tests/without_jax`, whose `jax` and `jaxlib` refuse to import, first on the
module path of this process and of every subprocess). The other tests, the default, run under
the newest JAX and again under the oldest. A marked test that does reach JAX fails in its run,
so the marker cannot silently keep a JAX-touching test from the oldest JAX's run.
"""

import os
import sys
from pathlib import Path

WITHOUT_JAX = os.environ.get("INFERBOOK_TESTS_WITHOUT_JAX") == "1"
if WITHOUT_JAX:
    _BLOCKER = str(Path(__file__).parent / "without_jax")
    sys.path.insert(0, _BLOCKER)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (_BLOCKER, os.environ.get("PYTHONPATH")) if p)

# Unit tests compile hundreds of tiny programs and time none of them: compile them without
# LLVM's expensive optimisations (a third less CPU time), and emit fusions with XLA:CPU's
# older emitters rather than its MLIR fusion emitters (with an empty XLA cache, a quarter less
# again: 112 s against 81 s for three test modules, under both JAX versions). Results are the
# same computations'; only their speed differs, and no unit test measures speed. Set before
# JAX starts.
_FAST_COMPILE = ("--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
                 " --xla_cpu_use_fusion_emitters=false")
os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_FAST_COMPILE}".strip()

import inferbook  # noqa: E402
from inferbook.book.claims import strict_by_default  # noqa: E402

# Measured claims fail a test unless INFERBOOK_STRICT_CLAIMS=0 (a test that wants a reader's
# note sets that itself).
strict_by_default()

# Before any test touches JAX: the device count is fixed once a backend starts.
if not WITHOUT_JAX:
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


def pytest_ignore_collect(collection_path, config):
    """In the run without JAX, a module that does not carry the marker is not even imported
    (most import JAX at the top)."""
    path = collection_path
    if WITHOUT_JAX and path.suffix == ".py" and path.name.startswith("test_") \
            and "pytest.mark.no_jax" not in path.read_text(encoding="utf-8"):
        return True
    return None


def pytest_collection_modifyitems(config, items):
    """In the run without JAX, only the tests marked no_jax."""
    if not WITHOUT_JAX:
        return
    kept = [i for i in items if i.get_closest_marker("no_jax")]
    config.hook.pytest_deselected(items=[i for i in items if i not in kept])
    items[:] = kept
