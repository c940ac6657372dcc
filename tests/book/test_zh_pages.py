"""The Chinese edition's sources: every translated page is whole, in the glossary's terms,
with exactly the English page's glued values, and with the English page's code cells.

What is checked, page by page (chapters, exercises and front matter, .py and .md alike):

- the pages listed in TRANSLATED are those that hold Chinese prose; in each of them every
  English Markdown cell has its Chinese twin (a page is translated whole or not at all);
- each Chinese cell shows the same glued values as its English cell (by name: the Chinese
  edition renders name__zh, the same number in Chinese form);
- a glossary term (book/notation.md) used in an English cell appears, in its glossary Chinese
  form, in the Chinese cell — unless KEPT_IN_ENGLISH says why not;
- a Chinese cell types no derived number (the rule of test_typed_numbers, in Chinese: 倍, 万,
  亿, 百分之, 秒 ...);
- read in either language, every page of the table of contents has the same code cells, so
  jupyter-cache finds one execution for both editions: the Chinese build executes nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

import jupytext
import pytest
import yaml

from inferbook.book.bilingual import GLUE_REFERENCE, markdown_blocks, translated, twins

ROOT = Path(__file__).resolve().parents[2]

# The pages with a Chinese twin. When every page of _toc.yml is here, set REQUIRE_ALL.
TRANSLATED = ["book/intro.md", "chapters/01_sampling_kv_cache.py",
              "exercises/01_sampling_kv_cache.py", "chapters/11_inference_engine.py",
              "chapters/12_paged_kv_prefix_caching.py", "exercises/11_serving.py",
              "chapters/08_sharding_prefill.py", "chapters/09_sharding_generation.py",
              "chapters/10_weight_stationary_2d.py", "exercises/08_many_chips.py",
              "book/hardware.py", "chapters/04_inference_arithmetic.py",
              "exercises/02_performance_models.py", "chapters/03_latency_throughput_memory.py",
              "chapters/02_rooflines.py", "book/how_to_run.md", "book/estimate_reference.py",
              "book/instructors.md", "book/references.md", "book/errata.py",
              "book/notation.md", "chapters/13_speculative_decoding.py",
              "exercises/14_mixture_of_experts.py", "chapters/14_mixture_of_experts.py",
              "chapters/06_flash_attention.py", "chapters/07_decoding_kernels.py",
              "exercises/06_kernels.py", "exercises/05_kv_cache_size.py",
              "chapters/05_kv_cache_size.py", "book/estimator.md"]
REQUIRE_ALL = True

# page -> {glossary term: why its Chinese cell does not use the glossary's form}
KEPT_IN_ENGLISH: dict[str, dict[str, str]] = {
    "book/instructors.md": {"key": "'answer keys' are the graders' answers (答案), not "
                                   "attention's keys"},
}

# page -> {typed phrase in a Chinese cell: why it is typed} (as ALLOWED in test_typed_numbers)
ALLOWED_ZH = {
    "exercises/01_sampling_kv_cache.py": {
        "七十亿": "the model's name (7B) in words, as the English cell's 'seven billion'",
    },
    "chapters/03_latency_throughput_memory.py": {
        "300亿": "the scaling book's quiz model (30 billion parameters), stated as the question "
                "states it",
    },
}


def toc_pages() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]] + [c["file"] for p in toc["parts"] for c in p["chapters"]]
    return [next(f"{f}{s}" for s in (".py", ".md") if (ROOT / f"{f}{s}").is_file())
            for f in files]


def cells(page: str) -> list:
    path = ROOT / page
    if path.suffix == ".py":
        return jupytext.read(path).cells
    return markdown_blocks(path.read_text(encoding="utf-8"))


def pairs(page: str) -> list[tuple[str, str]]:
    """(English text, Chinese text) of every translated cell of a page."""
    cs = cells(page)
    return [(cs[en].source, cs[tr["zh"]].source) for en, tr in twins(cs) if "zh" in tr]


# What a reader does not read as prose: roles, inline code, math, link targets, fences.
HIDDEN = re.compile(r"\{[a-zA-Z][\w:-]*\}`[^`]*`|`[^`\n]*`|\$\$.*?\$\$|\$[^$]*\$|\]\([^)]*\)"
                    r"|^\s*(```|:::).*$", re.S | re.M)


def prose(text: str) -> str:
    return HIDDEN.sub(" ", text)


# The glossary ----------------------------------------------------------------------------

def glossary() -> list[tuple[str, bool, list[str]]]:
    """(English term, is an abbreviation, its Chinese forms) for every glossary entry."""
    text = (ROOT / "book" / "notation.md").read_text(encoding="utf-8")
    table = text[text.index("| English | 中文 |"):].splitlines()[2:]
    terms = []
    for row in table:
        if not row.startswith("|"):
            break
        english, chinese = (c.strip() for c in row.strip("|").split("|")[:2])
        zh = [re.sub(r"（[^）]*）|\([^)]*\)", "", v).strip() for v in chinese.split(" / ")]
        en = [v.strip() for v in english.split(" / ")]
        for i, variant in enumerate(en):
            forms = [zh[i]] if len(zh) == len(en) else zh
            if m := re.search(r"\(([^)]*)\)", variant):
                for abbreviation in m[1].split(","):
                    terms.append((abbreviation.strip(), True, forms))
                variant = variant[:m.start()].strip()
            terms.append((variant, False, forms))
    return terms


def term_pattern(term: str, abbreviation: bool) -> re.Pattern:
    words = [re.escape(w) for w in re.split(r"[\s-]+", term)]
    last = words[-1]
    if not abbreviation:        # a plural or a verb form of the last word counts too
        last = re.sub(r"s$", "", last)
        last = last[:-1] + "(?:y|ys|ies|ied|yed)" if last.endswith("y") \
            else last + "(?:s|es|d|ed)?"
    body = r"[\s-]+".join(words[:-1] + [last])
    return re.compile(rf"(?<![\w-]){body}(?![\w])", 0 if abbreviation else re.I)


def terms_used(english: str) -> list[tuple[str, bool, list[str]]]:
    """The glossary terms an English text uses, longest first, each span counted once."""
    text, found = prose(english), []
    for term, abbreviation, forms in sorted(glossary(), key=lambda t: -len(t[0])):
        pattern = term_pattern(term, abbreviation)
        if pattern.search(text):
            found.append((term, abbreviation, forms))
            text = pattern.sub(lambda m: " " * len(m[0]), text)
    return found


def missing_terms(english: str, chinese: str, kept: dict[str, str]) -> list[str]:
    zh = re.sub(r"\s+", "", prose(chinese))
    missing = []
    for term, abbreviation, forms in terms_used(english):
        if term in kept:
            continue
        if any(re.sub(r"\s+", "", f) in zh for f in forms):
            continue
        if abbreviation and term in zh:
            continue
        missing.append(f"{term!r} -> {' / '.join(forms)}")
    return missing


# Numbers typed in Chinese ----------------------------------------------------------------

NUMERAL = "零一二两三四五六七八九十百千"
NUMBER = r"\d[\d,]*(?:\.\d+)?"
DERIVED_ZH = re.compile(rf"{NUMBER}\s*倍|[{NUMERAL}]+倍|{NUMBER}\s*(?:万亿|万|亿)(?!\w*[A-Za-z])"
                        rf"|[{NUMERAL}]+(?:万亿|万|亿)|百分之[{NUMERAL}]+"
                        rf"|{NUMBER}\s*(?:秒|毫秒|微秒|纳秒)|{NUMBER}\s*[千兆吉太]字节")


def typed_numbers_zh(text: str) -> list[str]:
    return [re.sub(r"\s+", "", m[0]) for m in DERIVED_ZH.finditer(prose(text))]


# Tests -----------------------------------------------------------------------------------

@pytest.mark.parametrize("page", toc_pages())
def test_a_page_is_translated_whole_or_not_at_all(page):
    cs = cells(page)
    is_translated = translated(cs, "zh")        # also checks where each Chinese cell stands
    assert is_translated == (page in TRANSLATED), \
        f"{page}: {'holds' if is_translated else 'holds no'} Chinese prose; update TRANSLATED"
    if is_translated:
        untranslated = [cs[en].source[:60] for en, tr in twins(cs) if "zh" not in tr]
        assert not untranslated, f"{page}: English cells without a Chinese twin: {untranslated}"


def test_every_page_is_translated():
    remaining = sorted(set(toc_pages()) - set(TRANSLATED))
    if not REQUIRE_ALL:
        pytest.skip(f"{len(remaining)} pages are not translated yet (REQUIRE_ALL is off)")
    assert not remaining, f"pages without their Chinese twin: {remaining}"


@pytest.mark.parametrize("page", TRANSLATED)
def test_a_chinese_cell_shows_the_glued_values_of_its_english_cell(page):
    for english, chinese in pairs(page):
        names = [{m["name"] or m["dname"] for m in GLUE_REFERENCE.finditer(t)}
                 for t in (english, chinese)]
        assert names[0] == names[1], (f"{page}: the Chinese cell glues {sorted(names[1])}, its "
                                      f"English cell {sorted(names[0])}: {english[:80]!r}")


@pytest.mark.parametrize("page", TRANSLATED)
def test_a_chinese_cell_uses_the_glossary_terms_of_its_english_cell(page):
    kept = KEPT_IN_ENGLISH.get(page, {})
    for english, chinese in pairs(page):
        missing = missing_terms(english, chinese, kept)
        assert not missing, (f"{page}: the Chinese of {english[:70]!r} lacks the glossary's "
                             f"{missing} (or list the term in KEPT_IN_ENGLISH with the reason)")


@pytest.mark.parametrize("page", TRANSLATED)
def test_a_chinese_cell_types_no_derived_number(page):
    allowed = ALLOWED_ZH.get(page, {})
    typed = [n for _, chinese in pairs(page) for n in typed_numbers_zh(chinese)
             if n not in allowed]
    assert not typed, f"{page}: Chinese prose types numbers the library computes: {typed}"


def test_every_chinese_allowance_is_still_needed_and_says_why():
    for page, phrases in ALLOWED_ZH.items():
        present = {n for _, chinese in pairs(page) for n in typed_numbers_zh(chinese)}
        for phrase, why in phrases.items():
            assert phrase in present and len(why) > 15, (page, phrase)


@pytest.mark.parametrize("page", [p for p in toc_pages() if p.endswith(".py")])
def test_both_editions_of_a_page_hit_the_same_execution(page, tmp_path):
    from jupyter_cache import get_cache

    from inferbook.book.reader import book_reads
    cache, text = get_cache(str(tmp_path / "cache")), (ROOT / page).read_text(encoding="utf-8")
    hashes = {lang: cache.create_hashed_notebook(book_reads(text, lang=lang))[1]
              for lang in ("en", "zh")}
    assert hashes["en"] == hashes["zh"], f"{page}: the two editions' code cells differ"


@pytest.mark.parametrize("english,chinese,missing", [
    ("The KV cache of a prefill", "预填充的 KV 缓存", []),
    ("The KV cache of a prefill", "预填充的缓存", ["'KV cache' -> KV 缓存"]),
    ("time to first token (TTFT)", "TTFT", ["'time to first token' -> 首个词元延迟"]),
    ("the TTFT of a long prompt", "长提示词的 TTFT", []),
    ("a memory-bound decode step", "一个内存受限的解码步骤", []),
    ("sliding-window attention", "滑动窗口注意力", []),
    ("FlashAttention reads `memory` and $S$ tokens", "FlashAttention 读取词元", []),
])
def test_the_glossary_check_finds_missing_terms_and_only_those(english, chinese, missing):
    assert missing_terms(english, chinese, {}) == missing


def test_the_chinese_number_scan_catches_typed_ratios_and_sums():
    assert typed_numbers_zh("快了 8.2 倍，约三倍，共 1,300 万个参数，占百分之十，耗时 2 毫秒") == \
        ["8.2倍", "三倍", "1,300万", "百分之十", "2毫秒"]
    assert typed_numbers_zh("{glue:text}`x` 倍，`3 倍`，$2^3$ 倍，2 字节，多少倍，几百次") == []


@pytest.mark.parametrize("twin", sorted((ROOT / "zh").rglob("*.ipynb")),
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_myst_survives_in_a_chinese_twin(twin):
    import nbformat
    from test_colab_twins import rendered

    from inferbook.book.colab_markdown import MYST_SYNTAX
    nb = nbformat.read(twin, as_version=4)
    for cell in nb.cells:
        found = MYST_SYNTAX.search(rendered(cell))
        assert not found, f"{twin.name}: {found[0]!r}"


def test_every_source_has_a_chinese_twin_that_starts_by_setting_the_language():
    import nbformat

    from inferbook.book import notebooks
    for source in notebooks.sources(ROOT):
        nb = nbformat.read(notebooks.twin_path(source, "zh", ROOT), as_version=4)
        assert nb.cells[0].source == notebooks.install_cell_source(
            ROOT, "zh", notebooks.models_used(source))
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")
