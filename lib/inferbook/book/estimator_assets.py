"""The files the estimator page loads, put where the site serves them: Pyodide and our wheel.

The estimator page (book/estimator.md) runs the library in the reader's browser. It needs a
Python for the browser — Pyodide, from the npm package ``pyodide`` (pinned here, with the
integrity hash the npm registry publishes for its tarball) — and the library itself, as the
wheel `make book` builds. Both are served by the site itself, so the page works offline and
sends no request anywhere else; neither is committed to the repository.

`make book` runs ``python -m inferbook.book.estimator_assets prepare DIR`` after building the
wheel into DIR. It takes the tarball from a cache (``~/.cache/inferbook/pyodide``; the first
time, ``npm pack`` downloads it there), checks its hash, and unpacks the runtime into
DIR/pyodide; it writes DIR/manifest.json, which names the wheel and the Pyodide version for
the page's script. Sphinx copies DIR into the site's ``_static/estimator`` (``_config.yml``,
``html_static_path``).

Pyodide's npm package holds the interpreter and the standard library, not numpy or any other
package (those normally come from a CDN, which an offline site cannot use). The estimator
needs none: the path of ``inferbook estimate`` imports the standard library alone, which
tests/unit/test_estimator_page.py keeps so.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Sequence

__all__ = ["PYODIDE_VERSION", "PYODIDE_INTEGRITY", "RUNTIME_FILES", "cached_tarball",
           "prepare", "main"]

PYODIDE_VERSION = "314.0.7"           # CPython 3.14.2 in WebAssembly
# `npm view pyodide@314.0.7 dist.integrity`: the SHA-512 of the tarball, base64.
PYODIDE_INTEGRITY = ("sha512-0YvXxEhfEdpLfb/XkM2BFAeMROq0iMUX2bzzH9pOttyMcWkwq+HbE5uyuGD82LN7y2q+"
                     "SNvi/6V5JEsOlD2R1A==")
# What loadPyodide() fetches, and the package's own description (version, licence: MPL-2.0).
RUNTIME_FILES = ("pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip",
                 "pyodide-lock.json", "package.json")
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "inferbook" / "pyodide"


class AssetError(RuntimeError):
    """The page's files cannot be prepared (no npm, no network, a tarball that is not ours)."""


def _integrity(path: Path) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(path.read_bytes()).digest()).decode()


def cached_tarball(cache: Path = CACHE) -> Path:
    """The pinned Pyodide tarball, from `cache` or downloaded into it by ``npm pack``; its
    hash checked either way (a tarball that does not match is deleted, never used)."""
    path = cache / f"pyodide-{PYODIDE_VERSION}.tgz"
    if not path.is_file():
        npm = shutil.which("npm")
        if npm is None:
            raise AssetError("npm is needed once, to download Pyodide into the cache "
                             f"({cache}); install Node.js and npm")
        cache.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([npm, "pack", f"pyodide@{PYODIDE_VERSION}", "--silent",
                               "--pack-destination", str(cache)],
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0 or not path.is_file():
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise AssetError(f"npm pack pyodide@{PYODIDE_VERSION} failed: {last}")
    if _integrity(path) != PYODIDE_INTEGRITY:
        path.unlink()
        raise AssetError(f"{path} is not the published pyodide {PYODIDE_VERSION} (its hash "
                         "differs); deleted it, run again to download it afresh")
    return path


def prepare(out: Path, cache: Path = CACHE) -> dict[str, str]:
    """Unpack Pyodide's runtime into `out`/pyodide and describe `out` in manifest.json.

    `out` must already hold exactly one inferbook wheel (`make book` builds it there)."""
    wheels = sorted(out.glob("inferbook-*.whl"))
    if len(wheels) != 1:
        raise AssetError(f"{out} must hold one inferbook wheel, found {len(wheels)} "
                         "(build it with `uv build --wheel --out-dir DIR`)")
    target = out / "pyodide"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    with tarfile.open(cached_tarball(cache)) as tar:
        for name in RUNTIME_FILES:
            try:
                member = tar.extractfile(f"package/{name}")
            except KeyError:
                member = None
            if member is None:
                raise AssetError(f"the pyodide {PYODIDE_VERSION} package has no {name}")
            (target / name).write_bytes(member.read())
    manifest = {"pyodide": PYODIDE_VERSION, "wheel": wheels[0].name}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inferbook.book.estimator_assets",
                                     description="Prepare the estimator page's files.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="unpack Pyodide beside the wheel, write manifest.json")
    p.add_argument("out", type=Path, help="the folder holding the wheel")
    p.add_argument("--cache", type=Path, default=CACHE, help=f"tarball cache (default {CACHE})")
    args = parser.parse_args(argv)
    try:
        manifest = prepare(args.out, args.cache)
    except (AssetError, OSError, tarfile.TarError, subprocess.TimeoutExpired) as err:
        sys.stderr.write(f"estimator_assets: error: {str(err).splitlines()[0]}\n")
        return 2
    print(f"estimator page: pyodide {manifest['pyodide']} and {manifest['wheel']} in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
