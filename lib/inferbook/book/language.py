"""The languages of the book, and the language of this kernel.

The book is written once, with its prose in English and in Chinese (`inferbook.book.bilingual`
says how a source holds both). Code, and so every computed number, is shared. A few things a
code cell produces are words, though: the feedback of an exercise's `check`, the labels of a
figure, a glued value such as "13.0 million". Those follow the *kernel's* language:

- a Chinese Colab notebook sets it in its first cell (``INFERBOOK_LANGUAGE=zh``);
- anything else — an English notebook, a test, the book's own execution — runs in English.

The book's build executes each page once and renders it in both languages, so what a page
shows in a language other than the kernel's is glued separately (`glued_name`): every glued
value also exists under a name per language, in that language's form.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

__all__ = ["LANGUAGES", "DEFAULT", "ENV", "HTML_LANG", "current", "set_language", "check_language",
           "using", "glued_name", "Bilingual", "bilingual", "localized"]

LANGUAGES = ("en", "zh")          # the first is the default, and the language of the sources
DEFAULT = LANGUAGES[0]
ENV = "INFERBOOK_LANGUAGE"
HTML_LANG = {"en": "en", "zh": "zh-CN"}     # the HTML lang attribute of each edition


def check_language(lang: str) -> str:
    """`lang` if it is one of the book's languages, else ValueError."""
    if lang not in LANGUAGES:
        raise ValueError(f"unknown language {lang!r}; the book is written in "
                         f"{', '.join(LANGUAGES)}")
    return lang


def current() -> str:
    """This kernel's language: ``$INFERBOOK_LANGUAGE`` if it names one of ours, else English.

    Read at every call, so setting the variable in a notebook's first cell is enough. An
    unknown value falls back to English rather than raising: this runs inside `check`, which
    must never fail on a reader.
    """
    lang = os.environ.get(ENV, "").strip().lower()
    return lang if lang in LANGUAGES else DEFAULT


def set_language(lang: str) -> None:
    """Make `lang` this kernel's language (and its subprocesses')."""
    os.environ[ENV] = check_language(lang)


@contextmanager
def using(lang: str) -> Iterator[None]:
    """Run a block in `lang` (a grader scoring a Chinese notebook), then restore the language."""
    before = os.environ.get(ENV)
    set_language(lang)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = before


def glued_name(name: str, lang: str) -> str:
    """The name a glued value has in `lang`'s edition: ``name`` in English, ``name__zh`` ...

    Prose is written with the English name in both languages; the Chinese edition's reader
    renames it (`inferbook.book.bilingual`), and `inferbook.book.present.glue` stores both.
    """
    return name if check_language(lang) == DEFAULT else f"{name}__{lang}"


class Bilingual(str):
    """A piece of text with its other languages' forms: ``str()`` is the English.

    Glue one where the value is a word rather than a number (``bilingual("faster", zh="更快")``)
    and each edition shows its own form.
    """

    forms: dict[str, str]

    def __new__(cls, en: str, **forms: str) -> "Bilingual":
        for lang in forms:
            check_language(lang)
        obj = super().__new__(cls, en)
        obj.forms = {DEFAULT: str(en), **forms}
        return obj


def bilingual(en: str, **forms: str) -> Bilingual:
    """Text in English with its forms in other languages: ``bilingual("yes", zh="是")``."""
    return Bilingual(en, **forms)


def localized(text: str, lang: str | None = None) -> str:
    """`text` in `lang` (default: this kernel's): its form if it is `Bilingual`, else itself."""
    lang = check_language(lang or current())
    if isinstance(text, Bilingual):
        return text.forms.get(lang, str(text))
    return text
