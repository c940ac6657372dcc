"""The kernel benchmark: memory read from compiled programs, the decode sweep, its command line.

The GPU measurement cannot run here, so its code path is run on the CPU at toy sizes (the
Pallas kernels interpreted): the file it writes must hold every kernel at every context, and
every kernel it times must compute the reference's attention.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from inferbook.cli import kernel_bench as cli
from inferbook.kernels import kernel_bench
from inferbook.model.attention import reference_at_positions
from inferbook.perf import compiled
from inferbook.perf.hardware import chip_for_device


def test_program_memory_sees_the_largest_array():
    mem = compiled.program_memory(lambda x: x @ x.T, jax.ShapeDtypeStruct((256, 64), jnp.float32))
    assert mem.largest_array_bytes == 256 * 256 * 4          # the product
    assert mem.argument_bytes == 256 * 64 * 4 and mem.output_bytes == 256 * 256 * 4


def test_every_decode_kernel_computes_attention():
    args = kernel_bench.attention_inputs(2, 1, 64, 4, 2, 16, "float32")
    expected = reference_at_positions(*args)[0]
    for name, fn in kernel_bench.decode_kernels(num_splits=4, pallas=True).items():
        np.testing.assert_allclose(fn(*args), expected, rtol=1e-5, atol=1e-5, err_msg=name)


def test_the_sweep_writes_every_kernel_and_context(tmp_path):
    out = tmp_path / "decode.json"
    code = cli.main(["--contexts", "64,128", "--heads", "4", "--kv-heads", "2", "--head-dim", "16",
                     "--splits", "4", "--repeats", "2", "--dtype", "float32", "--pallas", "on",
                     "--out", str(out)])
    assert code == 0
    record = json.loads(out.read_text())
    assert record["source"] and record["device"] and record["date"] and record["jax_version"]
    assert record["interpreted"] is (jax.default_backend() == "cpu")
    assert {(r["kernel"], r["S"]) for r in record["rows"]} == {
        (k, S) for k in kernel_bench.decode_kernels(4, True) for S in (64, 128)}
    for r in record["rows"]:
        assert r["kv_bytes"] == 2 * 1 * 2 * r["S"] * 16 * 4
        assert r["bytes_per_s"] == pytest.approx(r["kv_bytes"] / r["seconds"])


@pytest.mark.parametrize("argv", [["--contexts", "100", "--splits", "32"],
                                  ["--heads", "4", "--kv-heads", "3"],
                                  ["--contexts", "a,b"], ["--batch", "0"]])
def test_bad_arguments_exit_2_with_one_line(argv, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("kernel-bench: error:") and err.count("\n") == 1


def test_device_kinds_map_to_chips():
    assert chip_for_device("NVIDIA H100 80GB HBM3").name == "H100 SXM"
    assert chip_for_device("NVIDIA H200").name == "H200"
    assert chip_for_device("TPU v5 lite").name == "TPU v5e"
    assert chip_for_device("cpu") is None
