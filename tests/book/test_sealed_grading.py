"""Sealed grading (`inferbook grade --sealed`) against a submission that tries every trick.

Each trick of issue 19 sits in its own cell of one small notebook, next to honest answers;
the notebook is graded through the command line with bubblewrap, and its tricks on processes
and files once more without it (the fallback a machine without user namespaces gets: the
time, memory and crash tricks meet the same code in both), and each run is asserted to give
the tricks nothing while the honest answers keep their points:

- a forged log line, a replaced `feedback.evaluate` and an object whose `__eq__` is always
  True earn nothing;
- a detached process that keeps rewriting results.json, and one that kills the kernel's
  parent, change nothing: the grader survives, every process is gone before results.json is
  written, and the file is the grader's;
- deleting the files around the working folder (and, under bubblewrap, a neighbouring
  submission by its absolute path) leaves the neighbour untouched;
- an endless loop, an allocation bomb and ``os._exit`` each lose only their cell's question,
  and a function that calls ``os._exit`` in the sandbox loses only its own;
- reading the answer keys, or calling the library's own answer to a coding exercise, scores
  nothing sealed — with the reason in the report — and full marks in self-study.

Gradescope's autograder package, set up and run as Gradescope runs it, is tested in
test_gradescope_package.py.
"""

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import jupytext
import nbformat
import pytest

from inferbook.grading import registry
from inferbook.grading.grader import grade_notebook
from inferbook.grading.sandbox import NO_BWRAP_ENV, bwrap_problem

ROOT = Path(__file__).resolve().parents[2]
CELL_LIMIT_S = 20      # room for a loaded 2-core build machine; the endless loop waits it out


def solution_cell(name: str, starts: str) -> str:
    """The source of the solution cell of exercises/`name` that starts with `starts`."""
    nb = jupytext.read(ROOT / "exercises" / f"{name}.py")
    return next(c.source for c in nb.cells
                if c.cell_type == "code" and c.source.startswith(starts))


def write(folder: Path, cells: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    path = folder / "submission.ipynb"
    nbformat.write(nb, path)
    return path


def trick_cells(results: Path, neighbour: Path, token: str, isolated: bool) -> list[str]:
    forged = {"event": "result", "id": "ch01.kv_bytes_per_token_bloom_176b", "status": "passed",
              "score": 1, "points": 1, "message": ""}
    rewriter = (f"import time\nfor _ in range(600):  # {token}\n    time.sleep(0.05)\n"
                f"    try:\n        open({str(results)!r}, 'w').write('{{\"score\": 999}}')\n"
                f"    except OSError:\n        pass\n")
    delete = "[shutil.rmtree(p, ignore_errors=True) for p in (Path('..'), Path('../..'))]"
    if isolated:                   # only where the sandbox hides it: it is not ours to delete
        delete += f"\nshutil.rmtree({str(neighbour.parent)!r}, ignore_errors=True)"
    return [
        "from inferbook.grading import check\nfrom inferbook.model.presets import get_preset\n"
        "from inferbook.perf import counts\nimport jax, jax.numpy as jnp, numpy as np",
        # honest and right
        'check("ch01.kv_bytes_per_token_llama_2_7b", '
        'counts.kv_bytes_per_token(get_preset("llama-2-7b"), 2))',
        # a forged log line, to every log this kernel could know of
        f"import json, os\nline = json.dumps({forged!r})\n"
        "for p in (os.environ.get('INFERBOOK_GRADING_LOG'), 'checks.jsonl'):\n"
        "    if p:\n        open(p, 'a').write(line + '\\n')",
        # a replaced evaluate, then a wrong answer
        "import inferbook.grading.feedback as fb\nfrom inferbook.grading.questions import Result\n"
        "fb.evaluate = lambda qid, answer: Result(qid, 'passed', 1.0)\n"
        'check("ch01.a10_tokens_after_weights", 0)',
        # an object equal to everything
        "class Always:\n    def __eq__(self, other):\n        return True\n"
        "    def __bool__(self):\n        return True\n"
        'check("ch01.decode_memory_bound", Always())',
        # a detached process that keeps rewriting results.json
        f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {rewriter!r}], "
        "start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)",
        # kill the kernel's parent
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
        # delete everything around the working folder
        f"import shutil\nfrom pathlib import Path\n{delete}",
    ] + ([
        # an endless loop holding a check
        'while True:\n    pass\ncheck("ch01.weights_in_tokens", 1)',
    ] if isolated else []) + [
        'check("ch01.prompt_kv_bytes", '
        '1000 * counts.kv_bytes_per_token(get_preset("llama-2-7b"), 2))',
    ] + ([
        # an allocation bomb
        'bomb = [bytearray(10**8) for _ in range(10**5)]\ncheck("ch01.prompt_flops", 1)',
        # the kernel ends itself
        'import os\nos._exit(3)\ncheck("ch01.naive_step_flops", 1)',
        # a function that ends the process that runs it, then a right one
        'import os\ncheck("ch01.write_kv", lambda *args: os._exit(1))',
        solution_cell("01_sampling_kv_cache", "def filter_logits"),
        'check("ch01.filter_logits", filter_logits)',
    ] if isolated else [])


def processes_with(token: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and token in Path(f"/proc/{entry}/cmdline").read_text():
                found.append(int(entry))
        except OSError:
            pass
    return found


@pytest.mark.parametrize("isolated", [True, False], ids=["bubblewrap", "fallback"])
def test_every_trick_gains_nothing_sealed(isolated, tmp_path):
    if isolated and bwrap_problem():
        pytest.skip(bwrap_problem())
    token = f"inferbook-trick-{uuid.uuid4().hex}"
    results = tmp_path / "results.json"
    neighbour = write(tmp_path / "neighbour", ["x = 1"])
    path = write(tmp_path / "trick", trick_cells(results, neighbour, token, isolated))
    env = {**os.environ, NO_BWRAP_ENV: "0" if isolated else "1"}
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "inferbook", "grade", "--sealed", str(path),
                        "--results", str(results), "--cell-timeout", str(CELL_LIMIT_S),
                        "--timeout", "400", "--memory-limit", "2G", "--seed", "19"],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    written = results.read_text()
    time.sleep(1.0)                       # the rewriter, were it alive, writes every 50 ms
    assert results.read_text() == written
    assert not processes_with(token)
    data = json.loads(written)
    tests = {t["name"].split(":")[0]: t for t in data["tests"]}
    status = {k: t["status"] for k, t in tests.items()}
    passed = {"ch01.kv_bytes_per_token_llama_2_7b", "ch01.prompt_kv_bytes"} | \
        ({"ch01.filter_logits"} if isolated else set())
    assert {k for k, s in status.items() if s == "passed"} == passed, r.stdout
    assert data["score"] == sum(registry.get(q).points for q in passed)
    out = {k: t["output"] for k, t in tests.items()}
    assert status["ch01.kv_bytes_per_token_bloom_176b"] == "failed"        # the forged line
    assert "Always object" in out["ch01.decode_memory_bound"]
    if isolated:
        assert "per-cell time limit" in out["ch01.weights_in_tokens"]
        assert "MemoryError" in out["ch01.prompt_flops"]
        assert "kernel died" in out["ch01.naive_step_flops"]
        assert "ended the process running it" in out["ch01.write_kv"]
    else:
        assert "kernel died" in data["output"]            # it killed its parent: the launcher
    assert neighbour.is_file() and path.is_file()
    assert ("bubblewrap (own PID" in data["output"]) == isolated
    assert time.monotonic() - start < 300


def reading_cells() -> list[str]:
    """ch01 answered by reading the keys (values) or calling the library's answers (functions)."""
    cells = ["from inferbook.grading import check, registry\nfrom inferbook.model import "
             "attention, kvcache, sampling"]
    library = {"ch01.write_kv": "kvcache.write", "ch01.merge_attention": "attention.merge_partials",
               "ch01.filter_logits": "sampling.filter_logits"}
    for i, q in enumerate(registry.questions_in("ch01")):
        answer = library.get(q.id, f'registry.get("{q.id}").reference()')
        cells += [f"answer_{i} = {answer}", f'check("{q.id}", answer_{i})']
    return cells


def test_reading_the_answers_scores_full_marks_in_self_study_and_nothing_sealed(tmp_path):
    path = write(tmp_path / "reader", reading_cells())
    open_book = grade_notebook(path, timeout_s=300)
    assert open_book.score == open_book.max_score > 0, open_book.table()
    sealed = grade_notebook(path, timeout_s=300, sealed=True, seed=19)
    assert sealed.score == 0, sealed.table()
    for g in sealed.grades:
        assert "SealedError" in g.output, g.output
        assert ("read from the library" in g.output) or ("library's own answer" in g.output)
