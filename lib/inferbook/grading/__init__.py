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
  localize    the checker's words in the notebook's language (English, Chinese)
  generate    exercise sources -> student notebooks (solutions replaced by stubs) and the
              book's pages (solutions behind toggles)

`inferbook grade`, self-study or sealed (for marks):

  grader      grade a notebook: scratch copy, run, score
  execution   run the cells: per-cell and notebook time limits, restart and replay
  kernel      one sandboxed Jupyter kernel (both its sides)
  sandbox     bubblewrap, the memory limit, a clean environment; jail: the process between
  reaper      every process the submission started ends before results are written
  seal        what a sealed submission cannot use: the keys, the library's own answers
  capture     `check()` in a sealed kernel: answers recorded for the grader
  answers     answers as plain data, the only thing that crosses to the grader
  sealed      scoring recorded answers; slicing: the cells that define a function answer;
              functions and function_runner: running it on fresh inputs in the sandbox
  report      the score table and Gradescope's results.json; gradescope: the autograder zip,
              gradescope_image: the library wheel and pinned requirements it installs

Reference answers are computed by the library when a check runs; none is typed in. Nothing
here needs files outside the installed package, nor myst-nb: it works the same on Colab.
"""

from __future__ import annotations

from .feedback import check, evaluate, results, summary
from .questions import Exact, Function, Mistake, Numeric, Result

__all__ = ["check", "evaluate", "results", "summary", "Result", "Numeric", "Exact",
           "Function", "Mistake"]
