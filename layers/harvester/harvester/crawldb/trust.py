"""lastmod trust: a host's sitemap ``lastmod`` counts only as far as it has proved true.

Many sites stamp every URL with the build time, so their lastmod advances at every build while the pages
stay the same; fetching on lastmod there fetches the whole site at every crawl. Each job therefore
collects evidence per host: of the URLs it fetched whose lastmod had advanced since their last good fetch,
how many really changed (confirmed) and how many came back the same (refuted: 304, or the same
signature). When the job ends, the host's score moves halfway toward that job's precision
(confirmed / evidence); the host is trusted while its score is at least the threshold (0.5). It starts at 1,
so a site that lies in every URL loses trust after two crawls in which its lastmod advanced
(1 → 0.5 → 0.25), and a site that is right again regains it at the next such crawl (0.25 → 0.625).

An untrusted host's lastmod stops making URLs due, except for a few per sitemap that are fetched anyway
(``lastmod_probe``), so that the evidence to regain trust keeps coming.
"""

from __future__ import annotations

from datetime import datetime

from msgspec import Struct

from harvester.crawldb.schedule import lastmod_advanced
from harvester.model.crawl import HostTrust, SiteCrawl, TrustChange
from harvester.model.records import SitemapURL
from harvester.urls import host_of

#: The fetch reasons of URLs a job lists without fetching them.
UNFETCHED = frozenset({"not_due", "listed"})
#: How many job ids a site remembers as applied (a job's end is retried within minutes, not months).
APPLIED_JOBS_KEPT = 64


class Evidence(Struct):
    confirmed: int = 0
    refuted: int = 0

    @property
    def total(self) -> int:
        return self.confirmed + self.refuted


def evidence_of(record: SitemapURL) -> bool | None:
    """True (the advanced lastmod was right), False (it was not), or None (no evidence) for a job's URL."""
    known = record.known
    if record.fetch_reason in UNFETCHED or record.fetch_reason is None:  # not asked by this job: no evidence
        return None
    if known is None or record.http_status is None or not lastmod_advanced(known, record.last_modified):
        return None
    if record.http_status == 304:
        return False
    if 200 <= record.http_status < 300 and record.signature:
        return record.signature != known.signature
    return None


class EvidenceTally:
    """The evidence of one job, host by host, collected while its records are read at its end."""

    def __init__(self) -> None:
        self.hosts: dict[str, Evidence] = {}

    def add(self, record: SitemapURL) -> None:
        verdict = evidence_of(record)
        if verdict is None:
            return
        evidence = self.hosts.setdefault(host_of(record.url), Evidence())
        if verdict:
            evidence.confirmed += 1
        else:
            evidence.refuted += 1


def apply(
    site: SiteCrawl, tally: EvidenceTally, *, job_id: str, now: datetime, threshold: float
) -> tuple[SiteCrawl, dict[str, TrustChange]]:
    """The site record with one job's evidence counted (once), and what it did to each host's trust."""
    if job_id in site.applied:
        return site, site.applied[job_id]
    hosts = dict(site.hosts)
    changes: dict[str, TrustChange] = {}
    for host, evidence in sorted(tally.hosts.items()):
        if not evidence.total:
            continue
        before = site.trust(host)
        score = (before.score + evidence.confirmed / evidence.total) / 2
        after = HostTrust(
            score=round(score, 6),
            trusted=score >= threshold,
            confirmed=before.confirmed + evidence.confirmed,
            refuted=before.refuted + evidence.refuted,
            updated_at=now,
        )
        hosts[host] = after
        changes[host] = TrustChange(
            confirmed=evidence.confirmed,
            refuted=evidence.refuted,
            score_before=before.score,
            score=after.score,
            trusted_before=before.trusted,
            trusted=after.trusted,
        )
    updated = site.model_copy(
        update={
            "hosts": hosts,
            "applied": dict(list({**site.applied, job_id: changes}.items())[-APPLIED_JOBS_KEPT:]),
            "version": site.version + 1,
        }
    )
    return updated, changes
