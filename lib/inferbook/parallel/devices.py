"""Device setup: the one call every chapter makes before any JAX work.

JAX fixes the number of CPU devices when its CPU backend starts, which happens the first time
anything asks for a device or runs an array operation. Mesh demonstrations need eight devices,
and most readers have one accelerator or none, so the book runs its meshes on eight *emulated*
CPU devices in one process. Those make sharding real in shapes, per-device bytes, FLOPs and
the collectives XLA inserts — but not in speed, so their wall-clock times are never reported.

`setup()` therefore has to run first. On a laptop or a CPU runtime it gives eight CPU devices.
On a Colab TPU or GPU runtime the accelerator stays the default device for single-device work
and timings, and eight CPU devices are still there for meshes when fewer than eight
accelerators exist (Colab's free TPU is a single v5e chip).

JAX is imported inside each function, never at the top: `import inferbook` imports this module,
and importing must not start (or even load) JAX before `setup()` has set the device count.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Sequence

__all__ = ["setup", "DeviceInfo", "mesh_devices", "make_mesh", "backend_started",
           "DeviceSetupError"]


class DeviceSetupError(RuntimeError):
    """JAX started before `setup()` with too few devices; only a restart can fix that."""


@dataclass(frozen=True)
class DeviceInfo:
    """What `setup()` found: the default platform and the devices on each side."""

    platform: str              # "cpu", "gpu" or "tpu": where single-device work runs
    device_kind: str           # e.g. "cpu", "NVIDIA H100 80GB HBM3", "TPU v5 lite"
    accelerators: int          # number of default-platform devices
    cpu_devices: int           # CPU devices available for emulated meshes
    jax_version: str

    def describe(self) -> str:
        """One line naming the device, for printing beside every timing."""
        where = f"{self.accelerators}× {self.device_kind}" if self.platform != "cpu" else "CPU"
        return (f"{where} (jax {self.jax_version}); {self.cpu_devices} CPU devices for meshes")


def backend_started() -> bool:
    """True once JAX has started a backend (after which the CPU device count is fixed)."""
    from jax._src import xla_bridge
    return xla_bridge.backends_are_initialized()


def _request_cpu_devices(n: int) -> None:
    import jax
    try:
        jax.config.update("jax_num_cpu_devices", n)
    except AttributeError:  # older JAX: only the XLA flag exists
        flags = os.environ.get("XLA_FLAGS", "")
        flag = f"--xla_force_host_platform_device_count={n}"
        if "xla_force_host_platform_device_count" not in flags:
            os.environ["XLA_FLAGS"] = f"{flags} {flag}".strip()


def setup(cpu_devices: int = 8, *, full_precision: bool = True) -> DeviceInfo:
    """Prepare JAX for the book. Call it before anything else touches JAX.

    Args:
      cpu_devices: CPU devices to provide for emulated meshes (default 8).
      full_precision: make float32 matrix products exact on TPUs (whose default rounds their
        inputs to bfloat16), so that the book's equality checks hold on every device. It does
        not affect bfloat16 work, nor anything on CPUs and most GPUs.

    Raises DeviceSetupError if JAX already started with fewer CPU devices: the count cannot
    change inside a running process, so the message says to restart and call setup() first.
    Calling setup() again after a successful call is harmless.
    """
    import jax

    if not backend_started():
        _request_cpu_devices(cpu_devices)
    have = len(jax.devices("cpu"))
    if have < cpu_devices:
        raise DeviceSetupError(
            f"JAX is already running with {have} CPU device(s) and cannot be given {cpu_devices} "
            "any more: restart the runtime (Colab: Runtime > Restart session) and call "
            "inferbook.setup() before any other JAX work.")
    if full_precision:
        jax.config.update("jax_default_matmul_precision", "highest")
    default = jax.devices()
    return DeviceInfo(platform=default[0].platform, device_kind=default[0].device_kind,
                      accelerators=len(default), cpu_devices=have, jax_version=jax.__version__)


def mesh_devices(n: int) -> list[Any]:
    """n devices for a mesh: the accelerators when there are enough, else emulated CPUs."""
    import jax
    default = jax.devices()
    if len(default) >= n:
        return default[:n]
    cpus = jax.devices("cpu")
    if len(cpus) < n:
        raise DeviceSetupError(f"a mesh of {n} devices needs {n} CPU devices but only "
                               f"{len(cpus)} exist; call inferbook.setup({n}) before JAX starts")
    return cpus[:n]


def make_mesh(shape: Sequence[int], axis_names: Sequence[str], *, explicit: bool = False,
              devices: Sequence[Any] | None = None) -> Any:
    """A named device mesh, e.g. ``make_mesh((2, 4), ("x", "y"))``.

    Axis types are always given (JAX 0.9 changed the default from Auto to Explicit); Auto,
    the default here, lets XLA propagate shardings, which is what shard_map code needs.
    """
    import jax
    from jax.sharding import AxisType
    n = math.prod(shape)
    devices = list(devices) if devices is not None else mesh_devices(n)
    if len(devices) != n:
        raise ValueError(f"mesh {tuple(shape)} needs {n} devices, got {len(devices)}")
    kind = AxisType.Explicit if explicit else AxisType.Auto
    return jax.make_mesh(tuple(shape), tuple(axis_names), axis_types=(kind,) * len(shape),
                         devices=devices)
