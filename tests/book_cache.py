"""Share notebook executions between the notebook tests and the book build.

`make test` executes every chapter under nbval and then builds the book, which would execute
every chapter a second time. Instead, the nbval plugin (`tests/notebook_plugin.py`) saves each
notebook that passed, with the outputs it produced, and this module stores those notebooks in
the book's jupyter-cache. myst-nb, in `execute_notebooks: cache` mode, then finds each one by
its hash (the sources of its code cells and their metadata) and renders the saved outputs.

jupyter-cache knows nothing of the library a notebook imports, so the cache is only valid for
the library it was filled with: `refresh` empties it whenever the library's sources change.

`make book` calls `python tests/book_cache.py execute` before `jupyter-book build`: it
refreshes the cache, then executes every page of the table of contents that the cache lacks,
several at a time (Jupyter Book 1 executes one after another), and stores them. A page that
fails stops the build with the error of its failing cell. Its measured claims are strict
(`inferbook.book.claims.strict_by_default`) unless INFERBOOK_STRICT_CLAIMS=0.

The Chinese edition is rendered from the same cache: a page read in Chinese has the English
page's code cells, hence its hash. Before building it, `make book` runs
`python tests/book_cache.py verify --language zh`, which fails if any page of that edition
would miss the cache — i.e. if the second build would execute anything.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "_build"
CACHE = BUILD / ".jupyter_cache"        # where jupyter-book keeps myst-nb's cache
EXECUTED = BUILD / "executed"           # notebooks the nbval run saved, outputs included
LIB_HASH = BUILD / ".libhash"


def lib_hash() -> str:
    """A digest of every source file of the library, names included."""
    digest = hashlib.sha256()
    for path in sorted((ROOT / "lib").rglob("*.py")):
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def refresh() -> bool:
    """Empty the cache if the library changed since it was filled; True if it was emptied."""
    BUILD.mkdir(exist_ok=True)
    current = lib_hash()
    stale = not LIB_HASH.exists() or LIB_HASH.read_text().strip() != current
    if stale:
        shutil.rmtree(CACHE, ignore_errors=True)
        LIB_HASH.write_text(current + "\n")
    return stale


def store_executed() -> int:
    """Move every notebook saved by the nbval run into the cache; the number stored."""
    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    saved = sorted(EXECUTED.rglob("*.ipynb")) if EXECUTED.exists() else []
    if not saved:
        return 0
    refresh()
    cache = get_cache(str(CACHE))
    for path in saved:
        nb = nbformat.read(path, as_version=4)
        source = ROOT / path.relative_to(EXECUTED).with_suffix(".py")
        cache.cache_notebook_bundle(CacheBundleIn(nb, str(source)), check_validity=False,
                                    overwrite=True)
    shutil.rmtree(EXECUTED)
    return len(saved)


def toc_sources() -> list[Path]:
    """The executable pages of `_toc.yml` (its .py entries), in table-of-contents order."""
    import yaml
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]] + [c["file"] for part in toc.get("parts", [])
                             for c in part.get("chapters", [])]
    return [ROOT / f"{f}.py" for f in files if (ROOT / f"{f}.py").exists()]


def _read(source: Path, lang: str = "en"):
    from inferbook.book.reader import book_reads
    return book_reads(source.read_text(encoding="utf-8"), lang=lang)


def uncached(lang: str) -> list[tuple[Path, str]]:
    """The pages of the table of contents that, read in `lang`, have no cached execution, and
    why: the English page is not cached either, or the two readings' code cells differ."""
    from jupyter_cache import get_cache
    cache = get_cache(str(CACHE))
    missing = []
    for source in toc_sources():
        try:
            cache.match_cache_notebook(_read(source, lang))
        except KeyError:
            try:
                cache.match_cache_notebook(_read(source))
                why = "its code cells differ from the English page's"
            except KeyError:
                why = "the English page was not executed either (run `execute` first)"
            missing.append((source, why))
    return missing


def execute_page(source: Path, timeout: int = 900):
    """Run one page in a fresh kernel in its own folder; (notebook, seconds, error or None).
    Its measured claims are strict, as in the build, unless INFERBOOK_STRICT_CLAIMS=0."""
    from jupyter_cache.executors.utils import single_nb_execution

    from inferbook.book.claims import strict_by_default
    strict_by_default()
    nb = _read(source)
    result = single_nb_execution(nb, cwd=str(source.parent), timeout=timeout,
                                 allow_errors=False)
    return result.nb, result.time, result.exc_string


def execute(jobs: int, timeout: int = 900) -> int:
    """Execute and cache every page the cache lacks; the number of pages that failed."""
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    if refresh():
        print("library changed: the notebook cache starts afresh")
    cache = get_cache(str(CACHE))
    todo = []
    for source in toc_sources():
        try:
            cache.match_cache_notebook(_read(source))
        except KeyError:
            todo.append(source)
    if not todo:
        return 0
    print(f"executing {len(todo)} page(s), {jobs} at a time", flush=True)
    failed, start = 0, time.perf_counter()
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(execute_page, s, timeout): s for s in todo}
        for future in as_completed(futures):
            source = futures[future].relative_to(ROOT)
            nb, seconds, error = future.result()
            if error:
                failed += 1
                print(f"FAILED {source} after {seconds:.0f} s\n{error}", flush=True)
                continue
            cache.cache_notebook_bundle(CacheBundleIn(nb, str(futures[future])),
                                        check_validity=False, overwrite=True)
            print(f"  {source}: {seconds:.0f} s", flush=True)
    print(f"executed in {time.perf_counter() - start:.0f} s", flush=True)
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tests/book_cache.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("execute", help="execute and cache the pages the cache lacks")
    run.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    verify = sub.add_parser("verify", help="fail if a page in this language would execute")
    verify.add_argument("--language", required=True)
    args = parser.parse_args(argv)
    if args.command == "verify":
        missing = uncached(args.language)
        for source, why in missing:
            print(f"{source.relative_to(ROOT)} read in {args.language!r} misses the execution "
                  f"cache: {why}", file=sys.stderr)
        return 1 if missing else 0
    return 1 if execute(args.jobs) else 0


if __name__ == "__main__":
    sys.exit(main())
