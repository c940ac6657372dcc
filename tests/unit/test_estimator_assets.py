"""Preparing the estimator page's files (inferbook.book.estimator_assets), without the network.

A tarball in the cache is used only when its hash is the one pinned (anything else is deleted,
never served); the runtime files land in DIR/pyodide and manifest.json names the wheel; bad
input is one line and exit code 2. The real download and the page it serves are exercised by
`make book` and tests/browser/test_estimator.py.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from inferbook.book import estimator_assets as assets


def fake_pyodide(cache: Path, files: tuple[str, ...] = assets.RUNTIME_FILES) -> str:
    """A tarball shaped like npm's (files under package/) in `cache`; its integrity string."""
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"pyodide-{assets.PYODIDE_VERSION}.tgz"
    with tarfile.open(path, "w:gz") as tar:
        for name in files:
            data = f"contents of {name}".encode()
            info = tarfile.TarInfo(f"package/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return "sha512-" + base64.b64encode(hashlib.sha512(path.read_bytes()).digest()).decode()


def test_the_runtime_is_unpacked_beside_the_wheel_and_described(tmp_path, monkeypatch):
    cache, out = tmp_path / "cache", tmp_path / "site"
    monkeypatch.setattr(assets, "PYODIDE_INTEGRITY", fake_pyodide(cache))
    out.mkdir()
    (out / "inferbook-0.1.0-py3-none-any.whl").write_bytes(b"PK")
    manifest = assets.prepare(out, cache)
    assert manifest == {"pyodide": assets.PYODIDE_VERSION,
                        "wheel": "inferbook-0.1.0-py3-none-any.whl"}
    assert json.loads((out / "manifest.json").read_text()) == manifest
    assert sorted(p.name for p in (out / "pyodide").iterdir()) == sorted(assets.RUNTIME_FILES)
    assert (out / "pyodide" / "pyodide.mjs").read_text() == "contents of pyodide.mjs"


def test_a_tarball_that_is_not_the_pinned_one_is_deleted_not_used(tmp_path):
    cache = tmp_path / "cache"
    fake_pyodide(cache)                       # its hash is not PYODIDE_INTEGRITY
    with pytest.raises(assets.AssetError, match="hash differs"):
        assets.cached_tarball(cache)
    assert not any(cache.iterdir())


def test_the_pinned_integrity_is_npms_sha512_format():
    digest = base64.b64decode(assets.PYODIDE_INTEGRITY.removeprefix("sha512-"), validate=True)
    assert assets.PYODIDE_INTEGRITY.startswith("sha512-") and len(digest) == 64


def test_a_package_missing_a_runtime_file_is_refused(tmp_path, monkeypatch):
    cache, out = tmp_path / "cache", tmp_path / "site"
    monkeypatch.setattr(assets, "PYODIDE_INTEGRITY",
                        fake_pyodide(cache, assets.RUNTIME_FILES[:-1]))
    out.mkdir()
    (out / "inferbook-0.1.0-py3-none-any.whl").write_bytes(b"PK")
    with pytest.raises(assets.AssetError, match="has no package.json"):
        assets.prepare(out, cache)


@pytest.mark.parametrize("wheels", [0, 2])
def test_the_folder_must_hold_one_wheel(tmp_path, capsys, wheels):
    for i in range(wheels):
        (tmp_path / f"inferbook-0.{i}.0-py3-none-any.whl").write_bytes(b"PK")
    code = assets.main(["prepare", str(tmp_path), "--cache", str(tmp_path / "cache")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"found {wheels}" in err
