"""A Sphinx extension for the book's editions: one set of sources, a site per language.

`make book` runs Jupyter Book twice over the same sources: the English site goes to
`_build/html`, the Chinese one (configured by `_config.zh.yml`, see `inferbook.book.editions`)
to `_build/html/zh`. The configuration value ``inferbook_language`` says which edition a build
is. This extension then

- gives each Markdown page (book/*.md) its prose in that language (`bilingual.select_markdown`;
  the notebook pages get theirs from their reader, `inferbook.book.reader.book_reads`);
- links every page to its twin in the other edition, with a language switch at the top of the
  page and in the sidebar (`templates/language-switch.html`) and ``<link rel="alternate">``
  tags, all relative links, so the site works offline and wherever it is served;
- in the Chinese edition, puts Chinese words on the exercise pages' "Show solution" toggles:
  they come from the code cells' metadata, which both editions share with the execution cache.

Loading it also makes measured claims strict for the pages the build executes
(`inferbook.book.claims.strict_by_default`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferbook.book.bilingual import select_markdown
from inferbook.book.claims import strict_by_default
from inferbook.book.language import DEFAULT, HTML_LANG, LANGUAGES, check_language

__all__ = ["setup", "twin_links", "LABELS", "PROMPTS"]

LABELS = {"en": "English", "zh": "中文"}
# Toggle prompts that reach the page from shared cell metadata, in each edition's words.
PROMPTS = {"zh": {"Show solution": "显示解答", "Hide solution": "隐藏解答"}}
TEMPLATE = "language-switch.html"
SIDEBAR = ["navbar-logo.html", TEMPLATE, "icon-links.html", "search-button-field.html",
           "sbt-sidebar-nav.html"]


def twin_links(pagename: str, lang: str) -> list[dict[str, Any]]:
    """The page `pagename` in every edition, seen from `lang`'s edition of it: label, language
    and relative link (None for the page itself). The English edition is the site's root,
    every other edition a folder named after its language."""
    check_language(lang)
    up = "../" * pagename.count("/")                      # from the page to its edition's root
    root = up if lang == DEFAULT else up + "../"          # ... and on to the English root
    links = []
    for other in LANGUAGES:
        href = None if other == lang else \
            root + ("" if other == DEFAULT else f"{other}/") + f"{pagename}.html"
        links.append({"label": LABELS[other], "hreflang": HTML_LANG[other], "href": href})
    return links


def _configure(app: Any, config: Any) -> None:
    check_language(config.inferbook_language)
    config.templates_path = [*config.templates_path, str(Path(__file__).parent / "templates")]
    options = config.html_theme_options
    start = list(options.get("article_header_start", ["toggle-primary-sidebar.html"]))
    if TEMPLATE not in start:
        options["article_header_start"] = [*start, TEMPLATE]
    if not config.html_sidebars:
        config.html_sidebars = {"**": SIDEBAR}


def _select_markdown(app: Any, docname: str, source: list[str]) -> None:
    if Path(app.env.doc2path(docname)).suffix == ".md":
        source[0] = select_markdown(source[0], app.config.inferbook_language)


def _translate_prompts(app: Any, doctree: Any) -> None:
    words = PROMPTS.get(app.config.inferbook_language)
    if not words:
        return
    for node in doctree.findall(lambda n: hasattr(n, "attributes")):
        for key in ("prompt_show", "prompt_hide"):
            if node.attributes.get(key) in words:
                node[key] = words[node[key]]


def _link_twin(app: Any, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    links = twin_links(pagename, app.config.inferbook_language)
    context["inferbook_editions"] = links
    alternates = "".join(f'<link rel="alternate" hreflang="{e["hreflang"]}" href="{e["href"]}">\n'
                         for e in links if e["href"])
    context["metatags"] = context.get("metatags", "") + alternates


def setup(app: Any) -> dict[str, Any]:
    # A build of the book executes what its cache lacks: claims fail it, as in the tests.
    strict_by_default()
    app.add_config_value("inferbook_language", DEFAULT, "env")
    app.connect("config-inited", _configure)
    app.connect("source-read", _select_markdown)
    app.connect("doctree-read", _translate_prompts)
    app.connect("html-page-context", _link_twin)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
