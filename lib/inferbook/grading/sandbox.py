"""Where a submission runs: a scratch folder, a memory limit and, where it works, bubblewrap.

`Sandbox.command(argv)` wraps a command (the Jupyter kernel, the function runner) so that it
runs

- under `launcher.py`, which sets the memory limit and stands between it and the grader;
- inside Debian's **bubblewrap** (`bwrap`) when it can run here: new PID, mount, IPC, UTS,
  user and network namespaces (no network, only loopback), a read-only view of the system,
  the Python installation and the library, a private /tmp, and one writable folder — the
  scratch copy of the submission — plus the grader's runtime folder (the kernel's sockets).
  Nothing else of the machine is there: not the grader's files, not the other submissions,
  and, when `hide_keys` is set, not the answer keys either (a stub that raises SealedError
  is mounted over `inferbook/grading/chapters`). Every process ends with the namespace.
- without bubblewrap (not installed, or user namespaces refused), in the scratch folder with
  the same limit, the keys refused by an import hook only; `isolation` says so, and the
  report repeats it. A grader running as root there can still separate the submission by
  account: with INFERBOOK_GRADING_USER naming an unprivileged user, the submission runs as
  that user (the Gradescope package sets it up, and makes the keys readable by root only).
"""

from __future__ import annotations

import functools
import os
import pwd
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from inferbook.book import bookdata

from .sealed_guards import KEYS_STUB

__all__ = ["Sandbox", "bwrap_problem", "parse_memory", "machine_memory", "DEFAULT_MEMORY",
           "NO_BWRAP_ENV", "USER_ENV"]

DEFAULT_MEMORY = "50%"              # of the machine's memory (or of the container's limit)
NO_BWRAP_ENV = "INFERBOOK_GRADING_NO_BWRAP"    # set to 1 to test the fallback where bwrap works
USER_ENV = "INFERBOOK_GRADING_USER"            # without bwrap, as root: run submissions as this
LAUNCHER = Path(__file__).with_name("launcher.py")
_PASS_ENV = re.compile(r"^(PATH|LANG|LC_\w+|TZ|LD_LIBRARY_PATH|PYTHONHASHSEED|INFERBOOK_DATA|"
                       r"(JAX|XLA|CUDA|TPU|NVIDIA|ROCR|HIP|TF)_\w+)$")


def machine_memory() -> int:
    """Bytes of memory this machine (or this container's cgroup) has."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def parse_memory(text: str) -> int:
    """'4G', '512M', '1.5G', '123456' (bytes) or '50%' (of the machine) -> bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT%]?)\s*", str(text))
    if not m:
        raise ValueError(f"a memory limit is a size such as 4G, 512M or 50%, not {text!r}")
    value, unit = float(m[1]), m[2].upper()
    if unit == "%":
        if not 0 < value <= 100:
            raise ValueError(f"a memory limit in percent must be in (0, 100], not {text!r}")
        return int(machine_memory() * value / 100)
    size = int(value * 1024 ** " KMGT".index(unit or " "))
    if size < 64 * 2**20:
        raise ValueError(f"a memory limit below 64M cannot run Python, got {text!r}")
    if size > machine_memory():
        raise ValueError(f"{text!r} is more than this machine has "
                         f"({machine_memory() / 2**30:.3g} GiB)")
    return size


@functools.lru_cache(maxsize=1)
def python_paths() -> tuple[str, ...]:
    """The folders a fresh interpreter of this Python imports from (no cwd, no PYTHONPATH)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    out = subprocess.run([sys.executable, "-c", "import sys; print('\\n'.join(sys.path))"],
                         capture_output=True, text=True, cwd="/", env=env, timeout=60)
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    paths |= {p for p in out.stdout.splitlines() if p.startswith("/")}
    return tuple(sorted(p for p in paths if os.path.exists(p)))


def data_paths() -> list[str]:
    """The book's data files (`inferbook.book.bookdata`): in the checkout, or INFERBOOK_DATA."""
    paths = [Path(bookdata.__file__).resolve().parents[3] / "book" / "data"]
    if os.environ.get("INFERBOOK_DATA"):
        paths.append(Path(os.environ["INFERBOOK_DATA"]).resolve())
    return [str(p) for p in paths if p.is_dir()]


@functools.lru_cache(maxsize=1)
def _bwrap_check() -> str | None:
    if not sys.platform.startswith("linux"):
        return "bubblewrap is Linux only"
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is not installed"
    try:
        r = subprocess.run(["bwrap", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
                            "--unshare-all", "--die-with-parent", "true"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"bubblewrap cannot run here ({err})"
    if r.returncode != 0:
        line = (r.stderr.strip().splitlines() or [f"exit code {r.returncode}"])[-1]
        return f"bubblewrap cannot run here ({line[:200]})"
    return None


def bwrap_problem() -> str | None:
    """None when bubblewrap can isolate a submission here; else why it cannot."""
    if os.environ.get(NO_BWRAP_ENV) == "1":
        return f"bubblewrap switched off ({NO_BWRAP_ENV}=1)"
    return _bwrap_check()


def _keys_dirs() -> list[Path]:
    """The keys' folder as this process imported it, and its real path: they differ when a
    folder above is a link (a venv reached through a symlink), and a kernel started with
    this interpreter imports from the first."""
    imported = Path(__file__).absolute().parent / "chapters"
    return list(dict.fromkeys([imported, imported.resolve()]))


@dataclass
class Sandbox:
    """How to start one submission's processes. `runtime` holds the grader's own files."""

    scratch: Path                    # the writable copy of the submission's folder (the cwd)
    runtime: Path                    # sockets and messages: writable, not the submission's
    memory_bytes: int
    hide_keys: bool = False
    isolate: bool = field(default=True)     # use bubblewrap where it works

    def __post_init__(self) -> None:
        self.problem = bwrap_problem() if self.isolate else "isolation not requested"
        self.bwrap = self.problem is None
        self.user = None                 # (uid, gid, name) the submission runs as, if not ours
        name = os.environ.get(USER_ENV)
        if name and not self.bwrap and os.geteuid() == 0:
            try:
                entry = pwd.getpwnam(name)
            except KeyError:
                raise ValueError(f"{USER_ENV}={name!r}: no such user") from None
            self.user = (entry.pw_uid, entry.pw_gid, name)
            for path in (self.runtime, self.scratch):
                path.mkdir(parents=True, exist_ok=True)
                for folder in (path, *path.rglob("*")):
                    os.chown(folder, entry.pw_uid, entry.pw_gid, follow_symlinks=False)
            for folder in (self.runtime.parent, self.runtime.parent.parent):
                folder.chmod(0o711)      # the user may pass through, not look around
        if self.hide_keys:            # beside the runtime folder: the submission cannot write it
            self.stub = self.runtime.parent / f"{self.runtime.name}-sealed-keys"
            self.stub.mkdir(parents=True, exist_ok=True)
            (self.stub / "__init__.py").write_text(KEYS_STUB)

    @property
    def isolation(self) -> str:
        """What separates the submission from the machine, in words for the report."""
        mem = f"memory limit {self.memory_bytes / 2**30:.3g} GiB"
        if self.bwrap:
            return f"bubblewrap (own PID, mount and network namespaces; read-only system); {mem}"
        who = f"as the user {self.user[2]}" if self.user else "as the grader's user"
        return (f"NOT isolated: {self.problem}; the submission ran {who} in a scratch folder, "
                f"with its processes ended afterwards and a {mem}")

    def env(self, **extra: str) -> dict[str, str]:
        """A clean environment: nothing of the grader's but locale, paths and JAX settings."""
        env = {k: v for k, v in os.environ.items() if _PASS_ENV.match(k)}
        home = str(self.scratch)
        env.update(HOME=home, TMPDIR="/tmp" if self.bwrap else str(self.runtime),
                   MPLCONFIGDIR=str(self.runtime / "mpl"), IPYTHONDIR=str(self.runtime / "ipy"),
                   PYTHONNOUSERSITE="1", PYDEVD_DISABLE_FILE_VALIDATION="1",
                   JUPYTER_PLATFORM_DIRS="1", MPLBACKEND="Agg")
        env.update(extra)
        return env

    def command(self, argv: list[str]) -> list[str]:
        """`argv` wrapped in the launcher and, where it works, in bubblewrap."""
        for path in (self.runtime, self.scratch):     # the submission may have deleted them
            path.mkdir(parents=True, exist_ok=True)
        inner = self._bwrap() + list(argv) if self.bwrap else list(argv)
        user = ["--user", f"{self.user[0]}:{self.user[1]}"] if self.user else []
        return [sys.executable, "-I", str(LAUNCHER), str(self.memory_bytes), *user, "--", *inner]

    def _bwrap(self) -> list[str]:
        args = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session",
                "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
        for top in ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
                    "/opt", "/sys"):
            if os.path.islink(top):
                args += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                args += ["--ro-bind", top, top]
        for pattern in ("nvidia*", "accel*", "vfio"):           # the accelerators, if any
            for dev in sorted(Path("/dev").glob(pattern)):
                args += ["--dev-bind", str(dev), str(dev)]
        for path in (*python_paths(), *data_paths()):
            args += ["--ro-bind", path, path]
        for keys in _keys_dirs() if self.hide_keys else []:
            if keys.is_dir():
                args += ["--ro-bind", str(self.stub), str(keys)]
        for path in (self.runtime, self.scratch):
            args += ["--bind", str(path), str(path)]
        return args + ["--chdir", str(self.scratch), "--"]
