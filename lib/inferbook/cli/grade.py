"""`inferbook grade`: grade an exercise notebook, or write Gradescope's autograder package.

    inferbook grade 01_sampling_kv_cache.ipynb --results results.json
    inferbook grade --sealed 01_sampling_kv_cache.ipynb --results results.json
    inferbook grade --gradescope-autograder autograder.zip 01_sampling_kv_cache

The notebook runs top to bottom in a fresh kernel, in a scratch copy of its folder, with a
time limit per cell (--cell-timeout), one for all its cells (--timeout; the kernel's start
is not counted) and a memory limit (--memory-limit); where bubblewrap works it also runs
without network and sees nothing of the machine but its folder and a read-only system.

Without --sealed, the notebook's own check() calls grade it (self-study feedback, trusting
the notebook). With --sealed, the answer keys are out of the notebook's reach: check() only
records the answers, which the grader scores in its own process — for marks.

The score table goes to stdout; --results writes Gradescope's results.json once every
process the notebook started has ended. Exit code 0 when the notebook was graded, 1 if no
kernel could be started, 2 for bad arguments (checked before anything runs).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from . import UsageError
from .args import finite_float, nonnegative_int, writable_file

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("grade", help="grade an exercise notebook (score table, "
                                            "Gradescope results.json and autograder)",
                              description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("notebook", metavar="NOTEBOOK",
                   help="the .ipynb to grade (or a .py source); with --gradescope-autograder, "
                        "the exercise (e.g. 01_sampling_kv_cache)")
    p.add_argument("--sealed", action="store_true",
                   help="grade for marks: the answer keys are out of the notebook's reach")
    p.add_argument("--results", metavar="JSON", type=writable_file,
                   help="write Gradescope's results.json here")
    p.add_argument("--timeout", type=finite_float(0, above=True), default=600.0, metavar="S",
                   help="time limit for all the cells together, in seconds (default 600)")
    p.add_argument("--cell-timeout", type=finite_float(0, above=True), default=300.0, metavar="S",
                   help="time limit for one cell, in seconds (default 300)")
    p.add_argument("--memory-limit", default="50%", metavar="SIZE",
                   help="the kernel's memory limit: 4G, 512M, or a share of the machine "
                        "such as 50%% (the default)")
    p.add_argument("--seed", type=nonnegative_int(), metavar="N",
                   help="sealed: draw the coding questions' inputs with this seed (the report "
                        "prints the one it used; default: a fresh one)")
    p.add_argument("--exercises", metavar="SETS",
                   help="grade these question sets (e.g. ch01,ch02) whatever the notebook holds")
    p.add_argument("--gradescope-autograder", metavar="ZIP", type=writable_file,
                   help="write Gradescope's autograder package for the exercise NOTEBOOK names")
    p.set_defaults(run=run)


def write_atomically(path: Path, text: str) -> None:
    """Write through a temporary file and a rename: never half a file, never through a link.
    Missing parent directories are created (`args.writable_file` checked that they can be)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent if str(path.parent) else ".",
                               prefix=".inferbook-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _autograder(args: argparse.Namespace) -> int:
    out = args.gradescope_autograder
    # The grading package (numpy, the question sets) loads only for this command: every
    # `inferbook` command imports this module to build its parser.
    from ..grading.gradescope import find_exercise, write_autograder
    try:
        find_exercise(args.notebook)
    except ValueError as err:
        raise UsageError(str(err)) from None
    files = write_autograder(out, args.notebook, timeout_s=args.timeout)
    print(f"wrote {out}: {', '.join(f for f in files if '/' not in f)} and the library's wheel")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.gradescope_autograder:
        return _autograder(args)
    results = args.results
    try:                    # Jupyter's packages are optional dependencies: say which is missing
        import ipykernel  # noqa: F401
        import jupyter_client  # noqa: F401
        import nbformat  # noqa: F401
    except ImportError as err:
        raise UsageError(f"grading needs {err.name}: pip install jupyter_client ipykernel "
                         f"nbformat") from None
    from ..grading import registry
    from ..grading.grader import GradingError, grade_notebook, read_notebook
    from ..grading.sandbox import USER_ENV, parse_memory
    if os.environ.get(USER_ENV):
        import pwd  # POSIX only, like the sandbox that needs the account
        try:
            pwd.getpwnam(os.environ[USER_ENV])
        except KeyError:
            raise UsageError(f"{USER_ENV}={os.environ[USER_ENV]!r}: no such user") from None
    try:
        memory = parse_memory(args.memory_limit)
    except ValueError as err:
        raise UsageError(f"--memory-limit: {err}") from None
    if args.seed is not None and not 0 <= args.seed < 2**32:
        raise UsageError(f"--seed must be an integer in [0, 2**32), got {args.seed}")
    sets = None
    if args.exercises is not None:
        sets = [s.strip() for s in args.exercises.split(",") if s.strip()]
        unknown = [s for s in sets if s not in registry.set_ids()] or ([] if sets else [""])
        if unknown:
            raise UsageError(f"--exercises: unknown question set {unknown[0]!r}; known: "
                             f"{', '.join(registry.set_ids())}")
    try:
        read_notebook(Path(args.notebook))             # refuse a bad file before any work
        report = grade_notebook(args.notebook, timeout_s=args.timeout, sealed=args.sealed,
                                cell_timeout_s=args.cell_timeout, memory=memory, sets=sets,
                                seed=args.seed)
    except GradingError as err:
        raise UsageError(str(err)) from None
    print(report.table())
    if results is not None:
        text = json.dumps(report.gradescope(), indent=2, ensure_ascii=False) + "\n"
        try:
            write_atomically(results, text)
        except OSError as err:
            sys.stderr.write(f"inferbook grade: cannot write {results}: {err}\n")
            return 1
    if report.run.infrastructure_error:
        sys.stderr.write(f"inferbook grade: {report.run.stopped}\n")
        return 1
    return 0
