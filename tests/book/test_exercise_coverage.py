"""Every chapter in the table of contents has graded exercises that the book lists.

A chapter `chapters/NN_slug.py` is covered when the question set `chNN` exists, holds at least
one question, and an exercise page listed in `_toc.yml` asks every question of that set.
"""

import re
from pathlib import Path

import pytest
import yaml

from inferbook.grading import registry

ROOT = Path(__file__).resolve().parents[2]
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text())
FILES = [c["file"] for part in TOC["parts"] for c in part["chapters"]]
CHAPTERS = [f for f in FILES if f.startswith("chapters/")]
EXERCISES = [ROOT / f"{f}.py" for f in FILES if f.startswith("exercises/")]
ASKED = re.compile(r"""\bcheck\(\s*["'](ch\d\d\.[a-z0-9_]+)["']""")


def asked_in_listed_exercises() -> set[str]:
    return {m for path in EXERCISES for m in ASKED.findall(path.read_text(encoding="utf-8"))}


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_chapter_has_its_exercises(chapter):
    set_id = "ch" + re.match(r"chapters/(\d\d)_", chapter).group(1)
    assert set_id in registry.set_ids(), f"no question set {set_id} for {chapter}"
    ids = {q.id for q in registry.questions_in(set_id)}
    assert ids, f"question set {set_id} is empty"
    missing = ids - asked_in_listed_exercises()
    assert not missing, f"asked by no exercise page in _toc.yml: {sorted(missing)}"


def test_every_exercise_source_is_listed():
    sources = {p.relative_to(ROOT).with_suffix("").as_posix()
               for p in (ROOT / "exercises").glob("[0-9]*.py")}
    assert sources <= set(FILES), sorted(sources - set(FILES))
