"""The exercise notebooks, graded in real kernels exactly as an instructor would.

A solution with one planted mistake loses exactly that question's points — in self-study,
where every other question of the notebook must pass, which is also what says that the
self-study checks give every solution full marks, and sealed (the mode for marks: answers
scored by the grader, functions run on fresh inputs in a sandbox); the student notebooks
(the committed Colab twins) hold no line of a solution; and a notebook that loops forever,
kills its kernel or breaks a cell is graded anyway, each failure reported on its question.
That every solution scores full marks sealed, and every student notebook runs without an
error and scores nothing, is tested through Gradescope's package, set up and run as
Gradescope runs it (test_gradescope_package.py). (nbval also executes each solution source,
as it does every page, so that the book renders its outputs; `check` never raises, so only
these tests can tell a right solution from a wrong one.) The tricks a submission could play
on the grader are in test_sealed_grading.py.
"""

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat
import pytest

from inferbook.book import exercise_sources
from inferbook.grading import registry
from inferbook.grading.grader import grade_notebook
from inferbook.grading.sandboxed_kernel import INTERRUPT_GRACE_S

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "exercises").glob("[0-9]*.py"))
CORRECT = ('from inferbook.perf import counts\nfrom inferbook.model.presets import get_preset\n'
           'check("ch01.kv_bytes_per_token_llama_2_7b", '
           'counts.kv_bytes_per_token(get_preset("llama-2-7b"), 2))')


def by_id(report):
    return {g.question.id: g for g in report.grades}


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_the_student_notebooks_hold_no_line_of_any_solution(source):
    nb = jupytext.read(source)
    outside, solution = set(), set()
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            if exercise_sources.SOLUTION_TAG in cell.metadata.get("tags", []):
                solution |= {x.strip() for x in cell.source.splitlines() if x.strip()}
            else:
                outside |= {x.strip() for x in cell.source.splitlines()}
            continue
        lines, pos = cell.source.splitlines(), 0
        for begin, end, _ in exercise_sources.solution_regions(cell.source):
            outside |= {x.strip() for x in lines[pos:begin]}
            solution |= {x.strip() for x in lines[begin + 1:end]}
            pos = end + 1
        outside |= {x.strip() for x in lines[pos:]}
    secret = {x for x in solution - outside if len(x) > 3}    # "return out" is a solution line,
    assert secret                                             # ")" is not worth a test
    student = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    student_lines = {x.strip() for c in student.cells for x in c.source.splitlines()}
    assert not secret & student_lines
    assert not any("SOLUTION" in c.source for c in student.cells)
    assert student.metadata["inferbook"]["exercises"] == sorted(
        {registry.set_of(i) for i in exercise_sources.question_ids(nb.cells)})


def plant(source: Path, question_id: str, template: str, tmp_path: Path) -> Path:
    """The solution notebook with the answer checked for `question_id` replaced."""
    nb = jupytext.read(source)
    call = re.compile(rf'check\("{re.escape(question_id)}", (.+)\)$', re.M)
    cells = [c for c in nb.cells if c.cell_type == "code" and call.search(c.source)]
    assert len(cells) == 1
    cells[0].source = call.sub(lambda m: f'check("{question_id}", {template.format(m[1])})',
                               cells[0].source)
    path = tmp_path / f"planted_{source.stem}.ipynb"
    nbformat.write(nb, path)
    return path


PLANTED = [
    ("01_sampling_kv_cache", "ch01.a10_tokens_after_weights", "{} * 1.5", ""),
    # (lse, out): the wrong order
    ("01_sampling_kv_cache", "ch01.merge_attention", "lambda *args: {}(*args)[::-1]", ""),
    # keys only, as seed 000 counts them
    ("02_performance_models", "ch03.wp1_kv_int8", "{} / 2", ""),
    # -1 for "none fits"
    ("05_kv_cache_size", "ch05.max_batch_fn", "lambda *a: {0}(*a) or -1", ""),
    # (lse, out) instead of (out, lse)
    ("06_kernels", "ch07.combine_chunks", "lambda *a: {}(*a)[::-1]", "shape"),
    # the cache split over heads only: two chips hold copies of each head
    ("08_many_chips", "ch09.kv_bytes_per_chip", "{} * 2", "copies of the same head"),
    # the target's token drawn from p_n instead of the residual after a rejection
    ("11_serving", "ch13.accept", "lambda *a: ({}(*a)[0], a[2][0])", "dist"),
    # the latent alone, without the shared rotary key
    ("14_mixture_of_experts", "ch14.mla_cache_bytes_v3",
     '{} * (lambda m: m.R_kv / (m.R_kv + m.H_rope))(get_preset("deepseek-v3").mla)',
     "rotary key"),
    # the top k probabilities without renormalising them
    ("14_mixture_of_experts", "ch14.top_k_router",
     "lambda x, w, k: (jax.lax.top_k(jax.nn.softmax(x @ w), k)[0], {}(x, w, k)[1])", "weights"),
]
# Sealed, a number and a function (rebuilt from the notebook, run in the sandbox).
SEALED = [PLANTED[1], PLANTED[5], PLANTED[-1]]


@pytest.mark.parametrize("sealed, notebook, question_id, template, message",
                         [(False, *p) for p in PLANTED] + [(True, *p) for p in SEALED],
                         ids=lambda v: v if isinstance(v, str) and "." in v else
                         ("sealed" if v is True else "self-study" if v is False else None))
def test_one_planted_mistake_loses_exactly_that_questions_points(sealed, notebook, question_id,
                                                                 template, message, tmp_path):
    source = ROOT / "exercises" / f"{notebook}.py"
    report = grade_notebook(plant(source, question_id, template, tmp_path), timeout_s=300,
                            sealed=sealed, seed=19)
    grades = by_id(report)
    assert grades[question_id].status == "failed", report.table()
    assert message in grades[question_id].output
    assert report.score == report.max_score - grades[question_id].question.points
    assert all(g.status == "passed" for qid, g in grades.items() if qid != question_id), \
        report.table()


def tiny_notebook(tmp_path: Path, *cells: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("from inferbook.grading import check")] + \
        [nbformat.v4.new_code_cell(c) for c in cells]
    path = tmp_path / "submission.ipynb"
    nbformat.write(nb, path)
    return path


def test_an_endless_loop_that_ignores_interrupts_loses_only_its_cell(tmp_path):
    # The interrupt does not take (SIGINT ignored): the kernel is restarted and the cells
    # before the loop run again. (An interruptible loop: test_sealed_grading.py.)
    stubborn = ("import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                'while True:\n    pass\ncheck("ch01.write_kv", f)')
    path = tiny_notebook(tmp_path, CORRECT, stubborn, 'check("ch01.prompt_kv_bytes", 524288000)')
    report = grade_notebook(path, timeout_s=300, cell_timeout_s=4)
    grades = by_id(report)
    assert grades["ch01.kv_bytes_per_token_llama_2_7b"].status == "passed"
    assert grades["ch01.write_kv"].status == "failed"
    assert "per-cell time limit (4 s) and did not stop" in grades["ch01.write_kv"].output
    assert grades["ch01.prompt_kv_bytes"].status == "passed"
    assert report.run.restarts == 1
    assert report.run.seconds < 4 + INTERRUPT_GRACE_S + 40       # not the notebook's 300 s


def test_a_check_that_kills_the_kernel_fails_that_question_only(tmp_path):
    path = tiny_notebook(tmp_path, CORRECT,
                         'import os\ncheck("ch01.write_kv", lambda *a: os._exit(1))',
                         'check("ch01.prompt_kv_bytes", 524288000)')
    report = grade_notebook(path, timeout_s=120)
    grades = by_id(report)
    assert grades["ch01.kv_bytes_per_token_llama_2_7b"].status == "passed"
    assert grades["ch01.write_kv"].status == "failed"
    assert "kernel died" in grades["ch01.write_kv"].output
    assert grades["ch01.prompt_kv_bytes"].status == "passed"     # restarted, earlier cells rerun
    assert report.run.restarts == 1


def test_a_broken_cell_fails_its_own_questions_and_the_rest_still_run(tmp_path):
    path = tiny_notebook(tmp_path, 'check("ch01.prompt_kv_bytes", undefined_answer)', CORRECT)
    results = tmp_path / "results.json"
    r = subprocess.run([sys.executable, "-m", "inferbook", "grade", str(path), "--results",
                        str(results), "--timeout", "120"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert "NameError" in r.stdout and "total" in r.stdout
    data = json.loads(results.read_text())
    tests = {t["name"].split(":")[0]: t for t in data["tests"]}
    assert tests["ch01.prompt_kv_bytes"]["status"] == "failed"
    assert "NameError" in tests["ch01.prompt_kv_bytes"]["output"]
    assert tests["ch01.kv_bytes_per_token_llama_2_7b"]["status"] == "passed"
    assert data["score"] == sum(t["score"] for t in data["tests"]) == 1
    assert set(tests) == {q.id for q in registry.questions_in("ch01")}
    assert all({"name", "score", "max_score", "status", "output"} <= set(t) for t in data["tests"])


def test_the_student_twin_is_what_the_generator_makes():
    # (test_notebooks checks the twins are current; this checks they are student versions.)
    for source in SOURCES:
        student = exercise_sources.student_notebook(jupytext.read(source))
        twin = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
        # Code cells as generated; the Markdown is rewritten for Colab (test_colab_twins).
        assert [c.source for c in twin.cells[1:] if c.cell_type == "code"
                and "cellView" not in c.metadata] \
            == [c.source for c in student.cells if c.cell_type == "code"]
        assert copy.deepcopy(twin.metadata["inferbook"]) == student.metadata["inferbook"]
