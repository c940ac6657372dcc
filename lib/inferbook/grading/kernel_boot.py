"""The grader's Jupyter kernel: ipykernel, started sealed or not.

    python -m inferbook.grading.kernel_boot [--sealed] -f CONNECTION_FILE

With ``--sealed`` the answer keys are refused before any of the student's code runs
(`seal.guard_answer_keys`; the sandbox also hides their files where it can) and `check`
records answers for the grader instead of grading them (`capture.activate`). Then it is an
ordinary IPython kernel: the notebook sees nothing else different.
"""

from __future__ import annotations

import os
import sys

from . import capture, seal


def main(argv: list[str]) -> None:
    sealed = "--sealed" in argv
    argv = [a for a in argv if a != "--sealed"]
    if sealed:
        seal.guard_answer_keys()
        capture.activate()
    # ipykernel ends itself when its parent changes; inside a PID namespace the grader's pid
    # means nothing, and the sandbox's jail already ends the kernel with the grader.
    os.environ.pop("JPY_PARENT_PID", None)
    from ipykernel import kernelapp
    sys.argv = [sys.argv[0], *argv]
    kernelapp.launch_new_instance()


if __name__ == "__main__":
    main(sys.argv[1:])
