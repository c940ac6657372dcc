"""The machinery of the two editions, on small inputs: selecting a language, gluing values in
both languages, Chinese numbers, figures per language, the editions' configuration and links,
and the Chinese Colab twins."""

from __future__ import annotations

import re
import textwrap
from decimal import Decimal
from pathlib import Path

import jupytext
import nbformat
import pytest

from inferbook.book import bilingual, editions, language, notebooks, present, prose
from inferbook.book.chinese_numbers import to_chinese
from inferbook.book.sphinx_editions import twin_links

ROOT = Path(__file__).resolve().parents[2]

SOURCE = textwrap.dedent("""\
    # %% [markdown]
    # # Title
    #
    # It has {glue:text}`n_params` parameters.

    # %% [markdown] tags=["lang-zh"]
    # # 标题
    #
    # 参数共 {glue:text}`n_params`。

    # %%
    x = 1

    # %% [markdown]
    # Not translated yet.

    # %% [markdown]
    # ```{glue:figure} fig
    # ```

    # %% [markdown] tags=["lang-zh"]
    # ```{glue:figure} fig
    # ```
    """)


def read(text=SOURCE):
    return jupytext.reads(text, fmt="py:percent").cells


def test_each_edition_keeps_its_prose_and_every_code_cell():
    en, zh = bilingual.select(read(), "en"), bilingual.select(read(), "zh")
    assert [c.source.splitlines()[0] for c in en] == ["# Title", "x = 1", "Not translated yet.",
                                                      "```{glue:figure} fig"]
    assert [c.source.splitlines()[0] for c in zh] == ["# 标题", "x = 1", "Not translated yet.",
                                                      "```{glue:figure} fig__zh"]
    assert "{glue:text}`n_params__zh`" in zh[0].source and "tags" not in zh[0].metadata
    assert [c.source for c in en if c.cell_type == "code"] == \
        [c.source for c in zh if c.cell_type == "code"]


@pytest.mark.parametrize("bad", [
    '# %% [markdown] tags=["lang-zh"]\n# 孤儿\n',                         # nothing to translate
    '# %%\nx = 1\n\n# %% [markdown] tags=["lang-zh"]\n# 代码之后\n',            # follows code
    '# %% [markdown]\n# a\n\n# %% [markdown] tags=["lang-zh"]\n# 一\n\n'
    '# %% [markdown] tags=["lang-zh"]\n# 二\n',                               # two translations
    '# %% tags=["lang-zh"]\nx = 1\n',                                         # code in one language
    '# %% [markdown] tags=["lang-fr"]\n# bonjour\n',                          # unknown language
])
def test_a_misplaced_or_unknown_translation_is_refused(bad):
    with pytest.raises(ValueError):
        bilingual.twins(read(bad))


def test_an_untranslated_page_reads_in_english_under_a_note():
    cells = bilingual.edition(read("# %% [markdown]\n# # T\n\n# %%\nx = 1\n"), "zh",
                              nbformat.v4.new_markdown_cell)
    assert cells[0].source == "# T" and cells[1].source == bilingual.UNTRANSLATED["zh"]
    assert bilingual.select_markdown("# Title\n\nText.\n", "zh").startswith(
        "# Title\n\n" + bilingual.UNTRANSLATED["zh"])


def test_markdown_pages_split_at_block_breaks_but_not_inside_code():
    page = ('# T\n\n```\n+++\n```\n\n+++ {"tags": ["lang-zh"]}\n\n# 题\n\n+++\n\nEnd.\n\n'
            '+++ {"tags": ["lang-zh"]}\n\n完。\n')
    blocks = bilingual.markdown_blocks(page)
    assert [b.source for b in blocks] == ["# T\n\n```\n+++\n```", "# 题", "End.", "完。"]
    assert bilingual.select_markdown(page, "en") == "# T\n\n```\n+++\n```\n\nEnd.\n"
    assert bilingual.select_markdown(page, "zh") == "# 题\n\n完。\n"
    with pytest.raises(ValueError, match="JSON"):
        bilingual.markdown_blocks("a\n+++ {tags: [lang-zh]}\nb\n")


def test_a_block_for_every_edition_is_shown_by_both_and_needs_no_twin():
    page = ('# T\n\n+++ {"tags": ["lang-zh"]}\n\n# 题\n\n+++ {"tags": ["lang-all"]}\n\n'
            '| term | 术语 |\n')
    blocks = bilingual.markdown_blocks(page)
    assert [len(t) for _, t in bilingual.twins(blocks)] == [1]      # the title, translated
    assert bilingual.select_markdown(page, "en") == "# T\n\n| term | 术语 |\n"
    assert bilingual.select_markdown(page, "zh") == "# 题\n\n| term | 术语 |\n"
    with pytest.raises(ValueError, match="lang-all"):
        bilingual.twins(bilingual.markdown_blocks('a\n+++ {"tags": ["lang-all", "lang-zh"]}\nb\n'))


def test_glue_stores_every_value_under_each_languages_name():
    present.glue("t_count", present.fmt_count(13.0e6))
    present.glue("t_word", present.bilingual("faster", zh="更快"))
    present.glue("t_time", present.fmt_seconds(0.0123))
    assert (prose.glued("t_count"), prose.glued("t_count__zh")) == ("13.0 million", "1,300 万")
    assert (prose.glued("t_word"), prose.glued("t_word__zh")) == ("faster", "更快")
    assert prose.glued("t_time") == prose.glued("t_time__zh") == "12.3 ms"
    with pytest.raises(ValueError):
        language.glued_name("x", "fr")


SCALE_ZH = {"万亿": 12, "亿": 8, "万": 4, "": 0}
SCALE_EN = {"thousand": 3, "million": 6, "billion": 9, "trillion": 12, "": 0}


def value_of(text: str, scales: dict[str, int]) -> Decimal:
    """The number a formatted text states (an independent reading, for the round trip)."""
    m = re.fullmatch(r"(-?[\d,]+(?:\.\d+)?)\s*(\S*?)\s*(?:tokens/s|词元/秒)?", text.strip())
    assert m and m[2] in scales, text
    return Decimal(m[1].replace(",", "")).scaleb(scales[m[2]])


@pytest.mark.parametrize("n", [0, 7, 999, 12_345, 999_999, 1.0e6, 1.2345e6, 13.0e6, 84.04e6,
                               123.4e6, 1.234e9, 6.74e9, 175.9e9, 2.5e12, 1.0e15])
def test_chinese_numbers_state_exactly_the_english_number(n):
    for english in (present.fmt_count(n), present.fmt_count(n, 2), present.fmt_tokens_per_s(n),
                    present.fmt_rate(n, "tokens/s")):
        chinese = to_chinese(english)
        assert not re.search(r"thousand|million|billion|trillion|tokens", chinese), chinese
        assert value_of(chinese, SCALE_ZH) == value_of(english, SCALE_EN), (english, chinese)


def test_units_chinese_writes_too_are_left_alone():
    for text in ("12.3 ms", "1.5 GB", "820.0 GB/s", "26.0 TFLOPs", "73%", "cpu", "4×4",
                 "8× H100", "2·L·K·H × bytes", "v5e 8×16 slice"):
        assert to_chinese(text) == text
    assert to_chinese("n/a") == "不适用"


@pytest.mark.parametrize("x", [0.5, 1.0, 3.14159, 25.0, 1234.5, 1.0e6])
def test_a_ratio_reads_bei_in_chinese_with_the_english_number(x):
    english = present.fmt_ratio(x)
    chinese = to_chinese(english)
    assert english.endswith("×") and chinese.endswith(" 倍") and "×" not in chinese
    assert Decimal(chinese.removesuffix(" 倍").replace(",", "")) == \
        Decimal(english.removesuffix("×").replace(",", ""))
    present.glue("t_ratio", english)
    assert prose.glued("t_ratio__zh") == chinese
    assert to_chinese(f"{english} (measured)") == f"{chinese} (measured)"


def test_an_edition_is_an_overlay_on_the_english_configuration():
    config, toc = editions.edition_config("zh", ROOT), editions.edition_toc("zh", ROOT)
    assert config["sphinx"]["config"]["inferbook_language"] == "zh"
    assert config["repository"]["path_to_book"] == "zh"
    assert config["repository"]["url"]         # merged from _config.yml, not repeated
    reader = config["sphinx"]["config"]["nb_custom_formats"][".py"]
    assert reader[1]["lang"] == "zh"
    assert Path(config["execute"]["cache"]) == (ROOT / "_build" / ".jupyter_cache").resolve()
    assert all(re.search(r"[\u4e00-\u9fff]", p["caption"]) for p in toc["parts"])
    assert editions.merge({"a": {"b": 1, "c": [1]}}, {"a": {"c": [2]}}) == {"a": {"b": 1,
                                                                                  "c": [2]}}
    with pytest.raises(ValueError):
        editions.edition_config("en", ROOT)


def test_chinese_citations_say_deng_for_et_al():
    from inferbook.book.citations import Reference, author_year_names
    many = Reference("k", ("Austin", "Douglas", "Pope"), "2025", "t")
    two = Reference("k", ("Dao", "Fu"), "2022", "t")
    assert author_year_names(many, "zh") == "Austin 等" and author_year_names(two, "zh") == \
        "Dao 和 Fu"
    assert author_year_names(many) == "Austin et al."


def test_every_page_links_to_its_twin_relatively():
    en = twin_links("chapters/01_x", "en")
    zh = twin_links("chapters/01_x", "zh")
    assert [e["href"] for e in en] == [None, "../zh/chapters/01_x.html"]
    assert [e["href"] for e in zh] == ["../../chapters/01_x.html", None]
    assert twin_links("search", "en")[1]["href"] == "zh/search.html"


def test_a_chinese_twin_sets_its_language_and_links_to_the_chinese_site():
    source = ROOT / "exercises" / "01_sampling_kv_cache.py"
    nb = nbformat.reads(notebooks.colab_notebook(source, ROOT, lang="zh"), as_version=4)
    namespace: dict = {}
    exec(nb.cells[0].source, namespace)          # not on Colab: it only sets the language
    try:
        assert language.current() == "zh"
    finally:
        language.set_language("en")
    assert nb.metadata["inferbook"]["language"] == "zh"
    text = "\n".join(c.source for c in nb.cells)
    assert "[Lienhart, 2023](" in text and "/zh/book/references.html" in text
    assert "BEGIN SOLUTION" not in text and "*你的答案：*" in text
    twin = notebooks.twin_path(source, "zh", ROOT)
    assert twin == ROOT / "zh" / "exercises" / source.with_suffix(".ipynb").name


def test_chinese_lines_are_joined_where_a_browser_would_show_a_space():
    text = ("生成文本就是\n绕着它转——\n并把 {glue:text}`x`\n个参数\n\n- 一\n- 二\n"
            "```python\n# 中文\n# 注释\n```\n:::{note}\n注意\n这里\n:::")
    assert bilingual.join_cjk_lines(text) == (
        "生成文本就是绕着它转——并把 {glue:text}`x`\n个参数\n\n- 一\n- 二\n"
        "```python\n# 中文\n# 注释\n```\n:::{note}\n注意这里\n:::")
    zh = bilingual.select(read(), "zh")
    assert "\n" not in zh[0].source.split("\n\n")[1]          # the paragraph is one line
