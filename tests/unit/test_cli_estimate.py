"""`inferbook estimate`: every field against first-principles arithmetic written here, and one
line for every bad input."""

import json
import math
import subprocess
import sys

import pytest

from inferbook.cli import main
from inferbook.model.presets import PRESETS
from inferbook.perf.hardware import CHIPS, Chip

# Never reaches JAX: runs once, with JAX unimportable, not under both versions (conftest).
pytestmark = pytest.mark.no_jax


def run_cli(capsys, *argv):
    try:
        code = main(["estimate", *argv])
    except SystemExit as exit_info:           # argparse errors
        code = exit_info.code
    out = capsys.readouterr()
    return code, out.out, out.err


def fields_of(capsys, *argv):
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def one_d_comm(cfg, chip, n, B, T):
    """The 1D layout's collectives of one pass (chapter 8's list), priced by hand: an AllGather
    of the [B,T,D] embedding, two AllReduces of [B,T,D] per layer, the float32 logits' AllReduce
    of [B,V], and, when KV heads are fewer than chips, two AllToAlls of the queries per layer
    over the Z = n / gcd(K, n) chips that split the batch. Returns (bandwidth s, latency s)."""
    a, D = 2, cfg.D
    Z = n // math.gcd(cfg.K, n)
    colls = [("ag", n, B * T * D * a, 1), ("ar", n, B * T * D * a, 2 * cfg.L),
             ("ar", n, B * cfg.V * 4, 1)]
    if Z > 1:
        colls.append(("a2a", Z, B * T * cfg.N * cfg.H * a // n, 2 * cfg.L))
    bw = lat = 0.0
    for kind, g, nbytes, count in colls:
        passes = 2 if kind == "ar" else 1
        if chip.interconnect == "ICI":     # rings around min(torus axes, log2 g) axes
            axes = max(1, min(chip.links // 2, int(math.log2(g))))
            # log2(g) doublings dealt over the axes; a ring of 2^e chips takes 2^e / 2 hops
            k = int(math.log2(g))
            rings = [2 ** (k // axes + (i < k % axes)) for i in range(axes)]
            W = 2 * chip.link_bytes_per_s * axes
            per_pass = chip.hop_latency_s * sum(m / 2 for m in rings if m > 1)
        else:                              # through the switch, all links at once; NCCL's
            step = 1.0e-6 if chip.interconnect.startswith("PCIe") else 0.47e-6  # ring steps
            W, per_pass = chip.link_bytes_per_s * chip.links, 3.6e-6 + (g - 1) * step
        bw += count * passes * nbytes * (g - 1) / g / W
        lat += count * passes * per_pass
    return bw, lat


def expected_fields(cfg, chip, n, B, S, T, wb, kvb):
    """A dense GQA model without windows, on n chips in the 1D layout, from its integers,
    under the bare roofline (--ideal). A step reads every weight but the input embedding,
    of which it reads its tokens' rows (with tied embeddings the table is the unembedding
    and read whole); its matmuls multiply the layers' matrices and the unembedding."""
    L, D, F, N, K, H, V = cfg.L, cfg.D, cfg.F, cfg.N, cfg.K, cfg.H, cfg.V
    mlp = (3 if cfg.mlp == "gated" else 2) * D * F
    layer = D * N * H * 2 + 2 * D * K * H + mlp
    P = L * (layer + 2 * D) + D + V * D * (1 if cfg.tied_embeddings else 2)
    table = 0 if cfg.tied_embeddings else V * D
    per_token = 2 * L * K * H * kvb
    kv = B * S * per_token
    W, C, hbm = chip.hbm_bytes_per_s, chip.bf16_flops_per_s, n * chip.hbm_bytes
    read = (P - table + min(B, V) * D * (table > 0)) * wb
    roof = (max(4 * B * S * N * H * L / (n * C), kv / (n * W))
            + max(2 * B * (L * layer + V * D) / (n * C), read / (n * W)))
    bw, lat = one_d_comm(cfg, chip, n, B, 1) if n > 1 else (0, 0)
    step = max(roof, bw) + lat
    pre_flops = 2 * B * T * L * layer + 4 * L * B * T * T * N * H + 2 * B * D * V
    pre_read = (P - table + min(B * T, V) * D * (table > 0)) * wb
    pre_roof = max(pre_flops / (n * C), (pre_read + B * T * per_token) / (n * W))
    pbw, plat = one_d_comm(cfg, chip, n, B, T) if n > 1 else (0, 0)
    prefill = max(pre_roof, pbw) + plat
    return {"params": P, "active_params": P, "param_bytes": P * wb,
            "kv_bytes_per_token": per_token, "kv_bytes": kv, "total_bytes": P * wb + kv,
            "hbm_bytes": hbm, "fits": P * wb + kv <= hbm,
            "max_batch": math.floor((hbm - P * wb) / (S * per_token)),
            "critical_batch": C * wb / (2 * W), "comm_time_s": bw + lat,
            "weight_bytes_read": read, "step_time_lower_bound_s": (kv + read) / (n * W),
            "step_time_s": step,
            "tokens_per_s": B / step, "tokens_per_s_per_user": 1 / step,
            "tokens_per_s_per_chip": B / step / n, "prefill_time_s": prefill,
            "ttft_s": prefill}


@pytest.mark.parametrize("model, hardware, chips, batch, context, prompt, wb, kvb", [
    ("llama-2-13b", "TPU v5e", 8, 16, 4096, 1024, 2, 2),
    ("llama-2-13b", "TPU v5e", 8, 240, 4096, 4096, 2, 2),
    ("llama-3-70b", "H100 SXM", 8, 64, 4096, 512, 1, 1),
    ("llama-3-70b", "TPU v4", 16, 64, 4096, 2048, 1, 1),       # KV heads < chips: AllToAlls
    ("kipply-52b", "A100 40GB", 4, 3, 2048, 100, 2, 2),
    ("llama-3.1-8b", "L4", 2, 5, 3000, 3000, 0.5, 2),
    ("tiny", "L4", 1, 1, 16, 7, 0.5, 2),
])
def test_json_fields_follow_the_definitions(capsys, model, hardware, chips, batch, context,
                                            prompt, wb, kvb):
    got = fields_of(capsys, "--model", model, "--hardware", hardware, "--chips", str(chips),
                    "--batch", str(batch), "--context", str(context), "--prompt", str(prompt),
                    "--weight-bytes", str(wb), "--kv-bytes", str(kvb), "--layout", "1d-ws",
                    "--ideal")
    want = expected_fields(PRESETS[model], CHIPS[hardware], chips, batch, context, prompt,
                           wb, kvb)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-12), key
    assert isinstance(got["fits"], bool) and isinstance(got["max_batch"], int)
    assert got["layout"] == (None if chips == 1 else "1d-ws")


def test_defaults_are_one_chip_batch_one_bf16_and_the_models_context(capsys):
    got = fields_of(capsys, "--model", "llama-2-7b", "--hardware", "a100-80gb", "--ideal")
    cfg = PRESETS["llama-2-7b"]
    want = expected_fields(cfg, CHIPS["A100 80GB"], 1, 1, cfg.max_seq_len, cfg.max_seq_len, 2, 2)
    assert got["context"] == got["prompt"] == cfg.max_seq_len
    assert got["weights"] == "bf16" and got["kv"] == "bf16" and got["chips"] == 1
    assert got["compute"] == "bf16" and got["efficiency"] == "ideal" and got["output"] is None
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-12), key


def test_the_default_layout_is_the_faster_one_and_is_printed(capsys):
    args = ["--model", "llama-3-70b", "--hardware", "TPU v5e", "--chips", "16", "--batch", "64",
            "--context", "2048"]
    best = fields_of(capsys, *args)
    both = {lay: fields_of(capsys, *args, "--layout", lay) for lay in ("1d-ws", "2d-ws")}
    assert best["step_time_s"] == min(r["step_time_s"] for r in both.values())
    assert best["layout"] == min(both, key=lambda lay: both[lay]["step_time_s"])
    code, out, err = run_cli(capsys, *args)
    assert code == 0 and f"({best['layout']}" in out and "the faster layout" in out


def test_a_hugging_face_config_estimates_like_the_preset(capsys, tmp_path):
    cfg = PRESETS["llama-3-8b"]
    hf = {"num_hidden_layers": cfg.L, "hidden_size": cfg.D, "intermediate_size": cfg.F,
          "num_attention_heads": cfg.N, "num_key_value_heads": cfg.K, "vocab_size": cfg.V,
          "tie_word_embeddings": False, "max_position_embeddings": cfg.max_seq_len}
    (tmp_path / "config.json").write_text(json.dumps(hf))
    args = ["--hardware", "H200", "--batch", "32", "--context", "8192", "--chips", "2"]
    from_file = fields_of(capsys, "--config", str(tmp_path / "config.json"), *args)
    from_preset = fields_of(capsys, "--model", "llama-3-8b", *args)
    for key in expected_fields(cfg, CHIPS["H200"], 2, 32, 8192, 8192, 2, 2):
        assert from_file[key] == from_preset[key], key
    # head_dim, when given, overrides hidden_size / num_attention_heads
    (tmp_path / "config.json").write_text(json.dumps(hf | {"head_dim": 256}))
    wide = fields_of(capsys, "--config", str(tmp_path / "config.json"), *args)
    assert wide["kv_bytes_per_token"] == 2 * from_preset["kv_bytes_per_token"]


def test_custom_hardware_from_json(capsys, tmp_path):
    path = tmp_path / "chip.json"
    path.write_text(json.dumps({"name": "mine", "hbm_bytes": 48e9, "hbm_bandwidth": 9.6e11,
                                "flops": 3.6e14}))
    got = fields_of(capsys, "--model", "llama-2-7b", "--hardware-config", str(path),
                    "--batch", "8", "--context", "2048", "--ideal")
    chip = Chip(name="mine", hbm_bytes=48e9, hbm_bytes_per_s=9.6e11, bf16_flops_per_s=3.6e14,
                int8_ops_per_s=None)
    want = expected_fields(PRESETS["llama-2-7b"], chip, 1, 8, 2048, 2048, 2, 2)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-12), key
    # Several chips need an interconnect: said in one line, naming what is missing.
    code, out, err = run_cli(capsys, "--model", "llama-2-7b", "--hardware-config", str(path),
                             "--chips", "2")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "interconnect" in err


def test_the_table_names_every_field_with_units_in_gb_and_gib(capsys):
    code, out, err = run_cli(capsys, "--model", "llama-2-13b", "--hardware", "TPU v5e",
                             "--chips", "8", "--batch", "16", "--context", "4096")
    assert code == 0 and err == ""
    assert out.startswith("llama-2-13b on 8 × TPU v5e (1d-ws")
    for text in ("13.02 billion", "26.03 GB (24.24 GiB)", "819.20 kB", "128.00 GB (119.21 GiB)",
                 "fits in memory", "yes", " ms", "tokens/s", "largest batch that fits",
                 "time to first token", "collectives per step"):
        assert text in out, text


def test_a_batch_that_does_not_fit_says_so_in_one_warning_line(capsys):
    code, out, err = run_cli(capsys, "--model", "llama-2-13b", "--hardware", "TPU v5e",
                             "--chips", "8", "--batch", "16", "--context", "8192")
    assert code == 0 and "fits in memory                  NO" in out
    lines = err.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("warning: ") for line in lines)
    assert "exceeds the 4,096 positions" in lines[0]
    assert "does not fit" in lines[1] and "the largest batch that fits is 15" in lines[1]
    code, out, err = run_cli(capsys, "--model", "llama-2-13b", "--hardware", "TPU v5e",
                             "--context", "8192", "--strict")
    assert code == 2 and out == "" and "--context" in err and len(err.splitlines()) == 1


def test_a_sweep_prints_a_table_and_json_a_list_of_rows(capsys):
    args = ["--model", "llama-3.1-8b", "--hardware", "H100 SXM", "--batch", "1,4,16",
            "--context", "1024,8192", "--prompt", "512"]
    rows = fields_of(capsys, *args)
    assert isinstance(rows, list) and len(rows) == 6
    assert [(r["context"], r["batch"]) for r in rows] == [
        (1024, 1), (1024, 4), (1024, 16), (8192, 1), (8192, 4), (8192, 16)]
    for r in rows:
        single = fields_of(capsys, "--model", "llama-3.1-8b", "--hardware", "H100 SXM",
                           "--batch", str(r["batch"]), "--context", str(r["context"]),
                           "--prompt", "512")
        assert r == single
    code, out, err = run_cli(capsys, *args)
    assert code == 0 and len(out.strip().splitlines()) == 3 + 1 + 6
    assert "tok/s/user" in out and "TTFT s" in out and "efficiency: calibrated" in out


def test_the_plot_is_written(capsys, tmp_path):
    target = tmp_path / "pareto.png"
    code, out, err = run_cli(capsys, "--model", "qwen3-30b-a3b", "--hardware", "H100 SXM",
                             "--batch", "1,8,64,512", "--context", "4096", "--plot", str(target))
    assert code == 0, err
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("what, name", [("models", "deepseek-v3"), ("chips", "TPU v5e")])
def test_lists_name_every_preset_and_chip(capsys, what, name):
    code, out, err = run_cli(capsys, "--list", what)
    assert code == 0 and name in out
    rows = fields_of(capsys, "--list", what)
    assert len(rows) == len(PRESETS if what == "models" else CHIPS)


def test_help_has_examples_and_names_the_presets_and_chips(capsys):
    code, out, err = run_cli(capsys, "--help")
    assert code == 0
    for text in ("examples:", "--plot", "llama-3.1-70b", "mixtral-8x7b", "H100 SXM", "TPU v5e"):
        assert text in out, text


@pytest.mark.parametrize("argv, message", [
    (["--model", "nope", "--hardware", "L4"], "known models: llama-2-7b"),
    (["--model", "tiny", "--hardware", "Z80"], "known: TPU v4, TPU v5e"),
    (["--model", "tiny", "--hardware", "L4", "--chips", "0"], "--chips"),
    (["--model", "tiny", "--hardware", "L4", "--batch", "-2"], "--batch"),
    (["--model", "tiny", "--hardware", "L4", "--batch", "2.5"], "not a whole number"),
    (["--model", "tiny", "--hardware", "L4", "--batch", "1,,2"], "--batch"),
    (["--model", "tiny", "--hardware", "L4", "--context", "0"], "--context"),
    (["--model", "tiny", "--hardware", "L4", "--weight-bytes", "0"], "--weight-bytes"),
    (["--model", "tiny", "--hardware", "L4", "--kv-bytes", "-1"], "--kv-bytes"),
    (["--model", "tiny", "--hardware", "L4", "--kv-bytes", "inf"], "--kv-bytes"),
    (["--model", "tiny", "--hardware", "L4", "--kv-bytes", "1e-20"], "--kv-bytes"),
    (["--model", "tiny", "--hardware", "L4", "--kv-bytes", "1e308"], "--kv-bytes"),
    (["--model", "tiny", "--hardware", "L4", "--batch", "two"], "--batch"),
    (["--model", "tiny", "--hardware", "L4", "--chips", "1.5"], "--chips"),
    (["--model", "tiny", "--hardware", "L4", "--chips", "1e31"], "--chips"),
    (["--model", "tiny", "--hardware", "H100", "--chips", "16"], "one NVLink 4 domain"),
    (["--model", "llama-2-13b", "--hardware", "TPU v5e", "--chips", "3"], "split 3 ways"),
    (["--model", "mixtral-8x7b", "--hardware", "H100", "--chips", "2", "--layout", "2d-ws"],
     "--layout"),
    (["--model", "tiny", "--hardware", "L4", "--weights", "int3"], "--weights"),
    (["--model", "tiny", "--hardware", "L4", "--weights", "int4:0"], "--weights"),
    (["--model", "tiny", "--hardware", "L4", "--weights", "bf16:64"], "--weights"),
    (["--model", "tiny", "--hardware", "L4", "--kv", "int4"], "--kv"),
    (["--model", "tiny", "--hardware", "L4", "--context", "64", "--prompt", "65"], "--prompt"),
    (["--model", "tiny", "--hardware", "L4", "--plot", "out.gif"], "--plot"),
    (["--model", "tiny", "--hardware", "L4", "--plot", "/no/such/dir/p.png"], "--plot"),
    (["--model", "tiny", "--hardware", "L4", "--list", "models"], "--list"),
    (["--config", "/no/such/config.json", "--hardware", "L4"], "no config file"),
    (["--model", "tiny"], "--hardware"),
    (["--hardware", "L4"], "--model"),
])
def test_bad_input_gives_exit_code_2_and_one_line(capsys, argv, message):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and message in err, err


@pytest.mark.parametrize("content, message", [
    ("{not json", "cannot read"),
    ("[1, 2]", "JSON object"),
    ('{"hidden_size": 64}', "missing the key 'num_hidden_layers'"),
    ('{"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, '
     '"num_attention_heads": 4, "vocab_size": 0}', "vocab_size"),
    ('{"num_hidden_layers": 1e12, "hidden_size": 64, "intermediate_size": 128, '
     '"num_attention_heads": 4, "vocab_size": 10}', "num_hidden_layers"),
    ('{"model_type": "mamba", "hidden_size": 64}', "model_type='mamba'"),
    ('{"model_type": [], "hidden_size": 64}', "model_type"),
    ('{"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, '
     '"num_attention_heads": 4, "vocab_size": 10, "rms_norm_eps": "small"}', "rms_norm_eps"),
    ('{"num_hidden_layers": 2, "hidden_size": "64", "intermediate_size": 128, '
     '"num_attention_heads": 4, "vocab_size": 10}', "hidden_size"),
    ('{"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, '
     '"num_attention_heads": 4, "vocab_size": 10, "max_position_embeddings": NaN}',
     "max_position_embeddings"),
    ("[" * 100000 + "]" * 100000, "config"),
])
def test_bad_model_configs_are_one_line(capsys, tmp_path, content, message):
    (tmp_path / "config.json").write_text(content)
    code, out, err = run_cli(capsys, "--config", str(tmp_path / "config.json"), "--hardware", "L4")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err, err


@pytest.mark.parametrize("content, message", [
    ("{broken", "cannot read"),
    ('{"hbm_bytes": 1e9, "flops": 1e12}', "missing the key 'hbm_bandwidth'"),
    ('{"hbm_bytes": 0, "hbm_bandwidth": 1e11, "flops": 1e12}', "positive"),
    ('{"hbm_bytes": 1e9, "hbm_bandwidth": -5, "flops": 1e12}', "positive"),
    ('{"hbm_bytes": 1e9, "hbm_bandwidth": "fast", "flops": 1e12}', "positive"),
    ('{"hbm_bytes": 1e9, "hbm_bandwidth": NaN, "flops": 1e12}', "NaN"),
    ('{"hbm_bytes": 1e9, "hbm_bandwidth": 1e11, "flops": Infinity}', "Infinity"),
    ('{"hbm_bytes": 1e400, "hbm_bandwidth": 1e11, "flops": 1e12}', "hbm_bytes"),
    ('{"hbm_bytes": 1e9, "hbm_bandwidth": 1e11, "flops": 1e12, "links": 2.5}', "links"),
    ('{"hbm_bytes": 1e9, "hbm_bandwidth": 1e11, "flops": 1e12, "name": 7}', "name"),
    ('{"hbm_bytes": 1e9, "hbm_bandwidth": 1e11, "flops": 1e12, "speed": 7}', "unknown keys"),
    ('"a string"', "JSON object"),
])
def test_bad_hardware_configs_are_one_line(capsys, tmp_path, content, message):
    (tmp_path / "chip.json").write_text(content)
    code, out, err = run_cli(capsys, "--model", "tiny", "--hardware-config",
                             str(tmp_path / "chip.json"))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_a_hardware_figure_out_of_range_is_refused_not_printed_as_infinity(capsys, tmp_path):
    (tmp_path / "chip.json").write_text('{"hbm_bytes": 1e9, "hbm_bandwidth": 1e11, '
                                        '"flops": 1e-300}')
    code, out, err = run_cli(capsys, "--model", "tiny", "--hardware-config",
                             str(tmp_path / "chip.json"), "--json")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1


def test_a_missing_hardware_file_is_one_line(capsys, tmp_path):
    code, out, err = run_cli(capsys, "--model", "tiny", "--hardware-config",
                             str(tmp_path / "none.json"))
    assert code == 2 and "does not exist" in err and len(err.strip().splitlines()) == 1


def test_the_installed_command_never_shows_a_traceback():
    proc = subprocess.run([sys.executable, "-m", "inferbook", "estimate", "--model", "tiny",
                           "--hardware", "L4", "--context", "-5"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    proc = subprocess.run([sys.executable, "-m", "inferbook", "estimate", "--model", "tiny",
                           "--hardware", "L4", "--json"], capture_output=True, text=True)
    assert proc.returncode == 0 and json.loads(proc.stdout)["params"] > 0


def test_every_json_field_is_defined_on_the_books_reference_page(capsys):
    from pathlib import Path
    page = (Path(__file__).resolve().parents[2] / "book" / "estimate_reference.py").read_text()
    fields = fields_of(capsys, "--model", "mixtral-8x7b", "--hardware", "H100 SXM",
                       "--chips", "2", "--context", "1024")
    missing = [key for key in fields if f"`{key}`" not in page]
    assert not missing, missing
    toc = (Path(__file__).resolve().parents[2] / "_toc.yml").read_text()
    assert "book/estimate_reference" in toc


def test_the_report_shows_the_generation_its_cost_and_where_the_step_goes(capsys):
    args = ["--model", "llama-3.1-8b", "--hardware", "H100 SXM", "--batch", "8", "--context",
            "2048", "--prompt", "1024", "--output", "256", "--price", "2.5"]
    got = fields_of(capsys, *args)
    code, out, err = run_cli(capsys, *args, "--breakdown")
    assert code == 0 and err == ""
    for text in ("output 256", "efficiency: calibrated", "whole generation",
                 "cost per million tokens, decoding", "reading the weights",
                 "reading the KV cache", "the MLP (arithmetic, routed rows)", "collectives",
                 "fixed costs per layer", "of the step"):
        assert text in out, text
    assert f"${got['usd_per_million_tokens']:,.4g}" in out
    code, out, _ = run_cli(capsys, *args[:-4], "--ideal")
    assert code == 0 and "efficiency: ideal" in out and "whole generation" not in out


def test_a_sweep_with_a_breakdown_has_a_column_per_component(capsys):
    code, out, _ = run_cli(capsys, "--model", "mixtral-8x7b", "--hardware", "H100 SXM",
                           "--chips", "8", "--batch", "8,4096", "--context", "2048",
                           "--breakdown", "--price", "3")
    assert code == 0
    header = out.splitlines()[3]
    for column in ("weights ms", "kv_cache ms", "mlp ms", "communication ms", "$/M tokens"):
        assert column in header, column
    assert "expert-parallel (experts over Z=" in out
