"""`inferbook estimate`: the contract of the estimator issue, and one line for every bad input."""

import json
import subprocess
import sys

import pytest

from inferbook.cli import main
from inferbook.model.presets import PRESETS
from inferbook.perf.hardware import CHIPS


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


def expected_fields(cfg, chip, chips, batch, context, wb, kvb):
    """The issue's definitions, computed here from the config's integers and the chip."""
    L, D, F, N, K, H, V = cfg.L, cfg.D, cfg.F, cfg.N, cfg.K, cfg.H, cfg.V
    mlp = (3 if cfg.mlp == "gated" else 2) * D * F
    params = L * (D * N * H * 2 + 2 * D * K * H + mlp + 2 * D) + D + V * D * (
        1 if cfg.tied_embeddings else 2)
    per_token = 2 * L * K * H * kvb
    kv = batch * context * per_token
    W, C, hbm = chip.hbm_bytes_per_s, chip.bf16_flops_per_s, chips * chip.hbm_bytes
    step = kv / (chips * W) + max(2 * batch * params / (chips * C), params * wb / (chips * W))
    max_batch = 0
    while params * wb + (max_batch + 1) * context * per_token <= hbm:
        max_batch += 1
    return {"params": params, "param_bytes": params * wb, "kv_bytes_per_token": per_token,
            "kv_bytes": kv, "total_bytes": params * wb + kv, "hbm_bytes": hbm,
            "fits": params * wb + kv <= hbm, "max_batch": max_batch,
            "critical_batch": C * wb / (2 * W),
            "step_time_lower_bound_s": (kv + params * wb) / (chips * W),
            "step_time_s": step, "tokens_per_s": batch / step}


@pytest.mark.parametrize("model, hardware, chips, batch, context, wb, kvb", [
    ("llama-2-13b", "TPU v5e", 8, 16, 8192, 2, 2),
    ("llama-2-13b", "TPU v5e", 8, 240, 8192, 2, 2),
    ("llama-3-70b", "H100 SXM", 8, 64, 4096, 1, 1),
    ("scaling-book-18b", "TPU v5e", 16, 4, 131072, 1, 1),
    ("kipply-52b", "A100 40GB", 4, 3, 2048, 2, 2),
    ("tiny", "L4", 1, 1, 16, 0.5, 2),
])
def test_json_fields_follow_the_definitions(capsys, model, hardware, chips, batch, context,
                                            wb, kvb):
    got = fields_of(capsys, "--model", model, "--hardware", hardware, "--chips", str(chips),
                    "--batch", str(batch), "--context", str(context), "--weight-bytes", str(wb),
                    "--kv-bytes", str(kvb))
    want = expected_fields(PRESETS[model], CHIPS[hardware], chips, batch, context, wb, kvb)
    for key, value in want.items():
        assert got[key] == pytest.approx(value), key
    assert isinstance(got["fits"], bool) and isinstance(got["max_batch"], int)


def test_defaults_are_one_chip_batch_one_two_bytes_and_the_models_context(capsys):
    got = fields_of(capsys, "--model", "llama-2-7b", "--hardware", "a100-80gb")
    cfg = PRESETS["llama-2-7b"]
    want = expected_fields(cfg, CHIPS["A100 80GB"], 1, 1, cfg.max_seq_len, 2, 2)
    assert got["context"] == cfg.max_seq_len
    for key, value in want.items():
        assert got[key] == pytest.approx(value), key


def test_a_hugging_face_config_estimates_like_the_preset(capsys, tmp_path):
    cfg = PRESETS["llama-3-8b"]
    hf = {"num_hidden_layers": cfg.L, "hidden_size": cfg.D, "intermediate_size": cfg.F,
          "num_attention_heads": cfg.N, "num_key_value_heads": cfg.K, "vocab_size": cfg.V,
          "tie_word_embeddings": False, "max_position_embeddings": cfg.max_seq_len}
    (tmp_path / "config.json").write_text(json.dumps(hf))
    args = ["--hardware", "H200", "--batch", "32", "--context", "8192"]
    from_file = fields_of(capsys, "--config", str(tmp_path / "config.json"), *args)
    from_preset = fields_of(capsys, "--model", "llama-3-8b", *args)
    for key in expected_fields(cfg, CHIPS["H200"], 1, 32, 8192, 2, 2):
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
                    "--batch", "8", "--context", "2048")
    chip = CHIPS["L4"].__class__(name="mine", hbm_bytes=48e9, hbm_bytes_per_s=9.6e11,
                                 bf16_flops_per_s=3.6e14, int8_ops_per_s=None)
    want = expected_fields(PRESETS["llama-2-7b"], chip, 1, 8, 2048, 2, 2)
    for key, value in want.items():
        assert got[key] == pytest.approx(value), key


def test_the_table_names_every_field_with_units(capsys):
    code, out, err = run_cli(capsys, "--model", "llama-2-13b", "--hardware", "TPU v5e",
                             "--chips", "8", "--batch", "16", "--context", "8192")
    assert code == 0 and err == ""
    assert "llama-2-13b on 8 × TPU v5e" in out
    for text in ("13.02 billion", "26.03 GB", "819.20 kB", "128.00 GB", "fits in memory",
                 "no", " ms", "tokens/s", "largest batch that fits"):
        assert text in out, text
    assert len(out.strip().splitlines()) == 13


@pytest.mark.parametrize("argv, message", [
    (["--model", "nope", "--hardware", "L4"], "known models: llama-2-7b"),
    (["--model", "tiny", "--hardware", "Z80"], "known: TPU v4, TPU v5e"),
    (["--model", "tiny", "--hardware", "L4", "--chips", "0"], "--chips"),
    (["--model", "tiny", "--hardware", "L4", "--batch", "-2"], "--batch"),
    (["--model", "tiny", "--hardware", "L4", "--context", "0"], "--context"),
    (["--model", "tiny", "--hardware", "L4", "--weight-bytes", "0"], "--weight-bytes"),
    (["--model", "tiny", "--hardware", "L4", "--kv-bytes", "-1"], "--kv-bytes"),
    (["--model", "tiny", "--hardware", "L4", "--kv-bytes", "inf"], "--kv-bytes"),
    (["--model", "tiny", "--hardware", "L4", "--batch", "two"], "--batch"),
    (["--model", "tiny", "--hardware", "L4", "--chips", "1.5"], "--chips"),
    (["--config", "/no/such/config.json", "--hardware", "L4"], "no config file"),
    (["--model", "tiny"], "--hardware"),
    (["--hardware", "L4"], "--model"),
])
def test_bad_input_gives_exit_code_2_and_one_line(capsys, argv, message):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and message in err


@pytest.mark.parametrize("content, message", [
    ("{not json", "cannot read"),
    ("[1, 2]", "JSON object"),
    ('{"hidden_size": 64}', "missing the key 'num_hidden_layers'"),
    ('{"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, '
     '"num_attention_heads": 4, "vocab_size": 0}', "vocab_size"),
])
def test_bad_model_configs_are_one_line(capsys, tmp_path, content, message):
    (tmp_path / "config.json").write_text(content)
    code, out, err = run_cli(capsys, "--config", str(tmp_path / "config.json"), "--hardware", "L4")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err


@pytest.mark.parametrize("content, message", [
    ("{broken", "cannot read"),
    ('{"hbm_bytes": 1e9, "flops": 1e12}', "missing the key 'hbm_bandwidth'"),
    ('{"hbm_bytes": 0, "hbm_bandwidth": 1e11, "flops": 1e12}', "positive"),
    ('{"hbm_bytes": 1e9, "hbm_bandwidth": -5, "flops": 1e12}', "positive"),
    ('{"hbm_bytes": 1e9, "hbm_bandwidth": "fast", "flops": 1e12}', "positive"),
    ('"a string"', "JSON object"),
])
def test_bad_hardware_configs_are_one_line(capsys, tmp_path, content, message):
    (tmp_path / "chip.json").write_text(content)
    code, out, err = run_cli(capsys, "--model", "tiny", "--hardware-config",
                             str(tmp_path / "chip.json"))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err


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
