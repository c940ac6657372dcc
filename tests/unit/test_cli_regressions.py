"""Every bad input reported in issue 15 and item 5 of issue 14, kept as a named test.

Each was a traceback, a hang or a silently wrong answer; each must now be exit code 2 and one
line within 10 seconds (`cli_harness.refused`), or for library calls a ValueError. The
commands run in this process, so a case that regressed into a hang fails its own test on the
alarm instead of stopping the suite.
"""

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from cli_harness import refused, run_cli

from inferbook.model import decoder
from inferbook.model.checkpoint import save_checkpoint
from inferbook.model.config import ModelConfig
from inferbook.model.presets import get_preset

ROOT = Path(__file__).resolve().parents[2]
GEN = ["generate", "--model", "tiny", "--prompt-ids", "1,2,3"]
SMALL = ModelConfig(L=1, D=16, F=24, N=2, K=1, H=8, V=40, max_seq_len=64, name="small")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "small"
    save_checkpoint(path, SMALL, decoder.init_params(SMALL, 0))
    return path


def with_config(checkpoint, tmp_path, **changes):
    """A copy of the checkpoint whose config.json has `changes`."""
    d = tmp_path / "edited"
    shutil.copytree(checkpoint, d)
    config = json.loads((d / "config.json").read_text())
    config.update(changes)
    (d / "config.json").write_text(json.dumps(config))
    return d


# generate ------------------------------------------------------------------------------------

@pytest.mark.parametrize("flags, fragment", [
    (["--seed", "-1"], "--seed"),                                   # was: numpy's traceback
    (["--seed", "99999999999999999999999"], "--seed"),              # was: OverflowError
    (["--eos-id", "99999999999999999999"], "--eos-id"),             # was: OverflowError
    (["--eos-id", "256"], "outside the vocabulary"),                # can never be produced
    (["--temperature", "nan"], "--temperature"),                    # was: all-zero tokens
    (["--temperature", "inf"], "--temperature"),
    (["--temperature", "1", "--top-p", "nan"], "--top-p"),
    (["--max-new-tokens", "600"], "512"),                           # was: tokens past 512
    (["--max-new-tokens", "1000000000"], "512"),                    # issue 14: ran until killed
])
def test_generate_refuses_what_it_used_to_crash_on_or_get_wrong(flags, fragment):
    refused([*GEN, *flags], fragment)


@pytest.mark.parametrize("key, value", [
    ("rms_norm_eps", "1e-5"), ("max_position_embeddings", "512"), ("sliding_window", "4096"),
    ("rope_theta", "10000"), ("rope_parameters", "linear"), ("hidden_act", ["silu"]),
])
def test_generate_refuses_a_config_with_values_of_the_wrong_type(checkpoint, tmp_path, key,
                                                                 value):
    d = with_config(checkpoint, tmp_path, **{key: value})
    refused(["generate", "--checkpoint", d, "--prompt-ids", "1,2"], key)


@pytest.mark.parametrize("model_type", [5, ["llama"], {"a": 1}])
def test_generate_refuses_a_model_type_that_is_not_a_string(checkpoint, tmp_path, model_type):
    """Was a TypeError from the family lookup (a list or dict cannot be hashed)."""
    d = with_config(checkpoint, tmp_path, model_type=model_type)
    refused(["generate", "--checkpoint", d, "--prompt-ids", "1,2"], "model_type")


def test_generate_and_estimate_refuse_a_config_nested_past_the_parser(checkpoint, tmp_path):
    """Was a RecursionError traceback from json's parser (generate) or a CLI-only check."""
    d = tmp_path / "deep"
    shutil.copytree(checkpoint, d)
    (d / "config.json").write_text('{"a": ' * 100_000 + "1" + "}" * 100_000)
    refused(["generate", "--checkpoint", d, "--prompt-ids", "1,2"], "nests too deeply")
    refused(["estimate", "--config", d, "--hardware", "h100"], "nests too deeply")


def test_generate_names_file_and_tensor_of_a_truncated_checkpoint(checkpoint, tmp_path):
    """Issue 14: 'cannot reshape array of size 4767 into shape (64,160)' became one line."""
    d = tmp_path / "cut"
    shutil.copytree(checkpoint, d)
    weights = d / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    refused(["generate", "--checkpoint", d, "--prompt-ids", "1,2"], str(weights), "truncated")


def test_generate_refuses_a_tensor_relabelled_as_integers(checkpoint, tmp_path):
    d = tmp_path / "relabelled"
    shutil.copytree(checkpoint, d)
    raw = (d / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = raw[8:8 + n].replace(b'"F32"', b'"I32"', 1)
    (d / "model.safetensors").write_bytes(raw[:8] + header + raw[8 + n:])
    refused(["generate", "--checkpoint", d, "--prompt-ids", "1,2"], "floating point")


# bench and kernel-bench ----------------------------------------------------------------------

@pytest.mark.parametrize("flags, fragment", [
    (["--model", "llama-2-70b"], "needs at least"),                 # was: out of memory
    (["--batches", "1000000000"], "needs at least"),
    (["--contexts", "100000", "--quick"], "holds at most"),
    (["--save", "--out", "/proc/x"], "/proc"),                      # was: after the work
])
def test_bench_refuses_before_any_work(flags, fragment):
    refused(["bench", "--no-progress", *flags], fragment)


@pytest.mark.parametrize("flags, fragment", [
    (["--batch", "1000000000"], "needs at least"),                  # was: out of memory
    (["--contexts", "1000000000000"], "--contexts"),
    (["--contexts", "2000000000", "--splits", "1"], "needs at least"),
])
def test_kernel_bench_refuses_sizes_this_device_cannot_hold(flags, fragment):
    refused(["kernel-bench", *flags], fragment)


def test_kernel_bench_refuses_a_directory_as_out_before_timing_anything(tmp_path):
    refused(["kernel-bench", "--contexts", "64", "--splits", "4", "--out", tmp_path],
            "is a directory")
    refused(["kernel-bench", "--contexts", "64", "--splits", "4", "--out", "/dev/full"],
            "not a regular file")


# estimate and grade (their fixes belong to other branches; the cases are kept here) ----------

@pytest.mark.parametrize("flags", [
    ["--kv-bytes", "1e-20"], ["--kv-bytes", "1e-300"], ["--chips", "1e31"],   # were: hangs
    ["--batch", "2.5"],
])
def test_estimate_refuses_in_one_line_without_hanging(flags):
    r = refused(["estimate", "--model", "tiny", "--hardware", "TPU v5e", *flags])
    if flags[0] == "--batch":           # was: "'2.5' is not a number"
        assert "is not a number" not in r.err


def test_estimate_json_is_strict_json_or_refused():
    r = run_cli(["estimate", "--model", "tiny", "--hardware", "TPU v5e", "--kv-bytes", "1e308",
                 "--json"])
    if r.code == 0:                     # was: Infinity, which no JSON parser accepts
        def no_constants(name):
            raise ValueError(f"{name} is not JSON")
        json.loads(r.out, parse_constant=no_constants)
    else:
        refused(r.argv)


@pytest.mark.parametrize("content", [
    '{"hbm_bytes": 1e400, "hbm_bandwidth": 8e11, "flops": 2e14}',   # was: a traceback
    '{"hbm_bytes": 16e9, "hbm_bandwidth": NaN, "flops": 2e14}',     # was: nan figures
])
def test_estimate_refuses_hardware_json_with_non_finite_numbers(tmp_path, content):
    (tmp_path / "chip.json").write_text(content)
    refused(["estimate", "--model", "tiny", "--hardware-config", tmp_path / "chip.json"])


@pytest.mark.parametrize("key, value", [
    ("rms_norm_eps", "1e-5"), ("max_position_embeddings", "512"), ("sliding_window", "4096"),
    ("rope_theta", "10000"), ("rope_parameters", "linear"), ("hidden_act", ["silu"]),
])
def test_estimate_refuses_a_config_with_values_of_the_wrong_type(checkpoint, tmp_path, key,
                                                                 value):
    d = with_config(checkpoint, tmp_path, **{key: value})
    refused(["estimate", "--config", d / "config.json", "--hardware", "TPU v5e"], key)


def test_grade_refuses_an_unwritable_results_file_before_running_the_notebook():
    """Was: the whole notebook ran, then the write to /dev/full raised. Run as a separate
    process so that, if it regressed, the kernel it started is stopped with it."""
    pytest.importorskip("nbclient")
    proc = subprocess.Popen([sys.executable, "-m", "inferbook", "grade",
                             ROOT / "exercises" / "01_sampling_kv_cache.ipynb",
                             "--results", "/dev/full"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=30)     # 10 s, plus Python's and JAX's start
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("grade --results /dev/full ran the notebook instead of refusing")
    assert proc.returncode == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err


# the library, for Python callers --------------------------------------------------------------

def test_library_generate_refuses_what_the_cli_refuses():
    import jax.numpy as jnp

    from inferbook.model.decode import generate, naive_generate
    from inferbook.model.sampling import Sampler
    cfg = get_preset("tiny")
    params = decoder.init_params(cfg, 0, jnp.float32)
    with pytest.raises(ValueError, match="temperature"):
        Sampler(temperature=float("nan"))
    for loop in (generate, naive_generate):
        with pytest.raises(ValueError, match="512 positions"):
            loop(params, cfg, [[1, 2, 3]], 600)
        with pytest.raises(ValueError, match="eos_id"):
            loop(params, cfg, [[1, 2, 3]], 4, eos_id=10**20)
        with pytest.raises(ValueError, match="outside the vocabulary"):
            loop(params, cfg, [[1, 2, 999]], 4)


def test_the_engine_api_refuses_what_it_used_to_accept_or_crash_on():
    from inferbook.serving import ContinuousBatching, MockEngine, ModelEngine, Request, serve
    cfg = get_preset("tiny")
    params = decoder.init_params(cfg, 0)
    with pytest.raises(ValueError, match="outside the vocabulary"):      # was: accepted
        serve(ModelEngine(cfg, slots=2, max_len=64), params, [Request(0, (1, 2, 999), 2)])
    engine = MockEngine(2, 64)
    for option in ("block_size", "num_blocks", "chunk"):               # ZeroDivisionError,
        with pytest.raises(ValueError, match=option):                  # or "the default"
            ContinuousBatching(engine, None, **{option: 0})
