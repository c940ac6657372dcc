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
from inferbook.perf import bench, bench_results, calibration

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
    for key in ("read_bytes_per_s", "read_kernel", "read_kernels", "matmul_flops_per_s",
                "date"):
        assert record[key]
    assert record["attention_timed"] == calibration.ATTENTION_TIMED
    # A read's typical (median) rate is never above its best; the summary compares like with
    # like: the batch-1 step's median against the reads' medians.
    medians, best = record["read_kernels_median"], record["read_kernels"]
    assert medians and all(0 < medians[k] <= best[k] for k in medians)
    assert record["read_median_bytes_per_s"] == max(medians.values())
    s, first = record["summary"], record["rows"][0]
    assert s["read_median_share"] == record["read_median_bytes_per_s"] / record[
        "reads_bytes_per_s"] <= 1
    assert s["step_vs_read_median"] == pytest.approx(
        first["bytes"] / first["measured_s"] / record["read_median_bytes_per_s"])
    for row in record["rows"]:          # attention's baseline is the skeleton's own step
        assert row["attention_skeleton_s"] == row["overhead_s"]
        assert record["repeats"] <= row["rounds"] <= 4 * record["repeats"]
    for row in record["rows"]:
        for key in ("measured_s", "best_s", "compile_s", "bytes_per_s", "mbu_measured",
                    "mfu_measured", "roofline_s", "roofline_error", "predicted_s", "error",
                    "matmul_s", "attention_s", "overhead_s", "matmul_skeleton_s",
                    "attention_skeleton_s"):
            assert row[key] is not None, key
    assert record["rows"][0]["read_bytes_per_s"] is not None      # read beside the step
    if record["platform"] == "cpu":       # no datasheet for a CPU: n/a, not a made-up number
        decode = record["rows"][0]
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
    W, C = record["read_bytes_per_s"], record["matmul_flops_per_s"]
    for row in (decode, prefill):
        t = row["measured_s"]
        np.testing.assert_allclose(row["mbu_measured"], row["bytes"] / t / W)
        np.testing.assert_allclose(row["mfu_measured"], row["flops"] / t / C)
        np.testing.assert_allclose(row["bytes_per_s"] * t, row["bytes"])
        # The calibrated prediction: the skeleton's step plus each part's work.
        work = (max(row["matmul_s"] - row["matmul_skeleton_s"], 0)
                + max(row["attention_s"] - row["attention_skeleton_s"], 0))
        np.testing.assert_allclose(row["predicted_s"], row["overhead_s"] + work)
        np.testing.assert_allclose(row["error"], row["predicted_s"] / t - 1)
    # C is the best matmul throughput seen; the roofline is kv/W + max(2·B·P/C, weights/W).
    assert C >= record["microbenchmark_flops_per_s"]
    assert C >= 2 * BATCH * weights / decode["matmul_s"] * (1 - 1e-12)
    roof = kv / W + max(2 * BATCH * weights / C, 4 * weights / W)
    np.testing.assert_allclose(decode["roofline_s"], roof)
    np.testing.assert_allclose(prefill["tokens_per_s"], PROMPT / prefill["measured_s"])


def test_the_roof_is_the_fastest_read_of_the_run_so_mbu_cannot_pass_100_percent(cli_run):
    record, _ = cli_run
    W = record["read_bytes_per_s"]
    decode = [r for r in record["rows"] if r["kind"] == "decode"]
    assert W == max(record["read_kernels"].values())
    assert record["read_kernels"][record["read_kernel"]] == W
    assert W >= record["reads_bytes_per_s"] >= max(r["read_bytes_per_s"] for r in decode)
    for r in decode:                      # every step is a read of its bytes: under the roof
        assert r["bytes"] / r["best_s"] <= W * (1 + 1e-12)
        assert r["best_s"] <= r["measured_s"] and r["mbu_measured"] <= 1.0
    C = record["matmul_flops_per_s"]      # and no step or prefill beat the FLOP roof either
    for r in record["rows"]:
        assert r["flops"] / r["measured_s"] <= C * (1 + 1e-12) and r["mfu_measured"] <= 1.0
    assert record["lead_in"] == bench.LEAD_IN >= 1      # the record says how steps were timed


def test_a_weak_read_cannot_make_a_step_beat_the_roof(monkeypatch):
    """Read kernels far slower than the memory (a read on one core, a busy moment): the roof
    rises to what the decode step itself achieved, and says so."""
    import time

    from inferbook.perf import read_roof

    def crawling(nbytes, *args, **kwargs):
        return [read_roof.Read("crawling read", lambda: time.sleep(0.01), 1000)]
    monkeypatch.setattr(bench, "read_programs", crawling)
    record = bench.run_benchmark(get_preset("tiny"), batches=(1,), contexts=(8,), prefill=(),
                                 repeats=2, quick=True, show_progress=False)
    (row,) = record["rows"]
    assert record["read_kernels"]["crawling read"] < row["bytes"] / row["best_s"]
    assert record["read_kernel"] == "decode step B=1 S=8"
    assert record["read_bytes_per_s"] == pytest.approx(row["bytes"] / row["best_s"])
    assert 0 < row["mbu_measured"] <= 1.0
    assert record["summary"]["mbu_reads"] > 1.0     # what the weak read alone would have said


def test_utilisation_is_none_without_a_roof():
    assert bench.mbu(1e9, 0.5, None) is None and bench.mfu(1e9, 0.5, None) is None
    assert bench.mbu(1e9, 0.5, 4e9) == pytest.approx(0.5)
    assert bench.mfu(3e12, 2.0, 1e13) == pytest.approx(0.15)


def test_summary_takes_batch_one_and_the_median_and_worst_error_of_every_row():
    errors = [0.1, -0.3, 0.05, -0.02]
    rows = [dict(kind="decode", batch=b, context=s, error=e, mbu_measured=0.1 * b,
                 mbu_spec=None) for (b, s), e in zip([(4, 128), (1, 512), (1, 128), (2, 128)],
                                                       errors)]
    rows.append(dict(kind="prefill", batch=1, context=64, error=0.4, roofline_error=9.0))
    rows[2].update(bytes=6e9, measured_s=2.0)
    s = bench.summary({"rows": rows, "read_bytes_per_s": 4e9, "read_kernel": "host threads",
                       "reads_bytes_per_s": 2e9})
    assert (s["batch"], s["context"], s["mbu_measured"]) == (1, 128, pytest.approx(0.1))
    assert s["roof_kernel"] == "host threads"
    assert s["mbu_reads"] == pytest.approx(6e9 / 2.0 / 2e9)
    assert s["median_abs_error"] == pytest.approx(statistics.median(map(abs, errors + [0.4])))
    assert s["worst_abs_error"] == pytest.approx(0.4)
    assert s["peer_speedup"] is None


def test_the_speedup_over_the_peer_is_its_time_per_token_over_ours():
    peer = [{"name": "inferbook decode.generate", "seconds_per_token": 0.01},
            {"name": "transformers generate (static cache, eager)", "seconds_per_token": 0.025}]
    assert bench.peer_speedup({"peer": peer}) == pytest.approx(2.5)
    assert bench.peer_speedup({"peer": peer[:1]}) is None and bench.peer_speedup({}) is None


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


def _record(load, **summary):
    """A CPU record of the benchmark model, as `bench.run_benchmark` returns it."""
    s = dict(batch=1, context=128, mbu_measured=0.85, peer_speedup=2.5, median_abs_error=0.03,
             worst_abs_error=0.08) | summary
    return dict(platform="cpu", model="cpu-336mb", dtype="float32", cpu_count=2, read_kernels={},
                load_average_before=[load, 0.0, 0.0], summary=s, device="CPU: test (2 cores)",
                date="2031-01-01T00:00:00+00:00", jax_version="0.0.1", rows=[])


@pytest.mark.parametrize("summary, missed", [
    ({}, []),
    ({"mbu_measured": 0.79}, ["MBU at batch 1 >= 80%"]),
    ({"peer_speedup": 1.9, "worst_abs_error": 0.11},
     ["time per token <= 1/2 of transformers' generate", "calibrated |error| worst <= 10%"]),
    ({"median_abs_error": 0.051}, ["calibrated |error| median <= 5%"]),
])
def test_a_quiet_record_is_held_to_each_target(summary, missed):
    from inferbook.perf import bench_targets
    record = _record(0.4, **summary)
    assert bench_targets.held(record)
    assert [m.split(" (measured")[0] for m in bench_targets.missed(record)] == missed
    loaded = _record(1.5, **summary)                  # load above half of 2 cores
    assert not bench_targets.held(loaded) and bench_targets.missed(loaded) == []
    assert bench_targets.check(loaded) == bench_targets.check(record)


def test_a_target_not_measured_is_neither_met_nor_missed():
    from inferbook.perf import bench_targets
    record = _record(0.0, peer_speedup=None)
    assert bench_targets.check(record)["peer_speedup"] is None
    assert bench_targets.missed(record) == []
    assert bench_targets.why_not_held(record) is None
    for other, why in ((dict(model="tiny"), "model"), (dict(platform="gpu"), "gpu"),
                       (dict(dtype="bfloat16"), "model"), (dict(load_average_before=None), "load")):
        assert not bench_targets.held(_record(0.0) | other)
        assert bench_targets.why_not_held(_record(0.0) | other) == why
    earlier = _record(0.0)
    del earlier["read_kernels"]                 # a record from before the read roof
    assert not bench_targets.held(earlier) and bench_targets.why_not_held(earlier) == "earlier"


@pytest.mark.parametrize("load, code", [(0.3, 1), (1.9, 0)])
def test_saving_a_quiet_run_that_missed_a_target_exits_1(tmp_path, monkeypatch, capsys, load,
                                                         code):
    """`make bench` fails when the machine was quiet and a target was missed; a run under
    load is saved and reported, but not held to the targets. The record is saved either way."""
    from inferbook.perf import bench as bench_module
    record = _record(load, mbu_measured=0.5) | dict(
        read_bytes_per_s=1e10, read_kernel="host threads", read_kernels={"host threads": 1e10},
        spec_bytes_per_s=None, matmul_flops_per_s=1e11, inferbook_version="0", quick=True)
    monkeypatch.setattr(bench_module, "run_benchmark", lambda *a, **k: dict(record))
    result = run_cli(capsys, "--quick", "--save", "--out", str(tmp_path), "--no-progress")
    assert result[0] == code
    assert len(list(tmp_path.glob("cpu-test-2-cores_*.json"))) == 1
    if code:
        assert result[2].count("\n") == 1 and "MBU at batch 1 >= 80% (measured 50.0%)" in result[2]
    assert ("MISSED" in result[1]) and (("not held" in result[1]) == (code == 0))
