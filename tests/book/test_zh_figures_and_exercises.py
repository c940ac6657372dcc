"""Figures in both languages, and exercises whose feedback follows the notebook's language.

A figure handed to `glue_figure` is glued as two pictures, English and Chinese; a label left
in English, or Chinese drawn without a CJK font in the book's build, is an error. An exercise
checked in Chinese says the same thing as in English — same ids, statuses, points and
tolerances — in Chinese, and every text of a translated question set has its translation.
"""

from __future__ import annotations

import re

import matplotlib
import pytest

matplotlib.use("agg")
import matplotlib.pyplot as plt  # noqa: E402

from inferbook.book import figures, language, prose  # noqa: E402
from inferbook.grading import evaluate, registry  # noqa: E402
from inferbook.grading.localize import STATUS, question_text, translations  # noqa: E402

TRANSLATED_SETS = ["ch01", "ch11", "ch12", "ch08", "ch09", "ch10", "ch04", "ch02", "ch03",
                   "ch13", "ch14", "ch06", "ch07", "ch05"]
CJK = re.compile(r"[\u4e00-\u9fff]")


def plot():
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.loglog([1, 10, 100], [1, 100, 1e4], label="naive")
    ax.loglog([1, 10, 100], [1, 10, 100], label="KV cache")
    ax.set_xlabel("tokens, n")
    ax.set_title("Work")
    ax.legend()
    return fig


def zh_labels():
    return dict(title="工作量", xlabel="词元数 n", legend=["朴素", "KV 缓存"])


def test_a_figure_is_glued_once_per_language_and_closed():
    fig = plot()
    figures.glue_figure("t_fig", fig, zh=zh_labels())
    en, zh = prose.glued_object("t_fig"), prose.glued_object("t_fig__zh")
    assert en.data[:8] == zh.data[:8] == b"\x89PNG\r\n\x1a\n" and en.data != zh.data
    assert not plt.fignum_exists(fig.number)          # the cell itself shows nothing
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["朴素", "KV 缓存"]


def test_a_label_left_in_english_is_refused():
    with pytest.raises(ValueError, match="Work"):
        figures.glue_figure("t_half", plot(), zh=dict(xlabel="词元数 n", legend=["朴素", "KV"]))
    with pytest.raises(ValueError, match="legend"):
        figures.glue_figure("t_short", plot(), zh=dict(zh_labels(), legend=["朴素"]))
    figures.glue_figure("t_kept", plot(), zh=dict(xlabel="词元数 n", legend=["朴素", "KV 缓存"]),
                        keep=["Work"])


def test_chinese_without_a_font_fails_the_build(monkeypatch):
    monkeypatch.setenv("INFERBOOK_STRICT_CLAIMS", "1")
    monkeypatch.setattr(figures, "cjk_font", lambda: None)
    with pytest.raises(figures.MissingGlyphs):
        figures.glue_figure("t_tofu", plot(), zh=zh_labels())


@pytest.mark.skipif(figures.cjk_font() is None, reason="no CJK font (make installs Noto CJK)")
def test_with_a_cjk_font_every_chinese_character_is_drawn(monkeypatch):
    monkeypatch.setenv("INFERBOOK_STRICT_CLAIMS", "1")
    figures.glue_figure("t_font", plot(), zh=zh_labels())     # raises on a missing glyph


@pytest.mark.parametrize("set_id", TRANSLATED_SETS)
def test_every_text_of_a_translated_question_set_has_its_chinese(set_id):
    table = translations(set_id, "zh")
    for q in registry.questions_in(set_id):
        texts = [q.title, q.hint] + [m.message for m in getattr(q, "mistakes", ())]
        for text in texts:
            assert text in table, f"{q.id}: no Chinese for {text!r}"
            assert CJK.search(table[text]), f"{q.id}: {table[text]!r} is not Chinese"
    fields = [set(re.findall(r"\{(\w+)\}", k)) == set(re.findall(r"\{(\w+)\}", v))
              for k, v in table.items()]
    assert all(fields), "a translated template must keep the English template's fields"


@pytest.mark.parametrize("answer", [..., 1.0, "text", True])
def test_feedback_in_chinese_has_the_same_outcome_in_chinese_words(answer, monkeypatch):
    qid = "ch01.kv_bytes_per_token_llama_2_7b"
    english = evaluate(qid, answer)
    monkeypatch.setenv(language.ENV, "zh")
    chinese = evaluate(qid, answer)
    assert (chinese.id, chinese.status, chinese.points, chinese.score) == \
        (english.id, english.status, english.points, english.score)
    assert CJK.search(chinese.message) and not CJK.search(english.message)
    assert STATUS["zh"][chinese.status] in chinese.line()
    if english.status == "failed" and "Hint" in english.message:
        hint = registry.get(qid).hint
        assert question_text(qid, hint, "zh") in chinese.message


def test_a_known_mistake_and_a_function_answer_are_explained_in_chinese(monkeypatch):
    from inferbook.model.presets import get_preset
    from inferbook.perf import counts
    monkeypatch.setenv(language.ENV, "zh")
    half = counts.kv_bytes_per_token(get_preset("llama-2-7b"), 2) / 2
    result = evaluate("ch01.kv_bytes_per_token_llama_2_7b", half)
    assert result.status == "failed" and "值向量" in result.message
    import numpy as np
    result = evaluate("ch01.filter_logits", lambda logits, k, p: np.asarray(logits))
    assert result.status == "failed" and "第 1 组测试" in result.message and "提示" in \
        result.message
    assert evaluate("ch01.merge_attention", ...).message == "写好函数，然后再运行这个单元格"


def test_what_differs_between_arrays_is_said_in_the_notebooks_language(monkeypatch):
    import numpy as np

    from inferbook.grading.compare import allclose
    want = (np.zeros((2, 3)), np.ones(3))
    wrong = (np.zeros((2, 3)), np.array([1.0, 2.0, 1.0]))
    english = allclose(names=["out", "lse"])(wrong, want)
    monkeypatch.setenv(language.ENV, "zh")
    chinese = allclose(names=["out", "lse"])(wrong, want)
    assert english.startswith("`lse` differs at 1 of 3 entries (first at index (1,): 2")
    assert chinese.startswith("`lse` 在 3 个元素中有 1 个不同（第一个在下标 (1,)：2，应为 1")
    assert not CJK.search(english) and allclose()(wrong, want).startswith("`输出 1` 在")
