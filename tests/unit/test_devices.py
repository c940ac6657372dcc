"""Device setup: import is inert, setup gives 8 CPU devices, a late setup fails clearly."""

import subprocess
import sys

import jax

import inferbook
from inferbook.parallel.devices import make_mesh, mesh_devices


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)


def test_importing_the_library_starts_no_backend():
    r = run_python("import inferbook, inferbook.model.decoder, inferbook.model.decode\n"
                   "from inferbook.parallel.devices import backend_started\n"
                   "print(backend_started())")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_setup_provides_eight_cpu_devices_in_a_fresh_process():
    r = run_python("import inferbook; info = inferbook.setup()\n"
                   "import jax; print(len(jax.devices('cpu')), info.cpu_devices)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["8", "8"]


def test_setup_after_jax_started_with_too_few_devices_says_to_restart():
    r = run_python("import jax; jax.devices()\n"
                   "import inferbook\n"
                   "try:\n    inferbook.setup(8)\n"
                   "except inferbook.parallel.devices.DeviceSetupError as e:\n    print('ERR', e)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ERR") and "restart" in r.stdout


def test_setup_is_idempotent_and_meshes_use_the_emulated_devices():
    info = inferbook.setup(8)        # the conftest already called it
    assert info.cpu_devices == 8
    assert len(mesh_devices(8)) == 8
    mesh = make_mesh((2, 4), ("x", "y"))
    assert dict(mesh.shape) == {"x": 2, "y": 4}
    assert "CPU" in info.describe() or info.platform != "cpu"
    assert jax.devices("cpu")[0] in list(mesh.devices.flat) or info.platform != "cpu"
