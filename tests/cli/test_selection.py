"""The selection of entries on the command line (issue 43, items 1-3): `harvest crawl` and `harvest sitemaps`
with --since, --alternates, --lang against a site served on 127.0.0.1, the summary's words for what was left
out, the crawl database after jobs with and without a selection (nothing left out is made orphan), and a bad
value refused naming its flag."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from harvester.demo import serve
from harvester.model.messages import JobRequest
from harvester.model.selection import EntrySelection
from tests.support import LOOPBACK, crawl_database, harvest, harvest_json

ALLOW = ("--allow-network", LOOPBACK)
SITE = "harvest: site 'https://example.com/': "
URLSET = '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:xhtml="http://www.w3.org/1999/xhtml">'


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("site")
    with serve(root) as url:
        (root / "robots.txt").write_text(f"Sitemap: {url}/sitemap.xml\n")
        (root / "sitemap.xml").write_text(
            f"{URLSET}"
            f"<url><loc>{url}/new</loc><lastmod>2026-03-01</lastmod></url>"
            f"<url><loc>{url}/old</loc><lastmod>2020-01-01</lastmod></url>"
            f"<url><loc>{url}/undated</loc></url></urlset>"
        )
        (root / "hreflang.xml").write_text(
            f"{URLSET}<url><loc>{url}/en/page</loc>"
            f'<xhtml:link rel="alternate" hreflang="en" href="{url}/en/page"/>'
            f'<xhtml:link rel="alternate" hreflang="de-AT" href="{url}/de/page"/></url>'
            f"<url><loc>{url}/fr/only</loc></url></urlset>"
        )
        yield url


def test_a_job_that_leaves_entries_out_makes_none_of_them_orphan(base, tmp_path):
    state = str(tmp_path / "state")
    whole = harvest_json("crawl", f"{base}/", "--state-dir", state, *ALLOW, "--no-pages", "--quiet")
    assert whole["total_urls"] == 3

    run = harvest("crawl", f"{base}/", "--state-dir", state, *ALLOW, "--no-pages", "--quiet", "--since", "2025-01-01")
    assert run.returncode == 0, run.stderr
    assert "  left out      1 entry (the job's selection): lastmod_before_since 1" in run.stdout.splitlines()
    assert "dropped" not in run.stdout  # (no URL hygiene refused anything)
    records = crawl_database(Path(state), base)
    assert {url.removeprefix(base): r["state"] for url, r in records.items()} == {
        "/new": "unfetched",
        "/old": "unfetched",  # left out by the selection: the site still lists it, no orphan
        "/undated": "unfetched",  # without a lastmod: kept
    }

    listed = json.loads(harvest("jobs", "--state-dir", state, "--json").stdout)
    assert [job["options"] for job in listed] == [["--no-pages"], ["--no-pages", "--since 2025-01-01"]]

    again = harvest_json("crawl", f"{base}/", "--state-dir", state, *ALLOW, "--no-pages", "--quiet")
    assert again["total_urls"] == 3 and again["changes"].get("removed", 0) == 0
    assert {r["state"] for r in crawl_database(Path(state), base).values()} == {"unfetched"}


def test_the_summary_counts_what_the_selection_left_out(base, tmp_path):
    result = harvest_json(
        "crawl", f"{base}/", "--state-dir", str(tmp_path / "s"), *ALLOW, "--no-pages", "--quiet",
        "--since", "2025-01-01", "--require-lastmod",
    )  # fmt: skip
    assert result["total_urls"] == 1
    assert result["entries_dropped"] == {"lastmod_before_since": 1, "no_lastmod": 1}


def test_a_crawl_lists_the_alternates_with_the_entry_they_came_from(base, tmp_path):
    state = str(tmp_path / "s")
    result = harvest_json(
        "crawl", f"{base}/", "--sitemap", f"{base}/hreflang.xml", "--state-dir", state, *ALLOW, "--no-pages",
        "--quiet", "--alternates",
    )  # fmt: skip
    lines = harvest("report", result["job_id"], "--state-dir", state, "--format", "jsonl").stdout
    records = {r["url"].removeprefix(base): r for r in (json.loads(line) for line in lines.splitlines())}
    assert sorted(records) == ["/de/page", "/en/page", "/fr/only"]
    assert records["/de/page"]["extensions"] == {"alternate_of": f"{base}/en/page", "hreflang": "de-AT"}
    assert records["/de/page"]["sitemap"] == f"{base}/hreflang.xml"


def test_sitemaps_lists_the_pages_in_a_language(base, tmp_path):
    run = harvest(
        "sitemaps", f"{base}/", "--sitemap", f"{base}/hreflang.xml", *ALLOW, "--format", "jsonl", "--lang", "de"
    )
    assert run.returncode == 0, run.stderr
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    assert [(line["url"].removeprefix(base), line.get("alternate_of")) for line in lines] == [
        ("/de/page", f"{base}/en/page")
    ]
    tree = harvest("sitemaps", f"{base}/", "--sitemap", f"{base}/hreflang.xml", *ALLOW, "--lang", "de")
    assert "other_language 1" in tree.stdout


def test_a_job_left_unfinished_is_named_with_its_selection(capsys):
    from harvester.adapters.local.runner import JobStart, differences
    from harvester.cli.jobs import announce
    from harvester.model.records import JobCounts, JobRecord, utcnow

    theirs = JobRequest(site="https://example.com/", select=EntrySelection(since="7d", changefreq=("daily", "hourly")))
    ours = JobRequest(site="https://example.com/", select=EntrySelection(lang="de", alternates=True))
    job = JobRecord(job_id="job-1", request=theirs, start_time=utcnow())
    announce(JobStart("job-2", ours.site, False, JobCounts(), ours, left=((job, differences(theirs, ours)),)))
    assert (
        "(it: --since 7d --changefreq daily --changefreq hourly; this command: --alternates --lang de)"
        in capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--since", "yesterday"], f"{SITE}--since yesterday: 'yesterday' is neither a date (2026-01-01) nor a"),
        (["--lang", "german"], f"{SITE}--lang german: 'german' is not a two-letter ISO 639-1 language code"),
        (["--min-priority", "2"], f"{SITE}--min-priority 2.0: must be at most 1.0"),
        (["--since", "2026-02-01", "--before", "2026-01-01"], f"{SITE}--before 2026-01-01: '2026-01-01' is not"),
    ],
)
def test_a_bad_selection_is_refused_naming_its_flag(flags, message, tmp_path):
    run = harvest("crawl", "https://example.com/", "--state-dir", str(tmp_path / "s"), *flags)
    assert run.returncode == 2
    assert run.stderr.startswith(message) and len(run.stderr.splitlines()) == 1, run.stderr
