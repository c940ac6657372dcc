"""Running `inferbook ...` in this process as a user would, with a time limit.

The CLI tests need three things pytest's capsys does not give: a hard time limit (a command
that hangs must fail its test, not the whole run), the exit code whether the command returns
it or argparse raises SystemExit, and any exception that escapes `main` turned into the
traceback a user would see. `refused` then states the contract of BOOK.md for bad input:
exit code 2, nothing on stdout, exactly one line on stderr, no traceback, in time.
"""

from __future__ import annotations

import contextlib
import io
import signal
import time
import traceback
from dataclasses import dataclass

from inferbook.cli import main

LIMIT_S = 10.0        # issue 15: each bad input is refused within 10 s


class _OutOfTime(BaseException):
    """Raised by the alarm; a BaseException so the code under test cannot catch it."""


@dataclass
class Outcome:
    argv: list[str]
    code: int | None
    out: str
    err: str
    seconds: float
    hung: bool

    def describe(self) -> str:
        return (f"inferbook {' '.join(self.argv)!r}: exit {self.code}, {self.seconds:.1f} s"
                f"{' (killed: over the time limit)' if self.hung else ''}\n"
                f"stdout: {self.out[-500:]!r}\nstderr: {self.err[-2000:]!r}")


def run_cli(argv, limit_s: float = LIMIT_S) -> Outcome:
    """Run the command line in-process; stop it with an alarm after `limit_s` seconds."""
    argv = [str(a) for a in argv]
    out, err = io.StringIO(), io.StringIO()

    def alarm(signum, frame):
        raise _OutOfTime()
    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    code, hung, start = None, False, time.perf_counter()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    except _OutOfTime:
        hung = True
    except SystemExit as done:
        code = done.code
    except Exception:               # what a user would see as a traceback
        err.write(traceback.format_exc())
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return Outcome(argv, code, out.getvalue(), err.getvalue(), time.perf_counter() - start,
                   hung)


def refused(argv, *fragments: str, limit_s: float = LIMIT_S) -> Outcome:
    """Assert the contract for bad input, and that the one line names each fragment."""
    r = run_cli(argv, limit_s)
    lines = r.err.splitlines()
    assert not r.hung, r.describe()
    assert "Traceback" not in r.err, r.describe()
    assert r.code == 2 and r.out == "" and len(lines) == 1, r.describe()
    for fragment in fragments:
        assert fragment in r.err, r.describe()
    return r
