"""The messages that travel on the queues: a job request, a sitemap task, a page task.

They are :class:`~harvester.model.base.Model` Structs, validated as they are decoded by the Lambda handlers
and the local runner alike; an invalid message is refused with the reason, never retried.
Every task carries what its worker needs to act without asking anyone (depth, the ancestor chain for
recursion detection, the sitemap metadata of a page), because in AWS no invocation shares memory with
another.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from msgspec import Meta, to_builtins
from msgspec.structs import force_setattr

from harvester.limits import MAX_DEPTH, URL_MAX_LENGTH
from harvester.model.base import Model, invalid
from harvester.model.discovery import DiscoveryOptions, homepage
from harvester.model.reading import ReadingRules
from harvester.model.selection import EntrySelection
from harvester.urls import origin_of, require_http_url, screen, validate_pattern

JOB_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}\Z"

#: A job's default spacing of requests to one host, in seconds (robots.txt is read at this spacing too).
DEFAULT_RATE_LIMIT_DELAY = 0.05

JobId = Annotated[str, Meta(pattern=JOB_ID_PATTERN)]


def _http_url(field: str, url: str) -> str:
    """``url`` as a job may use it (stripped), or the reason it may not, naming ``field``."""
    try:
        return require_http_url(url)
    except ValueError as exc:
        raise invalid(field, str(exc)) from None


def _patterns(field: str, patterns: tuple[str, ...]) -> None:
    for i, pattern in enumerate(patterns):
        try:
            validate_pattern(pattern)
        except ValueError as exc:
            raise invalid(f"{field}[{i}]", str(exc)) from None


class Scope(StrEnum):
    """Which page URLs a sitemap may hand out (Crawlee's default is the same host)."""

    SAME_HOST = "same-host"
    SAME_DOMAIN = "same-domain"
    ANY = "any"


class Refetch(StrEnum):
    """Which known URLs a job fetches: those due by their schedule (or an advanced, trusted lastmod), or all
    of them (``--full``; still conditionally, so unchanged pages cost a 304)."""

    DUE = "due"
    ALL = "all"


class Output(StrEnum):
    """How a job keeps the pages it fetched: WARC files (batched; what archive tools read) or one loose
    document per page (``files``: for tools that want files)."""

    WARC = "warc"
    FILES = "files"


class Unprocessable(ValueError):
    """A message that is well-formed but can never succeed (a job id already used for another job): it is
    refused with the reason (dead-lettered at once on AWS), never retried."""


class JobRequest(Model, kw_only=True, frozen=True):
    """What a user pushes to the job queue (or what `harvest crawl` builds from its flags)."""

    site: str
    sitemaps: tuple[str, ...] = ()
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    sitemap_include: tuple[str, ...] = ()
    sitemap_exclude: tuple[str, ...] = ()
    max_depth: Annotated[int, Meta(ge=1, le=50)] = MAX_DEPTH
    fetch_pages: bool = True
    rate_limit_delay: Annotated[float, Meta(ge=0, le=60)] = DEFAULT_RATE_LIMIT_DELAY
    scope: Scope = Scope.SAME_HOST
    refetch: Refetch = Refetch.DUE
    output: Output = Output.WARC
    #: Which entries the job lists, by their sitemap fields, alternates and language (None: every one).
    select: EntrySelection | None = None
    #: How the sitemaps are read beyond the defaults (harvester.model.reading); None: the defaults.
    reading: ReadingRules | None = None
    #: How the job looks for sitemaps (None: robots.txt, then the well-known paths, from the site's root).
    discovery: DiscoveryOptions | None = None
    job_id: JobId | None = None

    def __post_init__(self) -> None:
        # The URLs a user gives, stripped as require_http_url gives them back (a frozen Struct is set once);
        # the site as its root (discovery starts there; a page of it given as the site names the same site),
        # or as given when its discovery keeps the path (``DiscoveryOptions.normalize_homepage_url``).
        if self.discovery is not None and self.discovery.default:
            force_setattr(self, "discovery", None)  # (the same job as one without the section: one fingerprint)
        site = _http_url("site", self.site)
        keep_path = self.discovery is not None and not self.discovery.normalize_homepage_url
        force_setattr(self, "site", homepage(site) if keep_path else origin_of(site) + "/")
        if self.discovery is not None and self.sitemaps:
            raise invalid("discovery", "a job that names its sitemaps runs no discovery: leave its options out")
        if self.sitemaps:
            sitemaps = tuple(_http_url(f"sitemaps[{i}]", url) for i, url in enumerate(self.sitemaps))
            force_setattr(self, "sitemaps", sitemaps)
        for name in ("include", "exclude", "sitemap_include", "sitemap_exclude"):
            _patterns(name, getattr(self, name))

    @property
    def origin(self) -> str:
        """The site as the crawl database knows it (``scheme://host[:port]``): its records outlive jobs."""
        return origin_of(self.site)

    def validated(self) -> JobRequest:
        """The request as the job queue would read it. A request built in code (``JobRequest(...)``) checks
        its URLs and patterns but not its types and bounds, which decoding checks and converts (an int
        delay to a float, ``"any"`` to its scope): a job is started from this form only, so that what is
        stored and fingerprinted is what any later reading of it gives (a ValidationError otherwise)."""
        return type(self).model_validate(to_builtins(self))

    def fingerprint(self) -> str:
        """Identifies what the job does (everything but its id): the local runner resumes by it. An option
        left unset (None) is left out, so that a request written without it keeps its fingerprint when
        options are added."""
        body = {k: v for k, v in self.model_dump(mode="json", exclude={"job_id"}).items() if v is not None}
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


class SitemapOrigin(StrEnum):
    """How a sitemap was found; a known-path probe that finds nothing is not an error worth reporting."""

    ROBOTS = "robots"  # robots.txt itself
    DECLARED = "declared"  # a Sitemap: line of robots.txt
    KNOWN_PATH = "known_path"  # one of the well-known locations, probed
    INDEX = "index"  # a child of a sitemap index
    REQUESTED = "requested"  # named in the job request


class SitemapTask(Model, kw_only=True, frozen=True):
    """Fetch and read one sitemap (or robots.txt) of a job."""

    kind: Literal["sitemap"] = "sitemap"
    job_id: JobId
    url: str
    origin: SitemapOrigin
    depth: Annotated[int, Meta(ge=1, le=64)]
    # From the site node down to the parent: a sitemap equal to (or redirecting to) one of these is recursion.
    ancestors: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        force_setattr(self, "url", _http_url("url", self.url))


class PageTask(Model, kw_only=True, frozen=True):
    """Fetch one page of a job, with what its sitemap said about it."""

    kind: Literal["page"] = "page"
    job_id: JobId
    url: str
    sitemap: str | None = None
    lastmod: datetime | None = None
    changefreq: str | None = None
    priority: Annotated[float, Meta(ge=0.0, le=1.0)] = 0.5
    attempt: Annotated[int, Meta(ge=0)] = 0
    #: The order it is served in, highest first (harvester.pipeline.ranking).
    rank: Annotated[float, Meta(ge=0.0)] = 0.0
    #: The turn at its host's gate booked for it when its batch was sent back to wait (epoch seconds;
    #: harvester.politeness.gate.arrive): it comes back shortly before and takes it.
    turn: float | None = None
    #: Its place in its host's waiting line when its batch was sent back with no turn booked (epoch seconds;
    #: harvester.politeness.gate.arrive): it comes back shortly before and takes the host's next turns, ahead
    #: of requests that joined the line after it.
    place: float | None = None
    #: Where the state store recorded it, as the store wrote it (the DynamoDB store: its batch and position),
    #: so that a claim goes there without looking it up; None: looked up.
    stored: str | None = None

    def __post_init__(self) -> None:
        # In the form records are keyed by (urls.normalize), so that a copy the page step makes with it never
        # meets a rule the task did not (a path-less URL of 2,048 characters is one more with its "/").
        screened = screen(self.url.strip())
        if isinstance(screened, str):
            reason = f"URL longer than {URL_MAX_LENGTH} characters" if screened == "too_long" else screened
            raise invalid("url", f"{self.url[:200]!r}: {reason}")
        force_setattr(self, "url", screened[0])


Task = SitemapTask | PageTask

#: The most pages one page message carries (``PageBatchSize`` in template.yaml can only lower it): two
#: recorded batches of the DynamoDB store, which keeps a job's pages in batches of up to 50
#: (``PageListing.batch_most``; the listing sends two a message: ``sitemap_step.listing.paired``).
PAGES_PER_MESSAGE = 100


class JobEnd(Model, kw_only=True, frozen=True):
    """Write the result of a job that ended (on AWS the job's end runs in a function of its own, with the
    time and memory a large site's end needs; the step that ended the job sends this)."""

    kind: Literal["end"] = "end"
    job_id: JobId
    #: The claim on the job's end a step that wrote part of it handed on to this one (``StateStore.save_end``):
    #: None for the first step, or for one sent again by a resume (it waits for a claim to lapse).
    claim: float | None = None


class PageBatchTask(Model, kw_only=True, frozen=True):
    """Pages of one job that travel as one message: on SQS one send, one delivery and one deletion for a
    batch of pages rather than for each page, and the unit a page function takes at once.

    Its pages are kept as given and validated one by one (:meth:`tasks`), so that an invalid page is refused
    alone and the batch's other pages go on. Each is a :class:`PageTask` without ``kind`` and ``job_id``."""

    kind: Literal["pages"] = "pages"
    job_id: JobId
    pages: Annotated[tuple[dict[str, Any], ...], Meta(min_length=1, max_length=PAGES_PER_MESSAGE)]

    @classmethod
    def of(cls, tasks: Sequence[PageTask]) -> PageBatchTask:
        """The batch of ``tasks``, all of one job (what each page says beyond the defaults, nothing more)."""
        jobs = {task.job_id for task in tasks}
        if len(jobs) != 1:
            raise ValueError(f"a page batch is of one job, not {len(jobs)}")
        pages = tuple(task.model_dump(mode="json", exclude={"kind", "job_id"}, exclude_defaults=True) for task in tasks)
        return cls(job_id=jobs.pop(), pages=pages)

    def tasks(self) -> tuple[list[PageTask], list[tuple[str, str]]]:
        """The valid pages as tasks, and each invalid one as its body (a page task's JSON) with the reason."""
        valid: list[PageTask] = []
        invalid: list[tuple[str, str]] = []
        for page in self.pages:
            body = {"kind": "page", "job_id": self.job_id} | page
            if body["kind"] != "page" or body["job_id"] != self.job_id:
                invalid.append((json.dumps(body), "a page of a batch is a page of the batch's job"))
                continue
            try:
                valid.append(PageTask.model_validate(body))
            except ValueError as exc:  # (msgspec's ValidationError is one)
                invalid.append((json.dumps(body), str(exc)))
        return valid, invalid


def job_id_from(seed: str, prefix: str = "job") -> str:
    """A stable job id from something that is delivered more than once (an SQS message id, a period)."""
    digest = hashlib.sha256(seed.encode()).hexdigest()[:20]
    return f"{prefix}-{digest}"
