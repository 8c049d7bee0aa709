"""The scratch file the AWS crawl database keeps a job's crawl records in (``job_urls`` past its first URLs):
the later record of a URL read twice wins, lookups of any size, and a read that fails part way (a throttled
query) leaves no file behind."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator

import pytest

from harvester.adapters.aws.record_shelf import RecordShelf


def test_a_shelf_answers_by_url_with_the_later_record(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    shelf = RecordShelf([(f"u{n}", f"first {n}") for n in range(1200)] + [("u7", "later 7")])
    asked = [f"u{n}" for n in range(0, 1300, 3)]
    assert shelf.get(asked) == {url: ("later 7" if url == "u7" else f"first {url[1:]}") for url in asked[:400]}
    shelf.close()
    shelf.close()
    assert list(tmp_path.iterdir()) == []


def test_a_read_that_fails_part_way_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def throttled() -> Iterator[tuple[str, str]]:
        yield from ((f"u{n}", "{}") for n in range(700))
        raise RuntimeError("ProvisionedThroughputExceededException")

    with pytest.raises(RuntimeError):
        RecordShelf(throttled())
    assert list(tmp_path.iterdir()) == []
