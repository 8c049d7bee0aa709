"""The messages that travel on the queues: a job request, a sitemap task, a page task.

They are pydantic models so that the Lambda handlers can validate them with Powertools' parser and the
local runner with the very same code; an invalid message is refused with the reason, never retried.
Every task carries what its worker needs to act without asking anyone (depth, the ancestor chain for
recursion detection, the sitemap metadata of a page), because in AWS no invocation shares memory with
another.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from harvester.limits import MAX_DEPTH, URL_MAX_LENGTH
from harvester.urls import origin_of, require_http_url, validate_pattern

JOB_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"

HttpUrl = Annotated[str, AfterValidator(require_http_url)]
Pattern = Annotated[str, AfterValidator(validate_pattern)]


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
    document per page (``files``: what Harvester kept before WARC, still there for tools that want files)."""

    WARC = "warc"
    FILES = "files"


class Unprocessable(ValueError):
    """A message that is well-formed but can never succeed (a job id already used for another job): it is
    refused with the reason (dead-lettered at once on AWS), never retried."""


class JobRequest(BaseModel):
    """What a user pushes to the job queue (or what `harvest crawl` builds from its flags)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    site: HttpUrl
    sitemaps: tuple[HttpUrl, ...] = ()
    include: tuple[Pattern, ...] = ()
    exclude: tuple[Pattern, ...] = ()
    sitemap_include: tuple[Pattern, ...] = ()
    sitemap_exclude: tuple[Pattern, ...] = ()
    max_depth: int = Field(default=MAX_DEPTH, ge=1, le=50)
    fetch_pages: bool = True
    rate_limit_delay: float = Field(default=0.05, gt=0, le=60)
    scope: Scope = Scope.SAME_HOST
    refetch: Refetch = Refetch.DUE
    output: Output = Output.WARC
    job_id: str | None = Field(default=None, pattern=JOB_ID_PATTERN)

    @property
    def origin(self) -> str:
        """The site as the crawl database knows it (``scheme://host[:port]``): its records outlive jobs."""
        return origin_of(self.site)

    def fingerprint(self) -> str:
        """Identifies what the job does (everything but its id): the local runner resumes by it."""
        body = self.model_dump(mode="json", exclude={"job_id"})
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


class SitemapOrigin(StrEnum):
    """How a sitemap was found; a known-path probe that finds nothing is not an error worth reporting."""

    ROBOTS = "robots"  # robots.txt itself
    DECLARED = "declared"  # a Sitemap: line of robots.txt
    KNOWN_PATH = "known_path"  # one of the well-known locations, probed
    INDEX = "index"  # a child of a sitemap index
    REQUESTED = "requested"  # named in the job request


class SitemapTask(BaseModel):
    """Fetch and read one sitemap (or robots.txt) of a job."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    kind: Literal["sitemap"] = "sitemap"
    job_id: str = Field(pattern=JOB_ID_PATTERN)
    url: HttpUrl
    origin: SitemapOrigin
    depth: int = Field(ge=1, le=64)
    # From the site node down to the parent: a sitemap equal to (or redirecting to) one of these is recursion.
    ancestors: tuple[str, ...] = ()


class PageTask(BaseModel):
    """Fetch one page of a job, with what its sitemap said about it."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    kind: Literal["page"] = "page"
    job_id: str = Field(pattern=JOB_ID_PATTERN)
    url: HttpUrl
    sitemap: str | None = None
    lastmod: datetime | None = None
    changefreq: str | None = None
    priority: float = Field(default=0.5, ge=0.0, le=1.0)
    attempt: int = Field(default=0, ge=0)
    #: The order it is served in, highest first (harvester.pipeline.ranking).
    rank: float = Field(default=0.0, ge=0.0)

    @field_validator("url")
    @classmethod
    def _short_enough(cls, url: str) -> str:
        if len(url) > URL_MAX_LENGTH:
            raise ValueError(f"URL longer than {URL_MAX_LENGTH} characters")
        return url


Task = SitemapTask | PageTask


def job_id_from(seed: str, prefix: str = "job") -> str:
    """A stable job id from something that is delivered more than once (an SQS message id, a period)."""
    digest = hashlib.sha256(seed.encode()).hexdigest()[:20]
    return f"{prefix}-{digest}"


def is_job_id(value: str) -> bool:
    return re.fullmatch(JOB_ID_PATTERN, value) is not None
