"""Run every Colab twin as a Colab reader would: oldest JAX, installed library, empty folder.

`make test-colab` builds a fresh environment (`.venv-colab`: jax 0.7.2, as Colab ships, and
the library installed from a wheel, not from the checkout) and runs this script with it. Each
committed .ipynb twin — chapters, front matter, exercises (the student version) — is executed
in a new kernel of that environment, from an empty working folder, with the book's data files
in the download cache where `inferbook.book.bookdata` looks on Colab, and with measured claims
strict unless INFERBOOK_STRICT_CLAIMS=0 (`inferbook.book.claims.strict_by_default`: a real
reader's Colab gets a note instead; the test holds the twins to the build's standard). A twin
fails if a cell raises, or if the prose it displays still holds a placeholder ("…" for a value
never computed, "{{") or any MyST syntax — what a reader would see as broken text.

    .venv-colab/bin/python tests/colab_notebooks.py [--jobs 2] [--all-languages] [NAME ...]

NAME selects twins by substring (e.g. `01_` or `errata`). Prints each twin's time and its
slowest cells; exit status 1 if any failed. --save DIR keeps the executed notebooks.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TWIN_DIRS = ("book", "chapters", "exercises")


# The Chinese twins run by default: a chapter and an exercise. A Chinese twin's code cells are
# its English twin's (tests/book/test_zh_pages.py checks the sources cell by cell), so running
# every one again under jax 0.7.2 would repeat the English run; what is new in a Chinese twin —
# its language cell, the prose cells showing Chinese-form values, figures with Chinese labels,
# the checker answering in Chinese — these two exercise end to end: chapter 4, which is quick
# and glues over a hundred values and figures into its Chinese prose (chapter 1 would spend two
# minutes running the trained model again), and exercise 1. --all-languages runs all.
CHINESE_SAMPLE = ("chapters/04_", "exercises/01_")


def twins(names: list[str], all_languages: bool = False) -> list[Path]:
    """The committed twins (an .ipynb beside a .py source), optionally filtered by name; and
    the Chinese twins (zh/...) of translated pages: those of CHINESE_SAMPLE, or with
    `all_languages` every one. (An untranslated page's Chinese twin has the English twin's
    code and prose: running it would test nothing new.)"""
    from inferbook.book.bilingual import UNTRANSLATED
    found = sorted(p for d in TWIN_DIRS for p in (ROOT / d).glob("*.ipynb")
                   if p.with_suffix(".py").is_file())
    found += sorted(p for d in TWIN_DIRS for p in (ROOT / "zh" / d).glob("*.ipynb")
                    if UNTRANSLATED["zh"].splitlines()[1] not in p.read_text(encoding="utf-8")
                    and (all_languages or any(f"zh/{s}" in p.relative_to(ROOT).as_posix()
                                              for s in CHINESE_SAMPLE)))
    return [p for p in found if not names or any(n in str(p.relative_to(ROOT)) for n in names)]


def displayed_text(nb) -> list[str]:
    """What the notebook's form cells displayed as Markdown (its prose, after execution)."""
    return [out["data"]["text/markdown"] for cell in nb.cells if cell.cell_type == "code"
            and cell.metadata.get("cellView") == "form" for out in cell.get("outputs", [])
            if "text/markdown" in out.get("data", {})]


def claim_notes(nb) -> int:
    """How many measured-claim notes the notebook showed (a reader's session, not strict)."""
    return sum("Measured claim not confirmed" in out["data"]["text/markdown"]
               for cell in nb.cells for out in cell.get("outputs", [])
               if "text/markdown" in out.get("data", {}))


def problems(nb) -> list[str]:
    """Broken prose in an executed twin: placeholders left, or MyST syntax shown."""
    from inferbook.book.colab_markdown import MYST_SYNTAX
    from inferbook.book.prose import NOT_YET
    found = []
    for text in displayed_text(nb):
        if NOT_YET in text or "{{" in text:
            found.append(f"a value never computed: {text[:120]!r}")
        if m := MYST_SYNTAX.search(text):
            found.append(f"MyST shown as text: {m[0]!r} in {text[:120]!r}")
    for cell in nb.cells:
        if cell.cell_type == "markdown" and (m := MYST_SYNTAX.search(cell.source)):
            found.append(f"MyST in a Markdown cell: {m[0]!r}")
    return found


def _kernel_manager():
    """A kernel of this very interpreter (the Colab-like environment), whatever kernel specs
    the machine's Jupyter directories hold."""
    import ipykernel.kernelspec
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager

    class ThisPython(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):
            return KernelSpec(resource_dir=ipykernel.kernelspec.RESOURCES,
                              **ipykernel.kernelspec.get_kernel_dict())

    return AsyncKernelManager(kernel_name="python3", kernel_spec_manager=ThisPython())


def twin_name(path: Path) -> str:
    """The twin's path in the repository (or its file name, for a notebook outside it)."""
    path = path.resolve()
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name


def run_twin(path: Path, cache: Path, timeout: int, save: Path | None = None
             ) -> tuple[str, float, list[tuple[float, str]], str | None, int]:
    """Execute one twin; (name, seconds, slowest cells, error or None, claim notes shown)."""
    import nbclient
    import nbformat

    from inferbook.book.claims import strict_by_default
    strict_by_default()
    nb = nbformat.read(path, as_version=4)
    work = Path(tempfile.mkdtemp(prefix=f"colab-{path.stem}-"))     # the reader's empty folder
    os.environ["INFERBOOK_DATA"] = str(cache)
    start = time.perf_counter()
    error = None
    try:
        client = nbclient.NotebookClient(nb, timeout=timeout, km=_kernel_manager(),
                                         resources={"metadata": {"path": str(work)}})
        client.execute()
        bad = problems(nb)
        error = "\n".join(bad) if bad else None
    except Exception as err:                 # a failing cell: report it, keep going
        error = f"{type(err).__name__}: {str(err)[-3000:]}"
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if save is not None:
            save.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, save / twin_name(path).replace("/", "__"))
    seconds = time.perf_counter() - start
    cells = []
    for cell in nb.cells:
        t = cell.metadata.get("execution", {})
        if "iopub.execute_input" in t and "shell.execute_reply" in t:
            from datetime import datetime
            d = (datetime.fromisoformat(t["shell.execute_reply"].replace("Z", "+00:00"))
                 - datetime.fromisoformat(t["iopub.execute_input"].replace("Z", "+00:00")))
            code = [ln for ln in cell.source.splitlines() if ln.strip() and ln[0] != "#"]
            cells.append((d.total_seconds(), (code or [""])[0][:60]))
    return (twin_name(path), seconds, sorted(cells, reverse=True)[:3], error,
            claim_notes(nb))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="run only twins whose name contains one")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    parser.add_argument("--save", type=Path, help="write the executed notebooks here")
    parser.add_argument("--all-languages", action="store_true",
                        help="run every translated page's Chinese twin, not only a sample")
    args = parser.parse_args(argv)
    import inferbook
    if Path(inferbook.__file__).resolve().is_relative_to(ROOT / "lib"):
        sys.exit("the library must be installed, not imported from the checkout: use "
                 "`make test-colab`")
    todo = twins(args.names, args.all_languages)
    if not todo:
        sys.exit(f"no twin matches {args.names}")
    # The download cache as a Colab session fills it: every data file, fetched by name.
    cache = Path(tempfile.mkdtemp(prefix="colab-data-"))
    shutil.copytree(ROOT / "book" / "data", cache, dirs_exist_ok=True)
    print(f"{len(todo)} Colab twin(s) under jax {_jax_version()}, {args.jobs} at a time",
          flush=True)
    failed, start = [], time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run_twin, p, cache, args.timeout, args.save) for p in todo]
        for future in as_completed(futures):
            name, seconds, slowest, error, notes = future.result()
            detail = "; ".join(f"{s:.0f} s `{src}`" for s, src in slowest)
            noted = f", {notes} measured-claim note(s)" if notes else ""
            print(f"  {'FAILED ' if error else ''}{name}: {seconds:.0f} s{noted} "
                  f"(slowest: {detail})", flush=True)
            if error:
                failed.append(name)
                print(f"    {error}", flush=True)
    shutil.rmtree(cache, ignore_errors=True)
    print(f"ran {len(todo)} twin(s) in {time.perf_counter() - start:.0f} s; "
          f"{len(failed)} failed", flush=True)
    return 1 if failed else 0


def _jax_version() -> str:
    from importlib.metadata import version
    return version("jax")


if __name__ == "__main__":
    sys.exit(main())
