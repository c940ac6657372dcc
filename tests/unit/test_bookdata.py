"""The book's data files: found from a checkout, every one with its source, and the Colab
fallback pointing at the repository the notebooks install from."""

from pathlib import Path

import pytest

from inferbook.book import bookdata

# Never reaches JAX: runs once, with JAX unimportable, not under both versions (conftest).
pytestmark = pytest.mark.no_jax

ROOT = Path(__file__).resolve().parents[2]
DATA = sorted((ROOT / "book" / "data").glob("*.*"))


@pytest.mark.parametrize("path", DATA, ids=lambda p: p.name)
def test_every_data_file_loads_and_names_its_source(path):
    data = bookdata.load(path.name)
    if isinstance(data, list):
        assert data and all(row.get("source") for row in data)
    else:
        assert data.get("source")


def test_csv_numbers_are_numbers():
    rows = bookdata.load("kipply_fastertransformer.csv")
    assert all(isinstance(r["total_ms"], float) and isinstance(r["gpus"], int) for r in rows)


def test_the_fallback_url_is_the_configured_repository():
    yaml = pytest.importorskip("yaml")
    repo = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
    owner_name = repo["url"].rstrip("/").removeprefix("https://github.com/")
    assert bookdata.REPOSITORY_RAW == (f"https://raw.githubusercontent.com/{owner_name}/"
                                       f"{repo['branch']}")


def test_a_file_found_in_no_checkout_and_no_network_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("INFERBOOK_DATA", str(tmp_path / "cache"))
    monkeypatch.setattr(bookdata, "REPOSITORY_RAW", "http://127.0.0.1:9")   # nothing listens
    with pytest.raises(FileNotFoundError, match="could not be fetched"):
        bookdata.find("no_such_file.csv")
