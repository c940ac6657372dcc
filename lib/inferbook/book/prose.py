"""Prose with this kernel's numbers, for notebooks that Sphinx never renders (Colab).

On the site a sentence says ``{glue:text}`ch1_params` `` and myst-nb puts in the value the
chapter computed. Colab renders Markdown, not MyST: the Colab twin of such a Markdown cell is a
small code cell, its code hidden as a form, that calls `show_prose` with the same text written
as a template — ``It has {{ch1_params}} parameters`` — and displays it with the values that
`inferbook.book.present.glue` recorded in this kernel.

A sentence may name a value its chapter computes only further down (a summary above the
measurement it summarises). Such a value shows as "…" until the cell that glues it has run;
then the displayed text is updated in place, as Jupyter and Colab allow for display outputs
with an id.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["PLACEHOLDER", "NOT_YET", "record", "glued", "glued_object", "fill", "show_prose"]

# {{name}} in a template; names are those chapters glue (letters, digits, underscores).
PLACEHOLDER = re.compile(r"\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}")
NOT_YET = "…"            # shown for a value that a later cell computes

_values: dict[str, str] = {}
_objects: dict[str, Any] = {}
_pending: list[tuple[Any, str]] = []     # (display handle, template) still showing NOT_YET


def _text(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)


def record(name: str, value: Any) -> None:
    """Keep a glued value for the prose of this kernel; refresh any prose waiting for it."""
    _values[name], _objects[name] = _text(value), value
    for handle, template in list(_pending):
        if name in PLACEHOLDER.findall(template):
            text, missing = fill(template)
            handle.update(_markdown(text))
            if not missing:
                _pending.remove((handle, template))


def glued(name: str) -> str:
    """The text glued under `name` in this kernel (KeyError if nothing was glued yet)."""
    return _values[name]


def glued_object(name: str) -> Any:
    """The object glued under `name` (a figure, for a twin's {glue:figure} cell)."""
    return _objects[name]


def fill(template: str) -> tuple[str, list[str]]:
    """The template with every {{name}} replaced by its glued text; and the names missing."""
    missing: list[str] = []

    def value(m: re.Match) -> str:
        if m[1] in _values:
            return _values[m[1]]
        missing.append(m[1])
        return NOT_YET
    return PLACEHOLDER.sub(value, template), missing


def _markdown(text: str) -> Any:
    from IPython.display import Markdown
    return Markdown(text)


def show_prose(template: str) -> None:
    """Display a Markdown template with this kernel's glued values (see the module doc)."""
    from IPython import get_ipython
    text, missing = fill(template)
    if get_ipython() is None:                  # a plain Python process: print it
        print(text)
        return
    from IPython.display import display
    handle = display(_markdown(text), display_id=True)
    if missing:
        _pending.append((handle, template))
