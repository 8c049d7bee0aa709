"""The reading rules (``--repair-urls``, ``--strict-location``, ``--allow-doctype``, ``--warn-size``) on a real
site on 127.0.0.1: through `harvest sitemaps`, `harvest crawl` and the Python API, and the orphan pass of a job
whose location rule left pages out."""

from __future__ import annotations

import json
from pathlib import Path

from harvester import iter_pages
from tests.support import LOOPBACK, crawl_database, harvest

NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
ALLOW = ("--allow-network", LOOPBACK)
RULES = ("--repair-urls", "--strict-location", "--allow-doctype", "--warn-size", "1KiB")


def _urlset(*locs: str, doctype: str = "", padding: int = 0) -> str:
    pad = f"<!-- {'x' * padding} -->" if padding else ""
    return f"{doctype}<urlset {NS}>{pad}" + "".join(f"<url><loc>{loc}</loc></url>" for loc in locs) + "</urlset>"


def write_rules_site(root: Path, base: str) -> None:
    """robots.txt declares news/declared.xml, whose URLs lie anywhere on the host (three without a scheme); the
    well-known sitemap_index.xml lists sub/child.xml (a URL outside sub/, over 1 KiB), sub/doc.xml (an external
    DTD) and, without a scheme, sub/list.txt (one line without a scheme)."""
    hostport = base.removeprefix("http://")
    (root / "news").mkdir()
    (root / "sub").mkdir()
    (root / "robots.txt").write_text(f"Sitemap: {base}/news/declared.xml\n")
    (root / "news" / "declared.xml").write_text(
        _urlset(f"{base}/news/a", f"{base}/other/b", f"{hostport}/news/c", "/news/d", f"//{hostport}/news/e")
    )
    children = (f"{base}/sub/child.xml", f"{base}/sub/doc.xml", f"{hostport}/sub/list.txt")
    (root / "sitemap_index.xml").write_text(
        f"<sitemapindex {NS}>" + "".join(f"<sitemap><loc>{c}</loc></sitemap>" for c in children) + "</sitemapindex>"
    )
    (root / "sub" / "child.xml").write_text(_urlset(f"{base}/sub/f", f"{base}/elsewhere/g", padding=1200))
    doctype = '<!DOCTYPE urlset PUBLIC "-//Example//DTD Sitemap//EN" "http://evil.invalid/sitemap.dtd">'
    (root / "sub" / "doc.xml").write_text(_urlset(f"{base}/sub/h", doctype=doctype))
    (root / "sub" / "list.txt").write_text(f"{hostport}/sub/t\n{base}/sub/u\n")


WITH_RULES = ["news/a", "other/b", "news/c", "news/d", "news/e", "sub/f", "sub/h", "sub/t", "sub/u"]
WITHOUT = ["news/a", "other/b", "sub/f", "elsewhere/g"]


def test_the_rules_repair_hold_to_the_location_read_a_doctype_and_warn_of_size(served_dir, tmp_path):
    root = tmp_path / "site"
    root.mkdir()
    base = served_dir(root)
    write_rules_site(root, base)

    def listed(*flags: str) -> list[str]:
        run = harvest("sitemaps", f"{base}/", *ALLOW, "--format", "jsonl", *flags)
        assert run.returncode == 0, run.stderr
        return sorted(json.loads(line)["url"] for line in run.stdout.splitlines())

    assert listed() == sorted(f"{base}/{p}" for p in WITHOUT)
    assert listed(*RULES) == sorted(f"{base}/{p}" for p in WITH_RULES)
    tree = harvest("sitemaps", f"{base}/", *ALLOW, *RULES).stdout
    assert f"{base}/news/declared.xml  [urlset]  5 pages  3 URLs repaired (no scheme)\n" in tree
    assert (
        f"{base}/sub/child.xml  [urlset]  1 page  1 entry dropped (outside_sitemap_directory 1)"
        "  larger than the warning size\n"
    ) in tree
    assert f"{base}/sub/doc.xml  [urlset]  1 page\n" in tree
    assert f"{base}/sitemap_index.xml  [index]  3 sitemaps  1 URL repaired (no scheme)\n" in tree
    assert f"{base}/sub/list.txt  [text]  2 pages  1 URL repaired (no scheme)\n" in tree
    plain = harvest("sitemaps", f"{base}/", *ALLOW).stdout
    assert f"{base}/news/declared.xml  [urlset]  2 pages  3 entries dropped (not_http 3)\n" in plain
    assert f"{base}/sitemap_index.xml  [index]  2 sitemaps  1 entry dropped (sitemap_not_http 1)\n" in plain
    assert f"{base}/sub/doc.xml  [invalid]  invalid: not a sitemap: it names an external DTD" in plain


def test_a_crawl_summary_and_result_count_the_repairs_the_drops_and_the_large_sitemaps(served_dir, tmp_path):
    root = tmp_path / "site"
    root.mkdir()
    base = served_dir(root)
    write_rules_site(root, base)
    state = str(tmp_path / "state")

    text = harvest("crawl", f"{base}/", *ALLOW, *RULES, "--no-pages", "--state-dir", state, "--quiet")
    assert text.returncode == 0, text.stderr
    job_id = text.stdout.split()[1].rstrip(":")
    result = json.loads(harvest("report", job_id, "--state-dir", state).stdout)["result"]
    assert "  dropped       1 entry (URL hygiene): outside_sitemap_directory 1\n" in text.stdout
    assert "  repaired      5 URLs written without a scheme (given their sitemap's)\n" in text.stdout
    assert "  large         1 sitemap past the warning size (reading.warn_size)\n" in text.stdout
    assert "set aside" not in text.stdout
    assert result["total_urls"] == len(WITH_RULES)
    assert result["entry_warnings"] == {"url_repaired": 5, "over_warn_size": 1}


def test_the_python_api_takes_the_rules_as_keyword_arguments(served_dir, tmp_path):
    root = tmp_path / "site"
    root.mkdir()
    base = served_dir(root)
    write_rules_site(root, base)
    options = {"allow_networks": [LOOPBACK], "repair_urls": True, "strict_location": True, "allow_doctype": True}

    pages = sorted(page.url for page in iter_pages(f"{base}/", **options))

    assert pages == sorted(f"{base}/{p}" for p in WITH_RULES)
    assert sorted(page.url for page in iter_pages(f"{base}/", allow_networks=[LOOPBACK])) == sorted(
        f"{base}/{p}" for p in WITHOUT
    )


def test_pages_the_location_rule_leaves_out_are_not_orphaned(served_dir, tmp_path):
    root = tmp_path / "site"
    (root / "sub").mkdir(parents=True)
    base = served_dir(root)
    (root / "sitemap_index.xml").write_text(
        f"<sitemapindex {NS}><sitemap><loc>{base}/sub/child.xml</loc></sitemap></sitemapindex>"
    )
    (root / "sub" / "child.xml").write_text(_urlset(f"{base}/sub/f", f"{base}/elsewhere/g"))
    state = tmp_path / "state"
    crawl = ("crawl", f"{base}/", *ALLOW, "--no-pages", "--state-dir", str(state), "--quiet")

    assert harvest(*crawl).returncode == 0
    strict = harvest(*crawl, "--strict-location")
    assert strict.returncode == 0, strict.stderr
    assert "outside_sitemap_directory 1" in strict.stdout

    records = crawl_database(state, base)
    assert records[f"{base}/elsewhere/g"]["state"] != "orphan"
    jobs = json.loads(harvest("jobs", "--state-dir", str(state), "--json").stdout)
    assert sorted(job["options"] for job in jobs) == [["--no-pages"], ["--no-pages", "--strict-location"]]
    # (what a page no sitemap lists any more becomes: the pass ran, and judged)
    (root / "sub" / "child.xml").write_text(_urlset(f"{base}/sub/f"))
    assert harvest(*crawl).returncode == 0
    assert crawl_database(state, base)[f"{base}/elsewhere/g"]["state"] == "orphan"


def test_a_warning_size_that_is_not_one_is_refused_naming_it(served_dir, tmp_path):
    for given, reason in (("lots", "not a size"), ("50MiB", "must be below 50 MiB")):
        run = harvest("sitemaps", "http://127.0.0.1:9/", *ALLOW, "--warn-size", given)
        assert run.returncode == 2
        assert run.stderr.strip().splitlines()[-1].startswith(f"harvest: --warn-size {given}: {reason}"), run.stderr
        assert "Traceback" not in run.stderr


def test_parse_reads_a_doctype_and_warns_of_size_when_asked(tmp_path):
    doctype = '<!DOCTYPE urlset PUBLIC "-//Example//DTD Sitemap//EN" "http://evil.invalid/sitemap.dtd">'
    path = tmp_path / "legacy.xml"
    path.write_text(_urlset("https://www.example.org/a", doctype=doctype, padding=2000))

    refused = harvest("parse", str(path))
    read = harvest("parse", str(path), "--allow-doctype", "--warn-size", "1KiB")

    assert refused.returncode == 1 and "it names an external DTD" in refused.stderr
    assert read.returncode == 0, read.stderr
    assert [json.loads(line)["url"] for line in read.stdout.splitlines()] == ["https://www.example.org/a"]
    assert read.stderr == f"harvest: {path}: larger than 1 KiB uncompressed (--warn-size)\n"


def test_an_unfinished_job_left_for_its_reading_rules_names_them(capsys):
    from datetime import UTC, datetime

    from harvester.adapters.local.runner import JobStart, differences
    from harvester.cli.jobs import announce
    from harvester.model.messages import JobRequest
    from harvester.model.reading import ReadingRules
    from harvester.model.records import JobCounts, JobRecord

    site = "https://example.com/"
    theirs = JobRequest(site=site, reading=ReadingRules(strict_location=True, warn_size=1024))
    ours = JobRequest(site=site)
    left = JobRecord(job_id="job-a", request=theirs, start_time=datetime(2026, 1, 1, tzinfo=UTC))
    start = JobStart("job-b", site, False, JobCounts(), ours, left=((left, differences(theirs, ours)),))

    announce(start)

    said = capsys.readouterr().err
    assert "(it: --strict-location --warn-size 1024; this command: no reading rules)" in said
