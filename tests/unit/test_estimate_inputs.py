"""One validation layer for `inferbook estimate` and the library's `estimate`.

Each bad input is given to both doors — as text to the command line, as a Python value to
`estimator.estimate` — and both must refuse it with the same words: the library raises an
`EstimateInputError` naming the input, the CLI prints that problem after the input's flag,
on one line, and exits with code 2. Good inputs pass both and give the same row.
"""

import pytest

from inferbook.cli import main
from inferbook.model.presets import get_preset
from inferbook.perf import estimate_inputs as inputs
from inferbook.perf.estimate_inputs import EstimateInputError
from inferbook.perf.estimator import estimate
from inferbook.perf.hardware import get_chip

BASE = {"model": "llama-2-13b", "hardware": "TPU v5e"}

# (flag, text for the CLI, keyword and value for the library, the input's name)
CASES = [
    ("--batch", "0", {"batch": 0}, "batch"),
    ("--batch", str(2 ** 41), {"batch": 2 ** 41}, "batch"),
    ("--chips", "3", {"chips": 3, "context": 1024}, "chips"),
    ("--chips", "512", {"chips": 512, "context": 1024}, "chips"),
    ("--context", "0", {"context": 0}, "context"),
    ("--prompt", "5000", {"context": 4096, "prompt": 5000}, "prompt"),
    ("--weight-bytes", "0", {"weight_bytes": 0}, "weight_bytes"),
    ("--kv-bytes", "16", {"kv_bytes": 16}, "kv_bytes"),
    ("--weights", "int3", {"weights": "int3"}, "weights"),
    ("--kv", "int4", {"kv": "int4"}, "kv"),
    ("--compute", "fp4", {"compute": "fp4"}, "compute"),
    ("--compute", "fp8", {"compute": "fp8"}, "compute"),          # a TPU v5e has no fp8 peak
    ("--mbu", "0", {"mbu": 0}, "mbu"),
    ("--mbu", "1.5", {"mbu": 1.5}, "mbu"),
    ("--mfu", "-0.2", {"mfu": -0.2}, "mfu"),
    ("--mfu", "nan", {"mfu": float("nan")}, "mfu"),
    ("--output", "0", {"output": 0}, "output"),
    ("--price", "0", {"price_per_chip_hour": 0}, "price"),
    ("--price", "2e9", {"price_per_chip_hour": 2e9}, "price"),
    ("--layout", "expert-parallel", {"layout": "expert-parallel", "chips": 2,
                                     "context": 1024}, "layout"),
]


def cli(capsys, *argv):
    try:
        code = main(["estimate", *argv])
    except SystemExit as exit_info:
        code = exit_info.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("flag, text, kwargs, name", CASES)
def test_the_cli_and_the_library_refuse_alike(capsys, flag, text, kwargs, name):
    with pytest.raises(EstimateInputError) as refused:
        estimate(get_preset(BASE["model"]), get_chip(BASE["hardware"]), **kwargs)
    assert refused.value.name == name and refused.value.flag == flag
    argv = ["--model", BASE["model"], "--hardware", BASE["hardware"], flag, text]
    if "context" in kwargs and flag != "--context":
        argv += ["--context", str(kwargs["context"])]
    if "chips" in kwargs and flag != "--chips":
        argv += ["--chips", str(kwargs["chips"])]
    code, out, err = cli(capsys, *argv)
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [f"inferbook estimate: error: {flag}: "
                                        f"{refused.value.problem}"]


def test_strict_context_and_the_warning_say_the_same():
    cfg, chip = get_preset("llama-2-13b"), get_chip("TPU v5e")
    with pytest.raises(EstimateInputError) as refused:
        estimate(cfg, chip, context=8192, strict=True)
    assert refused.value.name == "context"
    row = estimate(cfg, chip, context=8192)
    assert row.warnings[0] == f"context {refused.value.problem}"


@pytest.mark.parametrize("text, problem", [("2.5", "is not a whole number"),
                                           ("two", "is not a number"),
                                           (" 64 ", None), ("1e3", "is not a whole number")])
def test_text_is_read_as_the_library_reads_values(text, problem):
    if problem is None:
        assert inputs.parse_whole("batch", text) == inputs.whole("batch", int(text))
    else:
        with pytest.raises(EstimateInputError, match=problem):
            inputs.parse_whole("batch", text)
    for bad in (True, 2.0, "2"):
        with pytest.raises(EstimateInputError, match="not a whole number"):
            inputs.whole("batch", bad)


@pytest.mark.parametrize("value", [0.125, 0.5, 1, 2, 8])
def test_element_bytes_accept_the_same_range_as_text_and_as_numbers(value):
    assert inputs.parse_element_bytes("kv_bytes", str(value)) \
        == inputs.element_bytes("kv_bytes", value) == float(value)


def test_good_inputs_give_the_same_row_through_both_doors(capsys):
    import json
    code, out, _ = cli(capsys, "--model", "llama-2-13b", "--hardware", "TPU v5e", "--chips",
                       "8", "--batch", "16", "--context", "2048", "--weights", "int8", "--json")
    assert code == 0
    row = estimate(get_preset("llama-2-13b"), get_chip("TPU v5e"), chips=8, batch=16,
                   context=2048, weights="int8")
    assert json.loads(out)["step_time_s"] == row.step_time_s


@pytest.mark.parametrize("flag, text, problem", [
    ("--mbu", "most", "is not a number"), ("--price", "cheap", "is not a number"),
    ("--output", "2.5", "is not a whole number"), ("--prefill-overlap", "maybe", "invalid choice"),
    ("--layout", "3d-ws", "invalid choice")])
def test_text_that_is_no_value_is_refused_in_one_line(capsys, flag, text, problem):
    code, out, err = cli(capsys, "--model", "llama-2-13b", "--hardware", "TPU v5e", flag, text)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert flag in err and problem in err


def test_a_price_may_be_written_with_its_dollar_sign():
    assert inputs.parse_price("price", "$2.49") == inputs.price("price", 2.49) == 2.49
    assert inputs.parse_fraction("mbu", " 0.8 ") == inputs.fraction("mbu", 0.8)
