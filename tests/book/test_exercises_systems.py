"""Planted mistakes in the exercises of the Kernels, Many chips and Serving parts.

`test_exercises.py` runs every exercise notebook (solution full marks, student version zero,
no solution line leaks). Here one realistic slip is planted in each of the three notebooks of
chapters 6–13, and the grade must lose exactly that question's points: the wrong answer is
recognised, and nothing else is disturbed.
"""

import re
from pathlib import Path

import jupytext
import nbformat
import pytest

from inferbook.grading.grader import grade_notebook

ROOT = Path(__file__).resolve().parents[2]


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


@pytest.mark.parametrize("notebook, question_id, template, message", [
    # (lse, out) instead of (out, lse)
    ("06_kernels", "ch07.combine_chunks", "lambda *a: {}(*a)[::-1]", "shape"),
    # the cache split over heads only: two chips hold copies of each head
    ("08_many_chips", "ch09.kv_bytes_per_chip", "{} * 2", "copies of the same head"),
    # the target's token drawn from p_n instead of the residual after a rejection
    ("11_serving", "ch13.accept", "lambda *a: ({}(*a)[0], a[2][0])", "dist"),
])
def test_a_planted_mistake_loses_exactly_its_points(notebook, question_id, template, message,
                                                    tmp_path):
    source = ROOT / "exercises" / f"{notebook}.py"
    report = grade_notebook(plant(source, question_id, template, tmp_path), timeout_s=300)
    grades = {g.question.id: g for g in report.grades}
    assert grades[question_id].status == "failed", report.table()
    assert message in grades[question_id].output
    assert report.score == report.max_score - grades[question_id].question.points
    assert all(g.status == "passed" for qid, g in grades.items() if qid != question_id)
