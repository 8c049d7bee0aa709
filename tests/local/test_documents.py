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


def test_a_stored_document_honours_the_umask(tmp_path):
    """Readable by whoever the user's umask lets read it (mkstemp made every document 0600)."""
    import os

    store = FolderDocumentStore(tmp_path)
    previous = os.umask(0o022)
    try:
        store.put("jobs/j/pages/a", b"1")
        os.umask(0o077)
        store.put("jobs/j/pages/b", b"2")
    finally:
        os.umask(previous)
    assert (tmp_path / "jobs/j/pages/a").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "jobs/j/pages/b").stat().st_mode & 0o777 == 0o600
