"""Graded exercises: immediate feedback in the notebook, and a grader for a whole class.

In an exercise notebook::

    from inferbook.grading import check
    kv_bytes = ...                      # the student replaces `...` with an answer
    check("ch01.kv_bytes_per_token_llama_2_7b", kv_bytes)
    # ✔ ch01.kv_bytes_per_token_llama_2_7b — passed (1/1)

The pieces, one concept per module:

  questions   the kinds of question (Numeric, Exact, Function) and how each grades an answer
  compare     comparing a student's output with the library's, and saying what differs
  registry    where the questions live: one module per chapter in `grading/chapters/`
  timelimit   calling a student's function with a time limit inside a live kernel
  feedback    `check()`, `summary()`, and the log the grader reads
  generate    exercise sources -> student notebooks (solutions replaced by stubs) and the
              book's pages (solutions behind toggles)
  grader      `inferbook grade`: run a notebook in a fresh kernel and score its checks
  report      the score table and Gradescope's results.json

Reference answers are computed by the library when a check runs; none is typed in. Nothing
here needs files outside the installed package, nor myst-nb: it works the same on Colab.
"""

from __future__ import annotations

from .feedback import check, evaluate, results, summary
from .questions import Exact, Function, Mistake, Numeric, Result

__all__ = ["check", "evaluate", "results", "summary", "Result", "Numeric", "Exact",
           "Function", "Mistake"]
