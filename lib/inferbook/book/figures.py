"""Figures in the page's language: one figure, drawn once per edition and glued per language.

A figure is the output of a code cell, and the book executes each page once for both of its
editions, so a figure cannot simply carry "the page's" words. Instead a chapter draws it as
usual, with English labels, and hands it to `glue_figure` with the Chinese of each label::

    fig, ax = plt.subplots()
    ax.loglog(n, naive, label="naive"); ax.loglog(n, cached, label="KV cache")
    ax.set_xlabel("tokens generated, n"); ax.set_ylabel("total FLOPs")
    glue_figure("ch1_work", fig, zh=dict(xlabel="生成的词元数 n", ylabel="总 FLOPs",
                                         legend=["朴素采样", "KV 缓存"]))

`glue_figure` renders the figure as it is and glues the picture under ``ch1_work``; then it
puts the Chinese labels in, sets a CJK font, renders again and glues that under
``ch1_work__zh``; the cell itself shows nothing. The prose shows the figure with
```` ```{glue:figure} ch1_work ```` in both languages (the Chinese edition's reader renames it,
`inferbook.book.bilingual`). A label with words that has no Chinese form is an error, so a
figure cannot be half translated; numbers, symbols and math (``$S$``) need none, and words
meant to stay as they are (a model's name) are listed in `keep`.

In the book's build both languages are drawn, and a Chinese figure drawn without a CJK font
(Debian's fonts-noto-cjk, which the Makefile installs) fails it. A reader's notebook draws only
its own language (`inferbook.book.language.current`).
"""

from __future__ import annotations

import io
import re
import warnings
from pathlib import Path
from typing import Any, Mapping, Sequence

from inferbook.book import claims, prose
from inferbook.book.language import DEFAULT, LANGUAGES, current, glued_name

__all__ = ["glue_figure", "cjk_font", "MissingGlyphs"]

KEYS = ("title", "xlabel", "ylabel", "legend", "texts", "suptitle")
PREFERRED = ("Noto Sans CJK SC", "Source Han Sans SC", "Noto Sans SC", "Noto Sans CJK JP",
             "WenQuanYi Zen Hei")
_WORDS = re.compile(r"[A-Za-z]{2,}")


class MissingGlyphs(RuntimeError):
    """A figure's text was drawn without a font that has its characters (boxes instead)."""


def cjk_font() -> str | None:
    """The name of a font with Chinese characters, registering system fonts matplotlib has not
    seen yet (installed after its font cache was built, as Colab's first cell does)."""
    from matplotlib import font_manager as fm

    def known() -> str | None:
        names = {f.name for f in fm.fontManager.ttflist}
        return next((n for n in PREFERRED if n in names),
                    next((n for n in sorted(names) if "CJK" in n), None))
    if (name := known()) is not None:
        return name
    for path in fm.findSystemFonts():
        if re.search(r"(?i)cjk|sourcehan|wqy|notosanssc", Path(path).name):
            try:
                fm.fontManager.addfont(path)
            except (OSError, RuntimeError, ValueError):     # an unreadable file: skip it
                continue
    return known()


def _languages() -> tuple[str, ...]:
    """Every language in the book's build (myst-nb present: both editions render from this
    run), else the kernel's own."""
    try:
        import myst_nb  # noqa: F401
    except ImportError:
        return (current(),)
    return LANGUAGES


def _texts(fig: Any) -> list[Any]:
    """Every text artist of the figure that a reader sees, tick labels included."""
    from matplotlib.text import Text
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


def _relabel(fig: Any, forms: Sequence[Mapping[str, Any]]) -> set[str]:
    """Put each axes' translated labels in; the texts put in."""
    done: set[str] = set()
    if len(forms) > len(fig.axes):
        raise ValueError(f"labels for {len(forms)} axes, but the figure has {len(fig.axes)}")
    for ax, labels in zip(fig.axes, forms):
        unknown = set(labels) - set(KEYS)
        if unknown:
            raise ValueError(f"unknown label keys {sorted(unknown)}; use {', '.join(KEYS)}")
        for key, artist in (("title", ax.title), ("xlabel", ax.xaxis.label),
                            ("ylabel", ax.yaxis.label)):
            if key in labels:
                artist.set_text(labels[key])
                done.add(labels[key])
        if "suptitle" in labels:
            fig.suptitle(labels["suptitle"])
            done.add(labels["suptitle"])
        pairs = [("legend", ax.get_legend().get_texts() if ax.get_legend() else []),
                 ("texts", ax.texts)]
        for key, artists in pairs:
            if key in labels:
                if len(labels[key]) != len(artists):
                    raise ValueError(f"{len(labels[key])} {key} given for {len(artists)}")
                for artist, text in zip(artists, labels[key]):
                    artist.set_text(text)
                    done.add(text)
    return done


def _png(fig: Any) -> tuple[bytes, list[str]]:
    """The figure as PNG, as Jupyter's inline backend shows it; and any missing-glyph warnings."""
    buffer = io.BytesIO()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig.savefig(buffer, format="png", bbox_inches="tight")
    missing = [str(w.message) for w in caught if "missing from font" in str(w.message)]
    return buffer.getvalue(), missing


def _image(png: bytes) -> Any:
    try:
        from IPython.display import Image
    except ImportError:          # a plain Python process: keep the bytes
        return png
    return Image(data=png, format="png")


def _glue(name: str, obj: Any) -> None:
    prose.record(name, obj)
    try:
        from myst_nb import glue as myst_glue
    except ImportError:
        return
    myst_glue(name, obj, display=False)


def glue_figure(name: str, fig: Any, zh: Mapping[str, Any] | Sequence[Mapping[str, Any]],
                keep: Sequence[str] = ()) -> None:
    """Glue `fig` under `name` in English and under ``name__zh`` with the labels `zh` (one
    mapping per axes, or one for a single axes); close it, so the cell shows nothing.

    Keys: title, xlabel, ylabel, legend (its entries in order), texts (the axes' `ax.text`s in
    order), suptitle. Raises ValueError for a label with words left untranslated (unless in
    `keep`), and `MissingGlyphs` in the build for text drawn without a font for it.
    """
    import matplotlib.pyplot as plt

    forms = [zh] if isinstance(zh, Mapping) else list(zh)
    try:
        for lang in _languages():
            if lang == DEFAULT:
                _glue(glued_name(name, lang), _image(_png(fig)[0]))
                continue
            done = _relabel(fig, forms)
            left = [t.get_text() for t in _texts(fig) if t.get_text() not in done
                    and not re.fullmatch(r"\s*\$.*\$\s*", t.get_text())
                    and _WORDS.search(t.get_text()) and t.get_text() not in keep]
            if left:
                raise ValueError(f"figure {name}: no Chinese form for {left}")
            font = cjk_font()
            for text in _texts(fig):
                text.set_fontfamily(["DejaVu Sans", font] if font else ["DejaVu Sans"])
            png, missing = _png(fig)
            if missing:
                message = (f"figure {name}: characters without a font ({missing[0]}); install a "
                           "CJK font (Debian: fonts-noto-cjk)")
                if claims.strict():
                    raise MissingGlyphs(message)
                warnings.warn(message, stacklevel=2)
            _glue(glued_name(name, lang), _image(png))
    finally:
        plt.close(fig)
