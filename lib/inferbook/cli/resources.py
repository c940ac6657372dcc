"""What a command would need, against what this machine has: refuse the impossible up front.

A batch of 10⁹ sequences, a context of 10¹² tokens or a 70-billion-parameter model in float32
on a laptop is not an error any argument type can see: each number is a fine integer. What
is wrong is the memory the run would take. Allocating it and letting the allocator fail gives
an out-of-memory traceback after minutes of compiling (or, on a machine that swaps, no answer
at all), so each command first works out a lower bound of the bytes it will hold at its peak
— the weights, the KV cache, the benchmark buffers: arithmetic on the config, nothing
allocated — and compares it with the memory available where the arrays would live:

  * an accelerator's own memory, from JAX (`device.memory_stats()`: its limit less what is
    in use), where the backend reports it;
  * otherwise (CPUs) the host's: the kernel's estimate of memory available without swapping
    (MemAvailable in /proc/meminfo), capped by a cgroup v2 limit when the process runs in a
    container, or the free physical pages from `os.sysconf` where /proc is absent.

Where neither can be read, nothing is refused: the check only ever refuses what surely
cannot run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from inferbook.book.present import fmt_bytes

from . import UsageError

__all__ = ["host_available_bytes", "device_available_bytes", "require_memory"]


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024          # the file's unit is KiB
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_available() -> int | None:
    """Room left under this process's cgroup v2 memory limit (None if unlimited or absent)."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = Path("/sys/fs/cgroup/memory.current").read_text().strip()
        return max(int(limit) - int(used), 0)
    except (OSError, ValueError):                           # "max" means no limit
        return None


def _sysconf_available() -> int | None:
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def host_available_bytes() -> int | None:
    """Bytes of host memory a new allocation can get without swapping (None: unknown)."""
    found = [b for b in (_meminfo_available() or _sysconf_available(), _cgroup_available())
             if b is not None]
    return min(found) if found else None


def device_available_bytes(device: Any = None) -> tuple[int | None, str]:
    """(bytes available, where) for arrays on `device` (default: JAX's first device).

    Accelerators report their own memory; a CPU device's arrays live in host memory.
    """
    if device is None:
        import jax  # starts JAX: only once the arguments have been checked
        device = jax.devices()[0]
    if device.platform != "cpu":
        try:
            stats = device.memory_stats() or {}
        except Exception:           # a backend without memory statistics raises its own kind
            stats = {}
        if "bytes_limit" in stats:
            free = int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
            return free, f"{device.device_kind} memory"
    return host_available_bytes(), "host memory"


def require_memory(needed: float, what: str, device: Any = None,
                   available: tuple[int | None, str] | None = None) -> None:
    """Raise UsageError when `what` needs more than the memory available on `device`."""
    free, where = available if available is not None else device_available_bytes(device)
    if free is not None and needed > free:
        raise UsageError(f"{what} needs at least {fmt_bytes(needed)}, but only "
                         f"{fmt_bytes(free)} of {where} is available")
