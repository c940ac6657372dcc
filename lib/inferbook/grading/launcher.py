"""The parent of every process a submission runs in: it limits it, and it ends with it.

Run as a script (``python -I launcher.py MEMORY_BYTES [--user UID:GID] -- COMMAND...``), not as a
module, so that starting it loads only the standard library. It

- starts COMMAND with a memory limit: RLIMIT_DATA, the heap and every private writable
  mapping (what a Python or NumPy allocation uses), so an allocation bomb gets a MemoryError
  — or, in C code that cannot report one, dies — instead of taking the machine down. It is
  not RLIMIT_AS: JAX reserves far more address space than it ever touches;
- limits each file it writes (RLIMIT_FSIZE, `MAX_FILE_BYTES`), so one endless write cannot
  fill the grader's disk (many files still can: see the instructors' page);
- stands between the grader and the submission: a kernel that kills its parent
  (``os.kill(os.getppid(), SIGKILL)``) kills this process, not the grader — and COMMAND is
  asked to die with it (PR_SET_PDEATHSIG), as this process is asked to die with the grader;
- with ``--user`` (a grader running as root, where bubblewrap cannot run), starts COMMAND as
  that unprivileged account: it can then neither signal the grader nor read what only root
  may read — the answer keys, once the Gradescope package's setup has made them so;
- passes on SIGTERM, SIGINT and SIGHUP, and exits with COMMAND's exit status.

Processes COMMAND itself starts are not its concern: the grader ends every one of them (see
`reaper.py`), and under bubblewrap they live in a PID namespace that ends with COMMAND.
"""

import ctypes
import os
import resource
import signal
import subprocess
import sys

PR_SET_PDEATHSIG = 1
MAX_FILE_BYTES = 2**30


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent ends (no-op elsewhere)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def main(argv: list[str]) -> int:
    user = None
    if len(argv) > 2 and argv[1] == "--user":
        user = tuple(int(x) for x in argv[2].split(":"))
        argv = argv[:1] + argv[3:]
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        sys.stderr.write("usage: launcher.py MEMORY_BYTES [--user UID:GID] -- COMMAND...\n")
        return 2
    memory, command = int(argv[0]), argv[2:]
    parent = os.getppid()
    die_with_parent()
    if os.getppid() != parent:          # the grader ended while we started
        return 1

    def limit() -> None:                # runs in the child, between fork and exec
        die_with_parent()
        if memory > 0:
            resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))
        resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
        if user is not None:            # last: dropping root is for good
            os.setgroups([])
            os.setgid(user[1])
            os.setuid(user[0])

    child = subprocess.Popen(command, preexec_fn=limit)

    def forward(signum, frame):
        child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    status = child.wait()
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
