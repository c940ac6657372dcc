"""The checker's words in the notebook's language: fixed messages, and each question's texts.

An exercise notebook runs in one language (`inferbook.book.language.current`: the Chinese
Colab twin sets it in its first cell). Two kinds of text reach the student:

- the checker's own sentences ("replace the `...` with your answer", "passed"): written here
  once per language, as templates keyed by their English form (`say`);
- a question's title, hint and known-mistake explanations: written by the question set
  (`grading/chapters/chNN.py`), which translates them in a table named after the language,
  ``ZH = {english text: 中文}``, keyed by the English text itself (`question_text`). A text
  missing from the table shows in English; when the English text changes, its old translation
  no longer matches, and the test of the table (tests/book/test_zh_exercises.py) says so.

Question ids, tolerances and points are the same in every language: only words change.
"""

from __future__ import annotations

import importlib
import re

from inferbook.book.language import DEFAULT, current

__all__ = ["say", "status_word", "question_text", "translations", "MESSAGES"]

STATUS = {"zh": {"passed": "通过", "failed": "未通过", "not attempted": "未作答",
                 "blocked": "暂不评分", "not run": "未运行"}}

# English template -> its translation, per language. Placeholders are str.format fields.
MESSAGES = {"zh": {
    "replace the `...` with your answer": "把 `...` 换成你的答案",
    "{got} is too large (tolerance: {tolerance}). Hint: {hint}":
        "{got} 太大了（容差：{tolerance}）。提示：{hint}",
    "{got} is too small (tolerance: {tolerance}). Hint: {hint}":
        "{got} 太小了（容差：{tolerance}）。提示：{hint}",
    "your answer is {got}": "你的答案是 {got}",
    "expected a number, got {got}": "需要一个数，得到的是 {got}",
    "expected a number, got the text {got} (leave out the quotes)":
        "需要一个数，得到的是文本 {got}（去掉引号）",
    "expected a single number, got {got}": "需要单个数，得到的是 {got}",
    "answer with one of {choices}": "请从 {choices} 中选一个作答",
    "Hint: {hint}": "提示：{hint}",
    "write the function, then run this cell again": "写好函数，然后再运行这个单元格",
    "expected a function, got {got}": "需要一个函数，得到的是 {got}",
    "did not return within {seconds} s on {case}": "在{case}上没有在 {seconds} 秒内返回",
    " and is still running in the background; if this notebook becomes slow, restart the "
    "runtime": "，而且仍在后台运行；如果笔记本变慢，请重启运行时",
    "{message}. Hint: {hint}": "{message}。提示：{hint}",
    "raised {error} on {case}. Hint: {hint}": "在{case}上抛出了 {error}。提示：{hint}",
    "{problem} on {case}. Hint: {hint}": "{case}：{problem}。提示：{hint}",
    "agrees with the library on {n} random tests": "在 {n} 组随机测试上与库的结果一致",
    "test {i} of {n} ({case})": "第 {i} 组测试（共 {n} 组；{case}）",
    "within {percent}%": "{percent}% 以内",
    "exact": "精确",
    " or ": " 或 ",
    "each call ≤ {seconds} s": "每次调用 ≤ {seconds} 秒",
    "there is no question {id}: check the spelling of the id":
        "没有编号为 {id} 的问题：请检查编号的拼写",
    "this criterion is measured on a GPU or TPU; this runtime has only a CPU, so it is not "
    "graded here": "这一项要在 GPU 或 TPU 上测量；当前运行时只有 CPU，所以这里不评分",
    "could not check this answer ({error})": "无法检查这个答案（{error}）",
    "question": "问题", "score": "得分", "tolerance": "容差", "status": "状态", "total": "总计",
    "No question has been checked yet.": "还没有检查过任何问题。",
    "Graded sealed: the grader scores the recorded answers after the notebook has run.":
        "封闭评分：笔记本运行完之后，评分程序才会为记录下的答案打分。",
    "summary: {error}": "summary：{error}",
    # grading/compare.py: what differs between an output and the library's
    "the output": "输出",
    "output {i}": "输出 {i}",
    "{name} should be an array of shape {shape}, got {got}":
        "{name} 应当是形状为 {shape} 的数组，得到的是 {got}",
    "{name} has dtype {dtype}; expected numbers": "{name} 的 dtype 是 {dtype}；需要的是数值",
    "{name} has shape {got}; expected {want}": "{name} 的形状是 {got}；需要的是 {want}",
    "{name} contains NaN (first at index {where})": "{name} 含有 NaN（第一个在下标 {where}）",
    "{name} differs at {n} of {size} entries (first at index {where}: {got} instead of {want}; "
    "tolerance rtol={rtol}, atol={atol})":
        "{name} 在 {size} 个元素中有 {n} 个不同（第一个在下标 {where}：{got}，应为 {want}；"
        "容差 rtol={rtol}，atol={atol}）",
    "return a tuple of {n} arrays ({names}); got {got}":
        "请返回由 {n} 个数组组成的元组（{names}）；得到的是 {got}",
}}


def say(template: str, lang: str | None = None, **values: object) -> str:
    """`template` (an English message of this module's table) in `lang` (default: this
    kernel's), with `values` filled in. A template without a translation stays English."""
    lang = lang or current()
    text = template if lang == DEFAULT else MESSAGES.get(lang, {}).get(template, template)
    return text.format(**values) if values else text


def status_word(status: str, lang: str | None = None) -> str:
    """A result's status ("passed", ...) as the student reads it."""
    lang = lang or current()
    return status if lang == DEFAULT else STATUS.get(lang, {}).get(status, status)


def translations(set_id: str, lang: str) -> dict[str, str]:
    """A question set's table of translations into `lang` ({} if it has none)."""
    if not re.fullmatch(r"ch\d\d", set_id):
        return {}
    try:
        module = importlib.import_module(f"{__package__}.chapters.{set_id}")
    except ImportError:
        return {}
    return dict(getattr(module, lang.upper(), {}))


def question_text(question_id: str, text: str, lang: str | None = None) -> str:
    """One of a question's texts (title, hint, a mistake's message) in `lang`."""
    lang = lang or current()
    if lang == DEFAULT or not text:
        return text
    return translations(question_id.split(".")[0], lang).get(text, text)
