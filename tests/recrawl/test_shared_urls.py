"""A URL two urlsets list, with sitemap parts on, reads as listing every entry reads it.

A urlset's part holds the URLs whose records name that urlset (those it listed first in its maker job), so a
reading that listed URLs another urlset of its job had listed first makes no part (``PartMaker``): adopted
whole while that other urlset is not read, fails, is left out, or no longer lists the URL, such a part would
lose the URL (a whole-tree job would even declare it orphan). Each case runs the same jobs with parts on and
off (``side_by_side``) and finds them agreeing, and on the stack the jobs' counts.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

from harvester.adapters.aws import crawl_parts
from harvester.adapters.aws.stack import submit_job
from harvester.model.messages import JobRequest, Refetch
from harvester.model.records import url_key
from tests.recrawl.test_aws_sitemap_parts import adapters_of
from tests.recrawl.test_sitemap_parts import SMALLEST, START, side_by_side

_BUMP = itertools.count(1)
SITEMAP_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"


def write(path: Path, text: str) -> None:
    """Writes a document with an mtime later than any before: the test server answers If-Modified-Since by
    whole seconds, so a rewrite within the second of the last request would otherwise be answered 304."""
    path.write_text(text)
    t = time.time() + 5 * next(_BUMP)
    os.utime(path, (t, t))


def urlset_of(base: str, paths: list[str], lastmod: str) -> str:
    entries = "".join(f"<url><loc>{base}{path}</loc><lastmod>{lastmod}</lastmod></url>\n" for path in paths)
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="{SITEMAP_NS}">\n{entries}</urlset>\n'


def index_of(base: str, names: list[str]) -> str:
    items = "".join(f"<sitemap><loc>{base}/{n}</loc></sitemap>\n" for n in names)
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<sitemapindex xmlns="{SITEMAP_NS}">\n{items}</sitemapindex>\n'


S_PATHS = ["/p/both.html"] + [f"/p/s{i}.html" for i in range(SMALLEST)]
T_PATHS = ["/p/both.html"] + [f"/p/t{i}.html" for i in range(SMALLEST)]


@pytest.fixture
def two_urlsets(served_dir, tmp_path):
    """s.xml and t.xml (in that order in the index) both list /p/both.html: its record names s.xml."""
    root = tmp_path / "site"
    (root / "p").mkdir(parents=True)
    base = served_dir(root)
    for path in {*S_PATHS, *T_PATHS}:
        (root / path.lstrip("/")).write_text(f"<html>{path}</html>")
    write(root / "robots.txt", f"Sitemap: {base}/index.xml\n")
    write(root / "index.xml", index_of(base, ["s.xml", "t.xml"]))
    write(root / "s.xml", urlset_of(base, S_PATHS, "2026-01-01"))
    write(root / "t.xml", urlset_of(base, T_PATHS, "2026-01-01"))
    return SimpleNamespace(root=root, base=base)


def crawled_twice(fetch_pages: bool) -> list[tuple[str, dict, None]]:
    """The two whole-site jobs a case starts from (the second adopts the parts the first made)."""
    return [("whole-1", {"fetch_pages": fetch_pages}, None), ("whole-2", {"fetch_pages": fetch_pages}, None)]


def jobs_side_by_side(site, tmp_path, jobs):
    """Runs the jobs (label, options, change before) into a state with parts and one without, one sitemap at
    a time; ``side_by_side`` checks they agree. (The crawl database keys a site by its origin, no slash: a
    ``base`` ending with "/" would compare two empty databases.)"""
    states = {True: tmp_path / "parts", False: tmp_path / "one-by-one"}
    results = {}
    for n, (label, options, change) in enumerate(jobs):
        if change is not None:
            change(site)
        request = JobRequest(site=f"{site.base}/", job_id=f"j{n}-{label}", rate_limit_delay=0.0001, **options)
        results[label] = side_by_side(
            states, SimpleNamespace(base=site.base), request, at=START + timedelta(days=n), label=label, concurrency=1
        )
    return results


@pytest.mark.parametrize("fetch_pages", [True, False], ids=["pages", "no-pages"])
def test_a_url_its_first_urlset_stops_listing_stays_listed_through_the_other(two_urlsets, tmp_path, fetch_pages):
    """s.xml drops /p/both.html; t.xml, unchanged, still lists it. With parts: t.xml's part (without the URL)
    is adopted whole, the job counts 20 for 21, and the whole-tree job declares the URL orphan (changes.jsonl
    "removed"; its record state orphan, naming s.xml), and every later job keeps losing it."""
    site = two_urlsets
    jobs_side_by_side(
        site,
        tmp_path,
        [
            *crawled_twice(fetch_pages),
            (
                "s-drops",
                {"fetch_pages": fetch_pages},
                lambda s: write(s.root / "s.xml", urlset_of(s.base, S_PATHS[1:], "2026-01-01")),
            ),
            ("whole-3", {"fetch_pages": fetch_pages}, None),
        ],
    )


def _s_missing(site):
    (site.root / "s.xml").rename(site.root / "s.bak")


def _s_off_the_index(site):
    write(site.root / "index.xml", index_of(site.base, ["t.xml"]))


@pytest.mark.parametrize("fetch_pages", [True, False], ids=["pages", "no-pages"])
@pytest.mark.parametrize(
    ("how", "options", "change"),
    [
        ("s-404", {}, _s_missing),
        ("s-off-the-index", {}, _s_off_the_index),  # (also declares the URL orphan: 11 removed for 10)
        ("sitemap-exclude-s", {"sitemap_exclude": ("*/s.xml",)}, None),
        ("named-t", {"sitemaps": "t.xml"}, None),
    ],
)
def test_a_url_of_two_urlsets_is_listed_when_its_first_urlset_is_not_read(
    two_urlsets, tmp_path, fetch_pages, how, options, change
):
    """A job that reads t.xml but not s.xml (s.xml answers 404, left the index, is excluded by a pattern, or
    the job names t.xml alone): listing one by one, t.xml gives 11 URLs; with parts, t.xml's part gives 10."""
    site = two_urlsets
    if options.get("sitemaps"):
        options = {**options, "sitemaps": (f"{site.base}/{options['sitemaps']}",)}
    results = jobs_side_by_side(
        site,
        tmp_path,
        [
            *crawled_twice(fetch_pages),
            (how, {"fetch_pages": fetch_pages, **options}, change),
        ],
    )
    assert results[how].total_urls == 1 + SMALLEST


@pytest.mark.parametrize("fetch_pages", [True, False], ids=["pages", "no-pages"])
def test_a_url_of_two_urlsets_names_the_one_read_first_after_the_index_reorders_them(
    two_urlsets, tmp_path, fetch_pages
):
    """The index lists t.xml first now (neither urlset changed): listing one by one, t.xml lists
    /p/both.html first and its record (and urls.jsonl line) names t.xml; with parts, s.xml's part is adopted
    whole and both keep naming s.xml. Counts agree; urls.jsonl, the index rows and the crawl database do not."""
    site = two_urlsets
    jobs_side_by_side(
        site,
        tmp_path,
        [
            *crawled_twice(fetch_pages),
            (
                "t-first",
                {"fetch_pages": fetch_pages},
                lambda s: write(s.root / "index.xml", index_of(s.base, ["t.xml", "s.xml"])),
            ),
        ],
    )


def crawled_on_stack(deployed_stack, request: JobRequest) -> tuple[dict, list[str]]:
    """Submits the job to the stack, drains it as Lambda's pollers do, and reads its result and urls.jsonl's URLs."""
    stack, _ = deployed_stack
    submit_job(request, stack.outputs["JobQueueUrl"])
    assert request.job_id is not None
    return finished_on_stack(deployed_stack, request.job_id)


def test_a_url_its_first_urlset_stops_listing_stays_listed_on_aws(deployed_stack, two_urlsets):
    """The first case on the stack (parts on, its default): the job after s.xml dropped the URL counts 20,
    lists no /p/both.html, and counts it removed."""
    site = two_urlsets
    seen = {}
    for job_id in ("whole-1", "whole-2", "s-drops", "whole-3"):
        if job_id == "s-drops":
            write(site.root / "s.xml", urlset_of(site.base, S_PATHS[1:], "2026-01-01"))
        request = JobRequest(site=f"{site.base}/", job_id=job_id, rate_limit_delay=0.0001)
        result, urls = crawled_on_stack(deployed_stack, request)
        seen[job_id] = (result["total_urls"], f"{site.base}/p/both.html" in urls, result["changes"]["removed"])
    assert seen == {job: (1 + 2 * SMALLEST, True, 0) for job in seen}, seen


def _t_relisted(site):
    write(site.root / "t.xml", urlset_of(site.base, T_PATHS, "2026-02-01"))


def test_a_url_of_two_urlsets_fetched_again_through_one_is_counted_once_by_the_next_job(two_urlsets, tmp_path):
    """A job about t.xml alone fetches /p/both.html again (its record names t.xml from then on); then jobs of
    the whole site, with neither urlset changed since. s.xml's part, made before, no longer holds what its
    records name: it must not be adopted beside t.xml's (which holds the URL now), or the URL counts twice."""
    site = two_urlsets
    t_only = {"sitemaps": (f"{site.base}/t.xml",), "refetch": Refetch.ALL}
    results = jobs_side_by_side(
        site,
        tmp_path,
        [("whole-1", {}, None), ("t-only", t_only, _t_relisted), ("whole-2", {}, None), ("whole-3", {}, None)],
    )
    assert {label: r.total_urls for label, r in results.items() if label != "t-only"} == {
        label: 1 + 2 * SMALLEST for label in ("whole-1", "whole-2", "whole-3")
    }


def test_a_url_of_two_urlsets_fetched_again_through_one_is_counted_once_on_aws(deployed_stack, two_urlsets):
    """The case above on the stack: each job's urls.jsonl holds each URL once, and the whole-site jobs 21."""
    site = two_urlsets
    for job_id in ("whole-1", "t-only", "whole-2", "whole-3"):
        options = {}
        if job_id == "t-only":
            _t_relisted(site)
            options = {"sitemaps": (f"{site.base}/t.xml",), "refetch": Refetch.ALL}
        request = JobRequest(site=f"{site.base}/", job_id=job_id, rate_limit_delay=0.0001, **options)
        result, urls = crawled_on_stack(deployed_stack, request)
        assert len(urls) == len(set(urls)) == result["total_urls"], job_id
        if job_id != "t-only":
            assert result["total_urls"] == 1 + 2 * SMALLEST, job_id


@contextmanager
def holding(deployed_stack, held_keys: set[tuple[str, str]]) -> Iterator[dict[tuple[str, str], list[str]]]:
    """Holds back the readings (job, sitemap URL) in ``held_keys`` (a live set: a key taken out is held no
    longer): their messages, deleted from the sitemap queue as the poller receives them, by key; those still
    held are sent again at the end."""
    stack, poller = deployed_stack
    queue = stack.outputs["SitemapQueueUrl"]
    held: dict[tuple[str, str], list[str]] = {}
    receive = poller._receive

    def hold(source):
        messages = []
        for message in receive(source):
            body = json.loads(message["Body"])
            key = (body.get("job_id"), body.get("url"))
            if source.queue_url == queue and key in held_keys:
                held.setdefault(key, []).append(message["Body"])
                poller.sqs.delete_message(QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"])
            else:
                messages.append(message)
        return messages

    poller._receive = hold
    try:
        yield held
    finally:
        poller._receive = receive
    for bodies in held.values():
        for body in bodies:
            poller.sqs.send_message(QueueUrl=queue, MessageBody=body)


def released_on_the_side(
    deployed_stack, keys: set[tuple[str, str]], held: dict[tuple[str, str], list[str]], key: tuple[str, str]
) -> None:
    """Holds the reading no longer (``holding``'s keys and what it held), sends it again and has it run now,
    as another Lambda invocation would beside the one under way (a thread of its own: the caller is inside a
    handler)."""
    stack, poller = deployed_stack
    keys.discard(key)
    for body in held.pop(key):
        poller.sqs.send_message(QueueUrl=stack.outputs["SitemapQueueUrl"], MessageBody=body)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            poller.poll_once("SitemapFunction")
        except BaseException as error:  # (re-raised in the caller's thread)
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert not errors, errors


def finished_on_stack(deployed_stack, job_id: str) -> tuple[dict, list[str]]:
    """Drains the stack and reads the job's result and urls.jsonl's URLs (a job that never ended: no result)."""
    stack, poller = deployed_stack
    stats = poller.drain(max_rounds=3000)
    assert stats.failed_invocations == 0, [f.traceback for f in stats.failures]
    documents = adapters_of(stack).documents
    result = json.loads(documents.get(f"jobs/{job_id}/result.json"))
    urls = [json.loads(line)["url"] for line in documents.get(f"jobs/{job_id}/urls.jsonl").splitlines()]
    return result, urls


def started_on_stack(deployed_stack, request: JobRequest) -> None:
    """Submits the job and drains what can run (readings held back by ``holding`` wait)."""
    stack, poller = deployed_stack
    submit_job(request, stack.outputs["JobQueueUrl"])
    assert poller.drain(max_rounds=3000).failed_invocations == 0


def test_a_part_made_while_a_job_runs_is_not_adopted_by_it_on_aws(deployed_stack, two_urlsets):
    """Job A, the site's first, lists /p/both.html through t.xml while its reading of s.xml waits; job B, about
    s.xml alone, runs whole meanwhile and makes s.xml's part, which holds the URL (B listed it first through
    s.xml, its records name s.xml). A's listing moved nothing of that part (the URL was new to the site), so
    A, reading s.xml last, would adopt it and count the URL twice (22 records, 21 URLs): a part made after a
    job started is not that job's to adopt."""
    site = two_urlsets
    with holding(deployed_stack, {("a", f"{site.base}/s.xml")}) as held:
        started_on_stack(deployed_stack, JobRequest(site=f"{site.base}/", job_id="a", rate_limit_delay=0.0001))
        s_alone = JobRequest(
            site=f"{site.base}/", job_id="b", rate_limit_delay=0.0001, sitemaps=(f"{site.base}/s.xml",)
        )
        assert crawled_on_stack(deployed_stack, s_alone)[0]["total_urls"] == 1 + SMALLEST
        assert held, "A's reading of s.xml was never sent"
    result, urls = finished_on_stack(deployed_stack, "a")
    assert len(urls) == len(set(urls)) == result["total_urls"] == 1 + 2 * SMALLEST


def test_a_url_a_part_does_not_hold_is_listed_through_the_other_urlset_on_aws(deployed_stack, two_urlsets):
    """s.xml drops /p/both.html (t.xml, unchanged, still lists it) and a job about s.xml alone adopts s.xml's
    part in part, leaving the URL out: its record still names s.xml, and the part made then does not hold it
    (its ``excluded``). The next whole-site job adopts that part whole and lists t.xml entry by entry: the URL
    is not the job's through s.xml's part, so t.xml's listing lists it (it was taken as the job's already: 20
    URLs for 21, the URL declared orphan)."""
    site = two_urlsets
    crawled_on_stack(deployed_stack, JobRequest(site=f"{site.base}/", job_id="whole-1", rate_limit_delay=0.0001))
    write(site.root / "s.xml", urlset_of(site.base, S_PATHS[1:], "2026-01-01"))
    s_alone = JobRequest(
        site=f"{site.base}/", job_id="s-only", rate_limit_delay=0.0001, sitemaps=(f"{site.base}/s.xml",)
    )
    assert crawled_on_stack(deployed_stack, s_alone)[0]["total_urls"] == SMALLEST
    for job_id in ("whole-2", "whole-3"):
        result, urls = crawled_on_stack(
            deployed_stack, JobRequest(site=f"{site.base}/", job_id=job_id, rate_limit_delay=0.0001)
        )
        assert f"{site.base}/p/both.html" in urls, job_id
        assert (len(urls), len(set(urls)), result["total_urls"]) == (1 + 2 * SMALLEST,) * 3, job_id
        assert result["changes"]["removed"] == 0, job_id


@pytest.mark.parametrize("b_job", ["t-only", "whole, s.xml dropping it"])
def test_a_url_another_job_moves_to_the_urlset_a_job_reads_later_is_counted_once_on_aws(
    deployed_stack, two_urlsets, b_job
):
    """s.xml's part holds /p/both.html (job w1). Job A adopts it whole while its reading of t.xml waits; job B
    meanwhile lists the URL through t.xml (a job about t.xml alone, or a whole-site job after s.xml dropped
    it), so its record and pointer name t.xml from then on. A then lists t.xml entry by entry: the URL is A's
    already, through s.xml's part, and must not count twice."""
    site = two_urlsets
    crawled_on_stack(deployed_stack, JobRequest(site=f"{site.base}/", job_id="w1", rate_limit_delay=0.0001))
    with holding(deployed_stack, {("a", f"{site.base}/t.xml")}) as held:
        started_on_stack(deployed_stack, JobRequest(site=f"{site.base}/", job_id="a", rate_limit_delay=0.0001))
        if b_job == "t-only":
            b = JobRequest(site=f"{site.base}/", job_id="b", rate_limit_delay=0.0001, sitemaps=(f"{site.base}/t.xml",))
            assert crawled_on_stack(deployed_stack, b)[0]["total_urls"] == 1 + SMALLEST
        else:
            write(site.root / "s.xml", urlset_of(site.base, S_PATHS[1:], "2026-01-01"))
            b = JobRequest(site=f"{site.base}/", job_id="b", rate_limit_delay=0.0001)
            assert crawled_on_stack(deployed_stack, b)[0]["total_urls"] == 1 + 2 * SMALLEST
        assert held, "A's reading of t.xml was never sent"
    result, urls = finished_on_stack(deployed_stack, "a")
    assert (len(urls), len(set(urls)), result["total_urls"]) == (1 + 2 * SMALLEST,) * 3, result["changes"]


def test_a_url_an_adopter_in_part_listed_itself_is_not_held_by_the_parts_other_adopters(deployed_stack, two_urlsets):
    """w1 makes s.xml's part. Z adopts it whole (its reading of t.xml held back). Both urlsets then add
    /p/v.html; Y adopts s.xml's part in part and lists v itself through s.xml (v's record names s.xml, listed
    by y: a listing of its own, not a record the part holds). B, about t.xml alone, lists v and
    /p/both.html: both.html is Z's and Y's through the part, v is Y's own listing's and not Z's. Each job
    counts each URL once."""
    site = two_urlsets
    crawled_on_stack(deployed_stack, JobRequest(site=f"{site.base}/", job_id="w1", rate_limit_delay=0.0001))
    t_url = f"{site.base}/t.xml"
    keys = {("z", t_url)}
    with holding(deployed_stack, keys):
        started_on_stack(deployed_stack, JobRequest(site=f"{site.base}/", job_id="z", rate_limit_delay=0.0001))
        (site.root / "p" / "v.html").write_text("<html>v</html>")
        write(site.root / "s.xml", urlset_of(site.base, [*S_PATHS, "/p/v.html"], "2026-01-01"))
        write(site.root / "t.xml", urlset_of(site.base, [*T_PATHS, "/p/v.html"], "2026-01-01"))
        keys.add(("y", t_url))
        started_on_stack(deployed_stack, JobRequest(site=f"{site.base}/", job_id="y", rate_limit_delay=0.0001))
        b = JobRequest(site=f"{site.base}/", job_id="b", rate_limit_delay=0.0001, sitemaps=(t_url,))
        assert crawled_on_stack(deployed_stack, b)[0]["total_urls"] == 2 + SMALLEST
    for job in ("y", "z"):
        result, urls = finished_on_stack(deployed_stack, job)
        assert f"{site.base}/p/v.html" in urls, job
        assert (len(urls), len(set(urls)), result["total_urls"]) == (2 + 2 * SMALLEST,) * 3, job


@pytest.mark.parametrize("adopter", ["after a first attempt", "after the lookup"])
def test_an_adoption_during_another_jobs_listing_of_its_url_keeps_it_once(
    deployed_stack, two_urlsets, monkeypatch, adopter
):
    """w1 makes s.xml's part (it holds /p/both.html); in the second case job X adopts it too and ends, so
    that B's lookup reads the URL's record as listed by x. Job D starts, its readings of s.xml and t.xml held
    back. Job B (t.xml alone) lists /p/both.html; D adopts s.xml's part whole while B's listing is under way:
    after B read the part item (B's epoch move then fails: B decides again, taking its first attempt's
    pointer over), or after B's lookup and before it reads the item (an adoption that drops x's mark, x being
    over). Either way D is kept among the URL's jobs, and D's listing of t.xml does not count it twice."""
    site = two_urlsets
    crawled_on_stack(deployed_stack, JobRequest(site=f"{site.base}/", job_id="w1", rate_limit_delay=0.0001))
    if adopter == "after the lookup":
        crawled_on_stack(deployed_stack, JobRequest(site=f"{site.base}/", job_id="x", rate_limit_delay=0.0001))
    s_url, t_url = f"{site.base}/s.xml", f"{site.base}/t.xml"
    s_key = url_key(s_url)
    adopters = crawl_parts.PartItems.adopters
    adopted: list[str | None] = []

    def adopting_d_meanwhile(items, site_, sitemap_keys, job_id, job_over):
        sitemap_keys = list(sitemap_keys)
        watched = job_id == "b" and s_key in sitemap_keys and not adopted
        if watched and adopter == "after the lookup":
            released_on_the_side(deployed_stack, keys, held, ("d", s_url))
        found = adopters(items, site_, sitemap_keys, job_id, job_over)
        if watched and adopter == "after a first attempt":
            released_on_the_side(deployed_stack, keys, held, ("d", s_url))
        if watched:
            adopted.append(adopters(items, site_, sitemap_keys, "nobody", job_over)[s_key].latest)
        return found

    keys = {("d", s_url), ("d", t_url)}
    with holding(deployed_stack, keys) as held:
        started_on_stack(deployed_stack, JobRequest(site=f"{site.base}/", job_id="d", rate_limit_delay=0.0001))
        monkeypatch.setattr(crawl_parts.PartItems, "adopters", adopting_d_meanwhile)
        b = JobRequest(site=f"{site.base}/", job_id="b", rate_limit_delay=0.0001, sitemaps=(t_url,))
        assert crawled_on_stack(deployed_stack, b)[0]["total_urls"] == 1 + SMALLEST
        monkeypatch.setattr(crawl_parts.PartItems, "adopters", adopters)
    assert adopted == ["d"]  # (D adopted s.xml's part while B listed)
    result, urls = finished_on_stack(deployed_stack, "d")
    assert (len(urls), len(set(urls)), result["total_urls"]) == (1 + 2 * SMALLEST,) * 3, result["changes"]


def test_a_url_settled_as_read_through_an_ended_adopter_stays_the_running_adopters(deployed_stack, two_urlsets):
    """w1 makes s.xml's part. D adopts it whole (its reading of t.xml held back). A adopts it too and ends (the
    latest adopter). s.xml drops /p/both.html; C adopts the part in part leaving it out: its record is first
    written whole as read, listed by a, and C's adoption drops A's mark (A is over), naming A as the adopter
    its settled records read through (``sb``). B, about t.xml alone, lists the URL: D's part holds it, and D's
    own listing of t.xml must not count it twice."""
    site = two_urlsets
    t_url = f"{site.base}/t.xml"
    crawled_on_stack(deployed_stack, JobRequest(site=f"{site.base}/", job_id="w1", rate_limit_delay=0.0001))
    keys = {("d", t_url)}
    with holding(deployed_stack, keys) as held:
        started_on_stack(deployed_stack, JobRequest(site=f"{site.base}/", job_id="d", rate_limit_delay=0.0001))
        crawled_on_stack(deployed_stack, JobRequest(site=f"{site.base}/", job_id="a", rate_limit_delay=0.0001))
        write(site.root / "s.xml", urlset_of(site.base, S_PATHS[1:], "2026-01-01"))
        keys.add(("c", t_url))  # (C runs on: at its end it would make a new part of s.xml)
        started_on_stack(deployed_stack, JobRequest(site=f"{site.base}/", job_id="c", rate_limit_delay=0.0001))
        b = JobRequest(site=f"{site.base}/", job_id="b", rate_limit_delay=0.0001, sitemaps=(t_url,))
        assert crawled_on_stack(deployed_stack, b)[0]["total_urls"] == 1 + SMALLEST
        assert held
    result, urls = finished_on_stack(deployed_stack, "d")
    assert (len(urls), len(set(urls)), result["total_urls"]) == (1 + 2 * SMALLEST,) * 3
