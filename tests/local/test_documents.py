"""The documents folder: keys are paths under it, and none may leave it."""

from __future__ import annotations

import pytest

from harvester.adapters.local.documents import FolderDocumentStore


@pytest.mark.parametrize("key", ["../escape", "jobs/../../escape", "/etc/passwd"])
def test_keys_stay_inside_the_folder(tmp_path, key):
    store = FolderDocumentStore(tmp_path / "documents")
    with pytest.raises(ValueError, match="leaves the document folder"):
        store.put(key, b"x")
    assert not (tmp_path / "escape").exists()


def test_a_write_is_atomic_and_leaves_no_temporary_file(tmp_path):
    store = FolderDocumentStore(tmp_path)
    store.put("jobs/j/pages/a", b"1")
    assert [p.name for p in (tmp_path / "jobs/j/pages").iterdir()] == ["a"]
