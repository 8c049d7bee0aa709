"""Politeness on the AWS path with several page functions at once: template.yaml in moto, the real handlers run
by pollers in threads (Lambda runs invocations side by side), the site on 127.0.0.1 logging request starts.

The page containers share nothing but the stack, so whatever paces them is the per-host gate in the state
table. Tolerance: see ``tests.politeness.support.JITTER``. Time is compressed where the product waits on
purpose and the pace is not what is shown: a page answered 429 is asked again 2 s later, not 30 s
(HARVEST_RETRY_BACKOFF_SECONDS, as the containers see it).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from moto import mock_aws

from harvester.adapters.aws import AwsAdapters
from harvester.adapters.aws.stack import job_status, submit_job
from harvester.model.messages import JobRequest
from tests.aws.concurrent import ContainerRun, moto_over_http, overlapping, run_side_by_side
from tests.aws.deployed import DeployedStack
from tests.aws.moto_dynamodb_speedups import moto_dynamodb_speedups
from tests.aws.moto_speedups import moto_sqs_speedups
from tests.aws.poller import LambdaPoller
from tests.aws.stack import TEMPLATE_PATH, deploy_stack
from tests.corpus import fixtures as f
from tests.corpus.server import HTML, Hit, Route, RouteServer, serving
from tests.politeness.support import JITTER, gaps, site, storm, timeline

#: Containers side by side within time budgets: `make test` runs these beside the others, which it nices.
pytestmark = pytest.mark.time_budget

CONTAINERS = 4
#: The product's waits, compressed (see the module's docstring).
COMPRESSED = {"HARVEST_RETRY_BACKOFF_SECONDS": "2"}


@pytest.fixture
def host() -> Iterator[RouteServer]:
    with serving("127.0.0.1", kernel_times=True) as running:
        yield running


@dataclass
class Aws:
    endpoint: str
    pollers: list[LambdaPoller]

    def deploy(
        self, environment: dict[str, str] | None = None, **parameters: str
    ) -> tuple[DeployedStack, LambdaPoller]:
        # Batches of 10 (PageBatchSize): with the default 50 one container may take every page of these
        # small sites, and what is shown is containers side by side (and, with lanes, a bulk batch takes its
        # host's turns within the horizon, which the priority lane's pages then wait behind).
        defaults = {"AllowedNetworks": "127.0.0.0/8", "PageBatchSize": "10"}
        stack = deploy_stack(TEMPLATE_PATH, {**defaults, **parameters}).with_functions(
            {**COMPRESSED, **(environment or {})}
        )
        self.pollers.append(LambdaPoller(stack))
        return stack, self.pollers[-1]


@pytest.fixture
def aws() -> Iterator[Aws]:
    with mock_aws(), moto_sqs_speedups(), moto_dynamodb_speedups(), moto_over_http() as endpoint, no_pauses():
        deployment = Aws(endpoint, [])
        yield deployment
        for poller in deployment.pollers:
            poller.close()


@contextmanager
def no_pauses() -> Iterator[None]:
    """This process serves the site and moto: a full collection of its heap (moto's state and whatever the
    tests before left) holds every thread of it, in a run of tests/aws 0.28-0.49 s several times a test of
    this module, and moto's answers to the containers (their claims, their turns at the gate) waited for it.
    So the heap is collected before the test, and not during it. (The site's requests are timed by the
    kernel, ``kernel_times``: a request logged by a thread that got to it late once looked 11 ms from the
    one before at a 0.2 s pace.)"""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def run_job(
    aws: Aws,
    server: RouteServer,
    *,
    delay: float,
    parameters: dict[str, str] | None = None,
    containers: int = CONTAINERS,
    lanes: int = 0,
    environment: dict[str, str] | None = None,
) -> tuple[dict[str, Any], list[Hit], list[ContainerRun]]:
    """Discovery by one poller (the pages are queued, not fetched), then the page function in CONTAINERS
    threads until the job is done. Returns the job's status, the page requests seen, the invocations."""
    deployed = aws.deploy(environment, **(parameters or {}))
    views, hits, invocations = run_jobs(
        aws, [server], delay=delay, containers=containers, lanes=lanes, deployed=deployed
    )
    return views[0], hits[0], invocations


def run_jobs(
    aws: Aws,
    servers: list[RouteServer],
    *,
    delay: float,
    parameters: dict[str, str] | None = None,
    containers: int = CONTAINERS,
    lanes: int = 0,
    deployed: tuple[DeployedStack, LambdaPoller] | None = None,
) -> tuple[list[dict[str, Any]], list[list[Hit]], list[ContainerRun]]:
    """``run_job`` for a job per server, in one stack (a new one unless ``deployed``), their pages fetched
    by the same containers."""
    stack, poller = deployed or aws.deploy(**(parameters or {}))
    job_ids = [
        submit_job(JobRequest(site=f"{server.base}/", rate_limit_delay=delay), stack.outputs["JobQueueUrl"])
        for server in servers
    ]
    for _ in range(500):
        if poller.poll_once("JobFunction") + poller.poll_once("SitemapFunction"):
            continue
        if all(poller.queue_depth(q).total == 0 for q in ("JobQueue", "SitemapQueue")):
            break
        poller.expire_in_flight()
        poller.release_delayed()
    for server in servers:
        server.reset_log()

    store = AwsAdapters.from_env(stack.function("PageFunction").environment).store

    def done() -> bool:  # (cheap: job_status reads the stack's outputs too, holding moto up)
        jobs = [store.get_job(job_id) for job_id in job_ids]
        return all(job is not None and job.status.final for job in jobs)

    functions = {"PageFunction": containers, "PagePriorityFunction": lanes}
    invocations = run_side_by_side(stack, aws.endpoint, functions, until=done, timeout=120)
    hits = [[h for h in server.hits if h.path.startswith("/p/")] for server in servers]
    return [job_status(job_id, stack.stack_name) for job_id in job_ids], hits, invocations


def test_page_functions_side_by_side_keep_one_pace_per_host(aws, host):
    urls = site(host, 30)
    view, hits, invocations = run_job(aws, host, delay=0.2)
    assert (view["total_urls"], view["successful_count"]) == (30, 30)
    assert overlapping(invocations) >= 2  # the containers did run at once
    assert len(hits) == len(urls)
    assert min(gaps(hits)) >= 0.2 - JITTER, timeline(hits)


def test_pages_their_hosts_pace_has_no_turn_for_go_back_to_the_queue_unclaimed(aws, host):
    """A batch claims only the pages its host's pace has turns for within the gate's horizon: the others go
    back to the queue as they came, each delayed to a turn of its own. Claimed first, each wait cost a claim
    and its release (on a 200-page host at 0.2 s, 2.45 deliveries a page: bench/aws_cost.py --delay 0.2), so
    a page's record is now written about twice after its listing (claimed, settled) however long it waited.
    (One container: side by side, containers that look at once each see the same turns free; their claims
    past them are deferred after their claim, as before.)"""
    urls = site(host, 30)
    view, hits, invocations = run_job(aws, host, delay=0.2, containers=1, parameters={"PageBatchSize": "50"})
    assert view["successful_count"] == len(urls) == len(hits)
    # One message carried every page (a page batch of up to 50): the other invocations took the pages sent
    # back to wait for their turns.
    assert len(invocations) > 1 and invocations[0].records == 1
    stack = aws.pollers[-1].stack
    store = AwsAdapters.from_env(stack.function("PageFunction").environment).store
    assert {page.attempts for page in store.pages(view["job_id"])} == {1}
    # The pages are one listed batch: its states move once for a delivery's claim and once for its
    # settlement, not for a page sent back to wait (claimed first, a wait was a claim and its release more).
    items = store.client.query(
        TableName=stack.outputs["StateTableName"],
        KeyConditionExpression="pk = :pk AND begins_with(sk, :batch)",
        ExpressionAttributeValues={":pk": {"S": f"JOB#{view['job_id']}"}, ":batch": {"S": "BATCH#"}},
    )["Items"]
    moves = [int(item["version"]["N"]) - 1 for item in items if item["sk"]["S"].endswith("#S")]
    assert len(moves) == 1
    assert moves[0] <= 2 * len(invocations), (moves, len(invocations))


def test_pages_past_the_hosts_bookings_wait_in_its_line_and_come_back_once_when_their_places_come(aws, host):
    """With the host booked ``book_ahead`` (here 1 s) ahead, the other batches take places in the host's
    waiting line and come back shortly before the pace reaches them: each batch is delivered about twice (its
    arrival, its return), not once every ``book_ahead`` until the pace gets to it; the pace is kept."""
    urls = site(host, 60)
    view, hits, invocations = run_job(aws, host, delay=0.2, containers=2, environment={"HARVEST_HOST_BOOK_AHEAD": "1"})
    assert view["successful_count"] == len(urls) == len(hits)
    assert min(gaps(hits)) >= 0.2 - JITTER, timeline(hits)
    batches = len(urls) // 10  # (PageBatchSize 10)
    delivered = sum(r.records for r in invocations)
    # (12 s of the host's turns, 1 s booked ahead: 15 deliveries here; each batch back every second until
    # its turn came, 35)
    assert delivered <= 3 * batches, delivered


def test_page_functions_side_by_side_keep_to_the_hosts_requests_in_flight(aws, host):
    urls = site(host, 24, page=Route("<html>slow</html>", content_type=HTML, delay=0.3))
    view, hits, invocations = run_job(aws, host, delay=0.001, parameters={"HostMaxInFlight": "2"})
    assert view["successful_count"] == len(urls) == len(hits)
    assert overlapping(invocations) >= 2
    assert host.max_in_flight == 2


def test_a_429_storm_slows_the_host_for_every_container(aws, host):
    urls = site(host, 30)
    host.override = storm(0.3)
    view, hits, invocations = run_job(aws, host, delay=0.01)
    assert view["successful_count"] == len(urls)
    assert overlapping(invocations) >= 2
    first = hits[0].at
    assert [h for h in hits if first + 0.35 < h.at < first + 0.95] == []
    assert max(gaps(hits)) >= 0.95


def test_page_containers_take_the_robots_txt_the_jobs_discovery_read(aws, host):
    """No page container asks the host for robots.txt (nor waits for a turn to): each takes the copy the
    sitemap function kept when the job's discovery read it, and its Disallow holds in every container."""
    urls = site(host, 40, robots="Disallow: /p/1")  # (/p/1, /p/10-19)
    view, hits, invocations = run_job(aws, host, delay=0.01)
    assert overlapping(invocations) >= 2
    assert [h.path for h in host.hits if h.path == "/robots.txt"] == []  # (the log starts after discovery)
    barred = {u for u in urls if u.startswith(host.url("/p/1"))}
    assert sorted(host.url(h.path) for h in hits) == sorted(set(urls) - barred)
    assert view["successful_count"] == len(urls) - len(barred)


def test_the_priority_lane_serves_the_sites_high_priorities_first(aws, host):
    """Page tasks ranked above a new URL of the default priority take PagePriorityQueue, whose functions
    poll beside PageFunction's: the priority-1.0 tenth of the site is fetched in the first fifth of its
    fetches, though it is scattered through the sitemap (and so through the other lane's batches)."""
    urls = [host.url(f"/p/{i}") for i in range(100)]
    high = set(urls[5::10])
    host.add("/robots.txt", Route(f"Sitemap: {host.url('/sitemap.xml')}\n", content_type="text/plain"))
    host.add("/sitemap.xml", Route(f.urlset(*(f.url(u, priority="1.0" if u in high else "0.5") for u in urls))))
    host.add_prefix("/p/", Route("<html>a page</html>", content_type=HTML, delay=0.2))
    # (The host's requests in flight are not the bound here: what is shown is the lanes.)
    view, hits, _ = run_job(aws, host, delay=0.01, parameters={"HostMaxInFlight": "50"}, containers=1, lanes=1)
    assert view["successful_count"] == len(urls)
    fetched = [host.url(h.path) for h in hits]
    assert sorted(fetched) == sorted(urls)
    first_fifth = set(fetched[: len(urls) // 5])
    assert high <= first_fifth, sorted(high - first_fifth)


def test_jobs_for_different_sites_share_the_page_functions_and_a_slow_host_does_not_starve_a_fast_one(aws):
    """A fast site crawled alone, then a site just like it beside one answering in 0.5 s (on 127.0.0.2), by
    the same containers: each host keeps its own pace, and the fast site takes about as long as alone
    (the slow host's requests in flight are bounded; its other pages wait in the queue, not in a container)."""
    with (
        serving("127.0.0.1", kernel_times=True) as alone,
        serving("127.0.0.1", kernel_times=True) as fast,
        serving("127.0.0.2", kernel_times=True) as slow,
    ):
        site(alone, 30)
        site(fast, 30)
        site(slow, 16, page=Route("<html>slow</html>", content_type=HTML, delay=0.5))
        deployed = aws.deploy(HostMaxInFlight="2")
        views, (alone_hits,), _ = run_jobs(aws, [alone], delay=0.05, deployed=deployed)
        assert views[0]["successful_count"] == 30
        views, (fast_hits, slow_hits), invocations = run_jobs(aws, [fast, slow], delay=0.05, deployed=deployed)
    assert [(v["total_urls"], v["successful_count"]) for v in views] == [(30, 30), (16, 16)]
    assert overlapping(invocations) >= 2
    assert len(fast_hits) == 30 and len(slow_hits) == 16
    assert min(gaps(fast_hits)) >= 0.05 - JITTER and min(gaps(slow_hits)) >= 0.05 - JITTER, (
        timeline(fast_hits),
        timeline(slow_hits),
    )
    assert slow.max_in_flight == 2
    alone_span = alone_hits[-1].at - alone_hits[0].at
    fast_span = fast_hits[-1].at - fast_hits[0].at
    # A batch's pages beyond the host's two slots take the slots its own requests free, at the host's pace
    # (30 x 0.05 s; when they went back to the queue instead, this took 7.8 s).
    assert alone_span < 4.0, alone_span
    # (A batch holding both jobs' pages takes their turns side by side: one job after the other, the fast
    # site's pages waited behind the slow host's, 1.8x as long as alone.)
    assert fast_span <= 1.3 * alone_span + 0.5, (fast_span, alone_span)
