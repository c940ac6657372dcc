"""Where the questions live: one module per chapter under `inferbook.grading.chapters`.

A question set is a module `inferbook/grading/chapters/chNN.py` holding a list `QUESTIONS`;
every id in it starts with ``chNN.``. Adding the exercises of a chapter is adding that one
module (and its exercise notebook): the sets are discovered, never listed by hand. Modules
load on first use, so `check()` in chapter 1 never imports what chapter 10 needs.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from functools import lru_cache

from inferbook.book.exercise_sources import QUESTION_ID

from .questions import Question

__all__ = ["set_ids", "questions_in", "get", "set_of"]

def _chapters():
    """The package of question sets (imported on use: a sealed kernel may not import it)."""
    return importlib.import_module(f"{__package__}.chapters")


def set_ids() -> list[str]:
    """Every question set of the book, e.g. ['ch01', 'ch02', ...]."""
    return sorted(m.name for m in pkgutil.iter_modules(_chapters().__path__)
                  if re.fullmatch(r"ch\d\d", m.name))


def set_of(question_id: str) -> str | None:
    """'ch01.kv_bytes' -> 'ch01'; None for an id of the wrong form."""
    match = QUESTION_ID.match(question_id) if isinstance(question_id, str) else None
    return match.group(1) if match else None


@lru_cache(maxsize=None)
def questions_in(set_id: str) -> tuple[Question, ...]:
    """The questions of one set, in the order the exercise notebook asks them."""
    if set_id not in set_ids():
        raise KeyError(f"no question set {set_id!r}; known: {', '.join(set_ids())}")
    module = importlib.import_module(f"{_chapters().__name__}.{set_id}")
    questions = tuple(module.QUESTIONS)
    ids = [q.id for q in questions]
    bad = [i for i in ids if set_of(i) != set_id]
    if bad or len(set(ids)) != len(ids):
        raise ValueError(f"question set {set_id}: ids must be unique and start with "
                         f"'{set_id}.': {bad or ids}")
    return questions


def get(question_id: str) -> Question | None:
    """The question with this id, or None if there is none."""
    set_id = set_of(question_id)
    if set_id is None or set_id not in set_ids():
        return None
    return next((q for q in questions_in(set_id) if q.id == question_id), None)
