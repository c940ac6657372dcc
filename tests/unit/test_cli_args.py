"""The CLI's argument types and resource checks, one behaviour at a time.

The fuzz tests (test_cli_fuzz.py) show that bad values are refused; these show what each
type accepts and returns, that a probe for writability leaves nothing behind, and that the
memory check compares with what the machine reports.
"""

import argparse
import os
from pathlib import Path

import pytest

from inferbook.cli import UsageError, one_line
from inferbook.cli import args as types
from inferbook.cli.resources import device_available_bytes, host_available_bytes, require_memory


def refuses(parse, text):
    with pytest.raises(argparse.ArgumentTypeError) as info:
        parse(text)
    assert "\n" not in str(info.value)
    return str(info.value)


@pytest.mark.parametrize("text, value", [("7", 7), (" 7 ", 7), ("+3", 3), ("0", 0),
                                         ("4294967295", 2**32 - 1)])
def test_integers_in_range_are_read(text, value):
    assert types.integer(0, 2**32 - 1)(text) == value


@pytest.mark.parametrize("text", ["-1", "4294967296", "1_000", "٣", "１２", "1.0", "1e3", "",
                                  "0x10", "9" * 5000, "nan"])
def test_integers_are_ascii_digits_in_range(text):
    # int() would accept '1_000', '٣' and '１２'; a count on the command line is plain digits.
    refuses(types.integer(0, 2**32 - 1), text)


def test_finite_floats_refuse_nan_inf_overflow_and_the_excluded_bound():
    parse = types.finite_float(0.0, above=True)
    assert parse("0.5") == 0.5 and parse("1e-3") == 1e-3
    for text in ["0", "-1", "nan", "inf", "-inf", "1e400", "x", ""]:
        refuses(parse, text)
    assert types.probability("1") == 1.0
    for text in ["0", "1.0000001", "nan"]:
        refuses(types.probability, text)


def test_integer_lists():
    parse = types.int_list(none=True)
    assert parse("1,2, 3") == (1, 2, 3) and parse("None") == ()
    for text in ["", "1,,2", "1,0", "1,x", ",".join(["1"] * (types.MAX_LIST + 1))]:
        refuses(parse, text)
    refuses(types.int_list(), "none")


def test_a_writable_file_is_probed_without_being_changed(tmp_path):
    existing = tmp_path / "old.json"
    existing.write_text("keep me")
    assert types.writable_file(str(existing)) == existing
    assert existing.read_text() == "keep me"
    fresh = tmp_path / "new" / "deeper" / "out.json"
    assert types.writable_file(str(fresh)) == fresh
    assert not (tmp_path / "new").exists() and os.listdir(tmp_path) == ["old.json"]


@pytest.mark.parametrize("make, fragment", [
    (lambda p: p, "is a directory"),
    (lambda p: "/dev/full", "not a regular file"),
    (lambda p: "/proc/x/out.json", "cannot write"),
    (lambda p: (p / "f").write_text("x") and p / "f" / "under.json", "not a directory"),
    (lambda p: "", "empty"),
    (lambda p: "x" * 5000, "cannot"),                      # a name too long for the system
])
def test_unwritable_files_are_refused_in_one_line(tmp_path, make, fragment):
    assert fragment in refuses(types.writable_file, str(make(tmp_path)))


def test_writable_directories(tmp_path):
    target = tmp_path / "a" / "b"
    assert types.writable_dir(str(target)) == target and not (tmp_path / "a").exists()
    (tmp_path / "file").write_text("")
    assert "not a directory" in refuses(types.writable_dir, str(tmp_path / "file"))
    refuses(types.writable_dir, "/proc/x")
    assert types.existing_dir(str(tmp_path)) == tmp_path
    assert "does not exist" in refuses(types.existing_dir, str(tmp_path / "nope"))


def test_one_line_escapes_every_line_break():
    text = "a\nb\rc\x1cd\x85e\u2028f\u2029g"
    assert one_line(text).splitlines() == [one_line(text)]
    assert one_line("plain é") == "plain é"


def _meminfo(key: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


@pytest.mark.skipif(not Path("/proc/meminfo").exists(), reason="Linux's /proc/meminfo")
def test_host_memory_is_what_the_kernel_says_is_available():
    available = host_available_bytes()
    assert 0 < available <= _meminfo("MemTotal")
    assert available <= _meminfo("MemAvailable") * 1.5       # it moves while we read it


def test_the_memory_check_refuses_only_what_exceeds_the_available_memory():
    import jax
    free, where = device_available_bytes(jax.devices()[0])
    if jax.devices()[0].platform == "cpu":
        assert where == "host memory"
    require_memory(100, "a small thing", available=(1000, "test memory"))
    require_memory(10**30, "anything", available=(None, "unknown memory"))   # cannot tell
    with pytest.raises(UsageError, match=r"a big thing needs at least 2\.0 kB, but only "
                                         r"1\.0 kB of test memory is available"):
        require_memory(2000, "a big thing", available=(1000, "test memory"))


@pytest.mark.parametrize("error", [
    MemoryError(),
    "jax:RESOURCE_EXHAUSTED: Out of memory while trying to allocate 8589934592 bytes.\nmore",
])
def test_running_out_of_memory_anyway_is_one_line_and_exit_2(monkeypatch, capsys, error):
    """The last line of defence behind the memory check: an allocation that fails."""
    import jax

    import inferbook.cli.kernel_bench as command
    from inferbook.cli import main
    if isinstance(error, str):
        error = jax.errors.JaxRuntimeError(error.removeprefix("jax:"))

    def run(args):
        raise error
    monkeypatch.setattr(command, "run", run)
    assert main(["kernel-bench"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "out of memory" in err and "Traceback" not in err


def test_other_runtime_errors_are_not_disguised_as_bad_input(monkeypatch):
    import jax

    import inferbook.cli.kernel_bench as command
    from inferbook.cli import main

    def run(args):
        raise jax.errors.JaxRuntimeError("INTERNAL: a bug, with its traceback")
    monkeypatch.setattr(command, "run", run)
    with pytest.raises(jax.errors.JaxRuntimeError):
        main(["kernel-bench"])
