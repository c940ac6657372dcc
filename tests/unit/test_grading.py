"""Grading in the notebook: check() never raises, tolerances and hints, time-limited calls.

Everything here runs in-process (no kernel): the question kinds against answers right, wrong,
unanswered and malformed; the time limit against Python loops, loops that swallow the stop
request, calls stuck inside XLA, crashes and sys.exit; the registry's questions against the
library they are computed from. Kernel-level behaviour is in tests/book/test_exercises.py.
"""

import dataclasses
import json
import math
import subprocess
import sys
import time

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferbook.grading import check, evaluate, registry
from inferbook.grading import feedback as check_module
from inferbook.grading.compare import allclose
from inferbook.grading.questions import Exact, Function, Mistake, Numeric
from inferbook.grading.timelimit import call_with_time_limit
from inferbook.model import attention, kvcache, sampling

NUMBER = Numeric("ch99.number", "a number", 2, "think harder", reference=lambda: 1000.0,
                 rel_tol=0.01, mistakes=[Mistake(lambda r: r / 2, "only half")])


def add_one_reference(x):
    return x + 1


def add_one_cases(rng):
    return [(jnp.asarray(rng.standard_normal(4), jnp.float32),) for _ in range(3)]


ADD_ONE = Function("ch99.add_one", "add one", 3, "add one", reference=add_one_reference,
                   cases=add_one_cases, time_limit_s=2.0)


# Numbers and exact answers -------------------------------------------------------------------

@pytest.mark.parametrize("answer", [1000, 1009.9, 990.5, np.float32(1000), jnp.int32(1000),
                                    np.array([1000.0])])
def test_numbers_within_the_tolerance_pass(answer):
    assert NUMBER.grade(answer).status == "passed"
    assert NUMBER.grade(answer).score == 2


@pytest.mark.parametrize("answer, words", [
    (1011, "too large"), (900, "too small"), (500, "only half"), ("1000", "leave out the quotes"),
    (True, "expected a number"), ([1000, 2], "single number"), (math.nan, "nan"),
    (object(), "single number")])
def test_wrong_or_malformed_numbers_fail_with_a_reason(answer, words):
    result = NUMBER.grade(answer)
    assert result.status == "failed" and result.score == 0
    assert words in result.message


@pytest.mark.parametrize("answer", [..., None])
def test_the_stub_is_not_attempted(answer):
    assert NUMBER.grade(answer).status == "not attempted"


def test_exact_answers_respect_types_and_choices():
    q = Exact("ch99.yes", "yes?", 1, "h", reference=lambda: True, choices=(True, False))
    assert q.grade(True).status == "passed"
    assert q.grade(np.bool_(True)).status == "passed"
    assert q.grade(False).status == "failed"
    assert "one of" in q.grade(1).message          # 1 == True in Python, but not an answer here
    letters = Exact("ch99.letter", "which", 1, "h", reference=lambda: "B", choices="ABC")
    assert letters.grade(" b ").status == "passed"


# Functions ---------------------------------------------------------------------------------

def test_a_correct_function_passes_and_a_stub_is_not_attempted():
    assert ADD_ONE.grade(lambda x: x + 1).status == "passed"
    assert ADD_ONE.grade(lambda x: np.asarray(x) + 1.0).status == "passed"   # NumPy is fine

    def stub(x):
        raise NotImplementedError
    assert ADD_ONE.grade(stub).status == "not attempted"
    assert ADD_ONE.grade(...).status == "not attempted"


@pytest.mark.parametrize("fn, words", [
    (lambda x: x + 2, "differs"),
    (lambda x: x[:2] + 1, "shape"),
    (lambda x: None, "got None"),
    (lambda x: "x + 1", "should be an array"),
    (lambda x: x / 0 * 0, "NaN"),
    (lambda x: 1 / 0, "ZeroDivisionError"),
    (lambda x: __import__("sys").exit(3), "SystemExit"),
    (42, "expected a function"),
])
def test_wrong_functions_fail_on_their_question_with_a_reason(fn, words):
    result = ADD_ONE.grade(fn)
    assert result.status == "failed", result
    assert words in result.message


def test_an_error_names_the_students_line():
    def student(x):
        y = x + 1
        return y.reshape(3, 5)          # the line that raises
    message = ADD_ONE.grade(student).message
    assert "TypeError" in message and "y.reshape(3, 5)" in message


def test_a_function_that_never_returns_is_stopped_by_the_time_limit():
    def forever(x):
        while True:
            pass
    start = time.monotonic()
    result = dataclasses.replace(ADD_ONE, time_limit_s=0.5).grade(forever)
    assert result.status == "failed" and "did not return within 0.5 s" in result.message
    assert time.monotonic() - start < 5


# The time limit itself ----------------------------------------------------------------------

def test_the_time_limit_returns_values_and_captures_errors():
    assert call_with_time_limit(lambda a, b: a + b, (2, 3), seconds=5).value == 5
    outcome = call_with_time_limit(lambda: {}["missing"], seconds=5)
    assert isinstance(outcome.error, KeyError) and not outcome.timed_out


def test_a_python_loop_is_stopped_even_when_it_swallows_exceptions():
    def stubborn():
        while True:
            try:
                while True:
                    pass
            except Exception:     # what students write; the stop request is a BaseException
                pass
    start = time.monotonic()
    outcome = call_with_time_limit(stubborn, seconds=0.3)
    assert outcome.timed_out and not outcome.abandoned
    assert time.monotonic() - start < 3


STUCK_IN_XLA = """
import time
import jax, jax.numpy as jnp, numpy as np
from inferbook.grading.timelimit import call_with_time_limit
endless = jax.jit(lambda x: jax.lax.while_loop(lambda c: c[0] >= 0,
                                               lambda c: (c[0] | 1, c[1] + 1), (x, x))[1])
endless(jnp.int32(-1)).block_until_ready()       # compiled (and ends at once for x < 0)
start = time.monotonic()
outcome = call_with_time_limit(lambda: np.asarray(endless(jnp.int32(0))), seconds=0.5)
assert outcome.timed_out and outcome.abandoned, outcome
assert time.monotonic() - start < 5
assert float(jnp.arange(4.0).sum()) == 6.0        # JAX still runs other programs
print("ok")
"""


def test_a_call_stuck_inside_xla_is_abandoned_and_the_caller_goes_on():
    # An endless lax.while_loop runs in C: no exception can reach it, yet we get control back.
    # In its own process, so that the loop left spinning ends with it.
    r = subprocess.run([sys.executable, "-c", STUCK_IN_XLA], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


# check(): never raises, records, logs -------------------------------------------------------

@given(st.one_of(st.none(), st.integers(), st.floats(), st.text(), st.binary(),
                 st.lists(st.integers()), st.dictionaries(st.text(), st.integers())))
def test_check_never_raises_whatever_the_answer(answer):
    for qid in ("ch01.kv_bytes_per_token_llama_2_7b", "ch01.decode_memory_bound", "ch01.nope",
                "not an id"):
        result = evaluate(qid, answer)
        assert result.status in ("passed", "failed", "not attempted")
    check("ch01.decode_memory_bound", answer)


def test_check_prints_one_line_and_logs_start_and_result(tmp_path, monkeypatch, capsys):
    log = tmp_path / "log.jsonl"
    monkeypatch.setenv(check_module.LOG_ENV, str(log))
    check("ch01.kv_bytes_per_token_llama_2_7b", ...)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "not attempted" in out
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["event"] for e in events] == ["start", "result"]
    assert events[1]["status"] == "not attempted" and events[1]["points"] == 1


def test_a_question_whose_reference_breaks_is_a_failure_not_a_traceback(monkeypatch):
    broken = dataclasses.replace(NUMBER, reference=lambda: 1 / 0)
    monkeypatch.setattr(registry, "get", lambda qid: broken)
    result = evaluate("ch99.number", 1)
    assert result.status == "failed" and "ZeroDivisionError" in result.message


def test_accelerator_criteria_are_blocked_on_a_cpu(monkeypatch):
    timed = dataclasses.replace(NUMBER, requires="accelerator")
    monkeypatch.setattr(registry, "get", lambda qid: timed)
    monkeypatch.setattr(check_module, "_platform", lambda: "cpu")
    assert evaluate("ch99.number", 1000).status == "blocked"
    monkeypatch.setattr(check_module, "_platform", lambda: "gpu")
    assert evaluate("ch99.number", 1000).status == "passed"


# The registry ------------------------------------------------------------------------------

ALL = [q for s in registry.set_ids() for q in registry.questions_in(s)]


def test_every_question_states_its_points_tolerance_and_hint():
    assert registry.set_ids() and ALL
    for q in ALL:
        assert registry.get(q.id) is q
        assert q.points > 0 and q.hint and q.title and q.tolerance


@pytest.mark.parametrize("q", [q for q in ALL if not isinstance(q, Function)],
                         ids=lambda q: q.id)
def test_every_reference_answer_is_computed_and_accepted(q):
    answer = q.reference()
    assert q.grade(answer).status == "passed"
    if isinstance(q, Numeric):
        assert answer != 0 and q.grade(answer * 1.5).status == "failed"


@pytest.mark.parametrize("q", [q for q in ALL if isinstance(q, Function)], ids=lambda q: q.id)
def test_coding_questions_accept_their_reference_and_reject_a_perturbation(q):
    assert q.grade(q.reference).status == "passed"

    def off_by_a_little(*args):
        out = q.reference(*args)
        if isinstance(out, tuple):
            return (out[0] + 0.01,) + tuple(out[1:])
        return jnp.where(jnp.isfinite(out), out + 0.01, out)
    assert q.grade(off_by_a_little).status == "failed"


def test_chapter_1_references_are_the_library():
    assert registry.get("ch01.write_kv").reference.__module__.endswith("ch01")
    args = registry.get("ch01.write_kv").cases(np.random.default_rng(0))[0]
    np.testing.assert_array_equal(registry.get("ch01.write_kv").reference(*args),
                                  kvcache.write(*args))
    args = registry.get("ch01.merge_attention").cases(np.random.default_rng(0))[0]
    np.testing.assert_array_equal(registry.get("ch01.merge_attention").reference(*args)[1],
                                  attention.merge_partials(*args)[1])
    args = registry.get("ch01.filter_logits").cases(np.random.default_rng(0))[1]
    np.testing.assert_array_equal(registry.get("ch01.filter_logits").reference(*args),
                                  sampling.filter_logits(*args))


def test_the_kv_article_numbers_match_the_formula():
    from inferbook.model.presets import get_preset
    for name in ("llama-2-7b", "bloom-176b"):
        cfg = get_preset(name)
        q = registry.get(f"ch01.kv_bytes_per_token_{name.replace('-', '_')}")
        assert q.reference() == 2 * cfg.L * cfg.K * cfg.H * 2


def test_merging_two_halves_of_the_keys_equals_attention_over_all_of_them():
    # The identity exercise 3.2 rests on, checked against the reference attention.
    rng = np.random.default_rng(1)
    q, k, v = (jnp.asarray(rng.standard_normal(s), jnp.float32)
               for s in [(1, 2, 4, 8), (1, 2, 10, 8), (1, 2, 10, 8)])
    mask = jnp.ones((1, 2, 10), bool)
    whole = attention.attention_reference(q, k, v, mask)
    a = attention.attention_reference(q, k[:, :, :4], v[:, :, :4], mask[..., :4])
    b = attention.attention_reference(q, k[:, :, 4:], v[:, :, 4:], mask[..., 4:])
    merged = attention.merge_partials(*a, *b)
    np.testing.assert_allclose(merged[0], whole[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(merged[1], whole[1], rtol=1e-5, atol=1e-6)
    assert allclose()(merged, whole) is None


def test_summary_adds_up_the_latest_result_of_each_question(capsys, monkeypatch):
    monkeypatch.setattr(check_module, "_RESULTS", {})
    check("ch01.kv_bytes_per_token_llama_2_7b", 1)                       # wrong, then right
    check("ch01.kv_bytes_per_token_llama_2_7b",
          registry.get("ch01.kv_bytes_per_token_llama_2_7b").reference())
    check("ch01.decode_memory_bound", registry.get("ch01.decode_memory_bound").reference())
    capsys.readouterr()
    check_module.summary()
    lines = capsys.readouterr().out.splitlines()
    points = sum(q.points for q in registry.questions_in("ch01"))
    assert lines[-1].split()[1:4] == ["2", "/", f"{points:g}"]
    assert len(lines) == len(registry.questions_in("ch01")) + 2
