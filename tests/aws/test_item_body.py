"""The state table's stored bodies (adapters/aws/item_body.py): deflated against a frozen dictionary, read back
exactly, old plain bodies still read, and a format this version does not know refused by name."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from harvester.adapters.aws.item_body import _DICTIONARY_V1, body_text, stored_body

#: Written by version 1 from PINNED_BODY. Decoding it must keep working whatever this code becomes: items
#: written today are read by every later version.
PINNED_BODY = '{"url":"https://www.example.com/a","status":"completed","http_status":200,"priority":0.5}'
PINNED_V1 = bytes.fromhex("01abc622965a910872b81ed0fdfa894a3a083f223ca483e1051d5437d70200")


def item(value: dict) -> dict:
    return {"pk": {"S": "JOB#j"}, "sk": {"S": "URL#k"}, "body": value}


@pytest.mark.parametrize(
    "body",
    [
        PINNED_BODY,
        json.dumps({"url": "https://例え.jp/ページ?q=ü", "title": "naïve — “quoted”"}, ensure_ascii=False),
        json.dumps({"lines": [os.urandom(8).hex() for _ in range(2_000)]}),  # 37 KB, mostly random hex
        "{}",
    ],
)
def test_a_body_reads_back_exactly_as_written(body):
    assert body_text(item(stored_body(body))) == body


def test_a_records_body_is_stored_deflated_and_much_smaller():
    body = json.dumps(
        {
            "url": "https://www.example.com/news/2026/11/a-story.html",
            "state": "fetched",
            "fetch_interval": 2592000.0,
            "next_fetch_time": "2026-12-26T01:19:44.135162Z",
            "last_fetch_time": "2026-11-26T01:19:44.135162Z",
            "http_status": 200,
            "content_type": "text/html; charset=utf-8",
            "warc": {"filename": "warc/job-36e3/20261126011944-75eb452d9431.warc.gz", "record_type": "response"},
            "last_listed_job": "job-36e3bad2aa0a425aac86",
            "changes": 0,
            "version": 2,
        },
        separators=(",", ":"),
    )
    value = stored_body(body)
    assert set(value) == {"B"} and value["B"][0] == 1
    assert len(value["B"]) < 0.6 * len(body.encode())


def test_a_body_deflate_would_not_shorten_stays_a_plain_string():
    body = json.dumps(os.urandom(24).hex()[:7])
    assert stored_body(body) == {"S": body}


def test_items_stored_before_the_codec_are_read_as_they_are():
    assert body_text(item({"S": PINNED_BODY})) == PINNED_BODY


def test_version_1_stays_readable_and_its_dictionary_never_changes():
    """Changing the dictionary would make every stored item unreadable: a new one needs a new version byte."""
    assert body_text(item({"B": PINNED_V1})) == PINNED_BODY
    assert hashlib.sha256(_DICTIONARY_V1).hexdigest() == (
        "9c2640322875889ca1e84adec1f00162d4ca97ab24fe25964a929f5a3fe80597"
    )


@pytest.mark.parametrize("stored", [b"\x07" + PINNED_V1[1:], b""])
def test_a_body_in_a_format_this_version_does_not_know_is_refused_by_name(stored):
    with pytest.raises(ValueError, match=r"item JOB#j/URL#k: body stored in format (07|empty).*cannot read"):
        body_text(item({"B": stored}))


def test_a_damaged_body_is_refused_by_name_not_read_in_part():
    whole = stored_body(json.dumps({"url": "https://www.example.com/" + "a" * 300, "state": "fetched"}))["B"]
    for damaged in (whole[:-4], whole + b"\x00\x01", whole[:1] + b"\xff" * 8):
        with pytest.raises(ValueError, match=r"item JOB#j/URL#k: body stored damaged"):
            body_text(item({"B": damaged}))
