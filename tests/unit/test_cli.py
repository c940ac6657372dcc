"""`inferbook generate`: the contract of BOOK.md, and one clear line for every bad input."""

import json
import subprocess
import sys

import pytest

from inferbook.cli import main
from inferbook.model import decoder
from inferbook.model.checkpoint import save_checkpoint
from inferbook.model.decode import generate
from inferbook.model.presets import get_preset


def run_cli(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_output_holds_the_new_tokens_of_each_prompt(capsys):
    code, out, err = run_cli(capsys, "generate", "--model", "tiny", "--seed", "3",
                             "--prompt-ids", "1,2,3", "--prompt-ids", "4,5",
                             "--max-new-tokens", "5", "--json")
    assert code == 0, err
    tokens = json.loads(out)["tokens"]
    cfg = get_preset("tiny")
    expected = generate(decoder.init_params(cfg, 3), cfg, [[1, 2, 3], [4, 5]], 5).tokens
    assert tokens == expected


def test_sampling_flags_are_deterministic_in_the_seed(capsys):
    args = ["generate", "--model", "tiny", "--prompt-ids", "7,8", "--max-new-tokens", "6",
            "--temperature", "1.0", "--top-k", "20", "--top-p", "0.9", "--json"]
    first = run_cli(capsys, *args, "--seed", "1")[1]
    again = run_cli(capsys, *args, "--seed", "1")[1]
    assert json.loads(first)["tokens"] == json.loads(again)["tokens"]      # timings differ


def test_a_checkpoint_directory_generates_like_the_preset_it_was_saved_from(capsys, tmp_path):
    cfg = get_preset("tiny")
    save_checkpoint(tmp_path / "ckpt", cfg, decoder.init_params(cfg, 5))
    from_ckpt = run_cli(capsys, "generate", "--checkpoint", str(tmp_path / "ckpt"),
                        "--prompt-ids", "9,8,7", "--max-new-tokens", "4", "--json")[1]
    from_preset = run_cli(capsys, "generate", "--model", "tiny", "--seed", "5",
                          "--prompt-ids", "9,8,7", "--max-new-tokens", "4", "--json")[1]
    assert json.loads(from_ckpt)["tokens"] == json.loads(from_preset)["tokens"]


@pytest.mark.parametrize("argv, message", [
    (["--model", "tiny", "--prompt-ids", "1,x"], "not a comma-separated list"),
    (["--model", "tiny", "--prompt-ids", ""], "not a comma-separated list"),
    (["--model", "tiny", "--prompt-ids", "1,2000"], "outside the vocabulary"),
    (["--model", "tiny", "--prompt-ids", "-1"], "outside the vocabulary"),
    (["--model", "tiny", "--prompt-ids", "1", "--max-new-tokens", "0"], "a positive integer"),
    (["--model", "tiny", "--prompt-ids", "1", "--max-new-tokens", "-3"], "a positive integer"),
    (["--model", "nope", "--prompt-ids", "1"], "unknown model 'nope'"),
    (["--checkpoint", "/no/such/dir", "--prompt-ids", "1"], "does not exist"),
    (["--model", "tiny", "--prompt-ids", "1", "--temperature", "0"], "finite number > 0"),
    (["--model", "tiny", "--prompt-ids", "1", "--top-k", "3"], "need --temperature"),
    (["--model", "tiny", "--prompt-ids", "1", "--temperature", "1", "--top-p", "2"], "top-p"),
])
def test_bad_input_gives_exit_code_2_and_one_line(capsys, argv, message):
    code, out, err = run_cli(capsys, "generate", *argv)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and message in err


def test_argparse_errors_are_one_line_too(capsys):
    code = main(["generate", "--model", "tiny", "--prompt-ids", "1", "--max-new-tokens", "lots"])
    assert code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_a_broken_checkpoint_is_reported_not_raised(capsys, tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text("{not json")
    code, _, err = run_cli(capsys, "generate", "--checkpoint", str(tmp_path / "ckpt"),
                           "--prompt-ids", "1")
    assert code == 2 and "cannot read" in err and "Traceback" not in err


def test_python_dash_m_works_and_never_prints_a_traceback():
    ok = subprocess.run([sys.executable, "-m", "inferbook", "generate", "--model", "tiny",
                         "--prompt-ids", "1,2", "--max-new-tokens", "2", "--json"],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and len(json.loads(ok.stdout)["tokens"][0]) == 2
    bad = subprocess.run([sys.executable, "-m", "inferbook", "generate", "--model", "tiny",
                          "--prompt-ids", "1,2,oops"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
