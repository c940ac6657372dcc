"""`inferbook grade`: run a student's exercise notebook, print the score, write results.json.

    inferbook grade 01_sampling_kv_cache.ipynb --results results.json --timeout 600

The notebook runs top to bottom in a fresh kernel of this Python environment; its cells
get --timeout seconds in all (the kernel's start-up is not counted). The score table goes to stdout; --results writes Gradescope's
results.json (score; tests with name, score, max_score, status, output). A student's crash,
endless loop or wrong type is reported on its question; the exit code is 0 whenever the
notebook was graded, 1 if no kernel could be started, 2 for bad arguments.

For Gradescope, `run_autograder` can be as short as
``inferbook grade /autograder/submission/*.ipynb --results /autograder/results/results.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from . import UsageError

__all__ = ["add_parser", "run"]


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("grade", help="grade an exercise notebook (score table, "
                                            "Gradescope results.json)",
                              description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("notebook", metavar="NOTEBOOK", help="the .ipynb to grade (or a .py source)")
    p.add_argument("--results", metavar="JSON", help="write Gradescope's results.json here")
    p.add_argument("--timeout", type=float, default=600.0, metavar="S",
                   help="time limit for running all the cells, in seconds (default 600)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if not math.isfinite(args.timeout) or args.timeout <= 0:
        raise UsageError(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    results = Path(args.results) if args.results else None
    if results is not None and (results.is_dir() or not results.parent.is_dir()):
        raise UsageError(f"cannot write --results {results}: "
                         + ("it is a directory" if results.is_dir()
                            else f"no directory {results.parent}"))
    try:
        import ipykernel  # noqa: F401
        import nbclient  # noqa: F401
        import nbformat  # noqa: F401
    except ImportError as err:
        raise UsageError(f"grading needs {err.name}: pip install nbclient ipykernel") from None

    from ..grading.grader import GradingError, grade_notebook
    try:
        report = grade_notebook(args.notebook, timeout_s=args.timeout)
    except GradingError as err:
        raise UsageError(str(err)) from None
    print(report.table())
    if results is not None:
        results.write_text(json.dumps(report.gradescope(), indent=2, ensure_ascii=False) + "\n")
    if report.run.infrastructure_error:
        sys.stderr.write(f"inferbook grade: {report.run.stopped}\n")
        return 1
    return 0
