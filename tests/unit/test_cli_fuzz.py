"""Bad values for every flag of every command, drawn by Hypothesis: exit 2, one line, in time.

For each command a valid base command line is extended (or edited) with one bad value for
one flag: negative, zero, huge, NaN, inf, non-numeric, empty, unicode, a line break, a
directory where a file goes, an unwritable or missing path, a size the device cannot hold.
The contract (BOOK.md, issue 15) is the same for all: exit code 2, one line on stderr, no
traceback, within `LIMIT_S` — which is only possible when bad input is refused before any
model is built or program compiled. `test_the_base_command_lines_are_valid` makes sure each
base is accepted, so that every refusal here is the bad value's doing.

A value is passed as ``--flag=value`` so that one starting with '-' is still a value.
"""

from __future__ import annotations

import atexit
import json
import math
import shutil
import tempfile
from pathlib import Path

import pytest
from cli_harness import refused, run_cli
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from inferbook.model import decoder
from inferbook.model.checkpoint import save_checkpoint
from inferbook.model.config import ModelConfig

LIMIT_S = 5.0
FUZZ = settings(max_examples=10, deadline=None, derandomize=True, database=None,
                phases=[Phase.explicit, Phase.generate],   # a failure is reported, not shrunk
                suppress_health_check=list(HealthCheck))

# Files and directories the path flags are given ------------------------------------------

PLACE = Path(tempfile.mkdtemp(prefix="inferbook-fuzz-"))
atexit.register(shutil.rmtree, PLACE, ignore_errors=True)
A_FILE = PLACE / "a_file.txt"
A_FILE.write_text("not what anyone expects\n")
A_DIR = PLACE / "a_dir"
A_DIR.mkdir()
SMALL = ModelConfig(L=1, D=16, F=24, N=2, K=1, H=8, V=40, max_seq_len=64, name="small")
CKPT = PLACE / "ckpt"
save_checkpoint(CKPT, SMALL, decoder.init_params(SMALL, 0))
NOTEBOOK = PLACE / "hw.ipynb"
NOTEBOOK.write_text(json.dumps({
    "cells": [{"cell_type": "code", "execution_count": None, "id": "c1", "metadata": {},
               "outputs": [], "source": 'check("ch01.prompt_kv_bytes", 1)'}],
    "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))


def _bad_config(name: str, content: str) -> Path:
    """A checkpoint directory whose config.json holds `content`."""
    d = PLACE / f"ckpt_{name}"
    shutil.copytree(CKPT, d)
    (d / "config.json").write_text(content)
    return d


def _with(key, value) -> str:
    config = json.loads((CKPT / "config.json").read_text())
    config[key] = value
    return json.dumps(config)


BAD_CHECKPOINTS = [_bad_config(name, content) for name, content in [
    ("notjson", "{not json"), ("list", "[1, 2]"), ("empty", ""),
    ("eps", _with("rms_norm_eps", "1e-5")), ("positions", _with("max_position_embeddings", "9")),
    ("window", _with("sliding_window", "4")), ("theta", _with("rope_theta", "1e4")),
    ("rope", _with("rope_parameters", "x")), ("act", _with("hidden_act", ["silu"])),
    ("heads", _with("num_attention_heads", 0)), ("vocab", _with("vocab_size", -3)),
    ("huge", _with("hidden_size", 2**40)), ("nan", _with("rms_norm_eps", float("nan")))]]
truncated = PLACE / "ckpt_truncated"
shutil.copytree(CKPT, truncated)
(truncated / "model.safetensors").write_bytes((CKPT / "model.safetensors").read_bytes()[:-64])
BAD_CHECKPOINTS += [truncated, PLACE / "missing", A_FILE, A_DIR]
# (A 2^40-wide model is a fine thing to estimate, just not to run: "huge" is left out.)
BAD_CONFIG_FILES = [d / "config.json" for d in BAD_CHECKPOINTS[:13] if d.name != "ckpt_huge"] + [
    PLACE / "missing.json", A_DIR]
BAD_HARDWARE = []
for i, content in enumerate(['{"hbm_bytes": 1e400, "hbm_bandwidth": 8e11, "flops": 2e14}',
                             '{"hbm_bytes": 16e9, "hbm_bandwidth": NaN, "flops": 2e14}',
                             '{"hbm_bytes": 16e9, "hbm_bandwidth": -1, "flops": 2e14}',
                             '{"hbm_bytes": "16e9", "hbm_bandwidth": 8e11, "flops": 2e14}',
                             '{"hbm_bytes": 16e9}', "[1]", "{oops"]):
    BAD_HARDWARE.append(PLACE / f"chip{i}.json")
    BAD_HARDWARE[-1].write_text(content)
BAD_HARDWARE += [PLACE / "missing.json", A_DIR]
UNWRITABLE_FILES = [A_DIR, "/dev/full", "/proc/x/out.json", A_FILE / "under_a_file.json",
                    "/proc/out.json", ""]
UNWRITABLE_DIRS = [A_FILE, "/proc/x", A_FILE / "sub", "/dev/full", ""]

# Values ------------------------------------------------------------------------------------


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


# Text no command could read as a number: no digits of any script, nothing float() accepts.
words = st.text(st.characters(exclude_categories=("Cs", "Cc", "Nd", "No", "Nl")),
                max_size=12).filter(lambda s: not _is_number(s))
SPECIAL = ["nan", "NaN", "-nan", "inf", "-inf", "+inf", "Infinity", "1e400", "-1e400", "",
           " ", "1\n2", "\u2028"]          # a line break, and a Unicode one
non_numbers = st.one_of(words, st.sampled_from(SPECIAL + ["0x10", "1.2.3", "e5"]))
non_integers = st.one_of(non_numbers, st.sampled_from(["1.5", "2.5", "-0.5"]),
                         st.floats(allow_nan=True, allow_infinity=True)
                         .filter(lambda x: not math.isfinite(x) or not float(x).is_integer())
                         .map(repr))


def bad(strategy: st.SearchStrategy, *named: str | None) -> tuple:
    """(a strategy, the values every run tries): Hypothesis draws from both, and
    `test_the_named_bad_values_are_refused` runs each named one, so none is left to chance."""
    drawn = st.one_of(st.sampled_from(named), strategy) if named else strategy
    return drawn, list(named)


def ints_outside(low: int, high: int | None = None, *also: str) -> tuple:
    """Text of integers below `low` or above `high`, non-integers, and `also`."""
    parts = [st.integers(max_value=low - 1).map(str), non_integers]
    named = [str(low - 1), "1.5", "nan", "", "1\n2"]
    if high is not None:
        parts.append(st.integers(min_value=high + 1, max_value=high * 10**15).map(str))
        named.append(str(high + 1))
    return bad(st.one_of(*parts), *named, *also)


def numbers_outside(low: float, high: float = math.inf, *also: str) -> tuple:
    """Text of numbers <= low (or > high), NaN, ±inf, non-numbers, and `also`."""
    parts = [st.floats(max_value=low, allow_nan=False).map(repr), non_numbers]
    named = [repr(low), "nan", "inf", "-inf", "1e400", "x"]
    if high < math.inf:
        parts.append(st.floats(min_value=high, exclude_min=True, allow_nan=False).map(repr))
        named.append(repr(high * 2 + 1))
    return bad(st.one_of(*parts), *named, *also)


def choices_but(*valid: str, also: tuple[str, ...] = ()) -> tuple:
    drawn = st.one_of(words, st.sampled_from(SPECIAL)).filter(lambda s: s not in valid)
    return bad(drawn, "", "1\n2", *also)


def paths(*bad_paths) -> tuple:
    return bad(st.nothing(), *[str(p) for p in bad_paths])


def only(value: str | None) -> tuple:
    return bad(st.nothing(), value)


MISSING = None          # the flag given with no value at all
FLAG_WITH_VALUE = "yes"  # a store_true flag given a value: --json=yes
SWITCHES = {"--json", "--greedy", "--quick", "--save", "--no-progress", "--strict", "--chat",
            "--ignore-eos", "--keep-quantized"}


# Commands: a valid base, and for each flag a strategy of bad values ----------------------

COMMANDS = {
    "generate": (["generate", "--model", "tiny", "--prompt-ids", "1,2,3", "--max-new-tokens",
                  "2"], {
        "--model": choices_but("tiny", "tiny-mha", "tiny-mqa", "small", "cpu-336mb"),
        "--checkpoint": paths(*BAD_CHECKPOINTS),
        "--seed": ints_outside(0, 2**32 - 1),
        "--prompt-ids": ints_outside(0, 255, "1,,2", ",", "1 2", "1;2", "9" * 5000,
                                     ",".join(["1"] * 600)),
        "--max-new-tokens": ints_outside(1, None, "510", "1000000000", "10" + "0" * 40),
        "--temperature": numbers_outside(0.0, math.inf, "1e-300", "4.5e-58", "1e-7"),
        "--top-k": ints_outside(1, 2**31 - 1),
        "--top-p": numbers_outside(0.0, 1.0),
        "--eos-id": ints_outside(0, 255),
        "--dtype": choices_but("float32", "bfloat16"),
        "--mesh": bad(words, "0", "2y4", "16", "3x3", "2x2x2x2x2", "9" * 40, "2x", "-2", "2.5",
                      "٢", ""),
        "--layout": choices_but(),
        "--json": only(FLAG_WITH_VALUE), "--greedy": only(FLAG_WITH_VALUE),
        "--chat": only(FLAG_WITH_VALUE), "--ignore-eos": only(FLAG_WITH_VALUE),
        "--keep-quantized": only(FLAG_WITH_VALUE), "--system": only(MISSING)}),
    "bench": (["bench", "--model", "tiny", "--quick", "--no-progress", "--peer", "off"], {
        "--model": choices_but("tiny", "tiny-mha", "tiny-mqa", "small",
                               also=("llama-2-70b", "bloom-176b")),
        "--batches": ints_outside(1, 2**31 - 1, "1000000000", "1,,2", "1,0",
                                  ",".join(["1"] * 101)),
        "--contexts": ints_outside(1, 2**31 - 1, "512", "100000", "1,x"),
        "--prefill": ints_outside(1, 2**31 - 1, "513", "nonee"),
        "--repeats": ints_outside(1, 1000),
        "--dtype": choices_but("float32", "bfloat16"),
        "--peer": choices_but("auto", "on", "off"),
        "--out": paths(*UNWRITABLE_DIRS), "--note": only(MISSING),
        "--quick": only(FLAG_WITH_VALUE), "--json": only(FLAG_WITH_VALUE),
        "--save": only(FLAG_WITH_VALUE), "--no-progress": only(FLAG_WITH_VALUE)}),
    "kernel-bench": (["kernel-bench", "--contexts", "64", "--splits", "4", "--heads", "4",
                      "--kv-heads", "2", "--head-dim", "16", "--repeats", "1", "--dtype",
                      "float32", "--pallas", "off"], {
        "--contexts": ints_outside(1, 2**31 - 1, "65", "2000000000", "64,,128", "64,x"),
        "--batch": ints_outside(1, 2**31 - 1, "1000000000"),
        "--heads": ints_outside(1, 4096, "5", "3"),
        "--kv-heads": ints_outside(1, 4096, "3", "8"),
        "--head-dim": ints_outside(1, 4096),
        "--dtype": choices_but("bfloat16", "float32"),
        "--splits": ints_outside(1, 2**31 - 1, "5", "128"),
        "--repeats": ints_outside(1, 1000),
        "--pallas": choices_but("auto", "on", "off"),
        "--out": paths(*UNWRITABLE_FILES)}),
    "estimate": (["estimate", "--model", "tiny", "--hardware", "TPU v5e"], {
        "--model": choices_but("tiny"),
        "--config": paths(*BAD_CONFIG_FILES),
        "--hardware": choices_but("TPU v5e"),
        "--hardware-config": paths(*BAD_HARDWARE),
        "--chips": ints_outside(1, None, "1e31"),
        "--batch": ints_outside(1, None, "2.5", "1,,2"),
        "--context": ints_outside(1, None, "2.5"),
        "--prompt": ints_outside(1, None, "2.5"),
        "--weight-bytes": numbers_outside(0.0),
        "--kv-bytes": numbers_outside(0.0, math.inf, "1e-20", "1e-300"),
        "--layout": choices_but("1d-ws", "2d-ws"),
        "--weights": choices_but("bf16", "fp8", "int8", "int4"),
        "--kv": choices_but("bf16", "fp8", "int8", "int4"),
        "--plot": paths(*UNWRITABLE_FILES),
        "--list": choices_but("models", "chips"),
        "--strict": only(FLAG_WITH_VALUE), "--json": only(FLAG_WITH_VALUE)}),
    "grade": (["grade", str(NOTEBOOK)], {
        "NOTEBOOK": paths(PLACE / "missing.ipynb", A_DIR, A_FILE, BAD_HARDWARE[-3], ""),
        "--results": paths(*UNWRITABLE_FILES),
        "--timeout": numbers_outside(0.0)}),
}
# Flags that replace one of the base's (mutually exclusive with it).
REPLACES = {("generate", "--checkpoint"): "--model", ("estimate", "--config"): "--model",
            ("estimate", "--hardware-config"): "--hardware", ("estimate", "--list"): "--model"}
# Flags that need another to mean anything (so the bad value is what gets refused).
NEEDS = {("generate", "--top-k"): ["--temperature", "1"],
         ("generate", "--top-p"): ["--temperature", "1"], ("bench", "--out"): ["--save"]}


def needs_grading_packages(command: str) -> None:
    """`grade` refuses everything where it cannot run notebooks (the unit-only environment
    of the oldest JAX): its cases would pass without testing their values, so skip them."""
    if command == "grade":
        pytest.importorskip("nbclient")
        pytest.importorskip("ipykernel")


def command_line(command: str, flag: str, value: str | None) -> list[str]:
    needs_grading_packages(command)
    base, _ = COMMANDS[command]
    argv = list(base)
    if flag == "NOTEBOOK":
        return [argv[0], value]
    gone = REPLACES.get((command, flag))
    if gone is not None:
        i = argv.index(gone)
        del argv[i:i + 2]
    argv += NEEDS.get((command, flag), [])
    return argv + ([flag] if value is MISSING else [f"{flag}={value}"])


CASES = [(command, flag) for command, (_, flags) in COMMANDS.items() for flag in flags]


@pytest.mark.parametrize("command, flag", CASES, ids=[f"{c} {f}" for c, f in CASES])
@FUZZ
@given(data=st.data())
def test_every_bad_value_of_every_flag_is_refused_in_one_line(command, flag, data):
    value = data.draw(COMMANDS[command][1][flag][0], label=flag)
    refused(command_line(command, flag, value), limit_s=LIMIT_S)


@pytest.mark.parametrize("command, flag", CASES, ids=[f"{c} {f}" for c, f in CASES])
def test_the_named_bad_values_are_refused(command, flag):
    """The values each flag is always tried with (issue 15's among them), all of them run
    even when one fails, so the report lists every value still accepted."""
    failures = []
    for value in dict.fromkeys(COMMANDS[command][1][flag][1]):
        try:
            refused(command_line(command, flag, value), limit_s=LIMIT_S)
        except AssertionError as err:
            failures.append(str(err).replace(str(PLACE), "<tmp>").splitlines()[0])
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_value_flag_given_no_value_is_refused(command):
    for flag in COMMANDS[command][1]:
        if flag != "NOTEBOOK" and flag not in SWITCHES:
            refused(command_line(command, flag, MISSING), limit_s=LIMIT_S)


class _Reached(Exception):
    """Raised by a stand-in for the work: every check before it passed."""


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_base_command_lines_are_valid(command, monkeypatch):
    """Each base passes every check, so each refusal above is its bad value's doing. The
    work itself is replaced where it would take long (a benchmark, a notebook run)."""
    def reached(*args, **kwargs):
        raise _Reached()
    import inferbook.grading.grader as grader
    import inferbook.kernels.kernel_bench as kernels
    import inferbook.model.decode as decode
    import inferbook.perf.bench as bench
    for module, name in [(bench, "run_benchmark"), (kernels, "decode_rows"),
                         (grader, "grade_notebook"), (decode, "generate")]:
        monkeypatch.setattr(module, name, reached)
    needs_grading_packages(command)
    r = run_cli(COMMANDS[command][0], LIMIT_S)
    if command == "estimate":       # fast and pure: it runs for real
        assert r.code == 0, r.describe()
    else:
        assert "_Reached" in r.err, r.describe()
