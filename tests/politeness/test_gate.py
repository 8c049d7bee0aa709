"""The gate's rules on one host's state, shared by every store (tests/politeness/test_*_politeness.py drive
them through the real stores and servers)."""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

import pytest

from harvester.politeness import GateRules, Grant, HostReport, HostState, admit, arrive, paced, settle
from harvester.politeness.gate import LATE_MAX, SLOWDOWN_FLOOR

#: Turns taken on the clock (sleeps of a few milliseconds against a host's pace): `make test` runs these
#: beside the others, which it nices.
pytestmark = pytest.mark.time_budget

#: How much closer than the spacing two recorded starts may be where pages miss turns and are granted new
#: ones: a turn is taken up to LATE_MAX late, by design (a clean run saw 0.1977 s for 0.2 s).
LATE = LATE_MAX

RULES = GateRules(max_in_flight=3, horizon=1.0, slot_seconds=60.0, slowdown_max=8.0, retry_after_max=30.0)


def test_starts_are_spaced_and_granted_only_within_the_horizon():
    state = HostState()
    grant = admit(state, "a", 5, spacing=0.4, now=100.0, rules=RULES)
    assert grant.starts == pytest.approx((100.0, 100.4, 100.8))  # 101.2 is past the horizon
    assert grant.later == pytest.approx(101.2)
    nxt = admit(state, "b", 1, spacing=0.4, now=100.1, rules=RULES)  # (every slot is held, too)
    assert nxt.starts == () and nxt.later == pytest.approx(101.2)


def test_requests_the_pace_held_back_ask_again_a_turn_apart_and_those_without_a_slot_soon():
    """All asking again at the next free turn, one got it and the rest were deferred again (on AWS each
    time a claim, a release and a message): each held back by the pace comes back for a turn of its own."""
    rules = GateRules(max_in_flight=8, horizon=1.0)
    state = HostState()
    grant = admit(state, "a", 6, spacing=0.4, now=100.0, rules=rules)
    assert grant.starts == pytest.approx((100.0, 100.4, 100.8))
    assert grant.asks(3) == pytest.approx([101.2, 101.6, 102.0])
    state = HostState()
    admit(state, "held", 3, spacing=0.0, now=100.0, rules=RULES)  # (every slot held)
    full = admit(state, "b", 2, spacing=0.0, now=100.0, rules=RULES)
    assert full.starts == () and full.asks(2) == pytest.approx([100.5, 100.5])
    assert admit(HostState(), "c", 2, spacing=0.4, now=100.0, rules=rules).asks(0) == []


def test_the_pace_alone_is_looked_at_without_granting_anything():
    """What a batch may claim: the turns the pace leaves within the horizon, whatever the slots (a page past
    them waits for one its batch's own requests free), and when each of the others should ask again."""
    state = HostState()
    admit(state, "held", 3, spacing=0.0, now=100.0, rules=RULES)  # every slot held
    before = state.dumps()
    ahead = paced(state, 5, spacing=0.4, now=100.0, rules=RULES)
    assert ahead.starts == pytest.approx((100.0, 100.4, 100.8)) and ahead.asks(2) == pytest.approx([101.2, 101.6])
    assert state.dumps() == before
    assert paced(state, 2, spacing=0.4, now=100.0, rules=RULES).asks(0) == []
    assert len(paced(state, 50, spacing=0.0, now=100.0, rules=RULES).starts) == 50  # (no pace: all of them)


def test_no_more_than_max_in_flight_and_a_settled_grant_frees_its_slots():
    """A grant has a turn for each request its pace allows, and holds only the slots free: its requests take
    their turns through them (no move of the gate for each)."""
    state = HostState()
    first = admit(state, "a", 5, spacing=0.0, now=10.0, rules=RULES)
    assert (len(first.starts), first.slots, first.later) == (5, 3, None)
    assert state.in_flight(10.0) == 3
    assert admit(state, "b", 1, spacing=0.0, now=10.5, rules=RULES).starts == ()
    settle(state, "a", HostReport(sent=5, latency=0.3), spacing=0.0, now=11.0, rules=RULES)
    assert admit(state, "c", 5, spacing=0.0, now=11.0, rules=RULES).slots == 3


def test_the_slots_of_a_worker_that_died_lapse():
    state = HostState()
    admit(state, "dead", 3, spacing=0.0, now=0.0, rules=RULES)
    assert admit(state, "b", 1, spacing=0.0, now=59.0, rules=RULES).starts == ()
    assert admit(state, "b", 1, spacing=0.0, now=60.5, rules=RULES).starts == (60.5,)


def test_jobs_with_other_delays_share_the_one_host_pace():
    state = HostState()
    admit(state, "slow-job", 1, spacing=2.0, now=0.0, rules=GateRules(horizon=5.0))
    fast = admit(state, "fast-job", 1, spacing=0.1, now=0.0, rules=GateRules(horizon=5.0))
    assert fast.starts == (2.0,)  # after the slow job's start, by the slow job's spacing


def test_a_429_slows_the_host_and_healthy_answers_bring_it_back_gradually():
    state = HostState()
    grant = admit(state, "a", 1, spacing=0.1, now=0.0, rules=RULES)
    settle(state, grant.token, HostReport(sent=1, throttled=1), spacing=0.1, now=0.2, rules=RULES)
    assert state.slowdown == SLOWDOWN_FLOOR and state.next_start == pytest.approx(1.2)
    steps = []
    for i in range(20):
        grant = admit(state, f"g{i}", 1, spacing=0.1, now=state.next_start, rules=RULES)
        steps.append(grant.starts[0])
        settle(state, grant.token, HostReport(sent=1, latency=0.01), spacing=0.1, now=grant.starts[0], rules=RULES)
    gaps = [b - a for a, b in itertools.pairwise(steps)]
    assert gaps[0] == pytest.approx(1.0)  # the slow-down
    assert gaps[1] == pytest.approx(0.5, abs=0.01)  # halved toward the latency target after one healthy answer
    assert gaps == sorted(gaps, reverse=True)  # it only speeds up
    assert state.slowdown == 0.0 and gaps[-1] == pytest.approx(0.1)  # back to the job's own spacing


def test_throttling_again_doubles_the_slowdown_up_to_its_bound_and_retry_after_is_honoured():
    state = HostState()
    for i in range(6):
        settle(state, f"t{i}", HostReport(sent=1, throttled=1), spacing=0.1, now=float(i), rules=RULES)
    assert state.slowdown == RULES.slowdown_max
    settle(state, "r", HostReport(sent=1, throttled=1, retry_after=20.0), spacing=0.1, now=10.0, rules=RULES)
    assert state.next_start == 30.0
    settle(state, "r", HostReport(sent=1, throttled=1, retry_after=9999.0), spacing=0.1, now=10.0, rules=RULES)
    assert state.next_start == 10.0 + RULES.retry_after_max  # bounded


def test_a_server_error_or_timeout_neither_slows_nor_speeds_the_host():
    state = HostState(slowdown=4.0)
    settle(state, "a", HostReport(sent=2, errors=1, latency=0.1), spacing=0.1, now=0.0, rules=RULES)
    assert state.slowdown == 4.0


def test_the_state_survives_its_stored_form():
    state = HostState()
    admit(state, "a", 2, spacing=0.5, now=3.0, rules=RULES)
    settle(state, "x", HostReport(sent=1, throttled=1), spacing=0.5, now=3.0, rules=RULES)
    assert HostState.loads(state.dumps()) == state
    # A state stored before ``slowed_from`` was kept: the turns booked before its slow-down are still void.
    old = json.loads(state.dumps())
    del old["f"]
    assert HostState.loads(json.dumps(old)).slowed_from == 3.0 + GateRules().book_ahead
    del old["a"]
    assert HostState.loads(json.dumps(old)).slowed_from == 0.0


def test_a_burst_of_429s_to_requests_sent_at_the_old_pace_is_one_signal():
    state = HostState()
    grants = [admit(state, f"g{i}", 1, spacing=0.01, now=0.0, rules=GateRules(horizon=1.0)) for i in range(3)]
    for grant in grants:
        report = HostReport(sent=1, throttled=1, granted_at=grant.at)
        settle(state, grant.token, report, spacing=0.01, now=0.1, rules=RULES)
    assert state.slowdown == SLOWDOWN_FLOOR  # not doubled three times
    later = admit(state, "after", 1, spacing=0.01, now=state.next_start, rules=RULES)
    report = HostReport(sent=1, throttled=1, granted_at=later.at)
    settle(state, later.token, report, spacing=0.01, now=later.starts[0] + 0.1, rules=RULES)
    assert state.slowdown == 2 * SLOWDOWN_FLOOR  # throttled again at the slower pace: slower still


def test_a_missed_turn_asked_again_keeps_its_slot():
    """A worker that missed its turn asks for another under the same grant: only the turn was missed, so a
    full host still has a turn for it, and the grant holds no second slot for one request."""
    state = HostState()
    full = admit(state, "g", 3, spacing=0.1, now=0.0, rules=RULES)
    assert len(full.starts) == 3 and state.in_flight(0.5) == 3
    again = admit(state, "g", 1, spacing=0.1, now=0.5, rules=RULES, rebook=True)
    assert again.starts == (pytest.approx(0.5),) and state.in_flight(0.5) == 3
    assert admit(state, "other", 1, spacing=0.1, now=0.5, rules=RULES).starts == ()  # still full
    state.next_start = 5.0  # (another worker booked the host's pace past the horizon)
    missed = admit(state, "g", 1, spacing=0.1, now=0.6, rules=RULES, rebook=True)
    assert missed.starts == () and missed.later == pytest.approx(5.0)
    assert state.in_flight(0.6) == 3  # the slot is still the grant's, until it is released


def fetched_batch(gate, urls, *, spacing, took):
    """A page function's batch of ``urls`` to one host through ``gate``, each request taking ``took``
    seconds: what its turns came to, when each request started, and the most in flight at once."""
    import asyncio

    return asyncio.run(run_batch(gate, urls, spacing=spacing, took=took))


async def run_batch(gate, urls, *, spacing, took):
    """``fetched_batch`` in the running event loop (several batches side by side, as several workers)."""
    import asyncio

    from harvester.politeness.turns import Turns

    turns = Turns()
    grant = gate.acquire("h.example", len(urls), spacing=spacing, now=time.time())
    turns.given("h.example", urls, grant, spacing, horizon=gate.rules.horizon)
    started: list[float] = []
    in_flight = most = 0

    async def fetch(url: str) -> None:
        nonlocal in_flight, most
        if not await turns.turn(gate, url):
            return
        started.append(time.time())
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(took)
        in_flight -= 1
        await turns.ended(url)

    await asyncio.gather(*(fetch(u) for u in urls))
    turns.release(gate)
    return turns, started, most


def test_a_batch_paces_its_requests_from_when_each_went_on_the_wire_not_from_its_turn():
    """A page's request goes out a while after its turn when its connection has to be made first (a TLS
    handshake; here 60 ms for the first request, then a kept-alive connection): the batch's next request to
    the host is paced from the sending (``Turns.sent``), so the host sees them a step apart (less at most
    LATE_MAX), where paced from the turns it saw the first two 60 ms closer than the step."""
    import asyncio

    from harvester.politeness.memory import MemoryHostGate
    from harvester.politeness.turns import Turns

    gate = MemoryHostGate(GateRules(max_in_flight=4, horizon=2.0))
    urls = [f"https://h.example/p/{n}" for n in range(4)]
    sent: list[float] = []

    async def batch() -> None:
        turns = Turns()
        grant = gate.acquire("h.example", len(urls), spacing=0.1, now=time.time())
        turns.given("h.example", urls, grant, 0.1, horizon=gate.rules.horizon)

        async def fetch(url: str) -> None:
            assert await turns.turn(gate, url)
            await asyncio.sleep(0.06 if url == urls[0] else 0.0)  # (the connection is made)
            turns.sent(url)
            sent.append(time.time())
            await asyncio.sleep(0.01)
            await turns.ended(url)

        await asyncio.gather(*(fetch(u) for u in urls))
        turns.release(gate)

    asyncio.run(batch())
    assert len(sent) == 4
    assert min(b - a for a, b in itertools.pairwise(sent)) >= 0.1 - LATE_MAX - 0.002


def test_a_batch_finding_every_slot_held_waits_for_one_within_the_horizon():
    """Two workers' batches to a host that allows two requests at once: the second asks while the first
    holds both slots. Its pages ask again when the gate says and are fetched once the first batch's slots
    are free, at the host's pace, instead of going back to the queue (whose delays are whole seconds on
    SQS: the host idled 0.2-0.7 s between two workers' batches in the AWS fairness test)."""
    import asyncio

    from harvester.politeness.memory import MemoryHostGate

    gate = MemoryHostGate(GateRules(max_in_flight=2, horizon=2.0))
    took = 0.02

    async def side_by_side():
        first = asyncio.create_task(
            run_batch(gate, [f"https://h.example/a/{n}" for n in range(6)], spacing=0.05, took=took)
        )
        await asyncio.sleep(0.1)  # (the first batch holds both slots now)
        second = await run_batch(gate, [f"https://h.example/b/{n}" for n in range(6)], spacing=0.05, took=took)
        return await first, second

    (first, a_started, _), (second, b_started, _) = asyncio.run(side_by_side())
    assert first.deferred == {} and second.deferred == {}
    assert len(a_started) == len(b_started) == 6 and min(b_started) > max(a_started)
    starts = sorted(a_started + b_started)
    assert min(b - a for a, b in itertools.pairwise(starts)) >= 0.05 - LATE
    assert max(sum(1 for t in starts if t <= s < t + took) for s in starts) <= 2
    assert min(b_started) - max(a_started) < 0.6  # (the gate's next turn, not a trip through the queue)


def test_a_batchs_pages_beyond_the_free_slots_take_the_slots_its_own_requests_free():
    """Six pages to a host that allows two requests at once: two start at once, and each of the others
    takes the slot of one of the batch's requests that ended, at the host's pace; none goes back to the
    queue, and never more than two are in flight."""
    from harvester.politeness.memory import MemoryHostGate

    gate = MemoryHostGate(GateRules(max_in_flight=2, horizon=2.0))
    urls = [f"https://h.example/p/{n}" for n in range(6)]
    turns, started, most = fetched_batch(gate, urls, spacing=0.01, took=0.05)
    assert turns.deferred == {} and len(started) == 6
    assert most == 2
    # The turns granted keep the pace, and no request starts before its turn (one that started late may be
    # followed by one on time: the host still sees them no closer than their turns).
    granted = sorted(turns.starts[url] for url in urls)
    assert min(b - a for a, b in itertools.pairwise(granted)) >= 0.01 - 1e-6
    assert all(start >= turn - 0.001 for start, turn in zip(sorted(started), granted, strict=True))
    assert gate.hosts["h.example"].in_flight(time.time()) == 0  # (all slots given back)


@pytest.mark.parametrize(("spacing", "took"), [(0.05, 0.005), (0.00001, 0.02)], ids=["paced", "no pace"])
def test_a_batchs_requests_take_their_turns_through_its_slots_without_moving_the_gate_again(spacing, took):
    """Eight pages, two slots: each takes its turn in the slot the one before it freed, and the gate is asked
    once (each page past the slots was a move of the host's item: on AWS a conditional write, 0.88 a page at
    0.05 s a request and without spacing). Paced, the requests are shorter than the spacing; with no pace to
    keep, a page late for its turn (its slot was busy) starts when the slot frees, within the horizon."""
    from harvester.politeness.memory import MemoryHostGate

    gate = MemoryHostGate(GateRules(max_in_flight=2, horizon=2.0))
    asked = []
    acquire = gate.acquire
    gate.acquire = lambda *args, **kwargs: asked.append(args) or acquire(*args, **kwargs)  # type: ignore[method-assign]
    urls = [f"https://h.example/p/{n}" for n in range(8)]
    turns, started, most = fetched_batch(gate, urls, spacing=spacing, took=took)
    assert turns.deferred == {} and len(started) == 8
    assert len(asked) == 1 and most <= 2
    assert min(b - a for a, b in itertools.pairwise(sorted(started))) >= spacing - LATE


def test_a_page_waiting_for_its_new_turn_leaves_its_slot_to_the_batch():
    """Ten pages, two slots, requests longer than the spacing: pages miss their turns (no slot yet) and are
    granted new ones; waiting for those, a page leaves its slot to the batch's others (the gate counts it
    for the grant still). Held while waiting, each wait made the next page miss its turn too: in about half
    the runs one page went back to the queue, and the batch ended 0.6 s later (a review's simulation)."""
    from harvester.politeness.memory import MemoryHostGate

    gate = MemoryHostGate(GateRules(max_in_flight=2, horizon=2.0))
    urls = [f"https://h.example/p/{n}" for n in range(10)]
    turns, started, most = fetched_batch(gate, urls, spacing=0.2, took=0.6)
    assert turns.deferred == {} and len(started) == 10
    assert most == 2
    assert min(b - a for a, b in itertools.pairwise(sorted(started))) >= 0.2 - LATE


def test_a_missed_turn_not_granted_again_runs_no_more_than_the_gate_holds():
    """A page late for its turn keeps its slot; when the gate has no turn for the batch's last pages (another
    worker booked the host's pace), the batch gives their slots to its other pages: no more of its requests
    run at once than the gate holds for it. (A review found one more ran when the missed turn gave its slot
    back to the gate to ask again.)"""
    import asyncio

    from harvester.politeness.memory import MemoryHostGate
    from harvester.politeness.turns import Turns

    gate = MemoryHostGate(GateRules(max_in_flight=2, horizon=1.0))
    urls = [f"https://h.example/{n}" for n in range(5)]
    took = {url: 0.5 if n == 0 else 3.0 for n, url in enumerate(urls)}
    over: list[tuple[int, int]] = []

    async def batch() -> Turns:
        now = time.time()
        grant = gate.acquire("h.example", len(urls), spacing=0.2, now=now)
        turns = Turns()
        turns.given("h.example", urls, grant, 0.2, horizon=gate.rules.horizon)
        assert len(turns.starts) == len(urls)
        gate.hosts["h.example"].next_start = now + 100  # (another worker booked the host's pace)

        async def fetch(url: str) -> None:
            if await turns.turn(gate, url):
                held = gate.hosts["h.example"].grants.get(grant.token, [0])[0]
                if turns.running["h.example"] > held:
                    over.append((turns.running["h.example"], held))
                await asyncio.sleep(took[url])
                await turns.ended(url)

        await asyncio.gather(*(fetch(u) for u in urls))
        return turns

    turns = asyncio.run(batch())
    assert over == []
    # /2 missed its turn (no slot until /0 ended): the batch's turns are its own up to its last, so it
    # started a step after the batch's last start, in /0's slot; /3 and /4 then found none free within the
    # horizon.
    assert sorted(turns.deferred) == [urls[3], urls[4]]


def test_a_429_stops_the_batchs_requests_to_the_host_and_slows_every_worker_at_once():
    """Eight pages to a host at 0.05 s, two slots; the first answer is a 429. The batch sends nothing more
    to the host: its other pages go back to the queue unsent, each at a turn of the slowed pace, and the
    gate slowed down when the 429 came, not when the batch ended (another worker asking meanwhile got no
    turn at the old pace). Reported at the batch's end, the 429 was met by the batch's other turns."""
    import asyncio

    from harvester.politeness.memory import MemoryHostGate
    from harvester.politeness.turns import Turns

    gate = MemoryHostGate(GateRules(max_in_flight=2, horizon=2.0))
    host = "h.example"
    urls = [f"https://{host}/p/{n}" for n in range(8)]
    sent: list[str] = []
    answered: list[float] = []
    other: list[tuple[float, ...]] = []

    async def batch() -> Turns:
        turns = Turns()
        turns.given(host, urls, gate.acquire(host, len(urls), spacing=0.05, now=time.time()), 0.05, horizon=2.0)

        async def fetch(url: str) -> None:
            if not await turns.turn(gate, url):
                return
            sent.append(url)
            await asyncio.sleep(0.02)
            turns.observe(url, status=429 if url == urls[0] else 200, latency=0.02)
            answered.append(time.time())
            await turns.ended(url)
            if url == urls[0]:  # another worker asks just after the 429
                await asyncio.sleep(0.05)
                other.append(gate.acquire(host, 1, spacing=0.05, now=time.time()).starts)

        await asyncio.gather(*(fetch(u) for u in urls))
        turns.release(gate)
        return turns

    turns = asyncio.run(batch())
    # /0 was answered in 0.02 s, before /1's turn came 0.05 s after it (on a busy machine, a turn taken
    # late may have sent /1 first).
    assert sent[0] == urls[0] and len(sent) <= 2, sent
    assert sorted(turns.deferred) == sorted(set(urls) - set(sent))
    asks = sorted(turns.deferred.values())
    assert asks[0] >= answered[0] + SLOWDOWN_FLOOR - 0.01
    assert min(b - a for a, b in itertools.pairwise(asks)) >= SLOWDOWN_FLOOR - 1e-6
    assert other[0] and other[0][0] >= answered[0] + SLOWDOWN_FLOOR - 0.01  # (at the slowed pace, at once)
    state = gate.hosts[host]
    assert state.slowdown >= SLOWDOWN_FLOOR and state.throttled == 1
    assert state.in_flight(time.time()) == 1  # (only the other worker's grant: the batch's were given back)


@pytest.mark.parametrize("kernel_times", [True, False])
def test_the_sites_server_times_a_request_by_its_arrival_not_by_when_a_thread_reads_it(monkeypatch, kernel_times):
    """The AWS politeness tests serve the site from the process that also serves moto, whose threads may
    hold it for a while: a request is timed when the kernel received it (``kernel_times``), so a request the
    server gets to 0.3 s late is still logged when it came (and without, when the server got to it)."""
    import urllib.request

    from harvester.demo.site import QuietServer
    from tests.corpus import server as corpus

    handle = QuietServer.process_request

    def late(self, request, client_address):
        time.sleep(0.3)
        return handle(self, request, client_address)

    monkeypatch.setattr(QuietServer, "process_request", late)
    with corpus.serving("127.0.0.1", kernel_times=kernel_times) as server:
        server.add("/p", corpus.Route("ok"))
        sent = time.monotonic()
        urllib.request.urlopen(server.url("/p"), timeout=5).read()
    [hit] = server.hits
    assert (hit.at - sent < 0.05) is kernel_times


def test_a_batch_with_no_pace_to_keep_asks_the_gate_again_once_a_horizon_not_once_a_page():
    """Twelve pages to a host kept to no pace, two slots, requests of 0.2 s: the batch's requests take 1.2 s,
    past the gate's 0.5-s horizon. Each horizon the batch asks the gate again (a slow-down another worker
    met would show there), and its next pages go on in its slots; a page starting past the horizon does not
    ask for itself. (Asking for each, every page past the first horizon missed its new turn waiting for a
    slot, asked again five times - a conditional write each on AWS - and went back to the queue.)"""
    from harvester.politeness.memory import MemoryHostGate

    gate = MemoryHostGate(GateRules(max_in_flight=2, horizon=0.5))
    asked = []
    acquire = gate.acquire
    gate.acquire = lambda *args, **kwargs: asked.append(args) or acquire(*args, **kwargs)  # type: ignore[method-assign]
    urls = [f"https://h.example/p/{n}" for n in range(12)]
    turns, started, most = fetched_batch(gate, urls, spacing=0.00001, took=0.2)
    assert turns.deferred == {} and len(started) == 12
    assert most <= 2
    assert len(asked) <= 1 + 3  # (the grant, then once in each horizon past the first: 1.2 s / 0.5 s)
    assert gate.hosts["h.example"].in_flight(time.time()) == 0


BOOKING = GateRules(max_in_flight=8, horizon=2.0, slot_seconds=60.0, book_ahead=30.0, span=5.0)


def test_a_batch_arriving_at_an_idle_host_is_granted_its_turns_up_to_its_span_with_half_the_slots():
    state = HostState()
    arrival = arrive(state, "a", [None] * 60, spacing=0.1, now=100.0, rules=BOOKING, lead=0.1)
    granted = [t for t in arrival.turns if t is not None and t in arrival.grant.starts]
    assert granted[0] == pytest.approx(100.1) and len(granted) == 51  # (100.1 .. 105.1: the span)
    booked = [t for t in arrival.turns if t is not None and t not in arrival.grant.starts]
    assert booked == pytest.approx([105.2 + 0.1 * i for i in range(9)]) and arrival.later is None
    assert arrival.grant.slots == 4 and state.grants["a"][0] == 4  # (half the host's 8)
    assert state.next_start == pytest.approx(106.1)


def test_a_batch_arriving_at_a_busy_host_books_its_turns_and_the_next_batch_books_after_it():
    state = HostState()
    arrive(state, "a", [None] * 20, spacing=0.5, now=100.0, rules=BOOKING)  # (turns to 109.5)
    second = arrive(state, "b", [None] * 4, spacing=0.5, now=100.0, rules=BOOKING)
    assert second.grant.starts == () and second.turns == pytest.approx((110.0, 110.5, 111.0, 111.5))
    assert "b" not in state.grants  # (a booking holds no slot)
    third = arrive(state, "c", [None], spacing=0.5, now=100.1, rules=BOOKING)
    assert third.turns == pytest.approx((112.0,))


def test_a_batch_back_for_its_booked_turns_takes_them_without_new_ones():
    state = HostState()
    arrive(state, "a", [None] * 20, spacing=0.5, now=100.0, rules=BOOKING)
    booked = arrive(state, "b", [None] * 4, spacing=0.5, now=100.0, rules=BOOKING).turns
    ahead = state.next_start
    back = arrive(state, "b2", list(booked), spacing=0.5, now=108.5, rules=BOOKING)
    assert back.grant.starts == booked and back.turns == booked
    assert state.next_start == ahead  # (the pace moved past them when they were booked)
    late = arrive(state, "b3", list(booked), spacing=0.5, now=111.0, rules=BOOKING)  # (two of them missed)
    assert late.turns[2:] == booked[2:] and all(t >= ahead for t in late.turns[:2])


def test_a_slow_down_since_a_booking_voids_it():
    state = HostState()
    arrive(state, "a", [None] * 20, spacing=0.5, now=100.0, rules=BOOKING)
    booked = arrive(state, "b", [None] * 2, spacing=0.5, now=100.0, rules=BOOKING).turns
    settle(state, "a", HostReport(sent=1, throttled=1), spacing=0.5, now=101.0, rules=BOOKING)
    again = arrive(state, "b2", list(booked), spacing=0.5, now=109.0, rules=BOOKING)
    assert all(t is None or t not in booked for t in again.turns)


def test_a_booking_made_after_the_slow_down_is_kept_at_its_pace():
    """A turn booked once the host slowed down was counted at the slowed pace: its batch takes it when it
    comes back, however recent the slow-down (re-booked, it would go to the end of the bookings each time it
    came back, and a request asked again after a 429 would wait ``book_ahead`` for nothing)."""
    state = HostState()
    arrive(state, "a", [None] * 20, spacing=0.5, now=100.0, rules=BOOKING)
    before = arrive(state, "b", [None] * 2, spacing=0.5, now=100.0, rules=BOOKING).turns
    settle(state, "a", HostReport(sent=1, throttled=1), spacing=0.5, now=101.0, rules=BOOKING)
    after = arrive(state, "c", [None] * 2, spacing=0.5, now=101.5, rules=BOOKING).turns
    assert min(after) >= max(before) and after[1] - after[0] == pytest.approx(SLOWDOWN_FLOOR)
    stored = HostState.loads(state.dumps())  # (the rule survives the host's stored form)
    back = arrive(stored, "c2", list(after), spacing=0.5, now=after[0] - 0.5, rules=BOOKING)
    assert back.turns == after and back.grant.starts == after
    voided = arrive(stored, "b2", list(before), spacing=0.5, now=before[0] - 0.5, rules=BOOKING)
    assert all(t is not None and t not in before and t >= after[1] for t in voided.turns)


def test_requests_the_bookings_leave_no_room_for_take_places_in_the_hosts_waiting_line():
    """Past ``book_ahead`` a request gets no turn but a place in the line behind the bookings: each batch is
    told when the pace reaches its first place, if every request ahead comes back for its turn. The line holds
    no turn: a request ``ahead`` of it (the priority lane's) that comes when the bookings have room again
    takes the host's next turn, and the places given after it are counted a turn later."""
    state = HostState()
    fill = arrive(state, "fill", [None] * 70, spacing=0.5, now=100.0, rules=BOOKING)  # (booked 100-127)
    # (five whole pieces of a span each, 11 turns: the sixth, 127.5-132.5, would pass book_ahead)
    assert fill.turns.count(None) == 15 and fill.later == pytest.approx(127.5)
    one = arrive(state, "one", [None] * 3, spacing=0.5, now=100.0, rules=BOOKING)
    other = arrive(state, "other", [None] * 3, spacing=0.5, now=100.1, rules=BOOKING)
    assert one.turns == (None, None, None) and one.grant.starts == ()
    assert (one.later, other.later, state.line) == pytest.approx((135.0, 136.5, 138.0))
    ahead = arrive(state, "lane", [None], spacing=0.5, now=101.0, rules=BOOKING, ahead=True)
    assert ahead.turns == pytest.approx((127.5,)) and ahead.later is None and state.line == pytest.approx(138.5)


def test_while_requests_wait_in_the_line_a_newcomer_joins_it_unless_the_host_has_a_turn_within_the_horizon():
    """A batch that is not ahead does not take the turns the line's places were counted on: with the bookings'
    room back (now + book_ahead past the host's next turn) it still joins the line; only a batch whose first
    turn is within the horizon (the host would otherwise be idle) takes turns, up to its span past that first
    one, as a grant does (kept whole rather than cut at the horizon)."""
    state = HostState()
    arrive(state, "fill", [None] * 70, spacing=0.5, now=100.0, rules=BOOKING)  # (booked 100-127, line to 135)
    newcomer = arrive(state, "new", [None] * 2, spacing=0.5, now=101.0, rules=BOOKING)
    assert newcomer.turns == (None, None) and newcomer.later == pytest.approx(135.0)
    assert state.next_start == pytest.approx(127.5) and state.line == pytest.approx(136.0)
    idle = HostState(line=200.0)  # (pages wait in the line, and the host has no turn booked)
    soon = arrive(idle, "soon", [None] * 14, spacing=0.5, now=100.0, rules=BOOKING)
    assert soon.grant.starts == pytest.approx(tuple(100.0 + 0.5 * i for i in range(11)))  # (to 105: the span)
    assert soon.turns[11:] == (None, None, None) and soon.later == pytest.approx(205.5)


def test_the_waiting_line_is_counted_up_to_line_max_and_is_never_behind_the_pace():
    rules = GateRules(max_in_flight=8, horizon=2.0, book_ahead=30.0, span=5.0, line_max=40.0)
    state = HostState(line=50.0)  # (a line the pace has passed: a new one starts behind the bookings)
    arrive(state, "fill", [None] * 61, spacing=0.5, now=100.0, rules=rules)  # (booked 100-130)
    first = arrive(state, "a", [None] * 15, spacing=0.5, now=100.0, rules=rules)
    assert first.later == pytest.approx(130.5) and state.line == pytest.approx(138.0)
    second = arrive(state, "b", [None] * 4, spacing=0.5, now=100.0, rules=rules)
    assert second.later == pytest.approx(138.0) and state.line == pytest.approx(140.0)
    third = arrive(state, "c", [None] * 4, spacing=0.5, now=100.0, rules=rules)
    assert third.later == pytest.approx(140.0) and state.line == pytest.approx(142.0)  # (140 <= now + 40)
    past = arrive(state, "d", [None] * 4, spacing=0.5, now=100.0, rules=rules)
    assert past.later == pytest.approx(140.0) and state.line == pytest.approx(142.0)  # (uncounted: asks again)
    assert HostState.loads(state.dumps()).line == pytest.approx(142.0)


def test_a_batch_finding_every_slot_held_moves_nothing_and_waits_for_one():
    state = HostState()
    for token in "abcd":  # (4 + 2 + 1 + 1 slots)
        arrive(state, token, [None] * 8, spacing=0.0, now=100.0, rules=BOOKING)
    state.line = 150.0  # (and pages wait in the host's line: a batch ahead of it moves nothing either)
    before = state.dumps()
    full = arrive(state, "e", [None] * 3, spacing=0.1, now=100.0, rules=BOOKING, ahead=True)
    assert full.grant.starts == () and full.grant.later is not None and full.grant.later <= 100.0 + BOOKING.horizon
    assert state.dumps() == before


def test_a_batch_arriving_while_every_slot_is_held_asks_again_whole_and_is_granted_as_one():
    """A batch back for its booked turns finds every slot held by batches still ending (page functions side
    by side): it asks the gate again, whole, as slots free, and is granted its turns as one grant, rather
    than each page waiting for a slot and asking for a turn of its own (which sent pages back to the queue
    a few at a time, each few claimed, fetched and settled apart)."""
    import asyncio
    from datetime import UTC, datetime
    from types import SimpleNamespace

    from harvester.model.messages import JobRequest, PageTask
    from harvester.model.records import JobRecord
    from harvester.pipeline import admission
    from harvester.politeness.memory import MemoryHostGate
    from harvester.settings import EngineSettings

    class Robots:
        async def allowed(self, url: str) -> bool:
            return True

        async def crawl_delay(self, url: str) -> None:
            return None

    gate = MemoryHostGate(GateRules(max_in_flight=2, horizon=2.0, book_ahead=30.0, span=5.0))
    now = time.time()
    holder = gate.acquire("h.example", 2, spacing=0.05, now=now)  # (both slots, for a batch still ending)
    turns = [now + 1.5 + 0.05 * n for n in range(4)]  # (booked before, for after the holder's end)
    gate.hosts["h.example"].next_start = max(turns) + 0.05  # (the pace moved past them)
    request = JobRequest(site="https://h.example/", rate_limit_delay=0.05)
    job = JobRecord(job_id="j", request=request, start_time=datetime.now(UTC))
    tasks = {
        f"https://h.example/p/{n}": PageTask(job_id="j", url=f"https://h.example/p/{n}", turn=turn)
        for n, turn in enumerate(turns)
    }
    ctx = SimpleNamespace(ephemeral=True, gate=gate, settings=EngineSettings(), robots=Robots())

    async def ending_then_arriving():
        async def end() -> None:
            await asyncio.sleep(0.6)
            gate.release("h.example", holder, HostReport(sent=2), spacing=0.05, now=time.time())

        ending = asyncio.create_task(end())
        admitted = await admission.arrive(ctx, job, tasks)
        await ending
        return admitted

    admitted = asyncio.run(ending_then_arriving())
    assert admitted.back == {} and admitted.turns.full == {} and admitted.turns.deferred == {}
    assert sorted(admitted.turns.starts.values()) == pytest.approx(turns)  # (its booked turns, all granted)
    assert len(admitted.turns.grants) == 1


def test_a_batch_late_for_its_turns_keeps_the_pace_within_them_and_asks_again_for_the_rest():
    """The worker was busy when its batch's turns came: its pages start a step after one another from then,
    with no move of the gate, as long as they start within the batch's turns; a page that would start past
    the batch's last turn asks the gate again (here it has none: another worker booked the host)."""
    import asyncio

    from harvester.politeness.memory import MemoryHostGate
    from harvester.politeness.turns import Turns

    gate = MemoryHostGate(GateRules(max_in_flight=8, horizon=2.0))
    urls = [f"https://h.example/{n}" for n in range(6)]
    fired: list[float] = []
    granted: list[Grant] = []

    async def batch() -> Turns:
        now = time.time()
        grant = gate.acquire("h.example", len(urls), spacing=0.1, now=now)
        granted.append(grant)
        turns = Turns()
        turns.given("h.example", urls, grant, 0.1, horizon=gate.rules.horizon)
        gate.hosts["h.example"].next_start = now + 100  # (another worker booked the host's pace)
        moves = gate.hosts["h.example"].dumps()
        time.sleep(0.25)  # (busy: the first three turns pass)

        async def fetch(url: str) -> None:
            if await turns.turn(gate, url):
                fired.append(time.time())
                await turns.ended(url)

        await asyncio.gather(*(fetch(u) for u in urls))
        assert gate.hosts["h.example"].dumps() == moves  # (no move for the late pages within the turns)
        return turns

    turns = asyncio.run(batch())
    gaps = [b - a for a, b in itertools.pairwise(sorted(fired))]
    assert gaps and min(gaps) >= 0.1 - LATE, gaps
    (grant,) = granted
    assert max(fired) <= max(grant.starts) + LATE  # (none past the batch's last turn)
    assert len(fired) >= 2 and len(turns.deferred) == len(urls) - len(fired)


def test_a_single_request_books_its_turn_behind_the_page_bookings_rather_than_waiting_for_them_to_end():
    """A sitemap or robots.txt fetch (``waited_turn``) at a host whose next turns page batches keep booking
    (each booking up to ``book_ahead``, as batches back from the line and the priority lane's do): asking
    only for a turn within the horizon it would wait until batches stopped booking; it books the host's
    next turn like a batch and takes it, within about ``book_ahead``."""
    import asyncio

    from harvester.politeness.memory import MemoryHostGate
    from harvester.politeness.turns import waited_turn

    rules = GateRules(max_in_flight=8, horizon=0.2, book_ahead=0.8, span=0.2)
    gate = MemoryHostGate(rules)
    spacing = 0.02
    started = time.time()

    async def keep_booking(stop: asyncio.Event) -> None:
        while not stop.is_set():  # (a batch of 40 back from the line every 50 ms: the host stays booked)
            arrival = gate.arrive("example.com", [None] * 40, spacing=spacing, now=time.time(), ahead=True)
            gate.release("example.com", arrival.grant, HostReport(), spacing=spacing, now=time.time())
            await asyncio.sleep(0.05)

    async def scenario() -> float:
        stop = asyncio.Event()
        booking = asyncio.create_task(keep_booking(stop))
        await asyncio.sleep(0.1)  # (the host booked book_ahead ahead)
        try:
            async with asyncio.timeout(3.0), waited_turn(gate, "http://example.com/sitemap.xml", spacing) as turns:
                return turns.starts["http://example.com/sitemap.xml"] - started
        finally:
            stop.set()
            await booking

    took = asyncio.run(scenario())
    assert took <= 0.1 + rules.book_ahead + rules.horizon


def test_a_single_request_whose_gate_answers_slowly_takes_its_turn_rather_than_asking_again_and_again():
    """The gate's answer takes longer than a turn may be missed by (LATE_MAX): a turn given for the moment
    the gate was asked is missed by the time the answer is back. A missed turn is asked for again ahead by
    about the answer's time (``Turns.lead``), so the request takes it: a few asks, not one after another
    until its invocation ends (each a write of the host's item, keeping other workers' writes from landing)."""
    import asyncio

    from harvester.politeness.memory import MemoryHostGate
    from harvester.politeness.turns import waited_turn

    answer = 0.08  # (seconds the gate's answer takes to come back: more than a step of the pace)

    class FarGate(MemoryHostGate):
        asked = 0

        def acquire(self, *args: Any, **kwargs: Any) -> Grant:
            self.asked += 1
            grant = super().acquire(*args, **kwargs)
            time.sleep(answer)
            return grant

        def arrive(self, *args: Any, **kwargs: Any) -> Any:
            self.asked += 1
            arrival = super().arrive(*args, **kwargs)
            time.sleep(answer)
            return arrival

    gate = FarGate(GateRules(max_in_flight=8, horizon=1.0))
    url = "http://example.com/sitemap.xml"

    async def scenario() -> float:
        async with asyncio.timeout(5.0), waited_turn(gate, url, 0.05) as turns:
            return turns.starts[url]

    started = time.time()
    start = asyncio.run(scenario())
    assert gate.asked <= 4, gate.asked
    assert start - started <= 1.0


def test_a_batch_is_booked_a_whole_span_at_a_time_never_cut_where_the_bookings_end():
    """A batch whose turns would run past ``book_ahead`` is not booked in part and lined in part (each part
    then claimed and settled apart): it books whole pieces of a span's turns that fit, and the rest waits in
    the line. (Before, a lane batch arriving at a host booked to 29.2 s ahead booked 17 pages and lined 22.)"""
    edge = HostState(next_start=129.2)
    cut = arrive(edge, "lane", [None] * 39, spacing=0.05, now=100.0, rules=BOOKING, ahead=True)
    assert cut.turns == (None,) * 39 and cut.later == pytest.approx(129.2)  # (129.2 + 1.9 would pass 130)
    room = HostState(next_start=127.0)
    whole = arrive(room, "lane", [None] * 39, spacing=0.05, now=100.0, rules=BOOKING, ahead=True)
    assert whole.turns == pytest.approx(tuple(127.0 + 0.05 * i for i in range(39))) and whole.later is None
    slow = HostState(next_start=110.0)  # (at 1 s a request a span holds 6 turns: pieces of 6, whole)
    pieces = arrive(slow, "bulk", [None] * 30, spacing=1.0, now=100.0, rules=BOOKING)
    assert pieces.turns[:18] == pytest.approx(tuple(110.0 + i for i in range(18)))  # (110-127: three pieces)
    assert pieces.turns[18:] == (None,) * 12 and pieces.later == pytest.approx(128.0)
