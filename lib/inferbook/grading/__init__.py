"""Graded exercises: immediate feedback in the notebook, and a grader for a whole class.

In an exercise notebook::

    from inferbook.grading import check
    kv_bytes = ...                      # the student replaces `...` with an answer
    check("ch01.kv_bytes_per_token_llama_2_7b", kv_bytes)
    # ✔ ch01.kv_bytes_per_token_llama_2_7b — passed (1/1)

A course uses two layers of this package; the second only when it grades for marks.

**Every course** (a student's notebook, self-study grading, the book's exercise pages):

  questions        the kinds of question (Numeric, Exact, Function) and how each grades
  compare          comparing a student's output with the library's, and saying what differs
  registry         where the questions live: one module per chapter in `grading/chapters/`
  timelimit        calling a student's function with a time limit inside a live kernel
  feedback         `check()`, `summary()`, and the log the grader reads
  localize         the checker's words in the notebook's language (English, Chinese)
  grader           `inferbook grade`: scratch copy, run every cell, score
  cell_runner      run the cells: per-cell and notebook time limits, restart and replay
  sandboxed_kernel one Jupyter kernel in the sandbox (the grader's side and the kernel's)
  sandbox          a scratch folder, the memory limit, bubblewrap where it works
  launcher         the process between the grader and the submission: limits, one exit
  reaper           every process the submission started ends before results are written
  report           the score table and Gradescope's results.json

**Only the sealed grader** (`inferbook grade --sealed`, marks; the Gradescope package):

  sealed_guards    what a sealed submission cannot reach: the keys, the library's answers
  sealed_check     `check()` in a sealed kernel: answers recorded for the grader
  plain_answers    answers as plain data, the only thing that crosses to the grader
  sealed_scoring   scoring the recorded answers in the grader's process
  slicing          the cells that define a function answer, to rebuild it elsewhere
  function_dispatch  the grader's side: run the student's functions, read back plain data
  function_runner  the sandboxed process that calls them on fresh inputs
  gradescope       the autograder zip Gradescope runs
  gradescope_image the library wheel and the pinned requirements that zip installs

The exercise sources' format (solutions between markers; student notebooks and the book's
pages made from them) is the book's: `inferbook.book.exercise_sources`.

Reference answers are computed by the library when a check runs; none is typed in. Nothing
here needs files outside the installed package, nor myst-nb: it works the same on Colab.
"""

from __future__ import annotations

from .feedback import check, evaluate, results, summary
from .questions import Exact, Function, Mistake, Numeric, Result

__all__ = ["check", "evaluate", "results", "summary", "Result", "Numeric", "Exact",
           "Function", "Mistake"]
