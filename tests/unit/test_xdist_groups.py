"""The test runner keeps an xdist group on one worker.

`make test` runs the unit tests with `--dist loadgroup`: tests marked `xdist_group` (the real
model's, whose fixtures load transformers' model and the library's in tens of seconds) must
run on one worker, so that each fixture loads once. pytest 9.2 broke this in pytest-xdist 3.8
without a word — the group's tests were spread over every worker, and the unit stage spent
minutes loading the same model again — so the runner's grouping is checked here, by running
a group of tests in a child pytest with two workers and asking each where it ran.
"""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.no_jax

GROUPED = '''
import os
import pytest

pytestmark = pytest.mark.xdist_group("one")


@pytest.mark.parametrize("i", range(6))
def test_where(i, tmp_path_factory):
    out = tmp_path_factory.getbasetemp().parent.parent / "workers"
    with open(out, "a") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
'''


def test_a_group_runs_on_one_worker(tmp_path):
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    base = tmp_path / "base" / "run"
    base.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup",
                        "-p", "no:cacheprovider", "--basetemp", str(base), "test_grouped.py"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    workers = (tmp_path / "base" / "workers").read_text().split()
    assert len(workers) == 6
    assert len(set(workers)) == 1, f"the group ran on {sorted(set(workers))}"
