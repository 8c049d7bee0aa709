"""A sitemap's part of a job's records, and when a later job may adopt it whole (see ``SitemapPart``).

A job that lists a URL it does not fetch writes it one line: what the sitemap said, what the crawl database
knows of it, then the fields that are the job's own, always last and always the same four::

    ...,"discovered_at":"<when>","finished_at":"<when>","fetch_reason":"<why>","change":"<kind>"}

Everything before that tail depends on the sitemap's entry and the URL's crawl record only. So a part keeps
its lines without the tail (``strip``), and a job that adopts it writes each with its own (``tail``): one
time for the whole part (the time it adopted it), ``listed`` for a job that fetches nothing, ``not_due``
for one that fetches what is due. Those are the lines the job would have written listing the URLs one by
one, on the same crawl records, at that time: ``adoptable`` says when that holds.

What a later job may adopt is fixed by what shapes the lines: the sitemap's document (its signature), the
options that choose the pages a listing keeps (``listing_of``), and this format (``PART_FORMAT``, moved
whenever a line's fields change).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime

from msgspec import Struct
from orjson import OPT_UTC_Z, JSONDecodeError, dumps, loads

from harvester.model.crawl import ChangeKind, CrawlRecord, SitemapPart
from harvester.model.messages import JobRequest, Refetch
from harvester.model.records import CrawlWrite, url_key
from harvester.sitemap.entries import SitemapKind

#: The documents that list pages and nothing else: only their readings have parts (an index's children are
#: followed by each job that reads it, a robots.txt's too).
PAGE_KINDS = frozenset(
    {SitemapKind.URLSET.value, SitemapKind.RSS.value, SitemapKind.ATOM.value, SitemapKind.TEXT.value}
)

#: How far apart two writers' clocks may be, in seconds (a job's start and a part's making; on AWS, the writes
#: of crawl records: crawl_parts.py): a part made this long before a job started is still taken as made after
#: (refusing is always safe: its URLs are listed one by one instead).
CLOCK_SKEW = 0.01

#: Moved whenever the lines a listing writes change shape: parts made before are then not adopted.
PART_FORMAT = 2

#: A part adopted in part hands its lineage on (``Lineage``): past this many earlier makers, or this many
#: URLs left out (``excluded_bound``), the sitemap is listed whole again, which starts a lineage afresh.
MAX_INHERITED = 32
MIN_EXCLUDED = 200
MAX_EXCLUDED = 2000

#: Where a line says when its URL is next due (``line_due``), and that value (``block_due``).
_DUE = b',"next_fetch_time":"'
_DUES = re.compile(rb',"next_fetch_time":"([^"]*)"')

#: Where a line's tail starts. The raw sequence cannot occur inside a JSON string (its quotes would be
#: escaped), and no extension has such a key: the last one in a line is the field.
_TAIL_START = b',"discovered_at":'
_TAIL = re.compile(
    rb',"discovered_at":"[^"]+","finished_at":"[^"]+","fetch_reason":"(?:listed|not_due)",'
    rb'"change":"(?:new|back|listed|not_due)"\}\Z'
)


def listing_of(request: JobRequest, started: datetime) -> str:
    """What a job's options do to a sitemap's listing (the page patterns and the scope keep or drop its
    URLs; the site names them; a selection of entries, its moments resolved for the job started at
    ``started``, and the reading rules that are on repair, drop or admit them), with the part format: two
    jobs with the same value list a document alike. A selection or a rule enters only when it is set, so
    that the parts of jobs without it stay adoptable."""
    shape: list[object] = [
        PART_FORMAT,
        request.origin,
        list(request.include),
        list(request.exclude),
        str(request.scope),
    ]
    selected = request.select.listing(started) if request.select is not None else None
    if selected is not None:
        shape.append(selected)
    if request.reading is not None and (rules := request.reading.listing()):
        shape.append({"reading": rules})
    return hashlib.sha256(json.dumps(shape).encode()).hexdigest()[:16]


def reason_of(request: JobRequest) -> ChangeKind:
    """The ``fetch_reason`` and ``change`` of a URL a job lists and does not fetch (not new, not back)."""
    return ChangeKind.NOT_DUE if request.fetch_pages else ChangeKind.LISTED


def tail(at: datetime, kind: ChangeKind) -> bytes:
    """The fields a job writes last on a line of a URL it listed at ``at`` and did not fetch."""
    when, name = dumps(at, option=OPT_UTC_Z), kind.value.encode()
    return b'%s%s,"finished_at":%s,"fetch_reason":"%s","change":"%s"}' % (_TAIL_START, when, when, name, name)


def strip(line: bytes) -> bytes | None:
    """The line without its tail, or None when the line is not one of a URL listed and not fetched (its
    tail is not the four fields above)."""
    start = line.rfind(_TAIL_START)
    if start < 0 or _TAIL.match(line, start) is None:
        return None
    return line[:start]


def line_url(line: bytes) -> str:
    """The URL of a record line (with its tail or without it): its first field, read without parsing the
    line unless the URL has an escape in it."""
    end = line.find(b'"', 8)
    if line.startswith(b'{"url":"') and end > 0 and b"\\" not in line[8:end]:
        return line[8:end].decode()
    line = line.rstrip(b"\n")
    try:
        return str(loads(line)["url"])
    except JSONDecodeError:  # (a line without its tail: its closing brace too)
        return str(loads(line + b"}")["url"])


#: A line's URL as ``line_url`` reads it without parsing (no escape in it), after the newline before the line
#: (a literal start, which the search finds quickly: a raw newline is never inside a JSON line).
_LINE_URLS = re.compile(rb'\n\{"url":"([^"\\\n]*)"')


def block_urls(block: bytes) -> list[str]:
    """The URL of each record line of ``block`` (lines each ending with a newline), in order, as
    ``line_url`` reads each: all at once, unless a URL has an escape in it."""
    found = _LINE_URLS.findall(b"\n" + block)
    if len(found) == block.count(b"\n") + (not block.endswith(b"\n") and bool(block)):
        try:
            return b"\n".join(found).decode().split("\n") if found else []
        except UnicodeDecodeError:
            pass
    return [line_url(line) for line in block.splitlines()]


def block_due(block: bytes) -> str | None:
    """The first in time of the next fetches of record lines (``block``: lines each ending with a newline),
    as ``line_due`` reads each (all at once when each line says it once, else line by line), as written."""
    found = _DUES.findall(block)
    if len(found) == block.count(b"\n"):
        due = [when.decode() for when in found]
    else:
        due = [when for line in block.splitlines() if (when := line_due(line)) is not None]
    # (first in time, not as text: a time of whole seconds is written without its fraction)
    return min(due, key=datetime.fromisoformat) if due else None


def line_due(line: bytes) -> str | None:
    """When the URL of a record line is next due, as the line writes it (ISO 8601, without its fraction for a
    time of whole seconds: compared as times, not as text), or None. Its crawl fields come after the entry's
    extensions, so the last occurrence is the field."""
    at = line.rfind(_DUE)
    if at < 0:
        return None
    start = at + len(_DUE)
    return line[start : line.find(b'"', start)].decode()


def render(stripped: bytes, at: datetime, kind: ChangeKind) -> bytes:
    """A part's lines (``stripped`` joined, each ending with a newline) with the adopting job's tail."""
    return stripped.replace(b"\n", tail(at, kind) + b"\n")


def adoptable(
    part: SitemapPart | None,
    *,
    signature: str | None,
    request: JobRequest,
    epoch: int,
    now: datetime,
    started: datetime,
) -> str | None:
    """Why a job started at ``started``, reading the sitemap at ``now`` (its document's ``signature``; the
    sitemap's crawl ``epoch``), may not adopt ``part`` whole, or None when its lines are the ones the job's
    listing would write."""
    if part is None:
        return "no part"
    if signature is None or part.signature != signature:
        return "another document"
    why = _made_before(part, started) or _same_listing(part, request=request, epoch=epoch, started=started)
    if why is not None:
        return why
    if request.fetch_pages:
        if part.held:
            return "a lastmod was held back"
        if part.due_at is not None and now >= part.due_at:
            return "a URL is due"
    return None


def partly_adoptable(
    part: SitemapPart | None, *, request: JobRequest, epoch: int | None, started: datetime
) -> str | None:
    """Why a job started at ``started`` may not adopt ``part`` in part (``PartDiff``: the lines of the entries
    the same as the part's and not due, the others listed one by one), or None when it may (``epoch`` None:
    not checked)."""
    if part is None:
        return "no part"
    why = _made_before(part, started) or _same_listing(part, request=request, epoch=epoch, started=started)
    if why is not None:
        return why
    if part.held:  # (which URL is held is not on its line; a part made of this reading would not know it)
        return "a lastmod was held back"
    if len(part.inherits) >= MAX_INHERITED or len(part.excluded) > excluded_bound(part.urls):
        return "too many jobs or URLs left out in its lineage"
    return None


def _made_before(part: SitemapPart, started: datetime) -> str | None:
    """Why a job started at ``started`` may not adopt ``part``: it was made after the job started (less
    ``CLOCK_SKEW``). An adoption is refused when one of the part's URLs moved since it was made (its epoch),
    and a job that lists a URL some part holds moves that part's epoch; but a URL the job listed before the
    part was made, through another sitemap, as new to the site or naming another, moved nothing of the
    part, which would hold it a second time. Parts made before the job started hold no such URL: every URL
    the job lists after that names the part's sitemap as its records do."""
    if part.made_at.timestamp() > started.timestamp() - CLOCK_SKEW:
        return "made after the job started"
    return None


def excluded_bound(urls: int) -> int:
    """How many URLs a part's lineage may leave out before its sitemap is listed whole again (on DynamoDB
    their keys are a set on the part's item: 400 KB an item)."""
    return min(MAX_EXCLUDED, max(MIN_EXCLUDED, urls // 10))


def _same_listing(part: SitemapPart, *, request: JobRequest, epoch: int | None, started: datetime) -> str | None:
    if part.listing != listing_of(request, started):
        return "other options"
    if epoch is not None and part.epoch != epoch:
        return "its URLs' records moved since"
    if request.fetch_pages and request.refetch is Refetch.ALL:
        return "every URL is fetched"
    return None


def sitemap_of(record: CrawlWrite) -> str | None:
    """The sitemap a crawl record names (whose epoch its write moves)."""
    return record.sitemap if isinstance(record, CrawlRecord) else loads(record.body).get("sitemap")


def writer_of(record: CrawlWrite) -> str:
    """The job a record written outside a job's own steps comes from (an orphan's, or its listing's); a
    record given as stored text names none, and counts as every other job's write."""
    if isinstance(record, CrawlRecord):
        return record.orphaned_job or record.last_listed_job or ""
    return ""


class Lineage(Struct, frozen=True):
    """How the records listed in a sitemap's current part read: those its maker listed, and those of the
    earlier makers it ``inherits`` (it adopted their part in part and holds their lines), read as listed by
    the part's latest adopter if one did, else the inherited ones as listed by its maker when it took them
    over (``inherited_at``). The URLs ``excluded`` (left out of the part, or of its latest adoption) read as
    they are stored: whoever left them out wrote them as they read before."""

    maker: str
    inherits: frozenset[str] = frozenset()
    inherited_at: datetime | None = None
    excluded: frozenset[str] = frozenset()
    adopter: tuple[str, datetime] | None = None
    #: ``excluded`` holds the URLs' keys (``url_key``), not the URLs.
    keyed: bool = False

    @classmethod
    def of(
        cls, part: SitemapPart, adopter: tuple[str, datetime] | None = None, excluded: Iterable[str] = ()
    ) -> Lineage:
        """The lineage of ``part``, with its latest adoption (and the URLs that adoption left out)."""
        return cls(
            maker=part.job_id,
            inherits=frozenset(part.inherits),
            inherited_at=part.inherited_at,
            excluded=frozenset(part.excluded).union(excluded),
            adopter=adopter,
        )

    def holds(self, listed_by: str | None) -> bool:
        return listed_by == self.maker or listed_by in self.inherits

    def excludes(self, url: str) -> bool:
        return bool(self.excluded) and (url_key(url) if self.keyed else url) in self.excluded

    def reading(self, listed_by: str | None, url: str) -> tuple[str, datetime] | None:
        """The job (and when) a record listed by ``listed_by`` reads as listed by; None: as stored."""
        if not self.holds(listed_by) or self.excludes(url):
            return None
        if self.adopter is not None:
            return self.adopter
        if listed_by != self.maker and self.inherited_at is not None:
            return self.maker, self.inherited_at
        return None


class Adoptions:
    """The lineage of each current part of a site that makes some records read otherwise than stored, by
    sitemap: what makes the records a part's jobs listed read as listed by the job that adopted it
    (``resolve``), as they would be had it listed them one by one. ``key`` names a sitemap as the store keeps
    it (its URL, or a key made of it)."""

    def __init__(self, lineages: Mapping[str, Lineage], key: Callable[[str], str] | None = None) -> None:
        self.lineages = lineages
        self._key = key
        self._keys: dict[str, str] = {}

    def __bool__(self) -> bool:
        return bool(self.lineages)

    def adopter(self, sitemap: str | None, listed_by: str | None, url: str) -> str | None:
        """The job that last adopted the part of ``sitemap`` (as the store names it) whose records
        ``listed_by`` listed (its own, or inherited), if it took the URL's."""
        lineage = self.lineages.get(sitemap) if sitemap is not None else None
        if lineage is None or lineage.adopter is None or not lineage.holds(listed_by) or lineage.excludes(url):
            return None
        return lineage.adopter[0]

    def resolve(self, record: CrawlRecord) -> CrawlRecord:
        if not self.lineages or record.sitemap is None:
            return record
        sitemap = record.sitemap
        if self._key is not None:
            named = self._keys.get(sitemap)
            if named is None:
                named = self._keys[sitemap] = self._key(sitemap)
            sitemap = named
        lineage = self.lineages.get(sitemap)
        reading = lineage.reading(record.last_listed_job, record.url) if lineage is not None else None
        if reading is None:
            return record
        job, at = reading
        return record.model_copy(update={"last_listed_job": job, "last_listed": at})
