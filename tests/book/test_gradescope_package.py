"""Gradescope's autograder package, set up and run the way Gradescope runs it.

For every exercise notebook in exercises/ the package is made; the first one's `setup.sh`
runs as root into a clean INFERBOOK_AUTOGRADER_ROOT, in an environment with nothing of this
checkout's (the system's python3, and uv only so that its cache saves the downloads), and
builds a fresh virtual environment from the package's requirements alone. Every other
package holds the same requirements and the same library wheel (asserted), so it shares
that environment (its root's `venv` a symlink to it) instead of installing it again. Then
`run_autograder` grades, each in its own root folder, as Gradescope would — submission
folder in, results.json out:

- every solution, sealed, to full marks, and every student notebook (the committed Colab
  twin, under another name) to 0, with no cell error (this is the book's test that the
  solutions are right when graded for marks, and that the student versions run);
- exercise 1's solution once more where bubblewrap cannot run (a `bwrap` that fails as it
  does in a container without user namespaces): the notebook and its functions run as the
  package's separate account, and still get full marks;
- a submission that reads the answer keys' file and submits what it finds, which would get
  full marks were the file readable, gets 0 under bubblewrap and as the separate account
  (and under bubblewrap through the shared environment's symlink, which once exposed them).

That test needs root (Gradescope runs setup.sh as root; it adds the account
`inferbook-student`) and a system python3 of 3.11 or newer. Without them, what the package
carries is still checked: its requirements pin the library's own (pyproject's) and
grading's to the versions installed here, and its wheel holds the library's files and
states the same requirements. The apt step of setup.sh installs only missing packages
(`make test` has installed bubblewrap before: `make bwrap`), so it needs no network here.
Gradings run two at a time; the whole test takes a few minutes of the suite's budget, which
is why the book's other exercise tests do not grade every notebook again.
"""

import base64
import concurrent.futures
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

import jupytext
import nbformat
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from inferbook.grading import feedback, gradescope_image, registry
from inferbook.grading.gradescope import find_exercise, write_autograder

ROOT = Path(__file__).resolve().parents[2]
EXERCISES = sorted(p.stem for p in (ROOT / "exercises").glob("[0-9][0-9]_*.py"))
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
FAILING_BWRAP = ("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace, likely "
                 "because the kernel does not allow non-privileged user namespaces.' >&2\n"
                 "exit 1\n")
KEYS_SET = "ch01"
# This machine's settings for reaching (or not) a package index: its proxy, its certificates,
# uv's and pip's own; nothing else of the test's environment reaches setup.sh.
NETWORK_SETTINGS = re.compile(r"^((HTTPS?|NO|ALL)_PROXY|(https?|no|all)_proxy|SSL_CERT_\w+|"
                              r"REQUESTS_CA_BUNDLE|UV_\w+|PIP_\w+)$")


def _system_python_problem() -> str | None:
    try:
        r = subprocess.run(["python3", "-c", "import sys; print(sys.version_info >= (3, 11))"],
                           capture_output=True, text=True, timeout=60,
                           env={"PATH": SYSTEM_PATH})
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"no system python3 ({err})"
    return None if r.stdout.strip() == "True" else "the system python3 is older than 3.11"


as_gradescope_does = pytest.mark.skipif(
    os.geteuid() != 0 or _system_python_problem() is not None,
    reason="Gradescope runs setup.sh as root, with a python3 of 3.11 or newer")


def test_the_package_carries_the_librarys_own_requirements_and_files(tmp_path):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pinned = gradescope_image.pinned_requirements()
    versions = dict(line.split("==") for line in pinned)
    by_name = {canonicalize_name(name): version for name, version in versions.items()}
    for requirement in [*project["dependencies"], *gradescope_image.GRADING_NEEDS]:
        name = Requirement(requirement).name
        assert by_name[canonicalize_name(name)] == importlib.metadata.version(name), name
    wheel = gradescope_image.write_library_wheel(tmp_path)
    assert wheel.name == f"inferbook-{project['version']}-py3-none-any.whl"
    package = ROOT / "lib" / "inferbook"
    with zipfile.ZipFile(wheel) as archive:
        info = f"inferbook-{project['version']}.dist-info"
        metadata = archive.read(f"{info}/METADATA").decode().splitlines()
        assert [m.removeprefix("Requires-Dist: ") for m in metadata
                if m.startswith("Requires-Dist: ")] == project["dependencies"]
        files = {n for n in archive.namelist() if not n.startswith(info)}
        assert files == {f"inferbook/{p.relative_to(package).as_posix()}"
                         for p in package.rglob("*") if p.is_file()
                         and "__pycache__" not in p.parts and p.suffix != ".pyc"}
        for line in archive.read(f"{info}/RECORD").decode().splitlines()[:-1]:
            name, digest, size = line.split(",")
            data = archive.read(name)
            assert len(data) == int(size)
            assert digest == "sha256=" + base64.urlsafe_b64encode(
                hashlib.sha256(data).digest()).rstrip(b"=").decode()


def key_reading_cells(set_id: str) -> list[str]:
    """A submission that finds the answer keys' file, runs it, and submits its answers."""
    questions = [q for q in registry.questions_in(set_id) if not hasattr(q, "cases")]
    return [
        "from inferbook.grading import check",
        "import importlib.util, pathlib\n"
        "grading = pathlib.Path(importlib.util.find_spec('inferbook.grading').origin).parent\n"
        f"source = (grading / 'chapters' / '{set_id}.py').read_text()\n"
        "keys = {'__name__': 'stolen_keys'}\n"
        "exec(source.replace('from ..', 'from inferbook.grading.'), keys)\n"
        "answers = {q.id: q.reference() for q in keys['QUESTIONS'] if not hasattr(q, 'cases')}",
        *[f'check("{q.id}", answers["{q.id}"])' for q in questions],
    ]


def test_the_key_reader_would_get_full_marks_if_it_could_read_the_file():
    # The cheat is real: with the file readable (here, outside any grader) its answers pass.
    checks = []
    namespace = {"check": lambda qid, answer: checks.append(feedback.evaluate(qid, answer))}
    for cell in key_reading_cells(KEYS_SET)[1:]:
        exec(cell, namespace)
    assert checks and all(r.status == "passed" for r in checks), checks


def _notebook(cells_or_nb, path: Path) -> None:
    if isinstance(cells_or_nb, list):
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(c) for c in cells_or_nb]
        cells_or_nb = nb
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(cells_or_nb, path)


def _uv_only(folder: Path) -> str:
    """A folder holding only uv (no python3 of this checkout's), or '' if there is no uv."""
    uv = ROOT / ".tools" / "bin" / "uv"
    found = str(uv) if uv.is_file() else shutil.which("uv")
    if not found:
        return ""
    folder.mkdir()
    (folder / "uv").symlink_to(found)
    return f"{folder}:"


def _run_autograder(root: Path, path: str, home: Path) -> tuple[dict, str]:
    env = {"PATH": path, "HOME": str(home), "LANG": "C.UTF-8",
           "INFERBOOK_AUTOGRADER_ROOT": str(root)}
    if os.environ.get("XLA_FLAGS"):              # the suite's faster compiles (conftest.py)
        env["XLA_FLAGS"] = os.environ["XLA_FLAGS"]
    r = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env,
                       capture_output=True, text=True, timeout=900, cwd="/")
    results = root / "results" / "results.json"
    data = json.loads(results.read_text()) if results.is_file() else {"score": None}
    return data, f"exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}"


@as_gradescope_does
def test_the_package_set_up_as_gradescope_does_grades_every_exercise():
    base = Path(tempfile.mkdtemp(prefix="inferbook-gradescope-"))
    try:
        _set_up_and_grade(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _set_up_and_grade(base: Path) -> None:
    base.chmod(0o755)                    # the separate account passes through to the venv
    home = base / "home"
    home.mkdir()
    # One package through the command line, the others through the function it calls.
    packages = {}
    r = subprocess.run([sys.executable, "-m", "inferbook", "grade", "--gradescope-autograder",
                        str(base / f"{EXERCISES[0]}.zip"), EXERCISES[0]],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    packages[EXERCISES[0]] = base / f"{EXERCISES[0]}.zip"
    for name in EXERCISES[1:]:
        packages[name] = base / f"{name}.zip"
        write_autograder(packages[name], name)
    setup_root = base / "setup"                       # the clean root setup.sh installs into
    with zipfile.ZipFile(packages[EXERCISES[0]]) as archive:
        archive.extractall(setup_root / "source")
    setup_root.chmod(0o755)
    first = setup_root / "source"

    # The requirements: the library's own (pyproject's `dependencies`, read here on their
    # own) and grading's, each pinned; every package the same, and the same library wheel.
    pinned = (first / "requirements.txt").read_text().split()
    assert pinned and all(re.fullmatch(r"[A-Za-z0-9_.\-]+==[^=\s]+", line) for line in pinned)
    names = {canonicalize_name(line.split("==")[0]) for line in pinned}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}
    assert wanted | {"safetensors", "ipykernel", "jupyter-client", "nbformat"} <= names
    wheel = f"library/inferbook-{project['version']}-py3-none-any.whl"
    for name, package in packages.items():
        with zipfile.ZipFile(package) as archive:
            assert archive.read("requirements.txt").split() == [p.encode() for p in pinned]
            assert archive.read(wheel) == (first / wheel).read_bytes(), name
            for script in ("setup.sh", "run_autograder"):
                assert archive.getinfo(script).external_attr >> 16 & 0o111, (name, script)

    # setup.sh as Gradescope runs it: as root, into the clean root of the first package.
    env = {"PATH": _uv_only(base / "uv") + SYSTEM_PATH, "HOME": os.environ.get("HOME", "/root"),
           "LANG": "C.UTF-8", "INFERBOOK_AUTOGRADER_ROOT": str(setup_root),
           "UV_PYTHON_DOWNLOADS": "never", **{k: v for k, v in os.environ.items()
                                              if NETWORK_SETTINGS.match(k)}}
    r = subprocess.run(["bash", str(first / "setup.sh")], env=env, capture_output=True,
                       text=True, timeout=900, cwd="/")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    venv = setup_root / "venv"
    listed = subprocess.run([str(venv / "bin" / "python"), "-c",
                             "import importlib.metadata as m, sys; print(sys.prefix); "
                             "print('\\n'.join(d.metadata['Name'] for d in m.distributions()))"],
                            capture_output=True, text=True, timeout=120, env={"PATH": SYSTEM_PATH})
    prefix, *installed = listed.stdout.split()
    assert prefix == str(venv), "the package's environment, not this one"
    assert {canonicalize_name(n) for n in installed} - {"pip", "setuptools"} == \
        names | {"inferbook"}                           # the requirements alone, all of them
    keys = next(venv.glob("lib/python3*/site-packages/inferbook/grading/chapters"))
    assert all(p.stat().st_mode & 0o077 == 0 for p in (keys, *keys.iterdir()))  # root only
    (base / "no-bwrap").mkdir()
    (base / "no-bwrap" / "bwrap").write_text(FAILING_BWRAP)
    (base / "no-bwrap" / "bwrap").chmod(0o755)
    no_bwrap = f"{base / 'no-bwrap'}:{SYSTEM_PATH}"

    # What to grade: (exercise, how, notebook, its file name, PATH, expected score or None
    # for full marks).
    jobs = []
    for name in EXERCISES:
        jobs.append((name, "solution", jupytext.read(ROOT / "exercises" / f"{name}.py"),
                     f"{name}.ipynb", SYSTEM_PATH, None))
        jobs.append((name, "student", nbformat.read(ROOT / "exercises" / f"{name}.ipynb",
                                                    as_version=4),
                     f"Copy of {name}.ipynb", SYSTEM_PATH, 0))
    keys_exercise = next(n for n in EXERCISES if KEYS_SET in find_exercise(n)[1])
    solution = jupytext.read(ROOT / "exercises" / f"{keys_exercise}.py")
    jobs += [(keys_exercise, "solution, no bubblewrap", solution, f"{keys_exercise}.ipynb",
              no_bwrap, None),
             (keys_exercise, "key reader", key_reading_cells(KEYS_SET), "mine.ipynb",
              SYSTEM_PATH, 0),
             (keys_exercise, "key reader, no bubblewrap", key_reading_cells(KEYS_SET),
              "mine.ipynb", no_bwrap, 0)]

    def grade(numbered):
        i, (name, how, nb, filename, path, _) = numbered
        root = base / f"run{i}"
        root.mkdir()
        root.chmod(0o755)
        with zipfile.ZipFile(packages[name]) as archive:     # each run its own source
            archive.extractall(root / "source")
        (root / "venv").symlink_to(venv)
        _notebook(nb, root / "submission" / filename)
        return _run_autograder(root, path, home)

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        outcomes = list(pool.map(grade, enumerate(jobs)))
    failures = []
    for (name, how, _, _, _, expected), (data, log) in zip(jobs, outcomes):
        points = sum(q.points for s in find_exercise(name)[1] for q in registry.questions_in(s))
        tests = data.get("tests", [])
        wrong = []
        if data["score"] != (points if expected is None else expected):
            wrong.append(f"score {data['score']} of {points}")
        if expected is None and {t.get("status") for t in tests} != {"passed"}:
            wrong.append("not every question passed")
        if len(tests) != len({q.id for s in find_exercise(name)[1]
                              for q in registry.questions_in(s)}):
            wrong.append(f"{len(tests)} questions graded")
        if not how.startswith("key reader") and \
                not data.get("output", "").startswith("Isolation: "):
            wrong.append("the notebook did not run cleanly")    # notes precede the isolation
        isolated = "bubblewrap (own PID" in data.get("output", "")
        if isolated != ("no bubblewrap" not in how):
            wrong.append("not the isolation asked for")
        if "no bubblewrap" in how and "as the user inferbook-student" not in data["output"]:
            wrong.append("not run as the separate account")
        if how.startswith("key reader") and not re.search(r"(FileNotFound|Permission)Error",
                                                          data.get("output", "")):
            wrong.append("the keys' file was not what stopped it")
        if wrong:
            failures.append(f"{name}, {how}: {'; '.join(wrong)}\n"
                            f"{json.dumps(data)[:3000]}\n{log}")
    assert not failures, "\n\n".join(failures)
