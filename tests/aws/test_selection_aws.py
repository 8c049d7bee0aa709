"""The selection of entries on AWS (issue 43, items 1-3): the job message's ``select`` section, read by the real
handlers of template.yaml in moto, driven as Lambda's poller drives them, against a small site on 127.0.0.1.
Every option in one message (entries by lastmod, lastmod required, priority, changefreq, extension; child
sitemaps by their index lastmod and by language; the page in a language), and alternates as pages in a
second job; the URLs the selective job left out are not made orphan."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from harvester.adapters.aws import AwsAdapters
from harvester.demo import serve
from harvester.model.crawl import CrawlState

NS = (
    'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:xhtml="http://www.w3.org/1999/xhtml"'
    ' xmlns:news="http://www.google.com/schemas/sitemap-news/0.9"'
)
NEWS = (
    "<news:news><news:publication><news:name>N</news:name><news:language>en</news:language></news:publication>"
    "<news:publication_date>2026-05-01</news:publication_date><news:title>T</news:title></news:news>"
)


def _url(base: str, path: str, lastmod: str | None = "2026-05-01", priority: str = "0.8", freq: str = "daily",
         news: bool = True, links: str = "") -> str:  # fmt: skip
    dated = f"<lastmod>{lastmod}</lastmod>" if lastmod else ""
    return (
        f"<url><loc>{base}{path}</loc>{dated}<priority>{priority}</priority><changefreq>{freq}</changefreq>"
        f"{NEWS if news else ''}{links}</url>"
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("site")
    with serve(root) as base:
        alternates = (
            f'<xhtml:link rel="alternate" hreflang="en" href="{base}/en/a"/>'
            f'<xhtml:link rel="alternate" hreflang="de" href="{base}/de/a"/>'
        )
        recent = [
            _url(base, "/en/a", links=alternates),
            _url(base, "/fr/b"),  # another language's
            _url(base, "/c", lastmod="2020-01-01"),  # too old; dated by its news publication date otherwise
            _url(base, "/d", lastmod=None, news=False),  # no date at all
            _url(base, "/e", priority="0.1"),
            _url(base, "/f", freq="weekly"),
            _url(base, "/g", news=False),
            _url(base, "/h"),
        ]
        files = {
            "robots.txt": f"Sitemap: {base}/index.xml\n",
            "index.xml": f'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            f"<sitemap><loc>{base}/recent.xml</loc><lastmod>2026-06-01</lastmod></sitemap>"
            f"<sitemap><loc>{base}/old.xml</loc><lastmod>2020-01-01</lastmod></sitemap>"
            f"<sitemap><loc>{base}/fr/sitemap.xml</loc><lastmod>2026-06-01</lastmod></sitemap></sitemapindex>",
            "recent.xml": f"<urlset {NS}>{''.join(recent)}</urlset>",
            "old.xml": f"<urlset {NS}>{_url(base, '/old-page')}</urlset>",
            "fr/sitemap.xml": f"<urlset {NS}>{_url(base, '/fr/c')}</urlset>",
        }
        for name, text in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        yield base


def crawl(stack: Any, poller: Any, message: dict[str, Any]) -> dict[str, Any]:
    """Sends the job message as a user would (JSON on the job queue) and drains the stack."""
    sqs = boto3.client("sqs")
    sqs.send_message(QueueUrl=stack.outputs["JobQueueUrl"], MessageBody=json.dumps(message))
    stats = poller.drain(max_rounds=3000)
    assert stats.failed_invocations == 0, [f.traceback for f in stats.failures]
    documents = AwsAdapters.from_env(stack.function("PageFunction").environment).documents
    job_id = message["job_id"]
    result = json.loads(documents.get(f"jobs/{job_id}/result.json"))
    records = [json.loads(line) for line in documents.get(f"jobs/{job_id}/urls.jsonl").splitlines()]
    return {"result": result, "records": {r["url"]: r for r in records}}


def test_the_job_messages_selection_on_aws(deployed_stack, site):
    stack, poller = deployed_stack
    common = {"site": f"{site}/", "fetch_pages": False, "rate_limit_delay": 0.0001}

    every = crawl(stack, poller, {**common, "job_id": "every", "select": {"alternates": True}})
    listed = {url.removeprefix(site) for url in every["records"]}
    assert listed == {"/en/a", "/de/a", "/fr/b", "/c", "/d", "/e", "/f", "/g", "/h", "/old-page", "/fr/c"}
    assert every["records"][f"{site}/de/a"]["extensions"] == {"alternate_of": f"{site}/en/a", "hreflang": "de"}

    select = {
        "since": "2025-01-01",
        "require_lastmod": True,
        "min_priority": 0.5,
        "changefreq": ["daily"],
        "extensions": ["news"],
        "sitemap_since": "2025-01-01",
        "lang": "de",
    }
    chosen = crawl(stack, poller, {**common, "job_id": "chosen", "select": select})
    assert {url.removeprefix(site) for url in chosen["records"]} == {"/de/a", "/h"}
    assert chosen["result"]["entries_dropped"] == {
        "other_language": 1,
        "lastmod_before_since": 1,
        "no_lastmod": 1,
        "priority_below_min": 1,
        "changefreq_not_chosen": 1,
        "no_chosen_extension": 1,
        "sitemap_lastmod_before_since": 1,
        "sitemap_other_language": 1,
    }
    crawldb = AwsAdapters.from_env(stack.function("PageFunction").environment).crawldb
    states = {r.url.removeprefix(site): r.state for r in crawldb.site_urls(site)}
    assert set(states) == listed and CrawlState.ORPHAN not in states.values()  # (the selective job vouches for none)
