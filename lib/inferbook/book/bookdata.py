"""Reported measurements: the book's data files under `book/data/`, found wherever a chapter runs.

Some numbers only their authors could measure — kipply's FasterTransformer runs on A100s, the
scaling book's published tables. Chapters never type them: each lives in a CSV or JSON file
under `book/data/` with a `source` naming where it comes from, and a chapter loads it with
`load(name)` to plot it beside the library's prediction.

In a clone of the repository (the book build, a local Jupyter) the file is read from the
checkout. On Colab, where only the library is installed, it is fetched once from the
repository the notebooks install from and kept in a cache directory.

Recorded runs that accumulate — benchmark results per device, kernel timings per GPU — are
found through an index file that lists them (`records`), never by listing a directory: on
Colab the cache holds only the files fetched by name, so a glob there sees nothing new.

    python -m inferbook.book.bookdata reindex     # rewrite every index from the checkout
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Any

__all__ = ["REPOSITORY_RAW", "INDEXES", "checkout_paths", "find", "load", "records",
           "indexed_files", "reindex"]

# Where the Colab notebooks install the library from (`_config.yml`, repository.url/branch);
# a test keeps the two in step.
REPOSITORY_RAW = ("https://raw.githubusercontent.com/inference-by-the-numbers/"
                  "inference-by-the-numbers/main")


# Each index file under book/data/ and the records it lists (a glob in the checkout).
INDEXES = {"bench/index.json": "bench/*.json",
           "decode_levers/index.json": "decode_levers/*.json",
           "flash_decoding_index.json": "flash_decoding_*.json",
           "published/index.json": "published/*.json"}


def checkout_paths(name: str) -> list[Path]:
    """Where book/data/`name` would be in a checkout: under the working directory or one of
    its parents, or beside the library's own source tree; nearest first."""
    here = Path(__file__).resolve()
    roots = [Path.cwd(), *Path.cwd().parents, here.parents[3]]
    return [root / "book" / "data" / name for root in roots]


def find(name: str) -> Path:
    """The local path of book/data/`name`, downloading it into a cache if there is no checkout."""
    for path in checkout_paths(name):
        if path.is_file():
            return path
    cache = Path(os.environ.get("INFERBOOK_DATA", Path.home() / ".cache" / "inferbook" / "data"))
    target = cache / name
    if not target.is_file():
        from urllib.request import urlopen
        url = f"{REPOSITORY_RAW}/book/data/{name}"
        try:
            with urlopen(url, timeout=30) as response:
                payload = response.read()
        except OSError as err:
            raise FileNotFoundError(f"book/data/{name} is not in a checkout here and could not "
                                    f"be fetched from {url}: {err}") from None
        cache.mkdir(parents=True, exist_ok=True)
        target.write_bytes(payload)
    return target


def load(name: str) -> Any:
    """A data file's contents: JSON as parsed, CSV as a list of dicts (numbers converted)."""
    text = find(name).read_text()
    if name.endswith(".json"):
        return json.loads(text)
    if name.endswith(".csv"):
        rows = list(csv.DictReader(io.StringIO(text)))
        return [{k: _number(v) for k, v in row.items()} for row in rows]
    raise ValueError(f"unknown data format: {name}")


def _number(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _listed(index_data: Any) -> list[str]:
    """The names an index holds: a plain list, or {"source": ..., "files": [...]}."""
    return index_data["files"] if isinstance(index_data, dict) else index_data


def records(index: str) -> list[Any]:
    """Every record an index file (a key of `INDEXES`) lists, each fetched by its name."""
    folder = index.rpartition("/")[0]
    return [load(f"{folder}/{name}" if folder else name) for name in _listed(load(index))]


def indexed_files(index: str, data: Path) -> list[str]:
    """The names an index should list: the checkout's files matching its pattern, sorted."""
    folder = index.rpartition("/")[0]
    return sorted(p.name for p in (data / folder).glob(INDEXES[index].rpartition("/")[2])
                  if p.name != Path(index).name)


def reindex(data: Path | None = None) -> list[Path]:
    """Rewrite every index file from the records in the checkout's book/data; the written."""
    data = data or find(next(iter(INDEXES))).parents[1]
    written = []
    for index in INDEXES:
        path = data / index
        files = indexed_files(index, data)
        old = json.loads(path.read_text()) if path.is_file() else None
        # An index beside other data files says what it is, as they all do (its "source").
        content = {**old, "files": files} if isinstance(old, dict) else files
        path.write_text(json.dumps(content, indent=1) + "\n")
        written.append(path)
    return written


if __name__ == "__main__":
    import sys
    if sys.argv[1:] != ["reindex"]:
        sys.exit("usage: python -m inferbook.book.bookdata reindex")
    for written in reindex():
        print(f"wrote {written}")
