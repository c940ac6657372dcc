"""The Chinese edition reads as written in Chinese: every source's Chinese text (the pages'
lang-zh cells and blocks, and the library's Chinese strings: glued labels, figure legends,
checkers' feedback, question sets) keeps the glossary's rejected variants and the style rules
of `inferbook.book.zh_terms` out. A failure names the file and the line, and says whether
``python -m inferbook.book.zh_terms fix`` can repair it.

Fast: the sources are read as text, nothing is executed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from inferbook.book import zh_first_use, zh_terms

ROOT = Path(__file__).resolve().parents[2]


def test_no_chinese_text_breaks_a_rule():
    found = zh_terms.findings(ROOT)
    fixable = {r.name for r in zh_terms.rules(ROOT) if r.replacement is not None}
    lines = [f"{f}{'  [zh_terms fix repairs this]' if f.rule in fixable else ''}" for f in found]
    assert not found, "the Chinese text breaks the wording rules:\n" + "\n".join(lines)


def test_every_source_with_chinese_is_read():
    read = {str(p) for p in zh_terms.sources(ROOT)}
    for expected in ("chapters/09_sharding_generation.py", "exercises/14_mixture_of_experts.py",
                     "book/intro.md", "book/errata.py", "lib/inferbook/grading/chapters/ch09.py",
                     "lib/inferbook/grading/localize.py"):
        assert expected in read


def test_the_glossary_lists_rejected_variants_and_no_term_of_its_own_is_one():
    variants = zh_terms.rejected_variants(ROOT)
    assert {v for v, _, _ in variants} >= {"拆分", "批次大小", "对数和指数", "闪存注意力"}
    table = (ROOT / "book" / "notation.md").read_text(encoding="utf-8")
    glossary = table[table.index("| English | 中文 |"):table.index(zh_terms.VARIANTS_HEADING)]
    for variant, use, _ in variants:
        assert variant not in glossary, f"the glossary's own terms use {variant} (use {use})"


def page(tmp_path: Path, name: str, text: str) -> Path:
    (tmp_path / "book").mkdir(exist_ok=True)
    glossary = (ROOT / "book" / "notation.md").read_text(encoding="utf-8")
    (tmp_path / "book" / "notation.md").write_text(glossary, encoding="utf-8")
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return Path(name)


# (source text, rules it breaks: a substring of each finding's rule, in order)
CASES = [
    ("# %% [markdown] tags=[\"lang-zh\"]\n# 每个词元快了 25×，而网格是 4×4。\n", ["ratio"]),
    ("# %% [markdown] tags=[\"lang-zh\"]\n# 一个词元的算术很少；算术强度很低。\n", ["算术"]),
    ("# %% [markdown] tags=[\"lang-zh\"]\n# 按头拆分，批次大小为 8。\n", ["拆分", "批次大小"]),
    ("# %% [markdown] tags=[\"lang-zh\"]\n# 见 seed 002 的读法，以及 scaling book 的附录。\n",
     ["source label", "scaling book"]),
    ('x = {"split over heads, 25×": "按头切分"}\n', []),            # English beside Chinese
    ('title = f"{name}，批次大小 {b}"\n', ["批次大小"]),            # a Chinese string in code
    ("# %% [markdown]\n# Each token is 25× faster; the scaling book (seed 000).\n", []),
    ("# {glue:text}`speedup`× 更快\n", ["glued value"]),
    ("# %% [markdown] tags=[\"lang-zh\"]\n# 输出和对数和\n# 指数。\n", ["line break"]),
]


@pytest.mark.parametrize("text, broken", CASES)
def test_the_rules_find_what_they_should_and_only_there(tmp_path, text, broken):
    name = page(tmp_path, "chapters/x.py", text)
    found = zh_terms.findings(tmp_path, [name])
    assert len(found) == len(broken), found
    for finding, rule in zip(found, broken):
        assert rule in finding.rule and finding.path == str(name) and finding.line >= 1


def test_fix_replaces_only_inside_chinese_text_and_leaves_the_rest(tmp_path):
    text = ("# %% [markdown]\n# The scaling book is 25× faster; split by heads.\n"
            "# %% [markdown] tags=[\"lang-zh\"]\n"
            "# 照 scaling book 的做法，一个词元的算术运算快了 25×，因而有 1.5× 的算术；按头拆分，"
            "对数和指数与 4×4 网格。\n"
            "# seed 000 的读法\n"
            'labels = {"1.5× the arithmetic": "1.5× 的算术", "scaling book": "批次大小"}\n')
    name = page(tmp_path, "chapters/x.py", text)
    changed = zh_terms.fix(tmp_path, [name])
    out = (tmp_path / name).read_text(encoding="utf-8").splitlines()
    assert changed == {str(name): 10}
    assert out[1] == "# The scaling book is 25× faster; split by heads."
    assert out[3] == ("# 照《How to Scale Your Model》的做法，一个词元的计算快了 25 倍，"
                      "因而有 1.5 倍的计算；按头切分，LSE 与 4×4 网格。")
    assert out[5] == ('labels = {"1.5× the arithmetic": "1.5 倍的计算", '
                      '"scaling book": "批量大小"}')
    left = zh_terms.findings(tmp_path, [name])
    assert [f.line for f in left] == [5] and "source label" in left[0].rule   # for a person


def test_the_command_exits_1_on_findings_0_when_clean_and_2_on_bad_input(tmp_path, capsys):
    dirty = page(tmp_path, "chapters/x.py", "# 按头拆分\n")
    assert zh_terms.main(["check", "--root", str(tmp_path), str(dirty)]) == 1
    assert "chapters/x.py:1:" in capsys.readouterr().out
    assert zh_terms.main(["fix", "--root", str(tmp_path), str(dirty)]) == 0
    capsys.readouterr()
    assert zh_terms.main(["check", "--root", str(tmp_path), "chapters/missing.py"]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    assert zh_terms.main(["check", "--root", str(tmp_path / "nowhere")]) == 2
    assert zh_terms.main(["mend"]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 1     # one line per bad call


def test_every_page_glosses_its_first_token():
    assert not zh_first_use.unglossed(ROOT), (
        "a page's first 词元 in Chinese prose is written 词元（token） "
        "(python -m inferbook.book.zh_first_use fix adds it):\n"
        + "\n".join(zh_first_use.unglossed(ROOT)))


# (page source, line of the first counted 词元 or None, glossed)
FIRST_USES = [
    ("# %% [markdown]\n# Each token.\n# %% [markdown] tags=[\"lang-zh\"]\n# 每个词元（token）。\n"
     "# 再一个词元。\n", 4, True),
    ("# %% [markdown] tags=[\"lang-zh\"]\n# `词元` 与 $词元$ 的首个词元延迟。\n# 一个词元。\n",
     3, False),
    ('# %%\nlabel = "词元"\n# %% [markdown] tags=["lang-zh"]\n# ```\n# 词元\n# ```\n# 无\n',
     None, None),
    ('+++ {"tags": ["lang-zh"]}\n\n每个词元都要\n\n+++\n\n词元（token）\n', 3, False),
]


@pytest.mark.parametrize("text, line, glossed", FIRST_USES)
def test_the_first_use_is_found_in_prose_only_and_glossed_in_place(tmp_path, text, line,
                                                                     glossed):
    name = Path("chapters/x.md" if text.startswith("+++") else "chapters/x.py")
    (tmp_path / "chapters").mkdir()
    (tmp_path / name).write_text(text, encoding="utf-8")
    found = zh_first_use.first_uses(tmp_path, [name]).get(str(name))
    assert (found[0], found[2]) == (line, glossed) if line else found is None
    assert len(zh_first_use.unglossed(tmp_path, [name])) == (line is not None and not glossed)
    zh_first_use.gloss(tmp_path, [name])
    assert not zh_first_use.unglossed(tmp_path, [name])
    if line and not glossed:
        lines = (tmp_path / name).read_text(encoding="utf-8").splitlines()
        assert lines[line - 1].count("词元（token）") == 1
        assert (tmp_path / name).read_text(encoding="utf-8").count("（token）") == 1 + (
            "+++" in text)
