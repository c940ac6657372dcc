"""Recorded runs are found through index files, which must list exactly the committed records.

On Colab the data cache holds only files fetched by name, so a chapter finds recorded runs
through an index (`inferbook.book.bookdata.records`); a record committed without its index
entry would be invisible there, and an entry without its file would fail to download.
"""

import json
from pathlib import Path

import pytest

from inferbook.book import bookdata

DATA = Path(__file__).resolve().parents[2] / "book" / "data"


@pytest.mark.parametrize("index", sorted(bookdata.INDEXES))
def test_each_index_lists_exactly_its_records(index):
    listed = json.loads((DATA / index).read_text())
    if isinstance(listed, dict):                # an index beside other data files
        assert listed["source"]
        listed = listed["files"]
    assert listed == bookdata.indexed_files(index, DATA), \
        "run `python -m inferbook.book.bookdata reindex`"


def test_records_are_fetched_by_name_from_the_index(tmp_path, monkeypatch):
    # A Colab-like session: no checkout above the working folder, only the cache, which holds
    # the index and the one record it lists, and a stray record nobody listed.
    cache = tmp_path / "cache"
    (cache / "bench").mkdir(parents=True)
    (cache / "bench" / "index.json").write_text('["a.json"]')
    (cache / "bench" / "a.json").write_text('{"device": "a"}')
    (cache / "bench" / "stray.json").write_text('{"device": "stray"}')
    monkeypatch.setenv("INFERBOOK_DATA", str(cache))
    monkeypatch.setattr(bookdata, "checkout_paths", lambda name: [])
    assert bookdata.records("bench/index.json") == [{"device": "a"}]


def test_runs_under_two_jax_versions_on_one_day_are_two_files():
    from inferbook.perf import bench_results
    run = {"device": "CPU: AMD EPYC (2 cores)", "date": "2031-02-03T04:05:06+00:00"}
    names = {bench_results.results_name({**run, "jax_version": v}) for v in ("0.7.2", "0.10.2")}
    assert names == {"cpu-amd-epyc-2-cores_2031-02-03_jax-0.7.2.json",
                     "cpu-amd-epyc-2-cores_2031-02-03_jax-0.10.2.json"}
