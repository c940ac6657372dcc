"""A question's words and its key describe the same problem.

A key can grade a different problem from the one its question states — worked problem 6 once
stated the source's expert layout and graded an even split of every weight, and a student who
followed the words failed. Here the layout is read from the question's own text, in both
languages, a student's answer is worked out from those words alone (from the source's counts,
not the library's layout code), and the key must give it full marks, and the even split none.
"""

import math
import re
from pathlib import Path

import jupytext
import pytest

from inferbook.grading import feedback
from inferbook.grading.chapters import ch03
from inferbook.model.presets import get_preset
from inferbook.perf import counts
from inferbook.perf.hardware import get_chip

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "exercises" / "02_performance_models.py"
# What each language says about problem 6's layout: (chips in all, Y, Z, chips of the rest).
LAYOUT_WORDS = {
    "en": (r"\*\*Problem 6\.\*\*",
           r"slice of (\d+) chips, \$Y = (\d+)\$ and\s+\$Z = (\d+)\$.*?\[E_Z, D, F_Y\].*?"
           r"split over all (\d+) chips, and every other weight over the (\d+) chips of \$Y\$"),
    "zh": (r"\*\*题 6\.\*\*",
           r"(\d+) 块芯片的 TPU v5e 8×16 切片上，\$Y = (\d+)\$，\$Z = (\d+)\$.*?\[E_Z, D, F_Y\].*?"
           r"分到全部 (\d+) 块芯片上，其余每个权重则分到\s*\$Y\$ 的 (\d+) 块芯片上"),
}


def problem_text(start: str, lang: str) -> str:
    cells = [c for c in jupytext.read(SOURCE).cells if c.cell_type == "markdown"
             and re.match(start, c.source) and ("lang-zh" in c.metadata.get("tags", []))
             == (lang == "zh")]
    assert len(cells) == 1, (lang, len(cells))
    return re.sub(r"\n# ?|\n", " ", cells[0].source)


@pytest.mark.parametrize("lang", LAYOUT_WORDS)
def test_problem_6_is_graded_in_the_layout_its_words_state(lang):
    start, pattern = LAYOUT_WORDS[lang]
    found = re.search(pattern, problem_text(start, lang), re.S)
    assert found, f"problem 6's {lang} text no longer states its layout as this test reads it"
    chips, Y, Z, experts_over, rest_over = (int(g) for g in found.groups())
    assert chips == Y * Z == experts_over and rest_over == Y
    assert (ch03.WP6["Y"], ch03.WP6["Z"], ch03.WP6["X"]) == (Y, Z, 1)   # the key's layout

    # A student following the words: problem 5's model (16 copies of each MLP), int8.
    base = get_preset("scaling-book-18b")
    mlp = counts.param_counts(base)["mlp"]
    experts, total = 16 * mlp, counts.param_count(base) + 15 * mlp
    per_chip = experts / chips + (total - experts) / rest_over
    v5e = get_chip("TPU v5e")
    answers = {"ch03.wp6_load_time": per_chip / v5e.hbm_bytes_per_s,
               "ch03.wp6_free_hbm": v5e.hbm_bytes - per_chip,
               "ch03.wp6_min_chips": math.ceil(total / v5e.hbm_bytes)}
    for qid, answer in answers.items():
        assert feedback.evaluate(qid, answer).status == "passed", qid
    # ...and one who splits every weight over all the chips does not get the marks.
    even = total / chips
    assert feedback.evaluate("ch03.wp6_load_time", even / v5e.hbm_bytes_per_s).status == \
        "failed"
    assert feedback.evaluate("ch03.wp6_free_hbm", v5e.hbm_bytes - even).status == "failed"
