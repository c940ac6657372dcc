"""Sealing: what a submission graded for marks (`inferbook grade --sealed`) cannot use.

Two things are out of a sealed submission's reach:

- **the answer keys**, `inferbook.grading.chapters`: the question sets, with the references
  that compute each answer. In the kernel and in the process that runs a student's functions
  the package cannot be imported (`guard_answer_keys`) and, where the sandbox has its own
  mount namespace, its files are not there at all (`KEYS_STUB` is mounted over them).
- **the library's own answers to the coding exercises**: e.g. `inferbook.model.kvcache.write`
  *is* the answer to "write to the cache". In the process that runs the student's functions
  each such callable is replaced by one that raises (`block_library_answers`), under every
  name the library holds it by. The notebook itself may still use them (and the rest of the
  library) to compute numbers: that is how the exercises are meant to be done.

Both raise `SealedError`, whose message says why; the grader recognises it and says in the
report that the answer was read from the library rather than computed.
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
from typing import Any, Mapping

__all__ = ["SealedError", "KEYS", "KEYS_MESSAGE", "KEYS_STUB", "guard_answer_keys",
           "block_library_answers"]

KEYS = "inferbook.grading.chapters"
KEYS_MESSAGE = (f"the answer keys ({KEYS}) are not available while grading: this notebook is "
                f"graded sealed, so each answer must come from its own code")
# The `__init__.py` mounted over the answer keys inside the sandbox.
KEYS_STUB = ("from inferbook.grading.sealed_guards import KEYS_MESSAGE, SealedError\n"
             "raise SealedError(KEYS_MESSAGE)\n")


class SealedError(ImportError):
    """What a sealed submission tried to use is not available while grading."""


class _KeyGuard(importlib.abc.MetaPathFinder):
    """An import hook that refuses the answer keys (the first finder Python asks)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == KEYS or name.startswith(KEYS + "."):
            raise SealedError(KEYS_MESSAGE)
        return None


def guard_answer_keys() -> None:
    """Make `import inferbook.grading.chapters` raise SealedError in this process."""
    if not any(isinstance(f, _KeyGuard) for f in sys.meta_path):
        sys.meta_path.insert(0, _KeyGuard())
    for name in [n for n in sys.modules if n == KEYS or n.startswith(KEYS + ".")]:
        del sys.modules[name]


def _unavailable(dotted: str, question_id: str):
    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise SealedError(f"{dotted} is the library's own answer to {question_id}: it is not "
                          f"available while grading")
    unavailable.__name__ = unavailable.__qualname__ = dotted.rpartition(".")[2]
    return unavailable


def block_library_answers(answers: Mapping[str, str]) -> None:
    """Replace each library callable (dotted name -> the question it answers) by one that raises.

    Every module of the library that holds the same object under any name gets the
    replacement, so `from inferbook.model.decode import write` (an alias) is refused too.
    """
    originals = {}
    for dotted, question_id in answers.items():
        module_name, _, attr = dotted.rpartition(".")
        original = getattr(importlib.import_module(module_name), attr)
        originals[id(original)] = (original, _unavailable(dotted, question_id))
    for module in list(sys.modules.values()):
        if not getattr(module, "__name__", "").startswith("inferbook"):
            continue
        for name, value in list(vars(module).items()):
            if id(value) in originals and value is originals[id(value)][0]:
                setattr(module, name, originals[id(value)][1])
