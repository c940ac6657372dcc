"""The estimator page's Python (inferbook.cli.estimate_page), outside the browser.

What the page shows must be what `inferbook estimate` prints: its rows against the estimator
called directly, its refusals against the command run as a process, beside the files the
page writes. And the page runs under Pyodide with the standard library alone (the site
serves no numpy): a subprocess that can import nothing else runs every kind of estimate the
page can ask for — every Hugging Face family the book reads among them — and the figure.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from inferbook.cli.estimate_page import (
    CHIP_FILE,
    CONFIG_FILE,
    DEFAULT_QUERY,
    QUERY_FLAGS,
    cli_args,
    estimate_page,
    form_choices,
    other_flags,
)
from inferbook.model.hf_config import from_hf_config
from inferbook.model.presets import PRESETS, get_preset
from inferbook.model.presets_families import FAMILY_CONFIGS
from inferbook.perf.estimator import estimate
from inferbook.perf.hardware import CHIPS, chip_from_json, get_chip
from inferbook.perf.layout_comms import ESTIMATE_LAYOUTS

ROOT = Path(__file__).resolve().parents[2]
CUSTOM_CHIP = {"name": "mine", "hbm_bytes": 48e9, "hbm_bandwidth": 9.6e11, "flops": 3.6e14}


def cli(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """`inferbook ARGV` as a reader runs it: a process of its own, in `cwd`."""
    return subprocess.run([sys.executable, "-m", "inferbook", *argv], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_a_query_becomes_the_commands_flags_in_order(tmp_path):
    argv = cli_args({"kv": "int8", "batch": "1,8", "model": "llama-3.1-8b", "chip": "H200",
                     "layout": "", "colour": "blue", "chips": "2"}, tmp_path)
    assert argv == ["estimate", "--model", "llama-3.1-8b", "--hardware", "H200", "--chips", "2",
                    "--batch", "1,8", "--kv", "int8"]
    # A value that looks like a flag stays a value, as "--batch=-1" keeps it on a command line.
    assert cli_args({"batch": "-1", "model": "--help"}, tmp_path) == [
        "estimate", "--model=--help", "--batch=-1"]
    assert list(QUERY_FLAGS) == ["model", "chip", "chips", "layout", "batch", "context",
                                 "prompt", "weights", "kv"]


def test_a_link_can_set_every_flag_of_the_command_but_its_outputs(tmp_path):
    usage = cli(["estimate", "--help"], tmp_path).stdout.split("examples:")[0]
    flags = set(re.findall(r"(?<![\w-])--([a-z][a-z-]*)", usage))
    by_query = {f.removeprefix("--") for v in QUERY_FLAGS.values()
                for f in (v if isinstance(v, tuple) else (v,))} | set(other_flags())
    assert flags - by_query == {"help", "json", "plot", "list"}
    argv = cli_args({"model": "llama-2-7b", "strict": "on", "weight-bytes": "1",
                     "kv-bytes": "", "json": "1", "plot": "x.png", "hardware": "H200"}, tmp_path)
    assert argv == ["estimate", "--model", "llama-2-7b", "--weight-bytes", "1", "--strict"]
    assert "--strict" not in cli_args({"strict": "off"}) and "--strict" not in \
        cli_args({"strict": ""})


def test_pasted_json_becomes_files_beside_the_command(tmp_path):
    config = json.dumps(FAMILY_CONFIGS["qwen3-8b"])
    argv = cli_args({"model": f"  {config}", "chip": json.dumps(CUSTOM_CHIP)}, tmp_path)
    assert argv == ["estimate", "--config", CONFIG_FILE, "--hardware-config", CHIP_FILE]
    assert json.loads((tmp_path / CONFIG_FILE).read_text()) == FAMILY_CONFIGS["qwen3-8b"]
    assert json.loads((tmp_path / CHIP_FILE).read_text()) == CUSTOM_CHIP


@pytest.mark.parametrize("query, expected", [
    ({"model": "llama-3.1-70b", "chip": "H100 SXM", "chips": "8", "batch": "1,64",
      "context": "8192,32768", "prompt": "2048"},
     dict(model="llama-3.1-70b", chip="H100 SXM", chips=8, batches=[1, 64],
          contexts=[8192, 32768], prompt=2048)),
    ({"model": "deepseek-v3", "chip": "H200", "chips": "8", "batch": "4", "context": "4096",
      "weights": "fp8", "kv": "int8"},
     dict(model="deepseek-v3", chip="H200", chips=8, batches=[4], contexts=[4096],
          weights="fp8", kv="int8")),
    ({"model": "llama-3.1-405b", "chip": "TPU v5p", "chips": "64", "layout": "2d-ws",
      "batch": "16,256", "context": "8192"},
     dict(model="llama-3.1-405b", chip="TPU v5p", chips=64, batches=[16, 256],
          contexts=[8192], layout="2d-ws")),
    ({"model": "llama-2-13b", "chip": "A100 80GB", "batch": "1,8", "context": "4096",
      "weight-bytes": "1", "kv-bytes": "1", "strict": "on"},
     dict(model="llama-2-13b", chip="A100 80GB", chips=1, batches=[1, 8], contexts=[4096],
          weight_bytes=1.0, kv_bytes=1.0, strict=True)),
    ({"model": json.dumps(FAMILY_CONFIGS["mixtral-8x7b"]), "chip": json.dumps(CUSTOM_CHIP),
      "batch": "1,8", "context": "4096", "weights": "int4:64"},
     dict(model="mixtral-8x7b", chip=CUSTOM_CHIP, chips=1, batches=[1, 8], contexts=[4096],
          weights="int4:64")),
])
def test_the_pages_rows_are_the_estimators(tmp_path, query, expected):
    page = estimate_page(query, folder=tmp_path)
    assert page["error"] is None, page["error"]
    if query["model"].startswith("{"):        # named after its folder, as the CLI names it
        cfg = from_hf_config(FAMILY_CONFIGS[expected["model"]], purpose="estimate",
                             name="pasted-config")
    else:
        cfg = get_preset(expected["model"])
    chip = chip_from_json(expected["chip"]) if isinstance(expected["chip"], dict) \
        else get_chip(expected["chip"])
    want = [estimate(cfg, chip, batch=B, context=S, prompt=expected.get("prompt"),
                     chips=expected["chips"], layout=expected.get("layout"),
                     weights=expected.get("weights", "bf16"), kv=expected.get("kv", "bf16"),
                     weight_bytes=expected.get("weight_bytes"),
                     kv_bytes=expected.get("kv_bytes"), strict=expected.get("strict", False))
            .as_dict() for S in expected["contexts"] for B in expected["batches"]]
    rows = page["rows"] if isinstance(page["rows"], list) else [page["rows"]]
    assert isinstance(page["rows"], list) == (len(want) > 1)      # as --json prints them
    assert rows == json.loads(json.dumps(want))
    assert json.loads(page["json"]) == page["rows"]
    # The table and the warnings are the command's, run as a process beside the same files.
    done = cli(cli_args(query, tmp_path), tmp_path)
    assert done.returncode == 0 and page["table"] == done.stdout.rstrip("\n")
    assert page["warnings"] == [line.removeprefix("warning: ")
                                for line in done.stderr.splitlines()]
    assert page["svg"].count("<circle") >= len(rows)
    assert page["command"].startswith("inferbook estimate ")


@pytest.mark.parametrize("query", [
    {"model": "llama-3.1-8b", "chip": "H100 SXM", "batch": "abc"},
    {"model": "no-such-model", "chip": "H100 SXM"},
    {"model": "llama-3.1-8b", "chip": "H100 SXM", "chips": "9"},
    {"model": "llama-3.1-8b", "chip": "Z80"},
    {"model": "llama-3.1-8b"},
    {"model": '{"hidden_size": 4096,', "chip": "H100 SXM"},
    {"model": '{"model_type": "bert"}', "chip": "H100 SXM"},
    {"model": "llama-3.1-8b", "chip": '{"hbm_bytes": 8e10, "hbm_bandwidth": 3e12}'},
    {"model": "llama-3.1-8b", "chip": "H100 SXM", "weights": "int3"},
    {"model": "llama-3.1-8b", "chip": "H100 SXM", "context": "100", "prompt": "200"},
    {"model": "llama-3.1-70b", "chip": "TPU v5e", "chips": "16", "layout": "2d-ws",
     "batch": "1"},
    {"model": "llama-3.1-8b", "chip": "H100 SXM", "batch": "-1"},
    {"model": "--help", "chip": "H100 SXM"},
    {"model": "llama-2-13b", "chip": "H100 SXM", "context": "8192", "strict": "yes"},
    {"model": "llama-2-13b", "chip": "H100 SXM", "weights": "int8", "weight-bytes": "1"},
])
def test_bad_input_shows_the_commands_one_line(tmp_path, query):
    page = estimate_page(query, folder=tmp_path)
    done = cli(cli_args(query, tmp_path), tmp_path)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert page["error"] == done.stderr.strip()
    assert "rows" not in page and page["command"].startswith("inferbook estimate")


def test_the_form_offers_what_the_command_accepts(tmp_path):
    choices = form_choices()
    assert [m["name"] for m in choices["models"]] == list(PRESETS)
    assert [c["name"] for c in choices["chips"]] == list(CHIPS)
    assert choices["layouts"] == list(ESTIMATE_LAYOUTS)        # what --layout accepts
    assert "int4" in choices["weights"] and "int8" in choices["kv"]
    # A registry chip's figures, given back as --hardware-config, are the same chip.
    for name, figures in choices["chip_figures"].items():
        assert chip_from_json(json.loads(json.dumps(figures))) == replace(CHIPS[name], source="")
    page = estimate_page(choices["default_query"], folder=tmp_path)
    assert page["error"] is None and len(page["rows"]) > 1
    assert choices["default_query"] == DEFAULT_QUERY


# The page under Pyodide: anything outside the standard library is absent, as it is there.
STDLIB_ONLY = r"""
import json, sys
before = set(sys.modules)          # the interpreter's own start (site's .pth hooks) aside
class Absent:
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top not in sys.stdlib_module_names and top != "inferbook":
            raise ModuleNotFoundError(f"{name} is not in Pyodide's standard library")
sys.meta_path.insert(0, Absent())
from inferbook.cli.estimate_page import estimate_page, form_choices
from inferbook.model.presets_families import FAMILY_CONFIGS
choices = form_choices()
folder = sys.argv[1]
queries = [choices["default_query"],
           {"model": "deepseek-v3", "chip": "H200", "chips": "8", "batch": "1,64",
            "context": "4096,16384", "weights": "fp8", "kv": "fp8"},
           {"model": "llama-3.1-405b", "chip": "TPU v5p", "chips": "64", "layout": "2d-ws",
            "batch": "16"},
           {"model": "llama-3.1-8b", "chip": json.dumps({"hbm_bytes": 2.4e10,
            "hbm_bandwidth": 9e11, "flops": 1.5e14}), "batch": "1,4", "weights": "int4:32"},
           {"model": "llama-3.1-8b", "chip": "H100 SXM", "batch": "x"}]
queries += [{"model": json.dumps(c), "chip": "H200", "batch": "1,16", "context": "2048"}
            for c in FAMILY_CONFIGS.values()]
for query in queries:
    page = estimate_page(query, lang="zh", folder=folder)
    assert (page["error"] is None) == (query.get("batch") != "x"), (query, page["error"])
loaded = {m.split(".")[0] for m in set(sys.modules) - before}
print(json.dumps(sorted(loaded - set(sys.stdlib_module_names))))
"""


def test_the_page_needs_nothing_beyond_the_standard_library(tmp_path):
    done = subprocess.run([sys.executable, "-c", STDLIB_ONLY, str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["inferbook"]
