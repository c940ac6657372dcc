"""The run of the tests marked no_jax: JAX cannot be imported there, in the test's process or in
any subprocess, and only marked tests run (tests/conftest.py, tests/without_jax)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WITHOUT_JAX = os.environ.get("INFERBOOK_TESTS_WITHOUT_JAX") == "1"


@pytest.mark.no_jax
def test_jax_cannot_be_imported_in_the_run_without_it():
    if not WITHOUT_JAX:
        pytest.skip("checks the run with INFERBOOK_TESTS_WITHOUT_JAX=1 (started by the test below)")
    with pytest.raises(ImportError, match="no_jax marker"):
        import jax  # noqa: F401
    child = subprocess.run([sys.executable, "-c", "import inferbook; inferbook.setup()"],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode != 0 and "no_jax marker" in child.stderr, child.stderr[-500:]
    # The library itself imports without JAX.
    import inferbook
    assert "jax" not in sys.modules and inferbook.__version__


def test_the_run_without_jax_blocks_it_and_keeps_only_the_marked_tests():
    env = dict(os.environ, INFERBOOK_TESTS_WITHOUT_JAX="1")
    run = subprocess.run([sys.executable, "-m", "pytest", __file__, "-q", "-n", "0", "-rA",
                          "-p", "no:cacheprovider"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-2000:]
    assert "PASSED" in out and "test_jax_cannot_be_imported_in_the_run_without_it" in out, out
    assert "1 passed, 1 deselected" in out, out[-500:]
