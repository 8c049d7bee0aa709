"""S3's join of documents (the job end's pieces joined into one output) reads and copies each part as it was
when the join began: a part written again meanwhile fails the join, which stores nothing."""

from __future__ import annotations

import os
from typing import Any

import pytest
from botocore.exceptions import ClientError

from harvester.adapters.aws import AwsAdapters
from harvester.adapters.aws.s3 import MIN_PART

KEYS = ["jobs/j/end/000.jsonl", "jobs/j/end/001.jsonl", "jobs/j/end/002.jsonl"]


def test_a_part_written_again_during_a_join_fails_it(deployed_stack):
    stack, _ = deployed_stack
    documents = AwsAdapters.from_env(stack.function("JobEndFunction").environment).documents
    for key, size in zip(KEYS, [100, 2000, 300], strict=True):
        documents.put(key, os.urandom(size))
    head = documents._head

    def rewritten_after_its_head(key: str) -> tuple[int, str]:
        seen = head(key)
        if key == KEYS[0]:
            documents.put(key, os.urandom(seen[0]))  # (another writer: the same size, other bytes)
        return seen

    documents._head = rewritten_after_its_head  # type: ignore[method-assign]
    with pytest.raises(ClientError, match=r"PreconditionFailed|412"):
        documents.join("jobs/j/urls.jsonl", KEYS)
    assert not documents.exists("jobs/j/urls.jsonl")


def test_the_parts_s3_copies_are_asked_for_in_the_version_the_join_began_with(deployed_stack):
    """(moto does not check UploadPartCopy's CopySourceIfMatch, which S3 does: the request is checked here.)"""
    stack, _ = deployed_stack
    documents = AwsAdapters.from_env(stack.function("JobEndFunction").environment).documents
    for key, size in zip(KEYS, [MIN_PART + 7, 3000, MIN_PART * 2], strict=True):
        documents.put(key, os.urandom(size))
    etags = {key: documents._head(key)[1] for key in KEYS}
    copies: list[dict[str, Any]] = []
    documents.client.meta.events.register(
        "provide-client-params.s3.UploadPartCopy", lambda params, **_: copies.append(dict(params))
    )
    documents.join("jobs/j/urls.jsonl", KEYS)
    assert [c["CopySource"]["Key"] for c in copies] == [KEYS[0], KEYS[2]]
    assert all(c["CopySourceIfMatch"] == etags[c["CopySource"]["Key"]] for c in copies)


def test_a_join_of_too_many_parts_is_refused_before_anything_is_written(deployed_stack, monkeypatch):
    stack, _ = deployed_stack
    documents = AwsAdapters.from_env(stack.function("JobEndFunction").environment).documents
    for key in KEYS:
        documents.put(key, b"x" * 1000)
    monkeypatch.setattr("harvester.adapters.aws.s3.MAX_PARTS", 2)
    monkeypatch.setattr("harvester.adapters.aws.s3.MIN_PART", 1000)
    with pytest.raises(ValueError, match="too many parts"):
        documents.join("jobs/j/urls.jsonl", KEYS)
    assert not documents.exists("jobs/j/urls.jsonl")
