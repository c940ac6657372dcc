"""The estimator page's Python: what runs in the reader's browser, under Pyodide.

The page (book/estimator.md, its script book/static/estimator.js) keeps its inputs in the
URL query, so that an estimate can be linked: ``?model=llama-3.1-70b&chip=H100+SXM&chips=8
&batch=1,8,64&context=8192``. It asks this module for the estimate, and nothing here
estimates: a query becomes the argument list of ``inferbook estimate`` (`cli_args`), which
runs through the command line's own `inferbook.cli.main` with its output captured
(`run_cli`). So the page shows exactly what the command prints — the rows of ``--json``, the
table, its warnings, its one-line refusal of bad input — and follows every change to the
command and its flags without a line changed here.

A query value that holds a JSON object instead of a name is a file the reader pasted: a
Hugging Face ``config.json`` for ``model`` (written to ``pasted-config/config.json`` and
passed as ``--config``), a chip's figures for ``chip`` (``chip.json``, ``--hardware-config``).
Paths are relative to a working folder, so the command line shown on the page, and every
message that names a file, is the one a reader gets by running it beside those files.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shlex
import tempfile
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from inferbook.cli import build_parser, main
from inferbook.perf.hardware import CHIPS
from inferbook.perf.pareto_svg import pareto_svg
from inferbook.perf.quant import KV_FORMATS, WEIGHT_CODES

__all__ = ["QUERY_FLAGS", "CONFIG_FILE", "CHIP_FILE", "DEFAULT_QUERY", "cli_args", "other_flags",
           "run_cli", "command_line", "estimate_page", "form_choices"]

# The query's keys, in the order the page shows them, and the flag each one sets. `model` and
# `chip` set one of two flags, by whether they hold a name or a pasted JSON object.
QUERY_FLAGS = {"model": ("--model", "--config"), "chip": ("--hardware", "--hardware-config"),
               "chips": "--chips", "layout": "--layout", "batch": "--batch",
               "context": "--context", "prompt": "--prompt", "weights": "--weights",
               "kv": "--kv"}
# Flags of the command a query cannot set: what to print, and files on the reader's disk.
NOT_IN_A_QUERY = {"--help", "--json", "--plot", "--list", "--config", "--hardware-config"}
CONFIG_FILE = "pasted-config/config.json"     # its folder names the model, as the CLI does
CHIP_FILE = "chip.json"
# What the page estimates when it is opened without a query.
DEFAULT_QUERY = {"model": "llama-3.1-8b", "chip": "H100 SXM", "chips": "1",
                 "batch": "1,2,4,8,16,32,64,128,256", "context": "8192"}
NO = ("", "0", "false", "no", "off")          # a switch left off


def _pasted(value: str) -> bool:
    return value.lstrip().startswith("{")


def _estimate_actions() -> list[argparse.Action]:
    """The actions of ``inferbook estimate``'s parser (argparse keeps them in ``_actions``;
    it has no public way to list them)."""
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(commands.choices["estimate"]._actions)


def other_flags() -> dict[str, argparse.Action]:
    """The command's flags beyond `QUERY_FLAGS` that a query may set by their own names
    (``weight-bytes=1``, ``strict=on``): whatever flag the command gains, a link can use."""
    taken = {f for flag in QUERY_FLAGS.values()
             for f in (flag if isinstance(flag, tuple) else (flag,))} | NOT_IN_A_QUERY
    return {opt[2:]: action for action in _estimate_actions() for opt in action.option_strings
            if opt.startswith("--") and opt not in taken and opt[2:] not in QUERY_FLAGS}


def _flag(flag: str, value: str) -> list[str]:
    # A value that starts with a dash would read as a flag of its own: joined to its flag,
    # it reaches the command as the value it is ("--batch=-1": "out of range").
    return [f"{flag}={value}"] if value.startswith("-") else [flag, value]


def cli_args(query: Mapping[str, str], folder: Path | str | None = None) -> list[str]:
    """The arguments of ``inferbook estimate`` that `query` asks for (without ``--json``).

    `QUERY_FLAGS` first, then any other flag of the command named by a key (`other_flags`;
    a switch is on unless its value is empty, 0, false, no or off). Empty values and keys
    that name no flag are left out, as a form's empty field is; a pasted JSON object is
    written under `folder` (`CONFIG_FILE`, `CHIP_FILE`) and named by its path relative to
    it; a value starting with a dash is joined to its flag with "=". Nothing is checked
    here: the command checks everything.
    """
    argv = ["estimate"]
    for key, flag in QUERY_FLAGS.items():
        value = query.get(key)
        if value is None or value == "":
            continue
        if isinstance(flag, tuple):
            name_flag, file_flag = flag
            if _pasted(value):
                path = CONFIG_FILE if key == "model" else CHIP_FILE
                target = Path(folder if folder is not None else ".") / path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(value, encoding="utf-8")
                argv += [file_flag, path]
                continue
            flag = name_flag
        argv += _flag(flag, value)
    for key, action in other_flags().items():
        value = query.get(key)
        if value is None:
            continue
        if action.nargs == 0:                               # a switch: --strict
            if value.strip().lower() not in NO:
                argv.append(f"--{key}")
        elif value != "":
            argv += _flag(f"--{key}", value)
    return argv


@contextmanager
def _inside(folder: Path) -> Iterator[None]:
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def run_cli(argv: Sequence[str]) -> tuple[int, str, str]:
    """Run ``inferbook ARGV`` in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def command_line(argv: Sequence[str]) -> str:
    """The shell command that runs `argv` (quoted as a shell needs it)."""
    return shlex.join(["inferbook", *argv])


def estimate_page(query: Mapping[str, str], lang: str = "en",
                  folder: Path | str | None = None) -> dict[str, Any]:
    """Everything the page shows for `query`, from the command's own output.

    ``command`` is the command line; then either ``error`` (the command's one line on stderr,
    exit code 2) or ``rows`` (what ``--json`` prints: one object, or a list for a sweep),
    ``json`` (the same, indented), ``table`` (what the command prints without ``--json``),
    ``warnings`` (its warning lines) and ``svg`` (the latency–throughput figure of the rows,
    `inferbook.perf.pareto_svg`, with `lang`'s words).
    """
    work = Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="estimate-"))
    with _inside(work):
        argv = cli_args(query)
        code, out, err = run_cli([*argv, "--json"])
        page: dict[str, Any] = {"command": command_line(argv), "error": None}
        if code != 0:
            lines = err.strip().splitlines()
            return page | {"error": lines[-1] if lines else f"exit code {code}"}
        rows = json.loads(out)
        _, table, _ = run_cli(argv)
    listed = rows if isinstance(rows, list) else [rows]
    warnings = [line.removeprefix("warning: ") for line in err.splitlines()
                if line.startswith("warning: ")]
    return page | {"rows": rows, "json": json.dumps(rows, indent=2, allow_nan=False),
                   "table": table.rstrip("\n"), "warnings": warnings,
                   "svg": pareto_svg(listed, lang)}


def _choices(flag: str) -> list[str]:
    """The choices the command's parser allows for `flag`."""
    action = next(a for a in _estimate_actions() if flag in a.option_strings)
    return list(action.choices or [])


def form_choices() -> dict[str, Any]:
    """What the page's form offers: the presets and chips (``--list models|chips --json``),
    each chip's figures as ``--hardware-config`` takes them (to start a custom chip from), the
    layouts the parser allows, the weight and KV formats, the query keys of the command's
    other flags (which links may carry and the form keeps), and the query of an empty link."""
    _, models, _ = run_cli(["estimate", "--list", "models", "--json"])
    _, chips, _ = run_cli(["estimate", "--list", "chips", "--json"])
    figures = {name: {k: v for k, v in c.as_dict().items() if v is not None and k != "source"}
               for name, c in CHIPS.items()}
    return {"models": json.loads(models), "chips": json.loads(chips), "chip_figures": figures,
            "layouts": _choices("--layout"), "weights": list(WEIGHT_CODES),
            "kv": list(KV_FORMATS), "other_flags": list(other_flags()),
            "default_query": DEFAULT_QUERY}
