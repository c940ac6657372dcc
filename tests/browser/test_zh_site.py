"""The Chinese edition of the built site (`_build/html/zh`), opened in headless Chromium.

Needs `make book` (both editions). For every page of the table of contents: the Chinese page
exists and says it is Chinese, its math is typeset, no cell shows an error, every image loads,
nothing is fetched from outside, its language switch leads to its English twin (test_site.py
checks the English page's switch), and notebook pages open their Chinese Colab twin, committed
under zh/. On a
translated page the glued values are exactly the English page's, each in its Chinese form
(read from the build's executed notebook: name -> English text, name__zh -> Chinese text),
and its figures are as many. Chinese text is drawn with a font that has the characters: two
different characters render differently, and differently from a character no font has (a
"tofu" box). Screenshots of the Chinese landing page and chapter 1 go to _build/screenshots/.
"""

from __future__ import annotations

import ast
import html
import json
import re
from collections import Counter
from pathlib import Path

import pytest
from test_site import (  # noqa: F401
    SHOTS,
    SITE,
    assert_colab_button_opens,
    browser,
    language_switch_target,
    open_page,
    page,
    server,
    toc_pages,
)

ROOT = Path(__file__).resolve().parents[2]
ZH = SITE / "zh"
EXECUTED = ROOT / "_build" / "jupyter_execute"
TRANSLATED = [p for p in toc_pages() if (ROOT / f"{p}.py").is_file()
              and 'tags=["lang-zh"]' in (ROOT / f"{p}.py").read_text(encoding="utf-8")]


def is_notebook(name: str) -> bool:
    return (ROOT / f"{name}.py").is_file()


@pytest.fixture(scope="module", autouse=True)
def built():
    if not (ZH / "book" / "intro.html").is_file():
        pytest.fail("no Chinese edition in _build/html/zh: run `make book`")


@pytest.mark.parametrize("name", toc_pages())
def test_chinese_page_renders_and_links_to_its_english_twin(page, server, name):  # noqa: F811
    open_page(page, server, f"zh/{name}")
    assert page.evaluate("document.documentElement.lang") == "zh-CN"
    untypeset = page.evaluate("""() => [...document.querySelectorAll('.math')]
        .filter(el => !el.querySelector('mjx-container')).map(el => el.textContent.slice(0, 60))""")
    assert not untypeset, f"math not typeset: {untypeset[:3]}"
    errors = page.evaluate("""() => [...document.querySelectorAll(
        '.cell_output .output.error, .cell_output .output.traceback')].map(el => el.textContent)""")
    assert not errors and "Traceback (most recent call last)" not in page.inner_text("body")
    broken = page.evaluate("""() => [...document.images]
        .filter(img => !(img.complete && img.naturalWidth > 0)).map(img => img.src)""")
    assert not broken, f"images failed to load: {broken}"
    assert language_switch_target(page) == f"{server}/{name}.html"
    if is_notebook(name):
        assert_colab_button_opens(page, name, edition="zh/")
    assert not page.outside_requests, page.outside_requests


def straight(text: str) -> str:
    """`text` with the typographic quotes Sphinx's smartquotes puts in (XLA’s) made straight, as
    the glued value has them."""
    return text.translate(str.maketrans("‘’“”", "''\"\""))


def pasted(path: Path) -> tuple[list[str], int]:
    """The glued texts a built page shows, in order, and how many images its article has."""
    text = path.read_text(encoding="utf-8")
    article = text[text.index('<article'):text.index('</article>')]
    values = [straight(html.unescape(re.sub(r"<[^>]+>", "", v)))
              for v in re.findall(r'<span class="pasted-text">(.*?)</span>', article, re.S)]
    return values, len(re.findall(r"<img\b", article))


def glued(name: str) -> dict[str, str]:
    """name -> text of every value the page's execution glued (myst-nb's record of the build:
    `_build/jupyter_execute/<page>.glue.json`, one display output per name)."""
    path = EXECUTED / f"{name}.glue.json"
    if not path.is_file():              # a page that glues nothing
        return {}
    outputs = json.loads(path.read_text(encoding="utf-8"))
    return {key: straight(ast.literal_eval(o["data"]["text/plain"]))
            for key, o in outputs.items()
            if "text/plain" in o.get("data", {}) and o["data"]["text/plain"][:1] in "'\""}


@pytest.mark.parametrize("name", TRANSLATED)
def test_a_translated_page_shows_the_english_pages_values_in_chinese_form(name):
    (en, en_images), (zh, zh_images) = pasted(SITE / f"{name}.html"), pasted(ZH / f"{name}.html")
    values = glued(name)
    forms = {}
    for key, text in values.items():
        if not key.endswith("__zh") and f"{key}__zh" in values:
            forms.setdefault(text, set()).add(values[f"{key}__zh"])
    assert bool(en) == bool(values), f"{name}: glued values missing from the English page"
    ambiguous = {v: f for v, f in forms.items() if len(f) > 1}
    assert not ambiguous, ambiguous
    expected = Counter(next(iter(forms[v])) for v in en)
    extra, short = sorted(Counter(zh) - expected), sorted(expected - Counter(zh))
    assert Counter(zh) == expected, (f"{name}: the Chinese page shows {extra} beyond, {short} "
                                     "short of, the English page's values")
    assert zh_images == en_images


def test_chinese_text_is_drawn_with_a_font_that_has_it(page, server):  # noqa: F811
    open_page(page, server, "zh/chapters/01_sampling_kv_cache")
    # Draw single characters in the page's own font: with no font for them, each would be the
    # same empty box as a private-use character, which no font has.
    pixels = page.evaluate("""() => {
        const font = getComputedStyle(document.querySelector('article p')).fontFamily;
        const draw = ch => { const c = document.createElement('canvas'); c.width = c.height = 40;
            const g = c.getContext('2d'); g.font = `32px ${font}`; g.fillText(ch, 2, 32);
            return Array.from(g.getImageData(0, 0, 40, 40).data).join(','); };
        return {zhong: draw('中'), wen: draw('文'), tofu: draw('\\uE000'), font}; }""")
    assert pixels["zhong"] != pixels["tofu"] and pixels["wen"] != pixels["tofu"], pixels["font"]
    assert pixels["zhong"] != pixels["wen"], "Chinese characters render as identical boxes"
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "zh_chapter.png"), full_page=False)
    open_page(page, server, "zh/book/intro")
    page.screenshot(path=str(SHOTS / "zh_landing.png"), full_page=False)
    assert (SHOTS / "zh_chapter.png").stat().st_size > 10_000
