"""`harvest report JOB --html FILE` and the job end's `report.html`: a site on 127.0.0.1 crawled twice (a page
changed, two broken between the crawls), the second job's page opened in a real headless Chromium (Debian's;
tests/browser.py): it renders without an error and asks for nothing, and the figures it shows are its
result.json's. The page's screenshot is kept in build/test-artifacts/."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harvester.demo.live import LiveSite
from harvester.model.crawl import ChangeKind
from harvester.model.fetch_stats import NO_ANSWER
from tests.browser import Browser
from tests.support import LOOPBACK, harvest, harvest_json, jsonl

FAST = ("--allow-network", LOOPBACK, "--rate-limit-delay", "0.0001", "--quiet")
ARTIFACTS = Path(__file__).resolve().parents[2] / "build" / "test-artifacts"
#: Every figure the page marks, by name: what the tests compare with result.json.
FIGURES = (
    "Object.fromEntries([...document.querySelectorAll('[data-figure][data-value]')]"
    ".map(e => [e.dataset.figure, Number(e.dataset.value)]))"
)


class Crawls:
    def __init__(self, state: Path, first: dict[str, Any], second: dict[str, Any], site: str) -> None:
        self.state, self.first, self.second, self.site = state, first, second, site

    def stored(self, job_id: str, name: str) -> Path:
        return self.state / "documents" / "jobs" / job_id / name


@pytest.fixture(scope="module")
def crawls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crawls]:
    state = tmp_path_factory.mktemp("report") / "state"
    with LiveSite(pages=8, sitemaps=2).serving() as site:
        first = harvest_json("crawl", site.url("/"), "--state-dir", str(state), *FAST)
        site.change("/pages/1.html")
        site.fail("/pages/2.html", 404)
        site.fail("/pages/3.html", 410)
        second = harvest_json("crawl", site.url("/"), "--state-dir", str(state), *FAST, "--full")
        yield Crawls(state, first, second, site.url("/"))


def expected_figures(result: dict[str, Any], sitemaps: int) -> dict[str, int]:
    """What the page must show of ``result`` (result.json), each under its name."""
    fetches = result["fetches"]
    figures = {
        name: result[name]
        for name in (
            "total_urls",
            "successful_processing",
            "failed_processing",
            "excluded_processing",
            "sitemaps_total",
            "sitemaps_ok",
        )
    }
    figures |= {f"changes.{kind.value}": result["changes"][kind.value] for kind in ChangeKind}
    figures |= {f"http_statuses.{code}": n for code, n in fetches["http_statuses"].items()}
    figures |= {f"failures.{reason}": n for reason, n in fetches["failures"].items()}
    figures["fetches.fetched"] = fetches["fetched"]
    for name in ("latency_ms", "size_bytes"):
        figures[f"{name}.count"] = sum(fetches[name]["counts"])
        figures |= {f"{name}.{i}": n for i, n in enumerate(fetches[name]["counts"])}
    for host, change in result["lastmod_trust"].items():
        figures |= {f"lastmod_trust.{host}.{k}": change[k] for k in ("confirmed", "refuted")}
    figures["sitemaps.shown"] = sitemaps
    return figures


def test_the_report_page_renders_in_chromium_asks_for_nothing_and_shows_the_figures_of_result_json(crawls, tmp_path):
    job = crawls.second["job_id"]
    page = tmp_path / "report.html"
    run = harvest("report", job, "--state-dir", str(crawls.state), "--html", str(page))
    assert run.returncode == 0 and run.stderr == f"harvest: wrote {page}\n" and run.stdout == ""
    result = json.loads(crawls.stored(job, "result.json").read_text())
    report = json.loads(harvest("report", job, "--state-dir", str(crawls.state)).stdout)
    sitemaps = report["loader_state"]["processed_sitemap_urls"]
    # What the second crawl came to, from its records (not from the counts the page is made of).
    records = jsonl(crawls.stored(job, "urls.jsonl"))
    statuses = Counter(str(r["http_status"]) if "http_status" in r else NO_ANSWER for r in records)
    assert statuses == {"200": 1, "304": 5, "404": 1, "410": 1}
    assert all(isinstance(r["fetch_ms"], int) and r["fetch_ms"] >= 0 for r in records)
    assert result["fetches"]["http_statuses"] == statuses and result["fetches"]["fetched"] == 8
    assert result["fetches"]["failures"] == {"HTTP 404 Not Found": 1, "HTTP 410 Gone": 1}
    assert (result["changes"]["changed"], result["changes"]["gone"]) == (1, 2)

    with Browser(tmp_path / "profile") as browser:
        browser.open(page.as_uri())
        shown = browser.evaluate(FIGURES)
        texts = browser.evaluate(
            "Object.fromEntries([...document.querySelectorAll('[data-figure][data-value]')]"
            ".map(e => [e.dataset.figure, e.textContent]))"
        )
        timeline = browser.evaluate(
            "[...document.querySelectorAll('tr[data-job]')].map(r => [r.dataset.job,"
            " Number(r.dataset.listed), Number(r.dataset.fetched), Number(r.dataset.changed)])"
        )
        tree = browser.evaluate("[...document.querySelectorAll('[data-sitemap]')].map(e => e.dataset.sitemap)")
        samples = browser.evaluate(
            "Object.fromEntries([...document.querySelectorAll('tr[data-reason]')]"
            ".map(r => [r.dataset.reason, r.querySelector('td.url').innerText.split('\\n')]))"
        )
        browser.screenshot(ARTIFACTS / "report-page.png")
        assert browser.errors() == []
        assert browser.requests() == [page.as_uri()]  # (the page itself, nothing else)
    assert shown == expected_figures(result, len(sitemaps))
    assert all(texts[name] == f"{value:,}" for name, value in shown.items() if name != "sitemaps.shown"), texts
    assert sorted(tree) == sorted(sitemaps)
    assert samples == {f["error"]: [f["url"]] for f in result["error_details"] if f["kind"] == "page"}
    first = crawls.first
    assert timeline == [
        [first["job_id"], 8, first["fetches"]["fetched"], first["changes"]["changed"]],
        [job, 8, 8, 1],
    ]
    assert (ARTIFACTS / "report-page.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_each_job_end_writes_its_page_beside_its_result(crawls, tmp_path):
    """The page a job's end wrote (report.html) is the one `report --html` writes: the same figures and the
    same timeline, that one from the site's history document, this one from the jobs' results."""
    for job in (crawls.first["job_id"], crawls.second["job_id"]):
        page = tmp_path / f"{job}.html"
        assert harvest("report", job, "--state-dir", str(crawls.state), "--html", str(page)).returncode == 0
        assert crawls.stored(job, "report.html").read_text() == page.read_text()
    assert page.read_text().count("<tr data-job=") == 2
    # (a folder gets JOB_ID.html inside it; a file that is no report page is not replaced)
    folder = tmp_path / "pages"
    folder.mkdir()
    assert harvest("report", job, "--state-dir", str(crawls.state), "--html", str(folder)).returncode == 0
    assert (folder / f"{job}.html").read_text() == page.read_text()
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    kept = harvest("report", job, "--state-dir", str(crawls.state), "--html", str(notes))
    assert kept.returncode == 2 and notes.read_text() == "mine"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope", "--html", "x.html"], "harvest: no job 'nope' in "),
        (["--html", "x.html"], "harvest: --html writes one job's page: give a JOB_ID, and no --format\n"),
        (
            ["JOB", "--html", "/no/such/folder/r.html"],
            "harvest: --html /no/such/folder/r.html: no folder /no/such/folder\n",
        ),
        (["JOB", "--html", "/proc/r.html"], "harvest: --html /proc/r.html: cannot write in /proc: "),
    ],
)
def test_a_page_that_cannot_be_written_is_named_with_the_reason(crawls, args, message):
    args = [crawls.second["job_id"] if a == "JOB" else a for a in args]
    run = harvest("report", *args, "--state-dir", str(crawls.state))
    assert run.returncode == (1 if "/proc" in args[-1] else 2) and run.stderr.startswith(message), run.stderr
    assert "Traceback" not in run.stderr and len(run.stderr.splitlines()) == 1
