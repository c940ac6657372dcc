"""Showing the library's own code in a chapter, as a highlighted listing.

A chapter that explains a computation shows the function that performs it rather than a copy
that could drift. `print(inspect.getsource(f))` would do that, but its output is plain text:
no highlighting, and lines of the library's 100 columns run off a page. `show_source` returns
the same source as a Markdown code block, which the book renders (myst-nb parses Markdown
outputs) with the theme's highlighting and Colab renders with its own:

    show_source(decode.attend_cached, kvcache.append)

On the site a listing keeps every line of code whole: a line wider than the column scrolls
sideways inside its block (book/static/book.css, checked by tests/browser/test_site.py)
rather than wrapping a signature or a docstring mid-line.

Each listing is headed by the object's name and the file it lives in. A public method is
often a thin shell around a compiled function of its module (`ModelEngine.generate` calls a
jitted `_generate`, then `_commit`); `callees=True` shows those module functions after it, so
the reader sees the code that does the work without the chapter naming private functions.
"""

from __future__ import annotations

import inspect
import re
import textwrap
from pathlib import Path
from typing import Any

__all__ = ["Listing", "show_source", "source_of", "module_callees"]


def _unwrapped(obj: Any) -> Any:
    """The plain Python function behind a method, property, `jax.jit` or functools wrapper."""
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, property):
        obj = obj.fget
    obj = getattr(obj, "__func__", obj)               # a bound method
    return inspect.unwrap(obj)                         # jax.jit and functools.wraps set this


def _title(obj: Any) -> tuple[str, str]:
    """The object's qualified name and its file, from the package down
    (`inferbook/model/decode.py`) wherever the library is installed."""
    target = _unwrapped(obj)
    name = getattr(target, "__qualname__", getattr(target, "__name__", repr(target)))
    try:
        parts = Path(inspect.getsourcefile(target) or "").parts
    except TypeError:
        return name, ""
    where = "/".join(parts[parts.index("inferbook"):]) if "inferbook" in parts else parts[-1]
    return name, where


def source_of(obj: Any) -> str:
    """The source text of a function, method or class, dedented, decorators included.

    Raises ValueError for an object without Python source (a builtin, a lambda typed at a
    prompt), since a chapter that asks for a listing must get one.
    """
    try:
        text = inspect.getsource(_unwrapped(obj))
    except (OSError, TypeError) as err:
        raise ValueError(f"no Python source for {obj!r}: {err}") from None
    return textwrap.dedent(text).rstrip("\n")


def module_callees(obj: Any) -> list[Any]:
    """The functions of `obj`'s own module that `obj` calls by name, in order of first use.

    Read from the compiled code's global names (`co_names`), so only module-level functions
    are found — not methods, not functions of other modules — and each once.
    """
    func = _unwrapped(obj)
    code, scope = getattr(func, "__code__", None), getattr(func, "__globals__", {})
    if code is None:
        return []
    found = []
    for name in code.co_names:
        candidate = scope.get(name)
        target = _unwrapped(candidate) if callable(candidate) else None
        if (inspect.isfunction(target) and target is not func and candidate not in found
                and target.__module__ == func.__module__):
            found.append(candidate)
    return found


def _fenced(text: str) -> str:
    """`text` as a Python code block whose fence is longer than any backtick run inside it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}python\n{text}\n{fence}"


class Listing:
    """Source listings that notebooks display as highlighted Markdown (plain text elsewhere)."""

    def __init__(self, objects: list[Any]):
        self.objects = objects

    def _repr_markdown_(self) -> str:
        blocks = []
        for obj in self.objects:
            name, where = _title(obj)
            blocks.append(f"**`{name}`** in `{where}`\n\n{_fenced(source_of(obj))}")
        return "\n\n".join(blocks)

    def __repr__(self) -> str:
        return "\n\n".join("# {} in {}\n{}".format(*_title(obj), source_of(obj))
                           for obj in self.objects)


def show_source(*objects: Any, callees: bool = False) -> Listing:
    """A highlighted listing of each object's source, for the last line of a notebook cell.

    With `callees=True` each object is followed by the functions of its module that it calls
    (`module_callees`), so a short method is shown with the compiled code it dispatches to.
    """
    if not objects:
        raise ValueError("show_source needs at least one function, method or class")
    shown: list[Any] = []
    for obj in objects:
        for item in [obj, *(module_callees(obj) if callees else [])]:
            if all(_unwrapped(item) is not _unwrapped(s) for s in shown):
                source_of(item)                 # fail here, in the cell that asked
                shown.append(item)
    return Listing(shown)
