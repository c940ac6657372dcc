"""Every measured claim quotes its threshold, from one named value, in code and in both languages.

A claim's threshold once drifted from its words: a floor lowered in the code ("at least 1.5×")
under prose that still promised the old one ("at least doubles"). So each page's calls to
`expect_measured` are read from its source and held to these rules:

- the condition compares against no number typed into it (an index such as ``tpot[8]`` is not
  a threshold): every threshold is a name, and a name bound to a typed number is written in
  capitals (``SPEEDUP_FLOOR = 10``), which is how this test tells a threshold from a
  measurement;
- the claim's own words (its `claim` text) and its `expected` text are f-strings that quote
  each threshold it uses, so the note a reader sees and the error the build raises state the
  number checked;
- each threshold is glued (``glue("ch1_speedup_floor", fmt_ratio(SPEEDUP_FLOOR))``) and the
  glued name appears in the page's English prose and in its Chinese prose;
- no page reads a timing's fastest call (`Timing.min_s`): what a claim compares is medians of
  variants timed in alternation after warm-up.

What no parser can judge — whether the surrounding sentence still says "no slower" beside a
glued "within 25%" — is left to the author; the rules above make the number impossible to
leave out.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from inferbook.book.reader import book_reads

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(p for d in ("book", "chapters", "exercises") for p in (ROOT / d).glob("*.py"))
CAPITALS = re.compile(r"^[A-Z][A-Z0-9_]*$")


def is_number(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


def outside_indices(node: ast.AST):
    """The nodes of an expression, leaving out what sits inside a subscript's index."""
    yield node
    for field, child in ast.iter_fields(node):
        if isinstance(node, ast.Subscript) and field == "slice":
            continue
        for c in child if isinstance(child, list) else [child]:
            if isinstance(c, ast.AST):
                yield from outside_indices(c)


def names_in(node: ast.AST | None) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} if node else set()


def quoted_in(text: ast.AST | None) -> set[str]:
    """The names an f-string's replacement fields use."""
    if not isinstance(text, ast.JoinedStr):
        return set()
    return set().union(*(names_in(v.value) for v in text.values
                         if isinstance(v, ast.FormattedValue)))


def prose(source: str, lang: str) -> str:
    nb = book_reads(source, lang=lang)
    return "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


def claim_problems(source: str) -> tuple[int, list[str]]:
    """How many claims a page makes, and every way they break the rules above."""
    tree = ast.parse(source)          # a py:percent source is Python; its prose is comments
    literal_names = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
                     and is_number(node.value) for t in node.targets if isinstance(t, ast.Name)}
    glued = {}                      # threshold name -> the glued names showing it
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "glue" \
                and len(node.args) >= 2 and isinstance(node.args[0], ast.Constant):
            for name in names_in(node.args[1]):
                glued.setdefault(name, set()).add(node.args[0].value)
    texts = {lang: prose(source, lang) for lang in ("en", "zh")}
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
             and getattr(n.func, "id", getattr(n.func, "attr", None)) == "expect_measured"]
    problems = []
    for call in calls:
        where = f"line {call.lineno}"
        holds = call.args[0] if call.args else None
        words = call.args[1] if len(call.args) > 1 else None
        expected = next((k.value for k in call.keywords if k.arg == "expected"), None)
        if holds is None:
            problems.append(f"{where}: no condition")
            continue
        nodes = list(outside_indices(holds))
        problems += [f"{where}: the condition compares with a typed {n.value}; name it in "
                     "capitals and glue it" for n in nodes
                     if isinstance(n, ast.Constant) and type(n.value) in (int, float)]
        used = {n.id for n in nodes if isinstance(n, ast.Name)}
        problems += [f"{where}: {name} holds a typed number; a threshold's name is in capitals"
                     for name in sorted(used & literal_names) if not CAPITALS.match(name)]
        for name in sorted(n for n in used if CAPITALS.match(n)):
            for label, text in (("claim", words), ("expected", expected)):
                if name not in quoted_in(text):
                    problems.append(f"{where}: the {label} text does not quote {name}")
            keys = glued.get(name, set())
            if not keys:
                problems.append(f"{where}: {name} is never glued into the prose")
            for lang, text in texts.items():
                # The Chinese reader renames a glued name to its Chinese form, name__zh.
                if keys and not any(re.search(rf"`{k}(__zh)?`", text) for k in keys):
                    problems.append(f"{where}: the {lang} prose quotes none of {sorted(keys)} "
                                    f"(the glued {name})")
    return len(calls), problems


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_each_claim_quotes_its_threshold_in_code_and_prose(path):
    text = path.read_text(encoding="utf-8")
    count, problems = claim_problems(text)
    assert count >= text.count("expect_measured(") - text.count("import expect_measured")
    assert not problems, "\n".join(problems)


def fastest_call_reads(source: str) -> list[int]:
    """The lines where a page reads a timing's fastest call (`Timing.min_s`).

    A page's timings are medians of interleaved runs after warm-up: on a shared machine the
    fastest call is whichever variant had the luckiest moment, and a claim comparing two such
    minima once failed on a loaded CI machine with a 3x difference in bytes.
    """
    return [n.lineno for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Attribute) and n.attr == "min_s"]


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_pages_time_with_medians_not_fastest_calls(path):
    assert not fastest_call_reads(path.read_text(encoding="utf-8"))


def test_a_fastest_call_is_found():
    assert fastest_call_reads("t = timing.time_fn(f).median_s") == []
    assert fastest_call_reads("a = 1\nt = timing.time_fn(f).min_s") == [2]


def test_the_book_makes_measured_claims():
    assert sum(claim_problems(p.read_text(encoding="utf-8"))[0] for p in SOURCES) > 0


GOOD = '''# %%
SPEEDUP_FLOOR = 10
speedup = naive_s / cached_s
glue("ch0_floor", f"{SPEEDUP_FLOOR}x")
expect_measured(speedup >= SPEEDUP_FLOOR, f"at least {SPEEDUP_FLOOR}x faster",
                expected=f"at least {SPEEDUP_FLOOR}x", measured=f"{speedup}x")

# %% [markdown]
# The cached step is at least {glue:text}`ch0_floor` faster.

# %% [markdown] tags=["lang-zh"]
# 带缓存的步骤至少快 {glue:text}`ch0_floor`。
'''
PLANTED = {          # each mistake: (right, wrong) replacements in GOOD
    "a typed threshold": [("speedup >= SPEEDUP_FLOOR", "speedup >= 10")],
    "a lower-case threshold": [("speedup >= SPEEDUP_FLOOR", "speedup >= floor"),
                               ("SPEEDUP_FLOOR = 10\n", "SPEEDUP_FLOOR = floor = 10\n")],
    "words that do not quote it": [('f"at least {SPEEDUP_FLOOR}x faster"', '"far faster"')],
    "expected text that does not": [('expected=f"at least {SPEEDUP_FLOOR}x"',
                                     'expected="at least ten times"')],
    "a threshold never glued": [('glue("ch0_floor", f"{SPEEDUP_FLOOR}x")', "")],
    "prose that does not quote it": [("至少快 {glue:text}`ch0_floor`", "快得多")],
}


@pytest.mark.parametrize("mistake", PLANTED)
def test_a_correct_claim_passes_and_a_planted_mistake_is_found(mistake):
    assert claim_problems(GOOD) == (1, [])
    wrong = GOOD
    for before, after in PLANTED[mistake]:
        assert before in wrong, mistake
        wrong = wrong.replace(before, after)
    count, problems = claim_problems(wrong)
    assert count == 1 and problems, mistake
