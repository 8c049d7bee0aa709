"""The rules of a sitemap's part (``crawldb.parts``): a line's tail, cut and put back; when a part may be adopted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from harvester.crawldb import parts
from harvester.model.crawl import ChangeKind, SitemapPart
from harvester.model.messages import JobRequest, Refetch
from harvester.model.selection import EntrySelection

AT = datetime(2026, 5, 1, 12, 30, 15, 123456, tzinfo=UTC)
LATER = AT + timedelta(seconds=1)  # (a job started after the part was made)
SITE = "https://example.com/"


def part(**fields: object) -> SitemapPart:
    values: dict[str, object] = {
        "sitemap": f"{SITE}sitemap.xml", "kind": "urlset", "signature": "s1",
        "listing": parts.listing_of(JobRequest(site=SITE), AT), "job_id": "job-1", "made_at": AT, "epoch": 7,
        "urls": 2, "lines": "k", "due_at": AT + timedelta(days=30),
    }  # fmt: skip
    values.update(fields)
    return SitemapPart(**values)  # type: ignore[arg-type]


def test_a_line_is_its_part_line_and_its_jobs_tail():
    body = b'{"url":"https://example.com/a","extensions":{"news":{"title":"\\",\\"discovered_at\\":"}}'
    line = body + parts.tail(AT, ChangeKind.NOT_DUE)
    assert line.endswith(b',"discovered_at":"2026-05-01T12:30:15.123456Z","finished_at":"2026-05-01T12:30:15.123456Z",'
                         b'"fetch_reason":"not_due","change":"not_due"}')  # fmt: skip
    assert parts.strip(line) == body  # (the escaped sequence inside the title is not the tail)
    later = AT + timedelta(days=1)
    assert (
        parts.render(body + b"\n" + body + b"\n", later, ChangeKind.LISTED)
        == (body + parts.tail(later, ChangeKind.LISTED) + b"\n") * 2
    )


@pytest.mark.parametrize(
    "tail",
    [
        b"}",  # no tail at all
        b',"discovered_at":"2026-01-01T00:00:00Z","finished_at":"2026-01-01T00:00:00Z","fetch_reason":"due","change":"changed"}',
        b',"discovered_at":"2026-01-01T00:00:00Z","finished_at":"2026-01-01T00:00:00Z","fetch_reason":"listed","change":"listed","x":1}',
    ],
    ids=["none", "fetched", "a field after"],
)
def test_a_line_of_a_url_the_job_fetched_has_no_part_line(tail):
    assert parts.strip(b'{"url":"https://example.com/a"' + tail) is None


def test_a_part_is_adopted_only_for_the_same_document_options_and_epoch_with_nothing_due():
    request = JobRequest(site=SITE)
    assert parts.adoptable(part(), signature="s1", request=request, epoch=7, now=AT, started=LATER) is None
    assert parts.adoptable(None, signature="s1", request=request, epoch=7, now=AT, started=LATER) == "no part"
    assert (
        parts.adoptable(part(), signature="s2", request=request, epoch=7, now=AT, started=LATER) == "another document"
    )
    other = JobRequest(site=SITE, include=("/blog/*",))
    assert parts.adoptable(part(), signature="s1", request=other, epoch=7, now=AT, started=LATER) == "other options"
    assert (
        parts.adoptable(part(), signature="s1", request=request, epoch=8, now=AT, started=LATER)
        == "its URLs' records moved since"
    )
    due = AT + timedelta(days=30)
    assert parts.adoptable(part(), signature="s1", request=request, epoch=7, now=due, started=LATER) == "a URL is due"
    assert (
        parts.adoptable(part(held=1), signature="s1", request=request, epoch=7, now=AT, started=LATER)
        == "a lastmod was held back"
    )
    full = JobRequest(site=SITE, refetch=Refetch.ALL)
    assert (
        parts.adoptable(part(), signature="s1", request=full, epoch=7, now=AT, started=LATER) == "every URL is fetched"
    )
    # A job that fetches nothing takes it whatever is due: it lists them, as the part does.
    listing = JobRequest(site=SITE, fetch_pages=False)
    assert parts.adoptable(part(held=1), signature="s1", request=listing, epoch=7, now=due, started=LATER) is None
    # Made after the job started (or within CLOCK_SKEW before): a URL the job listed before then, through
    # another sitemap, may be in it; in part neither.
    for started in (AT, AT + timedelta(seconds=parts.CLOCK_SKEW / 2), AT - timedelta(hours=1)):
        assert parts.adoptable(part(), signature="s1", request=request, epoch=7, now=AT, started=started) == (
            "made after the job started"
        )
        assert parts.partly_adoptable(part(), request=request, epoch=7, started=started) == "made after the job started"
    assert parts.partly_adoptable(part(), request=request, epoch=7, started=LATER) is None
    assert parts.reason_of(listing) is ChangeKind.LISTED and parts.reason_of(request) is ChangeKind.NOT_DUE


def test_the_urls_of_a_block_of_lines_are_read_at_once_as_one_at_a_time() -> None:
    lines = [
        b'{"url":"https://example.com/a","priority":0.5}',
        b'{"url":"https://example.com/caf\xc3\xa9","priority":0.5}',
        b'{"url":"https://example.com/q\\"uoted","priority":0.5}',  # (an escape: parsed)
        b'{"url":"https://example.com/b","priority":0.5',  # (without its tail's brace)
    ]
    for n in range(len(lines) + 1):
        block = b"".join(line + b"\n" for line in lines[:n])
        assert parts.block_urls(block) == [parts.line_url(line) for line in lines[:n]]
    assert parts.block_urls(lines[0] + b"\n" + lines[3] + b"\n") == ["https://example.com/a", "https://example.com/b"]


def test_the_first_due_of_a_block_is_read_at_once_as_line_by_line() -> None:
    def line(n: int, due: str | None) -> bytes:
        field = f',"next_fetch_time":"{due}"' if due else ""
        return f'{{"url":"https://example.com/{n}","crawl_state":"listed"{field}}}\n'.encode()

    dues = ["2026-12-03T00:00:00Z", "2026-12-01T00:00:00Z", None, "2026-12-02T00:00:00Z"]
    for n in range(len(dues) + 1):
        block = b"".join(line(i, due) for i, due in enumerate(dues[:n]))
        one_by_one = [d for d in (parts.line_due(x) for x in block.splitlines()) if d is not None]
        assert parts.block_due(block) == (min(one_by_one) if one_by_one else None)
    assert parts.block_due(b"") is None


def test_the_first_due_of_a_block_is_the_first_in_time_whole_seconds_or_not() -> None:
    # (a time of whole seconds is written without its fraction, which sorts it after later times as text)
    block = (
        b'{"url":"a","next_fetch_time":"2026-12-01T00:00:00.500000Z"}\n'
        b'{"url":"b","next_fetch_time":"2026-12-01T00:00:00Z"}\n'
    )
    assert parts.block_due(block) == "2026-12-01T00:00:00Z"


def test_a_block_without_its_last_newline_gives_every_url() -> None:
    block = b'{"url":"https://example.com/a"}\n{"url":"https://example.com/q\\"b"}'
    assert parts.block_urls(block) == ["https://example.com/a", 'https://example.com/q"b']
    assert parts.block_urls(b'{"url":"https://example.com/a"}') == ["https://example.com/a"]


def test_a_part_diff_is_comparable_only_when_no_line_is_due_by_then() -> None:
    from harvester.crawldb.part_diff import PartDiff

    def line(url: str, due: str) -> bytes:
        return f'{{"url":"{url}","priority":0.5,"crawl_state":"listed","next_fetch_time":"{due}"'.encode() + b"\n"

    due_by = datetime(2026, 12, 1, 0, 0, 0, 200000, tzinfo=UTC)
    assert PartDiff(b"", sitemap="s", due_by=due_by).comparable  # (an empty part: nothing due)
    later = line("https://example.com/a", "2026-12-01T00:00:00.500000Z")
    whole = line("https://example.com/b", "2026-12-01T00:00:00Z")  # (due: before due_by, though later as text)
    assert PartDiff(later, sitemap="s", due_by=due_by).comparable
    assert not PartDiff(later + whole, sitemap="s", due_by=due_by).comparable
    assert PartDiff(later + whole, sitemap="s").comparable  # (a job that fetches nothing: none is due)


def test_a_part_diff_says_which_of_its_urls_were_compared_and_listed() -> None:
    """The URLs of the part a reading compared and did not keep are the ones it listed itself: their records are
    the job's, and the part's adoption in part writes none of them again (only those it left out unread)."""
    from harvester.crawldb.part_diff import PartDiff, entry_fields
    from harvester.sitemap import PageEntry

    sitemap = f"{SITE}sitemap.xml"
    entries = {f"{SITE}{name}": PageEntry(url=f"{SITE}{name}", last_modified=AT) for name in ("a", "b", "c", "d")}
    block = b"".join(
        entry_fields(url, entry, sitemap) + b',"crawl_state":"fetched"}\n' for url, entry in entries.items()
    )
    diff = PartDiff(block, sitemap=sitemap)
    later = AT + timedelta(days=1)
    assert diff.keeps(f"{SITE}a", entries[f"{SITE}a"])
    assert not diff.keeps(f"{SITE}b", PageEntry(url=f"{SITE}b", last_modified=later))  # (changed: listed)
    assert not diff.keeps(f"{SITE}new", PageEntry(url=f"{SITE}new"))  # (not the part's)
    assert diff.keeps(f"{SITE}c", entries[f"{SITE}c"])
    assert diff.listed == {f"{SITE}b"}
    assert diff.excluded() == [f"{SITE}b", f"{SITE}d"]  # (d: removed, left out unread)


def test_a_part_is_adopted_only_under_the_same_selection_of_entries_its_moments_resolved():
    """A selection that changes which URLs a sitemap lists (issue 43) enters the part's listing only when
    set, so that the parts of jobs without one stay adoptable; a duration lists other pages for each job."""
    plain = JobRequest(site=SITE)
    assert parts.listing_of(plain, AT) == parts.listing_of(JobRequest(site=SITE, select=EntrySelection()), AT)
    children_only = JobRequest(site=SITE, select=EntrySelection(sitemap_since="2026-01-01"))  # (no urlset's)
    assert parts.listing_of(children_only, AT) == parts.listing_of(plain, AT)
    dated = JobRequest(site=SITE, select=EntrySelection(since="2026-01-01"))
    assert parts.listing_of(dated, AT) != parts.listing_of(plain, AT)
    assert parts.listing_of(dated, AT) == parts.listing_of(dated, LATER)
    recent = JobRequest(site=SITE, select=EntrySelection(since="7d"))
    assert parts.listing_of(recent, AT) != parts.listing_of(recent, LATER)
    for select in (EntrySelection(alternates=True), EntrySelection(lang="de"), EntrySelection(min_priority=0.6)):
        assert parts.listing_of(JobRequest(site=SITE, select=select), AT) != parts.listing_of(plain, AT)
    assert parts.adoptable(part(), signature="s1", request=dated, epoch=7, now=AT, started=LATER) == "other options"
    assert parts.partly_adoptable(part(), request=dated, epoch=7, started=LATER) == "other options"


def test_a_reading_rule_enters_the_listing_only_when_it_is_on():
    """A part made under a rule that repairs, drops or admits URLs is not adopted by a job without it (nor the
    reverse); a request with no rule on (only a size warning, which lists nothing otherwise) keeps the
    listing, and with it the parts of jobs made before the rules existed."""
    from harvester.model.reading import ReadingRules

    plain = parts.listing_of(JobRequest(site=SITE), AT)
    assert parts.listing_of(JobRequest(site=SITE, reading=ReadingRules(warn_size=1024)), AT) == plain
    ruled = {
        rule: parts.listing_of(JobRequest(site=SITE, reading=ReadingRules(**{rule: True})), AT)
        for rule in ("repair_urls", "strict_location", "allow_doctype")
    }
    assert len({plain, *ruled.values()}) == 4
    assert JobRequest(site=SITE, reading=None).fingerprint() == JobRequest(site=SITE).fingerprint()
