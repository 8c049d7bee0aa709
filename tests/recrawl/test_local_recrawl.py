"""Re-crawling on one machine: the real `harvest crawl`, three times, against a live site on 127.0.0.1."""

from __future__ import annotations

import csv
import io
import json
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from harvester.adapters.local.database import connect
from harvester.adapters.local.runner import LocalHarvest
from harvester.adapters.local.state import SqliteStateStore
from harvester.crawldb.documents import site_prefix
from harvester.demo.live import LiveSite
from harvester.limits import ROBOTS_MAX_BYTES
from harvester.pipeline.completion import write_result
from harvester.pipeline.context import StepContext
from tests.archive.checks import index_rows
from tests.recrawl import scenario
from tests.support import (
    LOOPBACK,
    crawl_database,
    harvest,
    harvest_json,
    jsonl,
    local_stores,
    stored_content,
    stored_versions,
    warc_captures,
)

FAST = ("--allow-network", LOOPBACK, "--rate-limit-delay", "0.0001", "--quiet")


def crawl(site: LiveSite, state: Path, *extra: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    site.reset_log()
    return harvest_json("crawl", site.url("/"), "--state-dir", str(state), *FAST, *extra, env=env)


def stored_pages(state: Path, site: LiveSite) -> set[str]:
    return stored_versions(local_stores(state)[0], site.base)


def test_three_crawls_fetch_only_what_is_due_and_report_exactly_what_changed(live_site, tmp_path):
    site = scenario.build(live_site())
    state = tmp_path / "state"

    first = crawl(site, state)
    scenario.check_crawl_1(site, first)
    after_first = stored_pages(state, site)
    assert len(after_first) == 40

    second = crawl(site, state)
    scenario.check_crawl_2(site, second)
    assert stored_pages(state, site) == after_first  # nothing stored again
    assert jsonl(Path(second["changes_location"])) == []

    mutation = scenario.Mutation()
    mutation.apply(site)
    third = crawl(site, state)
    scenario.check_crawl_3(site, mutation, third, jsonl(Path(third["changes_location"])))
    new_documents = stored_pages(state, site) - after_first
    assert len(new_documents) == len(mutation.changed) + len(mutation.added)
    # The job's records name its captures: a response record for a changed or new page, a revisit for one
    # that came back the same (its content is where the crawl record points); a page not due has none.
    records = {r["url"]: r for r in jsonl(Path(third["processed_urls"]))}
    with LocalHarvest.open(state) as local:
        known = {r.url: r for r in local.crawldb.site_urls(site.base)}
    documents, warcs = local_stores(state)
    for path in [*mutation.changed, *mutation.added, mutation.touched_304, mutation.touched_same, "/pages/0.html"]:
        record = records[site.url(path)]
        assert stored_content(documents, warcs, known[site.url(path)]) == site.site[path].body, path
        if path == "/pages/0.html":
            assert "warc" not in record
        elif path in (mutation.touched_304, mutation.touched_same):
            assert record["warc"]["record_type"] == "revisit", path
        else:
            assert record["warc"]["record_type"] == "response", path
            assert stored_content(documents, warcs, record) == site.site[path].body, path
    assert records[site.url("/pages/0.html")]["change"] == "not_due"
    assert records[site.url(mutation.touched_304)]["http_status"] == 304

    fourth = crawl(site, state)
    scenario.check_crawl_4(site, mutation, fourth)
    gone = {r["url"]: r for r in jsonl(Path(fourth["processed_urls"])) if r["status"] == "failed"}
    assert sorted(gone) == sorted(site.url(p) for p in mutation.gone)
    assert all(r["change"] == "not_due" and r["crawl_state"] == "gone" for r in gone.values())
    # Its index tells its fetches (none) from what it carried over: the third job's 404s and 200s.
    third_rows = {r["url"]: r for r in index_rows(Path(third["url_index"]))}
    rows = index_rows(Path(fourth["url_index"]))
    assert len(rows) == 40 and all(r["fetch_status"] is None and r["fetch_time"] is None for r in rows)
    assert all(r["fetch_reason"] == "not_due" for r in rows)
    assert sorted(r["url"] for r in rows if r["last_fetch_status"] == 404) == sorted(gone)
    seconds = {r["url"]: r["last_fetch_time"][:19] for r in rows}  # (the crawl record's time: the settling's)
    assert seconds == {url: r["last_fetch_time"][:19] for url, r in third_rows.items()}
    assert sum(r["fetch_status"] is not None for r in third_rows.values()) == len(mutation.fetched)
    # `harvest get` of a page now gone prints what was stored, and says that it is gone.
    got = subprocess.run(
        [sys.executable, "-m", "harvester", "get", site.url(mutation.gone[0]), "--state-dir", str(state)],
        capture_output=True,
        check=False,
    )
    assert got.returncode == 0 and got.stdout == site.site[mutation.gone[0]].body
    assert got.stderr.decode().startswith(f"harvest: {site.url(mutation.gone[0])}: gone: HTTP 404 Not Found at its")
    assert got.stderr.decode().endswith("; printing the content of its last good fetch\n")


def test_an_unchanged_sitemap_is_parsed_from_its_stored_copy_or_read_again_when_that_is_gone(live_site, tmp_path):
    """A 304 is answered from the document the last complete reading stored: the job lists the same URLs.
    Without that copy (a cleaned document folder), the sitemap is asked again without validators. (With the
    sitemaps' parts kept apart: a 304 then needs no copy when it is adopted whole.)"""
    site = scenario.build(live_site())
    state = tmp_path / "state"
    env = {"HARVEST_SITEMAP_PARTS": "0"}
    first = crawl(site, state, env=env)
    second = crawl(site, state, env=env)
    scenario.check_crawl_2(site, second)  # every sitemap answered 304, every URL listed again
    # Archived as the pages are: each 304 a revisit of the response the first job archived.
    first_read, second_read = (documents_read(state, job["job_id"]) for job in (first, second))
    assert set(first_read) >= {site.url(p) for p in scenario.SITEMAP_PATHS}
    assert {kind for _, kind in first_read.values()} == {"response"}
    assert {kind for _, kind in second_read.values()} == {"revisit"}
    assert {uri: digest for uri, (digest, _) in second_read.items()} == {u: d for u, (d, _) in first_read.items()}
    copies = state / "documents" / site_prefix(site.base, "sitemaps")
    assert len([p for p in copies.rglob("*") if p.is_file()]) == len(scenario.SITEMAP_PATHS)
    shutil.rmtree(copies)

    third = crawl(site, state, env=env)
    assert (third["total_urls"], third["changes"]["not_due"], third["sitemaps_ok"]) == (40, 40, second["sitemaps_ok"])
    hits = scenario.sitemap_hits(site)
    for path in scenario.SITEMAP_PATHS:
        asked = [(h.conditional, h.status) for h in hits if h.path == path]
        assert asked[:2] == [(True, 304), (False, 200)], (path, asked)
    assert len([p for p in copies.rglob("*") if p.is_file()]) == len(scenario.SITEMAP_PATHS)  # stored again
    # Read whole again, without validators: archived whole again, as a new reading is.
    assert {kind for _, kind in documents_read(state, third["job_id"]).values()} == {"response"}

    urlset = site.url("/sitemaps/0.xml")
    (copy,) = [p for p in copies.rglob("*") if p.is_file() and p.read_bytes() == site._documents()["/sitemaps/0.xml"]]
    copy.write_bytes(copy.read_bytes()[:300])  # damaged: cut inside its entries
    fourth = crawl(site, state, env=env)
    assert (fourth["total_urls"], fourth["changes"]["not_due"]) == (40, 40)
    asked = [(h.conditional, h.status) for h in scenario.sitemap_hits(site) if site.url(h.path) == urlset]
    assert asked == [(True, 304), (False, 200)]
    records = jsonl(Path(fourth["processed_urls"]))
    assert len(records) == len({r["url"] for r in records}) == 40


def test_a_sitemap_sent_again_whole_with_the_same_bytes_is_archived_as_a_revisit(live_site, tmp_path):
    """A redeploy names the same bytes with new ETags: each sitemap comes back 200, and is archived as a
    revisit (identical payload) of the record that holds those bytes, not as a second copy."""
    site = live_site(pages=4, sitemaps=2)
    state = tmp_path / "state"
    first = crawl(site, state)
    site.deployment = "-redeployed"

    second = crawl(site, state)

    asked = [(h.conditional, h.status) for h in site.hits if h.path.startswith("/sitemaps/")]
    assert asked and set(asked) == {(True, 200)}
    first_read, second_read = (documents_read(state, job["job_id"]) for job in (first, second))
    sitemaps = {uri: value for uri, value in second_read.items() if "/sitemaps/" in uri}
    assert len(sitemaps) == 2 and {kind for _, kind in sitemaps.values()} == {"revisit"}
    assert {uri: digest for uri, (digest, _) in sitemaps.items()} == {u: first_read[u][0] for u in sitemaps}


def test_a_warc_job_after_a_files_job_asks_for_what_no_warc_record_holds_whole_once(live_site, tmp_path):
    """What a crawl with --output files stored exists only as loose documents: a WARC job after it asks for
    each page and sitemap whole (a 304 would be a revisit of no record), archives them as responses, and the
    next WARC job asks conditionally again and archives revisits."""
    site = live_site(pages=4, sitemaps=1)
    state = tmp_path / "state"
    crawl(site, state, "--output", "files")
    wanted = [*site.page_paths(), *(url.removeprefix(site.base) for url in site.sitemap_urls)]
    assert "/sitemaps/0.xml" in wanted and "/sitemap_index.xml" in wanted
    for asked, kind in (((False, 200), "response"), ((True, 304), "revisit")):
        job = crawl(site, state, "--full")
        assert {(h.path, h.conditional, h.status) for h in site.hits if h.path in wanted} == {
            (path, *asked) for path in wanted
        }
        captures = [c for c in warc_captures(local_stores(state)[0]) if job["job_id"] in c[0]]
        kinds = {uri: record_type for _, record_type, uri, _, what in captures if what in ("page", "sitemap")}
        assert kinds == {site.url(p): kind for p in wanted}, job["job_id"]


def documents_read(state: Path, job_id: str) -> dict[str, tuple[str, str]]:
    """The sitemaps and robots.txt a job archived: URL -> (payload digest, record type)."""
    return {
        uri: (digest, record_type)
        for file, record_type, uri, digest, kind in warc_captures(local_stores(state)[0])
        if job_id in file and kind in ("sitemap", "robots.txt")
    }


class CutRobots(LiveSite):
    """robots.txt beyond the 512 KiB a reading keeps, its last Sitemap: line cut inside its URL."""

    def _build(self) -> dict[str, bytes]:
        built = super()._build()
        robots, cut = built["/robots.txt"], f"Sitemap: {self.url('/sitemaps/ex')}".encode()
        filler = b"# " + b"x" * (ROBOTS_MAX_BYTES - len(robots) - len(cut) - 3) + b"\n"
        built["/robots.txt"] = robots + filler + cut + b"tra.xml\n"
        assert len(robots + filler + cut) == ROBOTS_MAX_BYTES
        return built


def test_a_304_for_a_document_cut_at_its_size_limit_lists_what_the_cut_reading_listed(tmp_path):
    """The stored copy of a reading cut at the size limit ends inside an entry: parsed again for a 304, it
    is closed as that reading was, so the partial entry (a valid-looking URL) is not followed."""
    with CutRobots(pages=10).serving() as site:
        state = tmp_path / "state"
        first = crawl(site, state)
        second = crawl(site, state)
        assert next((h.conditional, h.status) for h in site.hits if h.path == "/robots.txt") == (True, 304)
        assert not [h for h in site.hits if h.path.startswith("/sitemaps/ex")]
        assert (second["sitemaps_total"], second["total_urls"]) == (first["sitemaps_total"], first["total_urls"])
        with closing(connect(state / "harvest.db")) as conn:
            robots = [s for s in SqliteStateStore(conn).sitemaps(second["job_id"]) if s.url.endswith("/robots.txt")]
        assert robots[0].not_modified and robots[0].truncated  # the cut is still said


def test_a_304_whose_stored_copy_is_gone_is_read_again_whole_even_one_request_per_host(tmp_path):
    """A sitemap answers 304 but the copy its last reading stored is gone: it is read again, unconditionally,
    on a turn of its own (with one request to the host in flight allowed, a turn taken inside the 304's own
    would have waited for itself)."""
    with CutRobots(pages=10).serving() as site:
        state = tmp_path / "state"
        first = crawl(site, state)
        shutil.rmtree(state / "documents" / site_prefix(site.base, "sitemaps"))
        second = crawl(site, state, "--per-host", "1")
        robots = [(h.conditional, h.status) for h in site.hits if h.path == "/robots.txt"]
        assert robots[:2] == [(True, 304), (False, 200)]
        assert (second["sitemaps_total"], second["total_urls"]) == (first["sitemaps_total"], first["total_urls"])


def test_the_crawl_database_view_of_a_site_and_of_a_url(live_site, tmp_path):
    site = scenario.build(live_site())
    state = tmp_path / "state"
    crawl(site, state)
    site.fail("/pages/3.html", 404)
    site.unlist("/pages/4.html")
    crawl(site, state)

    view = json.loads(harvest("report", "--site", site.url("/"), "--state-dir", str(state)).stdout)
    assert view["urls"] == 40 and view["by_state"] == {"fetched": 38, "gone": 1, "orphan": 1}
    assert view["due_now"] == 0 and view["next_due"]
    assert {s["url"] for s in view["sitemaps"]} == {site.url(p) for p in scenario.SITEMAP_PATHS}
    assert view["lastmod_trust"]["127.0.0.1"]["trusted"] is True

    (record,) = json.loads(harvest("report", "--url", site.url("/pages/3.html"), "--state-dir", str(state)).stdout)
    assert (record["site"], record["state"], record["http_status"]) == (site.base, "gone", 404)
    assert record["signature"] and record["warc"]  # what it was, while it was there

    rows = harvest("report", "--site", site.url("/"), "--state-dir", str(state), "--format", "csv").stdout
    assert len(rows.strip().splitlines()) == 41 and rows.startswith("url,state,")
    missing = harvest("report", "--url", site.url("/nowhere.html"), "--state-dir", str(state))
    assert missing.returncode == 2 and "not in the crawl database" in missing.stderr

    # --format is honoured for a URL and for the list of jobs as for a job.
    state_dir = ("--state-dir", str(state))
    (line,) = harvest("report", "--url", site.url("/pages/3.html"), *state_dir, "--format", "jsonl").stdout.splitlines()
    shown = json.loads(line)
    keys = ("site", "url", "state", "http_status", "signature", "next_fetch_time")
    assert [shown[k] for k in keys] == [record[k] for k in keys] and shown["warc"]["offset"] == record["warc"]["offset"]
    table = harvest("report", "--url", site.url("/pages/3.html"), *state_dir, "--format", "csv").stdout
    (row,) = csv.DictReader(io.StringIO(table))
    assert (row["site"], row["url"], row["state"], row["http_status"]) == (
        site.base,
        site.url("/pages/3.html"),
        "gone",
        "404",
    )
    jobs = json.loads(harvest("report", *state_dir, "--format", "json").stdout)
    assert [j["status"] for j in jobs] == ["completed", "completed"] and {j["site"] for j in jobs} == {site.url("/")}
    listed = list(csv.DictReader(io.StringIO(harvest("report", *state_dir, "--format", "csv").stdout)))
    assert [r["job_id"] for r in listed] == [j["job_id"] for j in jobs]
    assert len(harvest("report", *state_dir).stdout.splitlines()) == 2  # (a line each, as before)


def test_harvest_changes_prints_the_latest_feed_or_a_jobs_as_csv(live_site, tmp_path):
    site = scenario.build(live_site())
    state = tmp_path / "state"
    first = crawl(site, state)
    site.change("/pages/7.html")
    crawl(site, state)

    latest = harvest("changes", "--state-dir", str(state))
    assert latest.returncode == 0
    assert [json.loads(line)["change"] for line in latest.stdout.splitlines()] == ["changed"]
    older = harvest("changes", first["job_id"], "--state-dir", str(state), "--format", "csv")
    lines = older.stdout.strip().splitlines()
    assert lines[0].startswith("url,change,") and len(lines) == 41 and all(",new," in line for line in lines[1:])
    unknown = harvest("changes", "no-such-job", "--state-dir", str(state))
    assert unknown.returncode == 2 and "no job 'no-such-job'" in unknown.stderr


def test_due_pages_are_asked_conditionally_and_unchanged_ones_are_not_stored_again(live_site, tmp_path):
    site = scenario.build(live_site())
    state = tmp_path / "state"
    env = {"HARVEST_FETCH_INTERVAL_MAX": "1", "HARVEST_FETCH_INTERVAL_MIN": "1"}
    crawl(site, state, env=env)
    before = stored_pages(state, site)
    time.sleep(1.2)  # every page's interval (at most 1 s) has passed

    again = crawl(site, state, env=env)

    pages = site.page_hits()
    assert sorted(h.path for h in pages) == sorted(scenario.page(n) for n in range(40))
    with_validators = [h for h in pages if int(h.path.split("/")[-1].split(".")[0]) < 35]
    assert all(h.conditional and h.status == 304 for h in with_validators)
    assert not any(h.conditional for h in pages if h not in with_validators)  # nothing to validate them with
    assert (again["changes"]["notmodified"], again["changes"]["unchanged"], again["changes"]["not_due"]) == (35, 5, 0)
    assert stored_pages(state, site) == before
    captures = [c for c in warc_captures(local_stores(state)[0]) if again["job_id"] in c[0]]
    pages = [record_type for _, record_type, _, _, kind in captures if kind == "page"]
    assert pages == ["revisit"] * 40  # 35 not modified, 5 identical


def test_a_moved_page_asked_conditionally_is_archived_as_its_redirect_then_a_revisit(live_site, tmp_path):
    """A 304 at the end of a redirect is a revisit, kept after the redirect that led to it, as a 200 is."""
    site = live_site(pages=2, sitemaps=1)
    site.add("/pages/new-home.html", listed=False)
    moved = site.add("/pages/moved.html", moved_to="/pages/new-home.html")
    state = tmp_path / "state"
    crawl(site, state)

    again = crawl(site, state, "--full")

    assert [(h.path, h.status, h.conditional) for h in site.page_hits() if "home" in h.path or "moved" in h.path] == [
        ("/pages/moved.html", 301, True),
        ("/pages/new-home.html", 304, True),
    ]
    captures = [c for c in warc_captures(local_stores(state)[0]) if again["job_id"] in c[0]]
    home = site.url("/pages/new-home.html")
    assert [(record_type, uri, kind) for _, record_type, uri, _, kind in captures if uri in (moved, home)] == [
        ("response", moved, "redirect"),
        ("revisit", home, "page"),
    ]


def test_full_fetches_every_page_still_conditionally(live_site, tmp_path):
    site = scenario.build(live_site())
    state = tmp_path / "state"
    crawl(site, state)
    site.change("/pages/8.html", lastmod=False)  # a change the sitemap does not announce

    full = crawl(site, state, "--full")

    assert len(site.page_hits()) == 40
    assert all(h.conditional for h in site.page_hits() if int(h.path.split("/")[-1].split(".")[0]) < 35)
    assert (full["changes"]["changed"], full["changes"]["notmodified"], full["changes"]["unchanged"]) == (1, 34, 5)


def test_a_site_that_stamps_every_lastmod_with_the_build_time_loses_trust_and_regains_it(live_site, tmp_path):
    site = live_site(pages=30, sitemaps=2)
    state = tmp_path / "state"
    crawl(site, state)

    def rebuilt_crawl() -> dict[str, Any]:
        site.touch_all()  # a new build: every lastmod moves, no page changed
        return crawl(site, state)

    second = rebuilt_crawl()  # trusted: every page fetched (conditionally), all 304
    assert len(site.page_hits()) == 30 and all(h.status == 304 for h in site.page_hits())
    trust = second["lastmod_trust"]["127.0.0.1"]
    assert (trust["refuted"], trust["confirmed"], trust["score"], trust["trusted"]) == (30, 0, 0.5, True)
    third = rebuilt_crawl()  # still trusted at 0.5: fetched again, refuted again
    assert len(site.page_hits()) == 30
    trust = third["lastmod_trust"]["127.0.0.1"]
    assert (trust["score"], trust["trusted_before"], trust["trusted"], trust["went"]) == (0.25, True, False, "lost")

    fourth = rebuilt_crawl()  # lastmod no longer trusted: only the probes (5 per sitemap) are asked
    assert len(site.page_hits()) == 10
    assert fourth["changes"]["not_due"] == 20 and fourth["changes"]["notmodified"] == 10
    assert fourth["lastmod_trust"]["127.0.0.1"]["trusted"] is False

    for path in site.page_paths():  # the site is honest again: a new lastmod comes with new content
        site.change(path)
    fifth = crawl(site, state)
    assert len(site.page_hits()) == 10  # the probes find the lastmod right
    trust = fifth["lastmod_trust"]["127.0.0.1"]
    assert (trust["confirmed"], trust["refuted"], trust["went"]) == (10, 0, "regained")
    for path in site.page_paths():
        site.change(path)
    sixth = crawl(site, state)
    assert len(site.page_hits()) == 30 and sixth["changes"]["changed"] == 30


def test_a_url_listed_again_after_it_was_removed_comes_back(live_site, tmp_path):
    site = scenario.build(live_site())
    state = tmp_path / "state"
    crawl(site, state)
    site.unlist("/pages/12.html")
    removed = crawl(site, state)
    assert removed["changes"]["removed"] == 1 and removed["total_urls"] == 39
    quiet = crawl(site, state)
    assert quiet["changes"]["removed"] == 0  # reported once, when it happened
    site.relist("/pages/12.html")
    back = crawl(site, state)
    assert back["changes"]["back"] == 1
    (line,) = jsonl(Path(back["changes_location"]))
    assert (line["url"], line["change"], line["previous_state"], line["state"]) == (
        site.url("/pages/12.html"),
        "back",
        "orphan",
        "fetched",
    )
    assert site.page_hits() == []  # back, but not due: its content is known and its interval not over


def test_a_job_id_reused_for_another_site_is_refused(live_site, tmp_path):
    one, other = live_site(pages=3), live_site(pages=3)
    state = tmp_path / "state"
    harvest_json("crawl", one.url("/"), "--state-dir", str(state), "--job-id", "weekly", *FAST)

    run = harvest("crawl", other.url("/"), "--state-dir", str(state), "--job-id", "weekly", *FAST, "--json")

    assert run.returncode == 2 and run.stdout == ""
    assert f"job id 'weekly' is already the job of site {one.url('/')}, not {other.url('/')}" in run.stderr
    assert other.hits == []


def _processed(db: Path) -> int:
    try:
        with sqlite3.connect(db, timeout=1) as conn:
            rows = conn.execute("SELECT urls_succeeded + urls_failed FROM counters ORDER BY rowid").fetchall()
    except sqlite3.Error:
        return 0
    return rows[-1][0] if len(rows) > 1 else 0


@pytest.mark.slow
def test_kill_9_in_the_middle_of_a_recrawl_then_the_same_command_ends_as_an_uninterrupted_one(live_site, tmp_path):
    site = live_site(pages=600, sitemaps=3)
    first, twin = tmp_path / "killed", tmp_path / "uninterrupted"
    crawl(site, first)
    shutil.copytree(first, twin)
    paths = site.page_paths()
    for path in paths[:120]:
        site.change(path)
    for path in paths[120:140]:
        site.unlist(path)
    for path in paths[140:160]:
        site.fail(path, 404)
    for n in range(20):
        site.add(f"/pages/added-{n}.html")
    args = ("crawl", site.url("/"), "--allow-network", LOOPBACK, "--full", "--rate-limit-delay", "0.004", "--quiet")

    reference = harvest_json(*args, "--state-dir", str(twin))
    process = subprocess.Popen(
        [sys.executable, "-m", "harvester", *args, "--state-dir", str(first), "--json"], stdout=subprocess.PIPE
    )
    deadline = time.monotonic() + 120
    while _processed(first / "harvest.db") < 200 and time.monotonic() < deadline:
        assert process.poll() is None, "the crawl ended before it could be killed"
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert 0 < _processed(first / "harvest.db") < 600

    resumed = harvest_json(*args, "--state-dir", str(first))

    assert resumed["job_id"] != reference["job_id"]
    assert resumed["changes"] == reference["changes"]
    assert reference["changes"]["changed"] == 120 and reference["changes"]["removed"] == 20
    assert crawl_database(first, site.base) == crawl_database(twin, site.base)
    assert feed_of(resumed) == feed_of(reference)


def feed_of(result: dict[str, Any]) -> set[tuple[str, str]]:
    return {(line["url"], line["change"]) for line in jsonl(Path(result["changes_location"]))}


def test_old_jobs_records_expire_locally_as_on_aws_and_the_crawl_database_stays(live_site, tmp_path):
    site = live_site(pages=12, sitemaps=1)
    state = tmp_path / "state"
    first = crawl(site, state)
    records = harvest("report", first["job_id"], "--state-dir", str(state), "--format", "jsonl")
    assert len(records.stdout.splitlines()) == 12

    second = crawl(site, state, env={"HARVEST_RETENTION_DAYS": "0"})  # every closed job is old enough

    assert harvest("report", first["job_id"], "--state-dir", str(state), "--format", "jsonl").stdout == ""
    kept = json.loads(harvest("report", first["job_id"], "--state-dir", str(state)).stdout)
    assert kept["job"]["status"] == "completed" and kept["result"]["total_urls"] == 12  # the job and its result
    assert Path(first["processed_urls"]).exists()
    assert second["changes"]["not_due"] == 12  # the crawl database was not touched
    current = harvest("report", second["job_id"], "--state-dir", str(state), "--format", "jsonl")
    assert len(current.stdout.splitlines()) == 12  # the running job's own records are not expired


def test_a_jobs_end_writes_the_same_from_summarised_batches_as_from_every_record(live_site, tmp_path):
    """URLs a job that fetches nothing lists for the first time are kept a batch at a time with their feed
    lines and counts (``ListedBatch``), which the job's end copies. Made to read every record instead (the
    summaries taken away), the same end writes the same records, feed and counts, byte for byte: on a first
    crawl (every URL new) and on the next, with URLs added and removed (new ones beside known ones)."""
    site = scenario.build(live_site())
    state = tmp_path / "state"
    for crawl_number in (1, 2):
        if crawl_number == 2:
            scenario.Mutation().apply(site)
        result = crawl(site, state, "--no-pages")
        records, feed = Path(str(result["processed_urls"])), Path(str(result["changes_location"]))
        written = records.read_bytes(), feed.read_bytes()
        assert len(jsonl(records)) == result["total_urls"] and len(jsonl(feed)) >= 2
        with closing(sqlite3.connect(state / "harvest.db")) as db, db:
            taken = db.execute(
                "UPDATE url_batches SET feed = NULL, kinds = NULL WHERE job_id = ? AND kinds IS NOT NULL",
                (result["job_id"],),
            ).rowcount
        assert taken >= 1
        with LocalHarvest.open(state) as local:
            context = StepContext(
                store=local.store,
                queue=local.queue,
                documents=local.documents,
                fetcher=None,  # type: ignore[arg-type]  # the end fetches nothing
                crawldb=local.crawldb,
            )
            again = write_result(context, str(result["job_id"]))
        assert (records.read_bytes(), feed.read_bytes()) == written, crawl_number
        assert again.changes.model_dump() == result["changes"]
        assert (again.total_urls, again.successful_processing) == (
            result["total_urls"],
            result["successful_processing"],
        )
