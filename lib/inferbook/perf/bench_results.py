"""`inferbook bench`'s records: what a run measures on a platform, and where its results live.

A benchmark run (`inferbook.perf.bench`) produces one JSON record per device, date and JAX
version, saved under book/data/bench/ and listed in that folder's index.json, which is how
chapter 2 finds them on Colab as well as in a checkout (`inferbook.book.bookdata`).

Nothing here starts JAX: the command line checks its arguments with these functions (where
the results would be saved, how much memory the reads hold) before any measurement begins.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from inferbook.book import bookdata

__all__ = ["DEFAULT_BATCHES", "RESULTS_DIR", "LEVERS_DIR", "default_model", "bandwidth_bytes",
           "read_memory_bytes", "results_name", "results_directory", "save", "load_results"]

DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
RESULTS_DIR = "bench"                  # under book/data/
LEVERS_DIR = "decode_levers"           # `inferbook bench --levers`, under book/data/


def default_model(platform: str) -> str:
    """The benchmark model: 336 MB of float32 weights on a CPU, LLaMA-3.2-1B elsewhere."""
    return "cpu-336mb" if platform == "cpu" else "llama-3.2-1b"


def bandwidth_bytes(platform: str, quick: bool = False) -> int:
    """Bytes of the array the read kernels of a run go over (`read_roof.read_programs`; the
    streamed weights are half that): many times any cache (a CPU's last level holds tens of
    MiB), four times more on an accelerator."""
    return (1 << 28 if quick else 1 << 29) * (1 if platform == "cpu" else 4)


def read_memory_bytes(platform: str, quick: bool = False) -> int:
    """Bytes the read kernels hold at their peak: the array, the weights streamed (half as
    much), the copy's output and, on a CPU, the host read's view of the array."""
    return int(bandwidth_bytes(platform, quick) * (3.5 if platform == "cpu" else 2.5))


def results_name(record: dict[str, Any]) -> str:
    """The file name for a record: its device, date and JAX version, e.g.
    cpu-amd-epyc-2-cores_2025-01-31_jax-0.7.2.json (runs under two JAX versions on the same
    day are two files; a record without a version keeps the device and date alone)."""
    slug = re.sub(r"[^a-z0-9]+", "-", record["device"].lower()).strip("-")
    version = record.get("jax_version")
    return f"{slug}_{record['date'][:10]}" + (f"_jax-{version}" if version else "") + ".json"


def results_directory(directory: str | Path | None = None, folder: str = RESULTS_DIR) -> Path:
    """Where `save` writes: `directory`, else book/data/`folder`/ of the checkout we run in
    (FileNotFoundError on Colab, where only the library is)."""
    if directory is not None:
        return Path(directory)
    for path in bookdata.checkout_paths(folder):
        if path.parent.is_dir():
            return path.parent / folder
    raise FileNotFoundError("no book/data/ here: pass a directory (--out)")


def save(record: dict[str, Any], directory: str | Path | None = None,
         folder: str = RESULTS_DIR) -> Path:
    """Write the record under book/data/`folder`/ (or `directory`) and list it in index.json
    (`folder`: "bench" for a benchmark run, "decode_levers" for `inferbook bench --levers`)."""
    directory = results_directory(directory, folder)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / results_name(record)
    path.write_text(json.dumps(record, indent=1) + "\n")
    names = sorted(p.name for p in directory.glob("*.json") if p.name != "index.json")
    (directory / "index.json").write_text(json.dumps(names, indent=1) + "\n")
    return path


def load_results(directory: str | Path | None = None) -> list[dict[str, Any]]:
    """Every results file on record, oldest first: from `directory`, the checkout's
    book/data/bench/, or (on Colab) the repository, through the file index.json lists."""
    if directory is not None:
        paths = sorted(Path(directory).glob("*.json"))
        return [json.loads(p.read_text()) for p in paths if p.name != "index.json"]
    names = bookdata.load(f"{RESULTS_DIR}/index.json")
    records = [bookdata.load(f"{RESULTS_DIR}/{name}") for name in names]
    return sorted(records, key=lambda r: r["date"])
