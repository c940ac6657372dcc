"""Planted mistakes in the performance-model and KV-size exercise notebooks (chapters 2-5).

As in test_exercises.py: replace one checked answer in a solution notebook by a wrong one,
grade it in a fresh kernel, and the notebook loses exactly that question's points — a known
slip of a source (explained by its Mistake) and a function that is slightly wrong.
"""

import pytest

from inferbook.grading.grader import grade_notebook
from test_exercises import ROOT, by_id, plant


@pytest.mark.parametrize("notebook, question_id, template", [
    ("02_performance_models", "ch03.wp1_kv_int8", "{} / 2"),          # keys only, as in 000
    ("04_kv_cache_size", "ch04.max_batch_fn", "lambda *a: {0}(*a) or -1"),  # -1 for "none"
])
def test_one_planted_mistake_loses_exactly_that_questions_points(notebook, question_id,
                                                                 template, tmp_path):
    source = ROOT / "exercises" / f"{notebook}.py"
    report = grade_notebook(plant(source, question_id, template, tmp_path), timeout_s=300)
    grades = by_id(report)
    assert grades[question_id].status == "failed"
    assert report.score == report.max_score - grades[question_id].question.points
    assert all(g.status == "passed" for qid, g in grades.items() if qid != question_id)
