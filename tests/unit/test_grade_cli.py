"""`inferbook grade`: bad arguments give exit code 2 and one line; the report's formats.

Runs no kernel (those tests are in tests/book/test_exercises.py).
"""

import json

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("jupyter_client")

from inferbook.cli import main  # noqa: E402
from inferbook.grading import registry  # noqa: E402
from inferbook.grading.grader import question_sets  # noqa: E402
from inferbook.grading.report import Grade, Report, Run  # noqa: E402

# Never reaches JAX: runs once, with JAX unimportable, not under both versions (conftest).
pytestmark = pytest.mark.no_jax


def notebook(tmp_path, *sources, name="hw.ipynb", metadata=None):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    nb.metadata.update(metadata or {})
    path = tmp_path / name
    nbformat.write(nb, path)
    return path


def run_cli(capsys, *argv):
    try:
        code = main(["grade", *argv])
    except SystemExit as exit_:
        code = exit_.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("make, extra, message", [
    (lambda p: p / "missing.ipynb", [], "does not exist"),
    (lambda p: (p / "answers.txt").write_text("42") and p / "answers.txt", [], "not a notebook"),
    (lambda p: (p / "broken.ipynb").write_text("{not json") and p / "broken.ipynb", [],
     "cannot read"),
    (lambda p: (p / "list.ipynb").write_text("[1, 2]") and p / "list.ipynb", [], "cannot read"),
    (lambda p: (p / "int.ipynb").write_text(
        '{"cells": [{"cell_type": "code", "source": 5, "metadata": {}, "outputs": []}], '
        '"metadata": {}, "nbformat": 4, "nbformat_minor": 5}') and p / "int.ipynb", [],
     "cell 1 has no cell type and text"),
    (lambda p: p, [], "is a directory"),
    (lambda p: notebook(p, "print('no exercises here')"), [], "holds none of the book's"),
    (lambda p: notebook(p, 'check("ch01.prompt_kv_bytes", 1)'), ["--timeout", "0"],
     "--timeout: must be a finite number > 0"),
    (lambda p: notebook(p, 'check("ch01.prompt_kv_bytes", 1)'), ["--timeout", "nan"],
     "--timeout: must be a finite number > 0"),
    (lambda p: notebook(p, 'check("ch01.prompt_kv_bytes", 1)'),
     ["--results", f"{__file__}/results.json"], "is not a directory"),
    (lambda p: notebook(p, 'check("ch01.prompt_kv_bytes", 1)'), ["--timeout", "soon"],
     "--timeout: must be a finite number"),
    # Output paths are checked before any work (issue 15: /dev/full failed after grading).
    (lambda p: notebook(p, 'check("ch01.prompt_kv_bytes", 1)'), ["--results", "/dev/full"],
     "not a regular file"),
    (lambda p: notebook(p, 'check("ch01.prompt_kv_bytes", 1)'), ["--results", "/proc/x"],
     "--results: cannot write /proc/x"),
    (lambda p: notebook(p, 'check("ch01.prompt_kv_bytes", 1)'), ["--results", "/tmp"],
     "it is a directory"),
    (lambda p: notebook(p, 'check("ch01.prompt_kv_bytes", 1)'), ["--cell-timeout=-inf"],
     "--cell-timeout: must be a finite number > 0"),
    (lambda p: notebook(p, 'check("ch01.prompt_kv_bytes", 1)'), ["--cell-timeout", "0"],
     "--cell-timeout: must be a finite number > 0"),
    (lambda p: notebook(p, 'check("ch01.prompt_kv_bytes", 1)'), ["--memory-limit", "plenty"],
     "--memory-limit"),
    (lambda p: notebook(p, 'check("ch01.prompt_kv_bytes", 1)'), ["--memory-limit", "1e99"],
     "--memory-limit"),
    (lambda p: notebook(p, 'check("ch01.prompt_kv_bytes", 1)'), ["--exercises", "ch77"],
     "unknown question set"),
    (lambda p: notebook(p, 'check("ch01.prompt_kv_bytes", 1)'), ["--sealed", "--exercises", ""],
     "unknown question set"),
    (lambda p: notebook(p, 'check("ch01.prompt_kv_bytes", 1)'), ["--seed", "-1"], "--seed"),
    (lambda p: notebook(p, 'check("ch01.prompt_kv_bytes", 1)'), ["--seed", "1.5"], "--seed"),
    (lambda p: "no_such_exercise", ["--gradescope-autograder", "/tmp/x.zip"], "no exercise"),
    (lambda p: "01", ["--gradescope-autograder", "/tmp"], "it is a directory"),
    (lambda p: "01", ["--gradescope-autograder", "/proc/x/a.zip"],
     "--gradescope-autograder: cannot write /proc/x/a.zip"),
])
def test_bad_arguments_give_exit_code_2_and_one_line(tmp_path, capsys, make, extra, message):
    code, out, err = run_cli(capsys, str(make(tmp_path)), *extra)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_the_question_sets_come_from_metadata_checks_or_the_file_name(tmp_path):
    by_check = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        'check("ch01.write_kv", f)')])
    assert question_sets(by_check, tmp_path / "anything.ipynb") == ["ch01"]
    by_meta = nbformat.v4.new_notebook(metadata={"inferbook": {"exercises": ["ch01", "ch77"]}})
    assert question_sets(by_meta, tmp_path / "x.ipynb") == ["ch01"]        # unknown sets ignored
    empty = nbformat.v4.new_notebook()
    assert question_sets(empty, tmp_path / "Copy of 01_sampling_kv_cache.ipynb") == ["ch01"]
    assert question_sets(empty, tmp_path / "homework.ipynb") == []


def test_gradescope_results_count_blocked_criteria_out():
    q1, q2, q3 = registry.questions_in("ch01")[:3]
    report = Report("hw.ipynb", ["ch01"], [Grade(q1, "passed"), Grade(q2, "failed", "too big"),
                                           Grade(q3, "blocked", "needs a GPU")], Run(seconds=3.2))
    data = json.loads(json.dumps(report.gradescope()))
    assert data["score"] == q1.points and data["execution_time"] == 3
    t1, t2, t3 = data["tests"]
    assert (t1["status"], t1["score"], t1["max_score"]) == ("passed", q1.points, q1.points)
    assert (t2["status"], t2["score"], t2["output"]) == ("failed", 0, "failed: too big")
    assert t3["max_score"] == 0 and "status" not in t3 and "blocked" in t3["output"]
    assert report.max_score == q1.points + q2.points
    assert "blocked" in report.table() and "too big" in report.table()


def test_the_scratch_copy_holds_the_folder_but_no_links_and_not_itself(tmp_path):
    from inferbook.grading.grader import copy_submission
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.txt").write_text("x")
    (tmp_path / "hw.ipynb").write_text("{}")
    (tmp_path / "link").symlink_to("/etc")
    copy = copy_submission(tmp_path, tmp_path / "grader" / "nb" / "work")   # inside the folder
    assert (copy / "data" / "x.txt").read_text() == "x" and (copy / "hw.ipynb").is_file()
    assert not (copy / "link").exists() and not (copy / "grader").exists()
