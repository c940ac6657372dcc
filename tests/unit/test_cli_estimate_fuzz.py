"""Fuzzing `inferbook estimate`: Hypothesis draws bad values for every flag (and broken config
and hardware files), runs the command in-process and requires exit code 2, exactly one line
on stderr, nothing on stdout, no traceback, and an answer within a few seconds."""

import contextlib
import io
import json
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferbook.cli import main

# Never reaches JAX: runs once, with JAX unimportable, not under both versions (conftest).
pytestmark = pytest.mark.no_jax

BASE = ["estimate", "--model", "tiny", "--hardware", "L4"]
# The command never builds a model or starts JAX, so examples cost milliseconds: draw many.
many = settings(max_examples=60)


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_info:
            code = exit_info.code
    return code, out.getvalue(), err.getvalue(), time.perf_counter() - start


def assert_refused(argv, flag=None):
    code, out, err, seconds = run(argv)
    assert code == 2, (argv, out, err)
    assert out == "" and "Traceback" not in err
    assert len(err.splitlines()) == 1 and err.endswith("\n"), err
    assert seconds < 5
    if flag is not None:
        assert flag in err, err


def is_whole(text, high=2 ** 40):
    t = text.strip()
    return bool(re.fullmatch(r"[0-9]+", t)) and 1 <= int(t) <= high


printable = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                    max_size=12)
numbers_as_text = st.one_of(
    st.integers(-10 ** 40, 0).map(str), st.integers(2 ** 40 + 1, 10 ** 60).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["2.5", "1e3", "1e31", "nan", "inf", "-inf", "", " ", "0x10", "½", "٣",
                     "１", "1_000", "+-1", "1.0"]))
bad_whole = st.one_of(numbers_as_text, printable).filter(lambda t: not is_whole(t))
bad_list = st.one_of(
    bad_whole,
    st.lists(st.one_of(st.integers(1, 99).map(str), bad_whole), min_size=2, max_size=5)
    .map(",".join).filter(lambda t: not all(is_whole(p) for p in t.split(","))))
bad_bytes = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).filter(lambda x: not 0.125 <= x <= 8)
    .map(repr), printable.filter(lambda t: _not_bytes(t)))


def _not_bytes(text):
    try:
        return not 0.125 <= float(text) <= 8
    except ValueError:
        return True


@many
@given(value=bad_whole, flag=st.sampled_from(["--chips", "--prompt"]))
def test_bad_whole_numbers(flag, value):
    assert_refused(BASE + [f"{flag}={value}"], flag)


@many
@given(value=bad_list, flag=st.sampled_from(["--batch", "--context"]))
def test_bad_lists_of_whole_numbers(flag, value):
    assert_refused(BASE + [f"{flag}={value}"], flag)


@many
@given(value=bad_bytes, flag=st.sampled_from(["--weight-bytes", "--kv-bytes"]))
def test_bad_byte_counts(flag, value):
    assert_refused(BASE + [f"{flag}={value}"], flag)


@many
@given(value=printable.filter(lambda t: t.strip() not in ("bf16", "fp8", "int8", "int4")
                              and not re.fullmatch(r"(fp8|int8|int4):[0-9]+", t.strip())))
def test_bad_weight_formats(value):
    assert_refused(BASE + [f"--weights={value}"], "--weights")


@many
@given(value=printable.filter(lambda t: t not in ("bf16", "fp8", "int8")),
       flag=st.sampled_from(["--kv", "--layout", "--list"]))
def test_bad_choices(flag, value):
    assert_refused(["estimate", f"{flag}={value}"] + ([] if flag == "--list" else BASE[1:]),
                   flag)


@many
@given(value=printable.filter(lambda t: t.strip()), flag=st.sampled_from(["--model",
                                                                         "--hardware"]))
def test_unknown_models_and_chips(flag, value):
    from inferbook.model.presets import PRESETS
    from inferbook.perf.hardware import get_chip
    if flag == "--model" and value in PRESETS:
        return
    if flag == "--hardware":
        try:
            get_chip(value)
            return
        except ValueError:
            pass
    argv = (["estimate", f"--model={value}", "--hardware", "L4"] if flag == "--model"
            else ["estimate", "--model", "tiny", f"--hardware={value}"])
    assert_refused(argv)


@many
@given(value=printable)
def test_bad_plot_paths(tmp_path_factory, value):
    folder = tmp_path_factory.mktemp("plot")
    name = str(folder / value) if not value.lower().endswith((".png", ".svg", ".pdf")) \
        else str(folder / "missing" / value)
    assert_refused(BASE + [f"--plot={name}"], "--plot")


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10 ** 30, 10 ** 30),
              st.floats(allow_nan=True, allow_infinity=True), printable),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(printable, inner, max_size=3),
    max_leaves=6)
HARDWARE = {"hbm_bytes": 1e10, "hbm_bandwidth": 1e11, "flops": 1e13,
            "link_bytes_per_s": 1e10, "links": 2, "hop_latency_s": 1e-6}


@many
@given(key=st.sampled_from(sorted(HARDWARE) + ["interconnect", "max_chips", "name"]),
       value=json_values)
def test_hardware_files_with_any_value_never_trace_back(tmp_path_factory, key, value):
    path = tmp_path_factory.mktemp("hw") / "chip.json"
    path.write_text(json.dumps({**HARDWARE, key: value}))
    code, out, err, seconds = run(["estimate", "--model", "tiny", "--hardware-config",
                                   str(path), "--chips", "2", "--json"])
    assert seconds < 5 and "Traceback" not in err
    if code == 0:                            # a value that happens to be valid
        assert all(v == v for v in json.loads(out).values() if isinstance(v, float))
    else:
        assert code == 2 and out == "" and len(err.splitlines()) == 1, err


LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "vocab_size": 100, "max_position_embeddings": 256}
DEEPSEEK = {**LLAMA, "model_type": "deepseek_v3", "kv_lora_rank": 16, "qk_nope_head_dim": 8,
            "qk_rope_head_dim": 8, "v_head_dim": 8, "n_routed_experts": 4,
            "num_experts_per_tok": 2, "moe_intermediate_size": 32, "n_group": 2,
            "topk_group": 1, "first_k_dense_replace": 1}


GEMMA3 = {**LLAMA, "model_type": "gemma3_text", "sliding_window": 4, "head_dim": 16}
NEOX = {**LLAMA, "model_type": "gpt_neox", "rotary_pct": 0.5}
SMOLLM3 = {**LLAMA, "model_type": "smollm3", "use_sliding_window": True, "sliding_window": 8}
NEWER = {"rotary_pct", "partial_rotary_factor", "no_rope_layers", "no_rope_layer_interval",
         "sliding_window_pattern", "_sliding_window_pattern", "rope_local_base_freq",
         "use_parallel_residual", "query_pre_attn_scalar", "use_sliding_window",
         "rotary_emb_base"}


@many
@given(base=st.sampled_from([LLAMA, DEEPSEEK, GEMMA3, NEOX, SMOLLM3]), key=st.sampled_from(
    sorted(set(DEEPSEEK) | NEWER | {"rms_norm_eps", "rope_theta", "rope_scaling",
                                    "rope_parameters", "hidden_act", "sliding_window",
                                    "head_dim", "tie_word_embeddings", "layer_types",
                                    "attention_bias"})), value=json_values)
def test_config_files_with_any_value_never_trace_back(tmp_path_factory, base, key, value):
    path = tmp_path_factory.mktemp("cfg") / "config.json"
    path.write_text(json.dumps({**base, key: value}))
    code, out, err, seconds = run(["estimate", "--config", str(path), "--hardware", "L4",
                                   "--json"])
    assert seconds < 5 and "Traceback" not in err
    if code == 0:
        json.loads(out)
    else:
        assert code == 2 and out == "" and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("argv, flag", [
    (["--kv-bytes", "1e-20"], "--kv-bytes"), (["--kv-bytes", "1e-300"], "--kv-bytes"),
    (["--chips", "1e31"], "--chips"), (["--batch", "2.5"], "not a whole number"),
    (["--kv-bytes", "1e308", "--json"], "--kv-bytes"),
])
def test_issue_15_reproductions(argv, flag):
    """Each hung, wrote Infinity or said "'2.5' is not a number"."""
    assert_refused(["estimate", "--model", "tiny", "--hardware", "TPU v5e", *argv], flag)
