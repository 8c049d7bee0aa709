"""The job message's ``discovery`` section on AWS: template.yaml in moto, the real handlers driven as Lambda's
poller drives them, jobs sent as raw JSON to the job queue, the site on 127.0.0.1 logging every request.

One job skips robots.txt, keeps the site's path and adds a path of its own: its sitemaps are looked for
under that path only, robots.txt is read by the page function for its rules alone (a disallowed page is
never asked for), and the crawl database knows the site by its origin. Another skips the known paths: only
robots.txt's sitemaps are read, and the first job's URLs that it does not list are not called orphan.
"""

from __future__ import annotations

import json
from typing import Any

import boto3

from harvester.adapters.aws import AwsAdapters
from harvester.pipeline.discovery import KNOWN_PATHS
from tests.corpus.server import serving
from tests.discovery_site import DECLARED, FOLDER, FOLDER_EXTRA, discovery_site, requested


def run_job(stack: Any, poller: Any, job_id: str, message: dict[str, Any]) -> dict[str, Any]:
    body = json.dumps({"job_id": job_id, "rate_limit_delay": 0.0001, **message})
    boto3.client("sqs").send_message(QueueUrl=stack.outputs["JobQueueUrl"], MessageBody=body)
    stats = poller.drain(max_rounds=3000)
    assert stats.failed_invocations == 0, [f.traceback for f in stats.failures]
    documents = AwsAdapters.from_env(stack.function("PageFunction").environment).documents
    return json.loads(documents.get(f"jobs/{job_id}/result.json"))


def test_the_discovery_section_of_a_job_message(deployed_stack):
    stack, poller = deployed_stack
    crawldb = AwsAdapters.from_env(stack.function("PageFunction").environment).crawldb
    with serving() as site:
        discovery_site(site)
        options = {"use_robots": False, "extra_known_paths": ["another/path.xml"], "normalize_homepage_url": False}
        result = run_job(stack, poller, "folder", {"site": site.url("/foo/bar"), "discovery": options})

        asked = requested(site)
        assert result["status"] == "completed" and result["site"] == site.url("/foo/bar/")
        assert set(asked) - {"/robots.txt", "/foo/bar/d"} == {
            f"/foo/bar/{p}" for p in (*KNOWN_PATHS, "another/path.xml")
        }
        assert "/foo/bar/robots.txt" not in asked and asked.count("/robots.txt") == 1  # (the page function's)
        assert "/foo/bar/d" in asked and "/private/y" not in asked  # (Disallow: /private/)
        records = {r.url: r for r in crawldb.site_urls(site.base)}
        assert sorted(records) == sorted(site.url(p) for p in FOLDER + FOLDER_EXTRA[1:])

        site.reset_log()
        result = run_job(stack, poller, "robots-only", {"site": site.url("/"), "discovery": {"use_known_paths": False}})
        assert requested(site)[:2] == ["/robots.txt", "/declared.xml"] and "/sitemap.xml" not in requested(site)
        states = {r.url.removeprefix(site.base): r.state.value for r in crawldb.site_urls(site.base)}
        assert states.keys() == set(DECLARED + FOLDER + FOLDER_EXTRA[1:]) and "orphan" not in states.values()
