"""Sealed grading's parts, without a kernel: plain-data answers, the answer's slice of a
notebook, the seal, the sandbox's limits, the reaper, and scoring recorded answers.

The kernels themselves (every trick of issue 19, with and without bubblewrap) are graded in
tests/book/test_sealed_grading.py.
"""

import math
import os
import pwd
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferbook.grading import plain_answers, registry
from inferbook.grading.questions import Function
from inferbook.grading.reaper import ProcessReaper, descendants
from inferbook.grading.report import Run
from inferbook.grading.sandbox import LAUNCHER, USER_ENV, Sandbox, parse_memory
from inferbook.grading.sealed_scoring import score_sealed
from inferbook.grading.slicing import SliceError, answer_program

# Plain data -----------------------------------------------------------------------------------

plain = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.tuples(inner, inner),
                            st.dictionaries(st.text(max_size=4), inner, max_size=3)),
    max_leaves=8)


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        return type(b) is dict and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@given(plain)
def test_plain_data_crosses_unchanged(value):
    assert same(plain_answers.decode(plain_answers.encode(value)), value)


@pytest.mark.parametrize("array", [np.arange(6, dtype=np.int32).reshape(2, 3),
                                   np.array([1.5, -np.inf, np.nan]), np.array(True),
                                   np.ones((2, 0), np.float16),
                                   np.array([1.0, 2.5], ml_dtypes.bfloat16)])
def test_arrays_cross_with_shape_dtype_and_bits(array):
    back = plain_answers.decode(plain_answers.encode(array))
    assert back.dtype == array.dtype and back.shape == array.shape
    assert back.tobytes() == array.tobytes()


def test_jax_arrays_and_huge_integers_arrive_as_plain_values():
    assert isinstance(plain_answers.decode(plain_answers.encode(jnp.arange(3.0))), np.ndarray)
    assert plain_answers.decode(plain_answers.encode(10**40)) == 10**40
    assert plain_answers.decode(plain_answers.encode(...)) is Ellipsis


def test_objects_arrive_as_markers_never_as_objects():
    class Always:
        def __eq__(self, other):
            return True

    class Sneaky(int):             # an int whose comparison lies: it arrives as a plain int
        def __eq__(self, other):
            return True
    got = plain_answers.decode(plain_answers.encode(Always()))
    assert isinstance(got, plain_answers.Unsupported) and "Always" in got.description
    assert isinstance(plain_answers.decode(plain_answers.encode(len)), plain_answers.Callable)
    back = plain_answers.decode(plain_answers.encode(Sneaky(3)))
    assert type(back) is int and back != 4
    assert isinstance(plain_answers.decode(plain_answers.encode(np.array([object()]))),
                      plain_answers.Unsupported)


@pytest.mark.parametrize("data", [
    {"__array__": {"dtype": "object", "shape": [1], "data": ""}},
    {"__array__": {"dtype": "float64", "shape": [2], "data": "AAAA"}},      # 3 bytes, not 16
    {"__pickle__": "gASVAAAA"}, {"a": 1, "b": 2}, {"__int__": "1" * 5000},
    {"__float__": "1e999"}, {"__dict__": [1]}])
def test_anything_but_plain_data_is_refused(data):
    with pytest.raises(plain_answers.AnswerFormatError):
        plain_answers.decode(data)


# The answer's slice of a notebook -------------------------------------------------------------

CELLS = [
    "import numpy as np\nimport os\nSCALE = 2\nunused = np.zeros(10**9)  # never needed",
    "def helper(x):\n    return x * SCALE\n",
    "%time scratch = 1\n@np.vectorize\ndef decorated(x):\n    return helper(x) + offset\n",
    "offset = 1\ntable = {}\ntable['k'] = 3\nos._exit(1)\nextra = []\nextra.append(5)",
    "answer = lambda x: decorated(x) + table['k'] + extra[0]",
    "from inferbook.grading import check\ncheck('ch99.f', answer)\nSCALE = 1000",
]


def test_the_slice_holds_what_the_answer_needs_and_nothing_else():
    program = answer_program(CELLS, 5, 2, "ch99.f")
    assert program.expression == "answer"
    kept = "\n".join(src for _, src in program.cells)
    for needed in ("import numpy as np", "SCALE = 2", "def helper", "@np.vectorize",
                   "offset = 1", "table['k'] = 3", "extra.append(5)", "answer = lambda"):
        assert needed in kept
    for dropped in ("unused", "os._exit", "%time", "SCALE = 1000", "check("):
        assert dropped not in kept
    namespace = {}
    for index, source in program.cells:
        original = CELLS[index].splitlines()
        assert all(line in ("", original[n]) for n, line in enumerate(source.splitlines()))
        exec(compile(source, f"<cell {index + 1}>", "exec"), namespace)
    assert eval(program.expression, namespace)(np.float64(1.0)) == 1 * 2 + 1 + 3 + 5


def test_a_lambda_at_the_check_is_the_answer_and_a_missing_check_is_explained():
    cells = ["def f(x):\n    return x", "check('ch99.g', lambda *a: f(*a)[::-1])"]
    program = answer_program(cells, 1, 1, "ch99.g")
    assert program.expression == "lambda *a: f(*a)[::-1]" and "def f" in program.cells[0][1]
    with pytest.raises(SliceError, match="holds no check"):
        answer_program(cells, 0, 1, "ch99.g")


# The seal ------------------------------------------------------------------------------------

SEAL = """
import sys, types
from inferbook.grading import sealed_guards
from inferbook.model import kvcache
alias = types.ModuleType("inferbook.alias_for_test")
alias.write = kvcache.write
sys.modules[alias.__name__] = alias
sealed_guards.guard_answer_keys()
sealed_guards.block_library_answers({"inferbook.model.kvcache.write": "ch01.write_kv"})
from inferbook.grading import registry
for attempt in (lambda: registry.get("ch01.write_kv"), lambda: kvcache.write(1, 2, 3),
                lambda: alias.write(1, 2, 3),
                lambda: __import__("inferbook.grading.chapters.ch01")):
    try:
        attempt()
    except sealed_guards.SealedError as err:
        print(type(err).__name__, str(err)[:40])
"""


def test_the_seal_refuses_the_keys_and_the_librarys_answers_under_every_name():
    r = subprocess.run([sys.executable, "-c", SEAL], capture_output=True, text=True, timeout=120)
    lines = r.stdout.splitlines()
    assert len(lines) == 4 and all(line.startswith("SealedError") for line in lines), r.stderr
    assert "answer keys" in lines[0] and "kvcache.write" in lines[1]


def test_every_library_answer_names_a_callable_of_the_library():
    import importlib
    named = [n for s in registry.set_ids() for q in registry.questions_in(s)
             if isinstance(q, Function) for n in q.library_answers]
    assert len(named) >= 14
    for dotted in named:
        module, _, attr = dotted.rpartition(".")
        assert callable(getattr(importlib.import_module(module), attr)), dotted


# Sandbox, launcher and reaper -----------------------------------------------------------------

@pytest.mark.parametrize("text, size", [("512M", 512 * 2**20), ("1.5G", int(1.5 * 2**30)),
                                        ("100000000", 100_000_000)])
def test_memory_limits_read_as_sizes(text, size):
    assert parse_memory(text) == size
    assert 0 < parse_memory("50%") < parse_memory("100%")


@pytest.mark.parametrize("text", ["", "lots", "10", "0%", "101%", "-1G", "1e9", "99999T"])
def test_bad_memory_limits_are_refused(text):
    with pytest.raises(ValueError):
        parse_memory(text)


def test_the_sandbox_passes_no_secret_and_hides_the_keys(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hunter2")
    box = Sandbox(tmp_path / "work", tmp_path / "rt", parse_memory("1G"), hide_keys=True)
    assert "hunter2" not in box.env().values()
    assert box.env()["HOME"] == str(tmp_path / "work")
    argv = box.command(["python", "x.py"])
    assert argv[:5] == [sys.executable, "-I", str(LAUNCHER), str(2**30), "--"]
    assert argv[-2:] == ["python", "x.py"]
    if box.bwrap:
        stub = argv.index(str(box.stub))
        assert argv[stub - 1] == "--ro-bind" and argv[stub + 1].endswith("grading/chapters")
        assert "--unshare-all" in argv and ["--bind", str(tmp_path / "work")] == \
            argv[argv.index(str(tmp_path / "work")) - 1:][:2]
    else:
        assert "NOT isolated" in box.isolation


def launch(*argv, memory=0, **kwargs):
    return subprocess.run([sys.executable, "-I", str(LAUNCHER), str(memory), "--", *argv],
                          capture_output=True, text=True, timeout=60, **kwargs)


def test_the_launcher_limits_memory_and_passes_on_the_exit_status():
    r = launch(sys.executable, "-c", "bytearray(2**31)", memory=512 * 2**20)
    assert r.returncode == 1 and "MemoryError" in r.stderr
    assert launch(sys.executable, "-c", "bytearray(2**20); raise SystemExit(7)",
                memory=512 * 2**20).returncode == 7


def test_a_detached_process_is_ended_by_the_reaper():
    # A double fork: the grandchild starts its own session and its parent exits at once.
    code = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(300)\n"
            "os._exit(0)")
    with ProcessReaper() as reaper:
        subprocess.run([sys.executable, "-c", code], timeout=30)
        time.sleep(0.2)
        orphans = descendants(os.getpid()) - reaper.before
        assert orphans, "the orphan should have been re-parented to us"
        assert reaper.sweep() >= 1
        assert not descendants(os.getpid()) - reaper.before


# Scoring recorded answers ----------------------------------------------------------------------

def notebook(*sources):
    return SimpleNamespace(cells=[SimpleNamespace(cell_type="code", source=s, metadata={})
                                  for s in sources])


def recorded(cell, qid, value, line=1):
    return (cell, {"id": qid, "line": line, "answer": plain_answers.encode(value)})


def test_recorded_answers_are_graded_by_the_grader_and_functions_by_their_outputs():
    q_num = registry.get("ch01.kv_bytes_per_token_llama_2_7b")
    q_fn = registry.get("ch01.merge_attention")
    q_refused = registry.get("ch01.prompt_kv_bytes")
    nb = notebook(textwrap.dedent("""\
        check("ch01.kv_bytes_per_token_llama_2_7b", x)
        check("ch01.decode_memory_bound", y)
        check("ch01.weights_in_tokens", z)"""),
        "from inferbook.model.attention import merge_partials as merge",
        'check("ch01.merge_attention", merge)',
        "answer = registry.get('ch01.prompt_kv_bytes').reference()",
        'check("ch01.prompt_kv_bytes", answer)')
    run = Run(answers=[recorded(0, q_num.id, q_num.reference()),
                       recorded(0, "ch01.decode_memory_bound", SimpleNamespace()),
                       recorded(0, "ch01.weights_in_tokens", len),
                       recorded(2, q_fn.id, len)],
              cell_errors={3: "cell 4 raised SealedError: the answer keys ...",
                           4: "cell 5 raised NameError"}, sealed_refusals={3})
    seen = {}

    def run_jobs(jobs, blocked):
        seen.update(blocked=blocked, jobs=jobs)
        (job,) = jobs
        return {job.id: {"outcomes": [{"value": plain_answers.encode(q_fn.reference(*args))}
                                      for args in job.cases]}}
    questions = [q_num, registry.get("ch01.decode_memory_bound"),
                 registry.get("ch01.weights_in_tokens"), q_fn, q_refused]
    grades = {g.question.id: g for g in score_sealed(questions, nb, run, seed=7,
                                                     setup_limit_s=10, run_jobs=run_jobs)}
    assert grades[q_num.id].status == "passed"
    assert "SimpleNamespace" in grades["ch01.decode_memory_bound"].output
    assert "got the function" in grades["ch01.weights_in_tokens"].output
    assert grades[q_fn.id].status == "passed"
    assert seen["blocked"]["inferbook.model.attention.merge_partials"] == q_fn.id
    assert seen["jobs"][0].program.expression == "merge"
    assert not all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in
                   zip(seen["jobs"][0].cases[0], q_fn.cases(q_fn.rng())[0]))   # fresh inputs
    assert grades[q_refused.id].status == "failed"
    assert "read from the library" in grades[q_refused.id].output


@pytest.mark.parametrize("event, words", [
    ({"outcomes": [{"error": "NotImplementedError", "not_implemented": True}]}, "not attempted"),
    ({"outcomes": [{"timed_out": True}]}, "did not return within"),
    ({"outcomes": [{"error": "SealedError: x is the library's own answer"}]}, "library's own"),
    ({"outcomes": [{"value": {"__pickle__": "x"}}]}, "cannot read"),
    ({"setup_error": "NameError: name 'f' is not defined"}, "rebuilding it"),
    ({"killed": "ended the process running it"}, "ended the process"),
    ({"infrastructure": "the function runner failed"}, "could not run it")])
def test_what_comes_back_from_the_sandbox_is_reported_on_the_question(event, words):
    q = registry.get("ch01.write_kv")
    run = Run(answers=[recorded(0, q.id, len)])
    grade, = score_sealed([q], notebook('check("ch01.write_kv", f)'), run, seed=1,
                          setup_limit_s=5, run_jobs=lambda jobs, blocked: {q.id: event})
    assert grade.status in ("failed", "not attempted") and grade.score == 0
    assert words in f"{grade.status}: {grade.output}"


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can run a submission as another user")
def test_without_bubblewrap_a_root_grader_runs_the_submission_as_another_account(tmp_path,
                                                                               monkeypatch):
    nobody = pwd.getpwnam("nobody")
    r = subprocess.run([sys.executable, "-I", str(LAUNCHER), "0", "--user",
                        f"{nobody.pw_uid}:{nobody.pw_gid}", "--", "/usr/bin/id", "-u"],
                       capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == str(nobody.pw_uid)
    monkeypatch.setenv(USER_ENV, "nobody")
    (tmp_path / "box" / "work").mkdir(parents=True)
    box = Sandbox(tmp_path / "box" / "work", tmp_path / "box" / "rt", parse_memory("1G"),
                  isolate=False)
    assert box.user[:2] == (nobody.pw_uid, nobody.pw_gid) and "as the user nobody" in \
        box.isolation
    assert (tmp_path / "box" / "work").stat().st_uid == nobody.pw_uid
    assert box.command(["x"])[4:7] == ["--user", f"{nobody.pw_uid}:{nobody.pw_gid}", "--"]
