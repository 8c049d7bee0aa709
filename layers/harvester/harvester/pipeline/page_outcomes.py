"""What becomes of a claimed page: the page step's outcome decisions, apart from the fetching.

Each function takes what a delivery came to (no request sent, an answer, a failure, a rule) and returns
the page's final job record with the crawl record its fetch moves (a ``PageOutcome``), or a ``PageRetry``
that sends it back to pending: ``completed``, ``failed``, ``excluded``, ``retry_or_fail``. ``untried``
takes a claim's try back, ``validators`` gives the conditional headers of a URL whose content is stored.
At settlement, ``with_listing`` makes an outcome write the crawl record its listing left unwritten,
``relisted`` computes an outcome again on a crawl record another job moved meanwhile, and ``placed``
names where its capture was archived.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from msgspec.structs import replace

from harvester.crawldb.crawl_state import Fetched, FetchResult, after_fetch, listed, listing_change, verdict
from harvester.fetch import conditional_headers
from harvester.model.crawl import ChangeKind, CrawlRecord, CrawlState, WarcLocation
from harvester.model.records import JobRecord, SitemapURL, UrlStatus
from harvester.model.state import PageOutcome, PageRetry
from harvester.pipeline.context import StepContext


def untried(record: SitemapURL) -> SitemapURL:
    """The record of a delivery that sent no request: its claim's try taken back."""
    return record.model_copy(update={"attempts": max(0, record.attempts - 1)})


def validators(known: CrawlRecord | None, *, warc: bool) -> dict[str, str]:
    """The conditional headers of a URL whose content is stored: a 304 then costs no body and no storage.
    For a job that keeps WARC, stored means in a WARC record, which its 304 is archived as a revisit of:
    content kept only as a loose document (by a crawl with ``--output files``) is asked for whole once,
    so that the archive holds it."""
    if known is None or not (known.warc or (known.document_key and not warc)):
        return {}
    return conditional_headers(known.etag, known.http_last_modified)


def completed(ctx: StepContext, record: SitemapURL, fetched: Fetched) -> PageOutcome:
    now = ctx.clock()
    done = record.model_copy(update={"status": UrlStatus.COMPLETED, "error_message": None, "finished_at": now})
    return _crawled(ctx, done, fetched, record.known)


def failed(ctx: StepContext, record: SitemapURL, reason: str, fetched: Fetched | None) -> PageOutcome:
    now = ctx.clock()
    failed = record.model_copy(update={"status": UrlStatus.FAILED, "error_message": reason, "finished_at": now})
    return _crawled(ctx, failed, fetched, record.known)


def excluded(ctx: StepContext, record: SitemapURL, reason: str) -> PageOutcome:
    """Not fetched by rule (robots.txt, the address policy): final for the job, neither success nor failure,
    and no fetch for the crawl database (the URL keeps its state: a later job asks the rule again)."""
    change = _listed_as(record) or ChangeKind.EXCLUDED
    update = {"status": UrlStatus.EXCLUDED, "error_message": reason, "finished_at": ctx.clock(), "change": change}
    if record.known is not None:
        update["crawl_state"] = record.known.state
    return PageOutcome(record.model_copy(update=update))


def _listed_as(record: SitemapURL) -> ChangeKind | None:
    """The change the listing already decided (``new``, ``back``): it stands whatever the fetch gives."""
    return record.change if record.change in (ChangeKind.NEW, ChangeKind.BACK) else None


def _crawled(ctx: StepContext, record: SitemapURL, fetched: Fetched | None, basis: CrawlRecord | None) -> PageOutcome:
    """A final job record with the crawl record its fetch moves ``basis`` to (nothing to move without a
    fetch, or for a record that has no crawl record).

    ``basis`` is the crawl record as the job's listing left it, not written yet (the listing leaves that to
    this settlement): the record this writes is its version, conditioned on the version the listing read."""
    if fetched is None:
        return PageOutcome(record)
    update: dict[str, object] = {}
    if fetched.result is FetchResult.SUCCESS:
        update = {"signature": fetched.signature, "size": fetched.size, "document_key": fetched.document_key}
    if basis is None:
        return PageOutcome(record.model_copy(update=update), fetched=fetched)
    after = after_fetch(basis, fetched, now=ctx.clock(), schedule=ctx.settings.schedule, unwritten=True)
    if fetched.result in (FetchResult.SUCCESS, FetchResult.NOTMODIFIED):
        # What the job's view shows of the content: the stored version, which a 304 did not resend.
        update = {
            "signature": after.signature,
            "size": after.size,
            "content_type": after.content_type,
            "document_key": after.document_key,
        }
    change = _listed_as(record) or verdict(basis, fetched, after)
    update |= {
        "known": basis,
        "crawl_state": after.state,
        "next_fetch_time": after.next_fetch_time,
        "change": change,
    }
    return PageOutcome(record.model_copy(update=update), crawl=after, fetched=fetched)


def retry_or_fail(
    ctx: StepContext, record: SitemapURL, reason: str, *, tried: bool = True, retry_after: float | None = None
) -> PageOutcome | PageRetry:
    """A failure that may pass: tried again by this job while the URL's budget lasts (``retry_max`` requests
    in all, whichever delivery sent them), after the wait the server asked for (``retry_after``, its
    Retry-After, at most ``retry_backoff_max_seconds``) or, when it asked for none, after a back-off that
    doubles at each retry. Then final for the job, and one retry more toward gone in the crawl database.
    (The host's gate holds every request to the host for that Retry-After too: politeness.md.)"""
    settings = ctx.settings
    retries = record.retries + 1
    sent = record.attempts if tried else max(0, record.attempts - 1)
    if sent < settings.retry_max and retries < settings.retry_max:
        if retry_after is None:
            delay = min(settings.retry_backoff_seconds * 2 ** (retries - 1), settings.retry_backoff_max_seconds)
        else:
            delay = min(retry_after, settings.retry_backoff_max_seconds)
        return PageRetry(
            url=record.url,
            retries=retries,
            error_message=reason,
            not_before=ctx.clock() + timedelta(seconds=delay),
            untried=not tried,
            retry_after=retry_after,
        )
    gave_up = record.model_copy(update={"retries": retries, "attempts": sent})
    fetched = Fetched(FetchResult.RETRY, http_status=record.http_status)
    spent = f"{sent} attempts" if tried else f"{retries} deliveries"
    return failed(ctx, gave_up, f"{reason} (gave up after {spent})", fetched)


def with_listing(outcome: PageOutcome) -> PageOutcome:
    """An outcome that moves no crawl record (no request was sent, or a rule excluded the URL) still writes
    the one its listing left unwritten for the fetch (``known``), so that the crawl database knows the URL
    was listed."""
    if outcome.crawl is not None or outcome.record.known is None:
        return outcome
    return replace(outcome, crawl=outcome.record.known)


def relisted(ctx: StepContext, job: JobRecord, outcome: PageOutcome, stored: CrawlRecord | None) -> PageOutcome:
    """The outcome again on the crawl record another job of the site wrote meanwhile: that record as this
    job's listing leaves it (as the sitemap step would have written it, at the listing's time), then
    moved by the fetch, if there was one.

    The result is what the records would be had the listing been written when it was made: a listing of
    the other job later than this one's stands (the orphan rule asks who listed the URL last, and when),
    and a URL orphaned by a job that started after this listing stays orphan (that job's orphan pass
    would have found this listing older than its start; a job that started before it would not have)."""
    record = outcome.record
    listed_at = record.discovered_at or ctx.clock()
    basis = listed(
        stored,
        url=record.url,
        lastmod=record.last_modified,
        changefreq=record.change_frequency,
        priority=record.priority,
        sitemap=record.sitemap,
        job_id=job.job_id,
        now=listed_at,
        schedule=ctx.settings.schedule,
    )
    if stored is not None and stored.last_listed > basis.last_listed:
        basis = basis.model_copy(update={"last_listed": stored.last_listed, "last_listed_job": stored.last_listed_job})
    if stored is not None and _orphaned_since(ctx, stored, listed_at):
        basis = basis.model_copy(
            update={"state": stored.state, "orphan_of": stored.orphan_of, "orphaned_job": stored.orphaned_job}
        )
    # The change the listing makes, decided again on the record it now lists (another job may have created
    # the URL's record, or brought it back, since the listing found it new or orphan).
    change = listing_change(stored) if basis.state is not CrawlState.ORPHAN else None
    if outcome.fetched is None:
        update: dict[str, object] = {"known": basis}
        if record.status is UrlStatus.EXCLUDED:  # (as excluded shows it: the state the URL keeps)
            update |= {"crawl_state": basis.state, "change": change or ChangeKind.EXCLUDED}
        return PageOutcome(record.model_copy(update=update), crawl=basis)
    return _crawled(ctx, record.model_copy(update={"change": change}), outcome.fetched, basis)


def _orphaned_since(ctx: StepContext, stored: CrawlRecord, listed_at: datetime) -> bool:
    """Whether the record was orphaned by a job that started after ``listed_at`` (one whose record is gone
    cannot say: the listing brings the URL back, as a listing after the orphaning does)."""
    if stored.state is not CrawlState.ORPHAN or stored.orphaned_job is None:
        return False
    orphaning = ctx.job(stored.orphaned_job)
    return orphaning is not None and orphaning.start_time > listed_at


def placed(outcome: PageOutcome, place: WarcLocation | None) -> PageOutcome:
    """The outcome of a page whose capture was stored at ``place``: its record names it, and a response
    record becomes where the crawl record finds the URL's content (a revisit leaves that where it was)."""
    if place is None or outcome.fetched is None:
        return outcome
    record = outcome.record.model_copy(update={"warc": place})
    if place.record_type != "response" or outcome.fetched.result is not FetchResult.SUCCESS:
        return replace(outcome, record=record)
    # (only the place is new: the outcome is not computed again)
    crawl = outcome.crawl.model_copy(update={"warc": place}) if outcome.crawl is not None else None
    return PageOutcome(record, crawl=crawl, fetched=replace(outcome.fetched, warc=place))
