"""Fetching by fetching-and-safety.md, end to end: redirects (counted, checked at every hop, http(s) only),
transient errors retried a bounded number of times, final ones not, Content-Encoding undone at most once,
pages too big or bombed, and pages redirected where they must not go.

The site is read with ``harvest sitemaps`` (the sitemap side) and crawled with ``harvest crawl`` (the page
side) with ``--concurrency 4``, proxy variables pointing at a trap, and a live server on 127.0.0.2 that
the allow list (127.0.0.1/32) keeps out.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harvester.archive.warc import parse_record
from harvester.words import size
from tests.corpus import sites as s
from tests.corpus.cli import FAST_RETRIES, ONLY_127_0_0_1, Run, Tree, harvest
from tests.corpus.server import Hit, RouteServer, serving

CONCURRENCY = 4
MEMORY_CEILING_MIB = 128


@dataclass
class FetchedSite:
    base: str
    sitemaps_run: Run
    tree: Tree
    sitemap_hits: list[Hit]
    crawl_run: Run
    result: dict[str, Any]
    records: dict[str, dict[str, Any]]  # page URL -> its record
    crawl_hits: list[Hit]
    max_in_flight: int
    forbidden_hits: list[Hit]
    proxy_hits: list[Hit]
    state: Path

    def node(self, path: str) -> dict[str, Any]:
        return self.tree[self.base + path]

    def record(self, path: str) -> dict[str, Any]:
        return self.records[path if "://" in path else self.base + path]

    def sitemap_fetches(self, path: str) -> int:
        return sum(1 for h in self.sitemap_hits if h.path == path)

    def page_fetches(self, path: str) -> list[Hit]:
        return [h for h in self.crawl_hits if h.path == path]


@pytest.fixture(scope="module")
def site(server: RouteServer, second_server: RouteServer, tmp_path_factory) -> FetchedSite:
    s.fetching_site(server, second_server)
    allow = ("--allow-network", ONLY_127_0_0_1)
    sitemaps_run = harvest("sitemaps", server.base + "/", *allow, "--format", "json", env=FAST_RETRIES)
    sitemap_hits = list(server.hits)
    server.reset_log()
    with serving("127.0.0.1") as proxy:
        proxies = {name: proxy.base for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy")}
        state = tmp_path_factory.mktemp("state")
        crawl_run = harvest(
            "crawl",
            server.base + "/",
            *allow,
            "--state-dir",
            str(state),
            "--json",
            "--quiet",
            "--rate-limit-delay",
            "0.0001",
            "--concurrency",
            str(CONCURRENCY),
            "--scope",
            "any",
            # (the host's slow-down after the 429 and 503 pages held to 2 s: at the default 60 s bound the pages
            # left waited 30-90 s before they were asked for again, issue 42's item 7, which no assertion here
            # is about; the slow-down itself: tests/politeness)
            env={**FAST_RETRIES, **proxies, "HARVEST_HOST_SLOWDOWN_MAX": "2"},
            timeout=300,
        )
        proxy_hits = list(proxy.hits)
    result = crawl_run.json()
    records = {}
    for line in Path(result["processed_urls"]).read_text().splitlines():
        record = json.loads(line)
        records[record["url"]] = record
    return FetchedSite(
        base=server.base,
        sitemaps_run=sitemaps_run,
        tree=Tree(sitemaps_run.json()),
        sitemap_hits=sitemap_hits,
        crawl_run=crawl_run,
        result=result,
        records=records,
        crawl_hits=list(server.hits),
        max_in_flight=server.max_in_flight,
        forbidden_hits=list(second_server.hits),
        proxy_hits=proxy_hits,
        state=state,
    )


# the job -------------------------------------------------------------------------------------------


def test_the_crawl_completes_with_its_failures_counted_and_explained(site):
    """Exit 0: the job completed, failed URLs included. Every failure is in error_details with its reason."""
    assert site.crawl_run.returncode == 0, site.crawl_run.stderr
    result = site.result
    assert result["status"] == "completed"
    parts = result["successful_processing"] + result["failed_processing"] + result["excluded_processing"]
    assert result["total_urls"] == parts == len(site.records)
    failed = {r["url"] for r in site.records.values() if r["status"] == "failed"}
    reported = {d["url"]: d for d in result["error_details"]}
    assert failed == {url for url, d in reported.items() if d["kind"] == "page"}
    assert all(d["error"] for d in reported.values())
    # Refused addresses are excluded (a rule), counted apart from the failures with their reasons.
    excluded = [r for r in site.records.values() if r["status"] == "excluded"]
    assert len(excluded) == result["excluded_processing"] == sum(result["exclusions"].values()) > 0
    assert all("refused to connect to" in reason for reason in result["exclusions"])


def test_well_known_paths_that_are_not_there_are_not_reported_as_errors(site):
    """A 404 at /sitemap.xml is normal: quiet, absent, and not in the job's error details."""
    reported = {d["url"] for d in site.result["error_details"]}
    assert not any(url.startswith(site.base + p) for p in s.KNOWN_PATHS for url in reported)
    assert site.node("/sitemap.xml")["status"] == "absent"


def test_good_pages_are_fetched_and_stored(site):
    for n in range(4):
        record = site.record(s.PAGE_OK.format(n=n))
        assert (record["status"], record["http_status"], record["crawl_state"]) == ("completed", 200, "fetched")
        assert record["warc"]["record_type"] == "response"


def test_a_page_is_archived_as_sent_and_read_back_alone_by_its_offset(site):
    """The response record keeps the body as received (gzip still on); a ranged read of the record's offset
    and length gives that record alone; and every WARC file of the crawl passes `warcio check`."""
    record = site.record(s.PAGE_GZIPPED)
    assert (record["status"], record["http_status"]) == ("completed", 200)
    warc = record["warc"]
    path = site.state / "documents" / warc["filename"]
    with path.open("rb") as file:
        file.seek(warc["offset"])
        member = file.read(warc["length"])
    stored = parse_record(member)
    assert (stored.url, stored.record_type, stored.status) == (site.base + s.PAGE_GZIPPED, "response", 200)
    assert stored.body == s.f.gzipped(s.GZIPPED_PAGE)  # byte for byte what the server sent
    assert stored.content == s.GZIPPED_PAGE
    assert ("Content-Encoding", "gzip") in stored.headers
    assert record["signature"] == hashlib.sha256(s.GZIPPED_PAGE).hexdigest()
    files = sorted((site.state / "documents" / "warc").rglob("*.warc.gz"))
    assert files
    for file in files:
        check = subprocess.run([sys.executable, "-m", "warcio.cli", "check", str(file)], capture_output=True)
        assert check.returncode == 0, check.stdout


def test_a_redirected_page_is_archived_with_every_hop(site):
    """Each redirect is an exchange of its own (its 3xx head, no body), before the landing page's response,
    which the record names; every one is in the file's CDXJ."""
    record = site.record(s.PAGE_REDIRECTED)
    warc = record["warc"]
    cdxj = (site.state / "documents" / (warc["filename"] + ".cdxj")).read_text().splitlines()
    lines = [json.loads(line.split(" ", 2)[2]) for line in cdxj]
    before = [line for line in lines if int(line["offset"]) < warc["offset"]]
    chain = [(line["url"], line["status"]) for line in before if s.PAGE_REDIRECTED in line["url"]]
    first = site.base + s.PAGE_REDIRECTED
    assert chain == [(first, "301"), (first + "/hop-1", "302"), (first + "/hop-2", "303")]
    landing = next(line for line in lines if int(line["offset"]) == warc["offset"])
    assert (landing["url"], landing["status"]) == (site.base + s.PAGE_LANDING, "200")
    assert warc["url"] == site.base + s.PAGE_LANDING


def test_the_crawl_stays_in_bounded_memory_while_a_page_bomb_goes_off(site):
    assert site.crawl_run.peak_rss_mib < MEMORY_CEILING_MIB


# redirects -----------------------------------------------------------------------------------------


def test_a_sitemap_reached_through_redirects_records_its_final_url(site):
    for path, target in ((s.THREE_HOPS, "/target/3-hops.xml"), (s.FIVE_HOPS, "/target/5-hops.xml")):
        node = site.node(path)
        assert (node["status"], node["pages"]) == ("completed", 2), path
        assert node["final_url"] == site.base + target
    # Archived as a page is: each hop's 3xx head, then the sitemap as the last one led to it.
    captures = [(uri, kind) for _, rec, uri, _, kind in archived_captures(site) if rec == "response"]
    first = site.base + s.THREE_HOPS
    chain = [c for c in captures if c[0].startswith(first) or c[0] == site.base + "/target/3-hops.xml"]
    hops = [(first, "redirect"), (first + "/hop-1", "redirect"), (first + "/hop-2", "redirect")]
    assert chain == [*hops, (site.base + "/target/3-hops.xml", "sitemap")]


def test_more_than_five_redirects_fail_the_sitemap(site):
    for path in (s.SIX_HOPS, s.REDIRECT_LOOP):
        node = site.node(path)
        assert (node["status"], node["pages"]) == ("failed", 0)
        assert "more than 5 redirects" in node["error"]
    assert site.sitemap_fetches(s.REDIRECT_LOOP) == 6  # the request and five redirects, not one more


def test_a_redirect_to_ftp_fails_the_sitemap(site):
    node = site.node(s.TO_FTP)
    assert node["status"] == "failed"
    assert "'ftp'" in node["error"]


def test_a_redirected_page_records_its_final_url(site):
    record = site.record(s.PAGE_REDIRECTED)
    assert (record["status"], record["final_url"]) == ("completed", site.base + s.PAGE_LANDING)


@pytest.mark.parametrize(
    ("path", "status", "reason"),
    [
        # The address policy's refusal is a rule, not the page's failure: excluded, its crawl state unmoved.
        (s.PAGE_TO_127_0_0_2, "excluded", "refused to connect to 127.0.0.2"),
        (s.PAGE_TO_METADATA, "excluded", "refused to connect to 169.254.169.254"),
        (s.PAGE_SIX_REDIRECTS, "failed", "more than 5 redirects"),
        (s.PAGE_TO_FTP, "failed", "scheme 'ftp'"),
    ],
)
def test_a_page_redirected_where_it_must_not_go_ends_with_the_reason(site, path, status, reason):
    record = site.record(path)
    assert record["status"] == status
    assert reason in record["error_message"]
    assert record["attempts"] == 1  # refusals are final, not retried
    if status == "excluded":
        assert record["crawl_state"] == "unfetched"


@pytest.mark.parametrize(("url", "address"), list(s.HIDDEN_PAGES.items()))
def test_a_page_at_a_disguised_forbidden_address_is_excluded_naming_the_address(site, second_server, url, address):
    record = site.record(url.format(port=second_server.port))
    assert (record["status"], record["attempts"]) == ("excluded", 0)  # no request was sent
    assert f"refused to connect to {address}" in record["error_message"] or address in record["error_message"]


def test_nothing_ever_reached_the_forbidden_server_or_the_proxy(site):
    """Redirects and links to 127.0.0.2 were refused at connect time, and proxy variables were ignored
    (``trust_env=False``): had either leaked, these servers would have seen a request."""
    assert site.forbidden_hits == []
    assert site.proxy_hits == []


# retries -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [s.SERVER_ERROR_TWICE, s.TOO_MANY_REQUESTS_ONCE, s.SERVER_ERROR_NO_RETRY_AFTER])
def test_a_transient_sitemap_error_is_retried_until_it_passes(site, path):
    node = site.node(path)
    assert (node["status"], node["pages"]) == ("completed", 2)


def test_a_sitemap_that_keeps_failing_is_given_up_after_a_bounded_number_of_attempts(site):
    node = site.node(s.SERVER_ERROR_ALWAYS)
    assert (node["status"], node.get("http_status")) == ("failed", 503)
    assert node["error"].endswith("(gave up after 3 attempts)")
    # One budget for the URL: the fetcher's own retries and the readings' deliveries, 3 requests in all.
    assert site.sitemap_fetches(s.SERVER_ERROR_ALWAYS) == 3


def test_a_final_http_error_on_a_sitemap_is_not_retried(site):
    node = site.node(s.GONE_SITEMAP)
    assert (node["status"], node.get("http_status")) == ("failed", 410)
    assert site.sitemap_fetches(s.GONE_SITEMAP) == 1


def test_a_page_that_keeps_failing_is_given_up_after_three_attempts(site):
    record = site.record(s.PAGE_503_ALWAYS)
    assert (record["status"], record["http_status"]) == ("failed", 503)
    assert record["error_message"] == "HTTP 503 Service Unavailable (gave up after 3 attempts)"
    assert len(site.page_fetches(s.PAGE_503_ALWAYS)) == record["attempts"] == 3
    # Every answer is archived, the retried ones too; the record names the last.
    retried = "HTTP 503 Service Unavailable"
    assert archived_answers(site, s.PAGE_503_ALWAYS) == [
        ("response", 503, retried),
        ("response", 503, retried),
        ("response", 503, record["error_message"]),
    ]
    with (site.state / "documents" / record["warc"]["filename"]).open("rb") as file:
        file.seek(record["warc"]["offset"])
        assert parse_record(file.read(record["warc"]["length"])).status == 503


def test_a_page_that_recovers_is_completed_and_retry_after_is_honoured(site):
    record = site.record(s.PAGE_503_RETRY_AFTER)
    assert (record["status"], record["http_status"]) == ("completed", 200)
    first, second = site.page_fetches(s.PAGE_503_RETRY_AFTER)[:2]
    assert second.at - first.at >= 0.95  # "Retry-After: 1"
    assert site.record(s.PAGE_429_ONCE)["status"] == "completed"
    assert archived_answers(site, s.PAGE_503_RETRY_AFTER) == [
        ("response", 503, "HTTP 503 Service Unavailable"),
        ("response", 200, ""),
    ]
    assert archived_answers(site, s.PAGE_429_ONCE) == [
        ("response", 429, "HTTP 429 Too Many Requests"),
        ("response", 200, ""),
    ]


def archived_captures(site) -> list[tuple[str, str, str, str, str]]:
    """Every capture of the crawl's WARC files, in the order written (tests.support.warc_captures)."""
    from harvester.adapters.local.documents import FolderDocumentStore
    from tests.support import warc_captures

    return warc_captures(FolderDocumentStore(site.state / "documents"))


def archived_answers(site, path: str) -> list[tuple[str, int, str]]:
    """The captures of a page's URL in the job's WARC files, in the order fetched: (record type, HTTP
    status, the ``error_message`` of its metadata record or "")."""
    from warcio.archiveiterator import ArchiveIterator

    found = []
    for file in sorted((site.state / "documents" / "warc").rglob("*.warc.gz")):
        with file.open("rb") as stream:
            errors: dict[str, str] = {}
            for record in ArchiveIterator(stream):
                headers = record.rec_headers
                if record.rec_type == "metadata":
                    known = json.loads(record.content_stream().read())
                    errors[headers.get_header("WARC-Concurrent-To")] = known.get("error_message", "")
                elif record.rec_type in ("response", "revisit") and headers.get_header("WARC-Target-URI") == (
                    site.base + path
                ):
                    status = int(record.http_headers.get_statuscode())
                    found.append((record.rec_type, status, errors.get(headers.get_header("WARC-Record-ID"), "")))
    return found


def test_a_body_cut_off_mid_download_is_retried_then_failed_with_the_reason(site):
    record = site.record(s.PAGE_CUT)
    assert record["status"] == "failed"
    assert "broken off" in record["error_message"] or "cut off" in record["error_message"]
    assert record["error_message"].endswith("(gave up after 3 attempts)")
    assert len(site.page_fetches(s.PAGE_CUT)) == record["attempts"] == 3
    assert not record.get("document_key") and not record.get("warc")


@pytest.mark.parametrize(("path", "status"), [(s.PAGE_404, 404), (s.PAGE_410, 410)])
def test_a_final_4xx_fails_the_page_at_once(site, path, status):
    record = site.record(path)
    assert (record["status"], record["http_status"], record["crawl_state"]) == ("failed", status, "gone")
    assert str(status) in record["error_message"]
    assert len(site.page_fetches(path)) == record["attempts"] == 1
    # Its answer is archived as the server sent it (an archive keeps error pages too).
    with (site.state / "documents" / record["warc"]["filename"]).open("rb") as file:
        file.seek(record["warc"]["offset"])
        stored = parse_record(file.read(record["warc"]["length"]))
    assert (stored.record_type, stored.status, stored.url) == ("response", status, site.base + path)


def test_a_403_page_is_final_too(site):
    record = site.record(s.PAGE_403)
    assert record["status"] == "failed"
    assert len(site.page_fetches(s.PAGE_403)) == 1
    assert record["error_message"] == "HTTP 403 Forbidden"
    # Final for this job (not retried in it), but Nutch's retry for the crawls to come: the crawl database
    # counts one retry toward gone, and the URL stays unfetched after one refusal.
    assert (record["crawl_state"], record["retries"], record["change"]) == ("unfetched", 0, "new")


# sizes and encodings -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [s.PAGE_TOO_BIG, s.PAGE_BOMB])
def test_a_page_over_10_mib_or_a_content_encoding_bomb_fails_naming_the_size(site, path):
    record = site.record(path)
    assert record["status"] == "failed"
    assert f"larger than {size(s.PAGE_MAX_BYTES)}" in record["error_message"]
    assert not record.get("document_key") and not record.get("warc")


@pytest.mark.parametrize(
    ("path", "reason"),
    [(s.CE_BROTLI, "unsupported Content-Encoding 'br'"), (s.CE_TWO_LAYERS, "unsupported Content-Encoding")],
)
def test_a_content_encoding_that_is_not_undone_fails_the_sitemap_with_the_reason(site, path, reason):
    """Only one of gzip / deflate is undone, and one layer of it: ``gzip, gzip`` is refused."""
    node = site.node(path)
    assert (node["status"], node["pages"]) == ("failed", 0)
    assert reason in node["error"]


def test_a_corrupt_content_encoding_fails_the_sitemap_with_the_reason(site):
    node = site.node(s.CE_CORRUPT)
    assert node["status"] in ("failed", "invalid")
    assert "corrupt" in node["error"]


def test_a_third_gzip_layer_is_not_undone(site):
    """One Content-Encoding layer plus one gzipped body at most: what is left is not a sitemap."""
    node = site.node(s.CE_THIRD_LAYER)
    assert node["pages"] == 0


# identity and politeness ---------------------------------------------------------------------------


def test_every_request_names_the_project_and_a_contact_url(site):
    agents = {h.headers.get("User-Agent") for h in site.sitemap_hits + site.crawl_hits}
    (agent,) = agents
    assert re.fullmatch(r"Harvester/\S+ \(\+https?://\S+\)", agent), agent


def test_no_more_requests_at_once_than_the_crawl_has_workers(site):
    """Eight slow pages (0.3 s each) and four workers: requests overlap, but never more than four."""
    assert 2 <= site.max_in_flight <= CONCURRENCY
    for n in range(s.SLOW_PAGES):
        assert site.record(s.PAGE_SLOW.format(n=n))["status"] == "completed"
