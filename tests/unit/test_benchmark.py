"""`inferbook bench`: its command-line contract, the arithmetic of MBU and MFU, the results
file and the loader the book reads it with. Timings are never asserted here: only that what
is reported follows from what was measured, by definitions recomputed independently."""

import json
import statistics
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from inferbook.cli import main
from inferbook.model import decoder
from inferbook.model.kvcache import init_cache
from inferbook.model.presets import get_preset
from inferbook.perf import bench, bench_results

ROOT = Path(__file__).resolve().parents[2]
BATCH, CONTEXT, PROMPT = 2, 16, 16


def run_cli(capsys, *argv):
    try:
        code = main(["bench", *argv])
    except SystemExit as exit_info:           # argparse errors
        code = exit_info.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("argv, message", [
    (["--batches", "1,x"], "argument --batches: must be a positive integer"),
    (["--batches", "0"], "argument --batches: must be a positive integer"),
    (["--contexts", ""], "argument --contexts: must be comma-separated integers"),
    (["--prefill", "-4"], "argument --prefill: must be a positive integer"),
    (["--repeats", "0"], "argument --repeats: must be a positive integer"),
    (["--model", "no-such-model"], "unknown model 'no-such-model'"),
    (["--model", "tiny", "--contexts", "4096"], "tiny holds at most 512 tokens"),
    (["--out", "somewhere"], "--out needs --save"),
    (["--dtype", "int4"], "invalid choice"),
])
def test_bad_input_is_one_line_and_exit_code_2(capsys, argv, message):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """One quick run of the command on the tiny model, saved to a temporary directory."""
    out = tmp_path_factory.mktemp("bench")
    import contextlib
    import io
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = main(["bench", "--model", "tiny", "--batches", str(BATCH), "--contexts",
                     str(CONTEXT), "--prefill", str(PROMPT), "--quick", "--json",
                     "--no-progress", "--save", "--out", str(out)])
    assert code == 0
    return json.loads(stdout.getvalue()), out


def test_json_names_the_device_versions_and_every_configuration(cli_run):
    record, _ = cli_run
    import inferbook
    from inferbook.perf import timing
    assert record["device"] == timing.device_name()
    assert record["platform"] == jax.devices()[0].platform
    assert record["jax_version"] == jax.__version__
    assert record["inferbook_version"] == inferbook.__version__
    assert record["model"] == "tiny" and record["dtype"] == "float32"
    assert [(r["kind"], r["batch"], r["context"]) for r in record["rows"]] == [
        ("decode", BATCH, CONTEXT), ("prefill", 1, PROMPT)]
    for key in ("read_bytes_per_s", "matmul_flops_per_s", "overhead_s", "date"):
        assert record[key]
    for row in record["rows"]:
        for key in ("measured_s", "compile_s", "bytes_per_s", "mbu_measured", "mfu_measured",
                    "roofline_s", "roofline_error"):
            assert row[key] is not None, key
    decode = record["rows"][0]
    for key in ("predicted_s", "error", "matmul_s", "attention_s", "read_bytes_per_s"):
        assert decode[key] is not None
    if record["platform"] == "cpu":       # no datasheet for a CPU: n/a, not a made-up number
        assert record["chip"] is None and decode["mbu_spec"] is None
        assert decode["mfu_spec"] is None and decode["spec_roofline_s"] is None


def _matmul_weight_bytes(params, cfg):
    """Bytes of every weight a decode step multiplies by, from the allocated arrays."""
    total = 0
    for layer in params["layers"]:
        total += sum(w.nbytes for name, w in layer.items() if "norm" not in name)
    return total + (params["embed"].nbytes if cfg.tied_embeddings else params["unembed"].nbytes)


def test_mbu_and_mfu_follow_from_bytes_flops_and_time(cli_run):
    record, _ = cli_run
    cfg = get_preset("tiny")
    params = decoder.init_params(cfg, 0, jnp.float32)
    cache = init_cache(cfg, BATCH, CONTEXT, jnp.float32)
    kv = sum(a.nbytes for a in jax.tree.leaves((cache.k, cache.v)))
    decode, prefill = record["rows"]
    assert decode["bytes"] == _matmul_weight_bytes(params, cfg) + kv
    # 2 FLOPs per weight per sequence, and Q·Kᵀ and P·V over the cache and the new token.
    weights = _matmul_weight_bytes(params, cfg) // 4
    attention = cfg.L * 2 * 2 * BATCH * cfg.N * cfg.H * (CONTEXT + 1)
    assert decode["flops"] == 2 * BATCH * weights + attention
    for row in (decode, prefill):
        t = row["measured_s"]
        bandwidth = row.get("read_bytes_per_s", record["read_bytes_per_s"])   # decode: its own
        np.testing.assert_allclose(row["mbu_measured"], row["bytes"] / t / bandwidth)
        np.testing.assert_allclose(row["mfu_measured"],
                                   row["flops"] / t / record["matmul_flops_per_s"])
        np.testing.assert_allclose(row["bytes_per_s"] * t, row["bytes"])
    # C is the best matmul throughput seen; the roofline is kv/W + max(2·B·P/C, weights/W).
    W, C = decode["read_bytes_per_s"], record["matmul_flops_per_s"]
    assert C >= record["microbenchmark_flops_per_s"]
    assert C >= 2 * BATCH * weights / decode["matmul_s"] * (1 - 1e-12)
    roof = kv / W + max(2 * BATCH * weights / C, 4 * weights / W)
    np.testing.assert_allclose(decode["roofline_s"], roof)
    np.testing.assert_allclose(decode["predicted_s"],
                               decode["matmul_s"] + decode["attention_s"] + decode["overhead_s"])
    np.testing.assert_allclose(decode["error"], decode["predicted_s"] / decode["measured_s"] - 1)
    np.testing.assert_allclose(prefill["tokens_per_s"], PROMPT / prefill["measured_s"])


def test_utilisation_is_none_without_a_roof():
    assert bench.mbu(1e9, 0.5, None) is None and bench.mfu(1e9, 0.5, None) is None
    assert bench.mbu(1e9, 0.5, 4e9) == pytest.approx(0.5)
    assert bench.mfu(3e12, 2.0, 1e13) == pytest.approx(0.15)


def test_summary_takes_batch_one_and_the_median_and_worst_error():
    errors = [0.1, -0.3, 0.05, -0.02]
    rows = [dict(kind="decode", batch=b, context=s, error=e, mbu_measured=0.1 * b,
                 mbu_spec=None) for (b, s), e in zip([(4, 128), (1, 512), (1, 128), (2, 128)],
                                                       errors)]
    rows.append(dict(kind="prefill", batch=1, context=64, roofline_error=9.0))
    rows[2].update(bytes=6e9, measured_s=2.0)
    s = bench.summary({"rows": rows, "read_bytes_per_s": 4e9})
    assert (s["batch"], s["context"], s["mbu_measured"]) == (1, 128, pytest.approx(0.1))
    assert s["mbu_microbenchmark"] == pytest.approx(6e9 / 2.0 / 4e9)
    assert s["median_abs_error"] == pytest.approx(statistics.median(map(abs, errors)))
    assert s["worst_abs_error"] == pytest.approx(0.3)


def test_the_results_file_round_trips_and_is_indexed(cli_run):
    record, out = cli_run
    saved = Path(record.pop("saved_to"))
    assert saved.parent == out and saved.name == bench_results.results_name(record)
    assert saved.name.endswith(f"_{record['date'][:10]}_jax-{record['jax_version']}.json")
    assert json.loads(saved.read_text()) == record
    assert json.loads((out / "index.json").read_text()) == [saved.name]
    assert bench_results.load_results(out) == [record]


def test_results_name_is_a_plain_file_name():
    name = bench_results.results_name({"device": "CPU: AMD EPYC 7B13 (2 cores)",
                                       "date": "2031-02-03T04:05:06+00:00"})
    assert name == "cpu-amd-epyc-7b13-2-cores_2031-02-03.json"


def test_the_books_results_are_all_indexed_and_load():
    directory = ROOT / "book" / "data" / "bench"
    files = sorted(p.name for p in directory.glob("*.json") if p.name != "index.json")
    assert files, "no benchmark results on record"
    assert json.loads((directory / "index.json").read_text()) == files
    records = bench_results.load_results()
    assert len(records) == len(files)
    for r in records:
        assert r["source"] and r["device"] and r["jax_version"] and r["inferbook_version"]
        assert any(row["kind"] == "decode" for row in r["rows"])


def test_the_loader_reads_from_the_repository_without_a_checkout(tmp_path, monkeypatch):
    """On Colab there is no book/data/: index.json and each file come through bookdata."""
    from inferbook.book import bookdata
    monkeypatch.chdir(tmp_path)
    served = {"bench/index.json": ["a.json"],
              "bench/a.json": {"source": "x", "date": "2031-01-01", "rows": []}}
    monkeypatch.setattr(bookdata, "load", lambda name: served[name])
    assert bench_results.load_results() == [served["bench/a.json"]]
