"""The discovery flags of `harvest crawl` and `harvest sitemaps` (``--no-robots``, ``--no-known-paths``,
``--known-path``, ``--keep-site-path``), run for real against a server on 127.0.0.1 that logs every request:
robots.txt skipped as a source of sitemaps still rules the page fetches, a job that skips a source of sitemaps
calls no URL orphan that only that source led to, and a site kept with its path is discovered there and
recorded under its origin."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from harvester.cli import main
from harvester.pipeline.discovery import KNOWN_PATHS
from tests.corpus.server import RouteServer, serving
from tests.discovery_site import DECLARED, EXTRA, FOLDER, FOLDER_EXTRA, KNOWN, discovery_site, requested
from tests.support import LOOPBACK, crawl_database, harvest

FAST = ("--allow-network", LOOPBACK, "--rate-limit-delay", "0")


@pytest.fixture(scope="module")
def site() -> Iterator[RouteServer]:
    with serving() as server:
        discovery_site(server)
        yield server


def test_no_robots_reads_the_known_paths_and_robots_txt_still_rules_the_pages(site, tmp_path):
    site.reset_log()
    run = harvest(
        "crawl", site.url("/"), "--no-robots", "--known-path", "custom/extra.xml", "--state-dir", str(tmp_path), *FAST
    )

    assert run.returncode == 0, run.stderr
    asked = requested(site)
    assert "/declared.xml" not in asked and "/a" not in asked  # (only robots.txt names that sitemap)
    assert {"/sitemap.xml", "/custom/extra.xml", "/b", "/c"} <= set(asked)
    assert "/private/x" not in asked  # robots.txt's Disallow: /private/ still applies to the pages
    assert asked.count("/robots.txt") == 1 and asked.index("/robots.txt") > asked.index("/sitemap.xml")
    records = crawl_database(tmp_path, site.base)
    assert sorted(url.removeprefix(site.base) for url in records) == sorted(KNOWN + EXTRA)
    assert records[site.url("/b")]["state"] == "fetched" and records[site.url("/private/x")]["state"] == "unfetched"


def test_a_job_that_skips_a_source_of_sitemaps_orphans_nothing_only_that_source_lists(site, tmp_path):
    state = ("--state-dir", str(tmp_path), "--no-pages", *FAST)
    assert harvest("crawl", site.url("/"), *state).returncode == 0  # robots.txt and the known paths: a, b, x

    for flag in ("--no-robots", "--no-known-paths", "--keep-site-path"):
        run = harvest("crawl", site.url("/foo/bar/"), flag, *state)
        assert run.returncode == 0, (flag, run.stderr)
        states = {url.removeprefix(site.base): r["state"] for url, r in crawl_database(tmp_path, site.base).items()}
        assert "orphan" not in states.values(), (flag, states)
    assert set(states) == set(DECLARED + KNOWN + FOLDER)


def test_keep_site_path_discovers_under_the_path_and_records_the_site_by_its_origin(site, tmp_path):
    site.reset_log()
    run = harvest(
        "sitemaps",
        site.url("/foo/bar"),
        "--keep-site-path",
        "--known-path",
        "another/path.xml",
        "--format",
        "json",
        *FAST,
    )

    assert run.returncode == 0, run.stderr
    tree = json.loads(run.stdout)
    assert tree["url"] == site.url("/foo/bar/")
    assert [c["url"] for c in tree["children"] if c["status"] == "completed"] == [
        site.url("/foo/bar/robots.txt"),
        site.url("/foo/bar/another/path.xml"),
    ]
    assert set(requested(site)) == {f"/foo/bar/{p}" for p in ("robots.txt", "sitemap.xml", *KNOWN_PATHS)} | {
        "/foo/bar/another/path.xml"
    }

    crawl = harvest("crawl", site.url("/foo/bar?from=home"), "--keep-site-path", "--state-dir", str(tmp_path), *FAST)
    assert crawl.returncode == 0, crawl.stderr
    assert f"the site's sitemaps are looked for under {site.url('/foo/bar/')}" in crawl.stderr
    assert sorted(crawl_database(tmp_path, site.base)) == [site.url(p) for p in FOLDER]
    assert sorted(set(FOLDER_EXTRA) & {u.removeprefix(site.base) for u in crawl_database(tmp_path, site.base)}) == []


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--no-robots", "--no-known-paths"), "--no-robots with --no-known-paths: no sitemap would be looked for"),
        (("--no-known-paths", "--known-path", "x.xml"), "--known-path with --no-known-paths: an extra path is probed"),
        (("--known-path", "/x.xml"), "--known-path '/x.xml': a known path is relative to the site"),
        (("--known-path", "https://example.com/x.xml"), "--known-path 'https://example.com/x.xml': a known path is"),
        (("--sitemap", "https://example.com/s.xml", "--no-robots"), "--sitemap: a job that names its sitemaps runs"),
    ],
)
@pytest.mark.parametrize("command", ["crawl", "sitemaps"])
def test_contradictory_or_bad_discovery_flags_are_one_line_naming_the_flag(command, flags, message, capsys, tmp_path):
    state = ("--state-dir", str(tmp_path)) if command == "crawl" else ()
    status = main([command, "https://example.com/", *flags, *state])
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("harvest: ") and message in err and err.count("\n") == 1, err


def test_a_job_left_unresumed_for_its_discovery_options_is_named_with_them(capsys):
    from harvester.adapters.local.runner import JobStart, differences
    from harvester.cli.jobs import announce, options
    from harvester.model.messages import JobRequest
    from harvester.model.records import JobCounts, JobRecord, utcnow

    discovery = {"use_robots": False, "extra_known_paths": ["feeds/s.xml?a=1&b=2"], "normalize_homepage_url": False}
    theirs = JobRequest.model_validate({"site": "https://example.com/blog", "discovery": discovery})
    ours = JobRequest(site="https://example.com/blog")
    left = JobRecord(job_id="j1", request=theirs, start_time=utcnow())
    announce(JobStart("j2", ours.site, False, JobCounts(), ours, left=((left, differences(theirs, ours)),)))

    assert options(theirs) == ["--no-robots --known-path 'feeds/s.xml?a=1&b=2' --keep-site-path"]
    assert (
        "its options differ (it: site https://example.com/blog/, --no-robots --known-path 'feeds/s.xml?a=1&b=2'"
        " --keep-site-path; this command: site https://example.com/, the default discovery)"
    ) in capsys.readouterr().err
