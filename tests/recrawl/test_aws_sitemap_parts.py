"""On AWS too, a cycle that adopts its unchanged sitemaps' parts writes what a cycle listing every entry writes.

Two copies of one site (the same pages, lastmods and changes, each on a port of its own) go through the
re-crawl bench's cycles on the stack from template.yaml in moto, the handlers driven as Lambda's poller drives
them: one copy with the stack's sitemap parts, one with them off (``HARVEST_SITEMAP_PARTS=0``, a cold start
for each switch), every reading listing its URLs one by one. The two must agree on each job's counts, each
line of ``urls.jsonl`` and ``changes.jsonl`` and each URL's crawl record, once what is only a copy's own is
set aside: its address, its job ids, and the times its own clock gave (a handler runs at the time it runs:
the local twin of this test, ``test_sitemap_parts.py``, holds the clock still and compares to the byte).

Here every key set of a part item is stored apart (``value_sets.INLINE`` 0), as a sitemap's thousands of
changed entries are: the tests of test_shared_urls.py run with the sets inline, as a few changed entries are.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from typing import Any

import pytest

from harvester.adapters.aws import AwsAdapters, value_sets
from harvester.adapters.aws.stack import submit_job
from harvester.demo.live import EPOCH, LiveSite
from harvester.model.messages import JobRequest
from tests.recrawl.test_sitemap_parts import CYCLES, REPLACED, alter, move, replace

#: A field of a line whose value follows the order of the job's writes, not what it found.
_ORDERED = ("warc", "fetch_ms")
#: A time of the crawler's clock (or one reckoned from it, as a URL's next fetch), not of the site's pages, whose
#: clock starts at live.EPOCH and moves a minute a change.
_CLOCK = re.compile(rf"(?!{EPOCH.date().isoformat()})\d{{4}}-\d\d-\d\dT[0-9:.]+(?:Z|[+-]00:00)?")

#: The site of the cases about a few URLs: urlsets of 50, each a listed batch a lane (the cycles' site, of 200
#: pages, lists each urlset in several batches).
SCENARIO_PAGES = 100


@pytest.fixture(autouse=True)
def sets_stored_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(value_sets, "INLINE", 0)


def adapters_of(stack: Any) -> AwsAdapters:
    return AwsAdapters.from_env(stack.function("PageFunction").environment)


def crawl(site: LiveSite, stack: Any, poller: Any, *, job_id: str, parts: bool) -> dict[str, Any]:
    for function in stack.functions.values():
        function.environment["HARVEST_SITEMAP_PARTS"] = "1" if parts else "0"
    poller.close()  # (the next invocations start cold, with the setting)
    request = JobRequest(site=site.url("/"), rate_limit_delay=0.0001, job_id=job_id)
    submit_job(request, stack.outputs["JobQueueUrl"])
    stats = poller.drain(max_rounds=3000)
    assert stats.failed_invocations == 0, [f.traceback for f in stats.failures]
    documents = adapters_of(stack).documents
    result = json.loads(documents.get(f"jobs/{job_id}/result.json"))
    return {
        "result": result,
        "urls": documents.get(f"jobs/{job_id}/urls.jsonl").decode(),
        "changes": documents.get(f"jobs/{job_id}/changes.jsonl").decode(),
        "crawl": {
            r.url: r.model_dump_json(exclude={"version", "warc"})
            for r in adapters_of(stack).crawldb.site_urls(site.base)
        },
        "adopted": len(taken := adapters_of(stack).store.adopted(job_id)),
        "partly": sum(1 for a in taken if a.partly),
    }


def plain(text: str, site: LiveSite, jobs: dict[str, str]) -> str:
    """``text`` with what is only one copy's own made the same: its address, its job ids, its clock's times."""
    text = text.replace(site.base, "SITE")
    for job_id, cycle in jobs.items():
        text = text.replace(job_id, cycle)
    return _CLOCK.sub("NOW", text)


def lines(text: str, site: LiveSite, jobs: dict[str, str]) -> list[str]:
    out = []
    for line in text.splitlines():
        record = json.loads(line)
        for name in _ORDERED:
            record.pop(name, None)
        out.append(plain(json.dumps(record, sort_keys=True), site, jobs))
    return sorted(out)


def summary(result: dict[str, Any], site: LiveSite, jobs: dict[str, str]) -> dict[str, Any]:
    own = ("job_id", "processed_urls", "changes_location", "url_index", "start_time", "end_time", "total_duration")
    kept = {k: v for k, v in result.items() if k not in own}
    if kept.get("fetches"):  # (the network's timing: one run's own)
        kept["fetches"] = {k: v for k, v in kept["fetches"].items() if k != "latency_ms"}
    return json.loads(plain(json.dumps(kept), site, jobs))


class Copies:
    """Two copies of one site, one crawled with the stack's sitemap parts and one with them off."""

    def __init__(self, stack: Any, poller: Any, live_site: Any, *, pages: int = 200) -> None:
        self.stack, self.poller = stack, poller
        self.sites = {True: live_site(pages=pages, sitemaps=2), False: live_site(pages=pages, sitemaps=2)}
        self.jobs: dict[bool, dict[str, str]] = {True: {}, False: {}}

    def cycle(self, n: int, label: str, change: Callable[[bool, LiveSite], None]) -> dict[bool, dict[str, Any]]:
        """Changes each copy, crawls it (job ``cycle-<n>`` of its own), and checks that the two agree on the
        job's counts, ``urls.jsonl``, ``changes.jsonl`` and the crawl records; the crawls' findings, by copy."""
        found = {}
        for parts, site in self.sites.items():
            change(parts, site)
            job_id = f"{'parts' if parts else 'listing'}-{n}"
            self.jobs[parts][job_id] = f"cycle-{n}"
            found[parts] = crawl(site, self.stack, self.poller, job_id=job_id, parts=parts)
        same = {parts: (self.sites[parts], self.jobs[parts]) for parts in self.sites}
        assert summary(found[True]["result"], *same[True]) == summary(found[False]["result"], *same[False]), label
        for name in ("urls", "changes"):
            assert lines(found[True][name], *same[True]) == lines(found[False][name], *same[False]), (label, name)
        crawl_records = {
            parts: {plain(url, *same[parts]): plain(body, *same[parts]) for url, body in found[parts]["crawl"].items()}
            for parts in self.sites
        }
        assert crawl_records[True] == crawl_records[False], label
        assert found[False]["adopted"] == 0
        return found


def test_a_cycle_that_adopts_parts_on_aws_writes_what_listing_every_entry_writes(deployed_stack, live_site):
    copies = Copies(*deployed_stack, live_site)
    rngs = {parts: random.Random(39) for parts in copies.sites}
    for n, cycle in enumerate(CYCLES):
        ours = copies.cycle(n, cycle, lambda parts, site, cycle=cycle: alter(site, cycle, rngs[parts]))[True]
        if cycle in ("unchanged", "redeployed"):  # (both urlsets' parts adopted whole)
            assert ours["adopted"] == 2, cycle
        if "%" in cycle:  # (the urlsets with changed entries adopted in part)
            assert ours["partly"] >= 1, cycle


def test_a_url_left_out_of_a_part_that_replaced_an_adopted_one_reads_on_aws_as_the_adopter_listed_it(
    deployed_stack, live_site
):
    """test_sitemap_parts.py's case of the same name, on the stack: the record of a URL the replacing job
    neither listed nor orphaned still names the job that adopted the part, and so does its orphaning."""
    copies = Copies(*deployed_stack, live_site, pages=SCENARIO_PAGES)
    gone = {parts: site.page_paths()[0] for parts, site in copies.sites.items()}
    for n, cycle in enumerate(REPLACED):
        ours = copies.cycle(n, cycle, lambda parts, site, cycle=cycle: replace(site, cycle, gone[parts]))[True]
    assert ours["result"]["changes"]["removed"] == 1


def test_a_page_moved_out_of_a_part_adopted_in_part_is_listed_on_aws_by_the_urlset_it_moved_to(
    deployed_stack, live_site
):
    """The URL a job left out of a part it adopted in part is not the job's through that part: the urlset it
    moved to lists it in the same job (whichever of the two is read first), as a listing one by one does."""
    copies = Copies(*deployed_stack, live_site, pages=SCENARIO_PAGES)
    pages = {}
    for parts, site in copies.sites.items():
        zero = [path for path in site.page_paths() if site.site[path].sitemap == 0]
        pages[parts] = [*zero[:2], next(path for path in site.page_paths() if site.site[path].sitemap == 1)]
    for n, cycle in enumerate(("first crawl", "a page moved", "unchanged", "a page moved back")):
        ours = copies.cycle(n, cycle, lambda parts, site, cycle=cycle: move(site, cycle, pages[parts]))[True]
        if cycle.startswith("a page moved"):
            assert ours["partly"] >= 1, cycle
        assert ours["result"]["total_urls"] == SCENARIO_PAGES, cycle
