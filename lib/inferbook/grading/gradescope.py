"""Gradescope's autograder package for one exercise notebook.

    inferbook grade --gradescope-autograder autograder.zip 01_sampling_kv_cache

Gradescope builds an image from the zip once (it unpacks it into /autograder/source and
runs `setup.sh`), then, for every submission, runs `run_autograder` with the student's files
in /autograder/submission and reads /autograder/results/results.json. The package holds

- `setup.sh`: installs Python and bubblewrap (Debian's packages, only those missing), then
  into a fresh environment this very library as a wheel (`library/`) and `requirements.txt`
  — the library's own dependencies and grading's, with everything they need, pinned to the
  versions installed where the package was made (`gradescope_image.py`) — and checks that
  nothing is missing; and an account to run submissions as where bubblewrap cannot run,
  with the answer keys readable by root only. It installs with uv where the image has it
  (from uv's cache), with pip otherwise;
- `run_autograder`: picks the submitted notebook (the exercise's file name, or the only
  .ipynb) and runs `inferbook grade --sealed` on it for the exercise's question sets,
  whatever the notebook claims to hold; if grading cannot start, results.json says why;
- `data/`: the book's data files some questions read (no network is needed to grade).

`INFERBOOK_AUTOGRADER_ROOT` (default /autograder) and `INFERBOOK_PYTHON` let a test run the
package in a temporary folder, or with an interpreter where the library is already installed.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import zipfile
from pathlib import Path

import inferbook
from inferbook.book import bookdata

from .grader import question_sets, read_notebook
from .gradescope_image import pinned_requirements, write_library_wheel

__all__ = ["exercise_sources", "find_exercise", "write_autograder"]

ROOT_ENV, PYTHON_ENV = "INFERBOOK_AUTOGRADER_ROOT", "INFERBOOK_PYTHON"

SETUP = """#!/usr/bin/env bash
# Run once by Gradescope, as root, to build the autograder's image (its python3: 3.11+).
set -euo pipefail
cd "$(dirname "$0")"
ROOT="${INFERBOOK_AUTOGRADER_ROOT:-/autograder}"
# Debian's packages, only those missing: an image that has them all needs no network here.
missing=()
for package in python3 python3-venv python3-pip bubblewrap; do
  case "$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)" in
    *" ok installed") ;;
    *) missing+=("$package") ;;
  esac
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
python3 -c 'import sys; assert sys.version_info >= (3, 11), "the library needs Python 3.11+"'
# The library and exactly the pinned versions of what it and grading need, nothing else
# (--no-deps, as a lock file is installed); the check fails the build if anything is missing.
if command -v uv >/dev/null 2>&1; then
  uv venv --quiet --python "$(command -v python3)" "$ROOT/venv"
  uv pip install --quiet --python "$ROOT/venv/bin/python" --no-deps -r requirements.txt
  # copied, not linked to uv's cache: the keys' permissions are changed below
  uv pip install --quiet --python "$ROOT/venv/bin/python" --no-deps --link-mode copy \\
      library/*.whl
  uv pip check --python "$ROOT/venv/bin/python"
else
  python3 -m venv "$ROOT/venv"
  "$ROOT/venv/bin/pip" install --quiet --no-deps -r requirements.txt library/*.whl
  "$ROOT/venv/bin/pip" check
fi
# Where bubblewrap cannot run (a container without user namespaces), submissions run as this
# account instead of root: it cannot signal the grader, nor read the answer keys.
useradd --system --no-create-home --shell /usr/sbin/nologin inferbook-student 2>/dev/null || true
chmod a+rx "$ROOT" "$ROOT/source"
chmod -R a+rX "$ROOT/venv" "$ROOT/source/data"
KEYS="$("$ROOT/venv/bin/python" -c 'import inferbook.grading as g, os
print(os.path.join(os.path.dirname(g.__file__), "chapters"))')"
chmod -R go-rwx "$KEYS"             # last: the line above must not make them readable again
"""

RUN = """#!/usr/bin/env bash
# Run by Gradescope for every submission: grade the notebook sealed, write results.json.
set -uo pipefail
ROOT="${{INFERBOOK_AUTOGRADER_ROOT:-/autograder}}"
PYTHON="${{INFERBOOK_PYTHON:-$ROOT/venv/bin/python}}"
export INFERBOOK_DATA="$ROOT/source/data"
if id -u inferbook-student >/dev/null 2>&1; then export INFERBOOK_GRADING_USER=inferbook-student; fi
RESULTS="$ROOT/results/results.json"
mkdir -p "$ROOT/results"
rm -f "$RESULTS"
fail() {{
  "$PYTHON" -c 'import json, sys; print(json.dumps({{"score": 0, "output": sys.argv[1]}}))' \\
      "$1" > "$RESULTS"
  exit 0
}}
shopt -s nullglob
cd "$ROOT/submission" || fail "no submission folder"
notebooks=( *.ipynb )
if [ -f "{name}.ipynb" ]; then notebook="{name}.ipynb"
elif [ ${{#notebooks[@]}} -eq 1 ]; then notebook="${{notebooks[0]}}"
else fail "Submit one notebook, {name}.ipynb (found ${{#notebooks[@]}} .ipynb files)."
fi
errors="$(mktemp)"
"$PYTHON" -m inferbook grade --sealed "$ROOT/submission/$notebook" --exercises {sets} \\
    --timeout {timeout} --results "$RESULTS" 2> "$errors"
[ -s "$RESULTS" ] || fail "The notebook could not be graded: $(tail -n 3 "$errors")"
"""


def exercise_sources() -> dict[str, Path]:
    """The book's exercise sources by name (`01_sampling_kv_cache`), from the checkout."""
    roots = [Path.cwd(), Path(inferbook.__file__).resolve().parents[2]]
    for root in roots:
        found = sorted((root / "exercises").glob("[0-9][0-9]_*.py"))
        if found:
            return {p.stem: p for p in found}
    return {}


def find_exercise(name: str) -> tuple[str, list[str]]:
    """(file stem, question sets) of an exercise given by path, name or number ('01')."""
    path = Path(name)
    sources = exercise_sources()
    if not path.is_file():
        matches = [p for stem, p in sources.items() if stem == name or stem.split("_")[0] == name]
        if len(matches) != 1:
            known = ", ".join(sources) or "none found (run it in the book's checkout)"
            raise ValueError(f"no exercise {name!r}; known: {known}")
        path = matches[0]
    sets = question_sets(read_notebook(path), path)
    if not sets:
        raise ValueError(f"{path} holds none of the book's exercises")
    stem = re.sub(r"\.(py|ipynb)$", "", path.name)
    return stem, sets


def write_autograder(out: Path, exercise: str, timeout_s: float = 600.0) -> list[str]:
    """Write the package for `exercise` to the zip `out`; the names of the files in it."""
    name, sets = find_exercise(exercise)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "setup.sh").write_text(SETUP)
        (root / "run_autograder").write_text(RUN.format(name=name, sets=",".join(sets),
                                                        timeout=f"{timeout_s:g}"))
        (root / "requirements.txt").write_text("\n".join(pinned_requirements()) + "\n")
        write_library_wheel(root / "library")
        data = Path(bookdata.__file__).resolve().parents[3] / "book" / "data"
        if data.is_dir():
            shutil.copytree(data, root / "data")
        else:
            (root / "data").mkdir()
        files = sorted(p for p in root.rglob("*") if p.is_file())
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in files:
                info = zipfile.ZipInfo(str(path.relative_to(root)))
                info.external_attr = (0o755 if path.name in ("setup.sh", "run_autograder")
                                      else 0o644) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, path.read_bytes())
    return [str(p.relative_to(root)) for p in files]
