"""Turns at the per-host gate: waiting for a granted start, taking a missed one again, reporting what the
requests came to, giving the grants back. Below the pipeline, so that any fetch (a page, a sitemap,
robots.txt) can take a turn with nothing but the gate.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from msgspec import Struct, field
from msgspec.structs import replace

from harvester.fetch.client import parse_retry_after
from harvester.patience import PATIENCE, Busy
from harvester.politeness.gate import LATE_MAX, RECHECK_SECONDS, Grant, HostGate, HostReport
from harvester.urls import host_of

log = logging.getLogger(__name__)

#: Answers that slow the whole host down.
THROTTLING = frozenset({429, 503})
#: Turns a request takes before it gives up and goes back to the queue.
_TURNS = 5


class Turns(Struct):
    """What the gate allowed of a batch: a start time per URL given a turn (a URL without one is settled
    without a request, as a page robots.txt forbids), the deferred URLs with when to try them, and the
    grants to give back. A grant may hold fewer slots than it has turns: its requests take their turns
    through its slots, one ending freeing its slot for the next."""

    starts: dict[str, float] = field(default_factory=dict)
    deferred: dict[str, float] = field(default_factory=dict)
    grants: dict[str, tuple[Grant, float]] = field(default_factory=dict)
    reports: dict[str, HostReport] = field(default_factory=lambda: defaultdict(HostReport))
    #: Requests of the batch in flight, by host (at most its grant's slots).
    running: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    #: Slots of the batch freed, by host: a page waiting for one waits on while they keep freeing.
    freed: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    #: Seconds from each answered request's start to its answer's headers, by URL (for the page metrics).
    latency: dict[str, float] = field(default_factory=dict)
    #: Hosts whose every slot other workers held when the batch asked, with the batch's URLs to each (in
    #: turn order), the spacing and until when they may wait: they ask again in the container when the
    #: gate says, within the horizon, rather than going back to the queue (whose delays are whole seconds
    #: on SQS: a host left idle between two workers' batches).
    full: dict[str, tuple[list[str], float, float]] = field(default_factory=dict)
    #: Hosts that answered a request of the batch with a 429 or 503, with when the next of the batch's
    #: requests to each not yet sent asks again (each one a step after the last): see ``_throttled``.
    stopped: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: When the batch's last request to each host started (went on the wire, once ``sent`` says so): the
    #: batch's next request to the host starts a step after it at the earliest.
    started: dict[str, float] = field(default_factory=dict)
    #: How far ahead a missed turn is asked for again (``turn``): twice the gate's last answer time, doubled
    #: at each turn missed since, up to half the horizon, and halved at each turn taken. A turn given for the
    #: moment the gate was asked is missed by the time its answer is back (a turn is missed past LATE_MAX),
    #: and asked for again at once it would be missed again: a request looping on the gate's item, its
    #: writes keeping other workers' writes from landing.
    lead: float = 0.0
    _asking: dict[str, asyncio.Lock] = field(default_factory=lambda: defaultdict(asyncio.Lock))
    _ended: asyncio.Condition | None = None

    def given(self, host: str, urls: list[str], grant: Grant, spacing: float, *, horizon: float) -> None:
        """What the gate granted of the batch's ``urls`` to ``host`` (in turn order): a start for the first
        ones, when to ask again for the others; with no slot free but a turn within the horizon, they wait
        for one in the container (``full``)."""
        self._take(host, urls, grant, spacing)
        if not grant.starts and grant.later is not None and grant.later <= grant.at + horizon:
            self.full[host] = (urls, spacing, grant.at + horizon)

    def _take(self, host: str, urls: list[str], grant: Grant, spacing: float) -> None:
        """A grant for ``urls`` (in turn order): the first ones start when it says, the others are deferred."""
        if grant.starts:
            self.grants[host] = (grant, spacing)
        for url, start in zip(urls, grant.starts, strict=False):
            self.starts[url] = start
            self.deferred.pop(url, None)
        waiting = urls[len(grant.starts) :]
        self.deferred.update(zip(waiting, grant.asks(len(waiting)), strict=True))

    async def turn(self, gate: HostGate, url: str) -> bool:
        """Waits for the URL's start (at most the gate's horizon, which granted it) and for one of its grant's
        slots: a batch of pages to a host at its limit is fetched a few at a time, each taking the slot of one
        of the batch's requests that ended, not sent back to the queue. A turn missed (the worker was busy, or
        no slot freed in time) is asked for again under the grant, whose slot it keeps at the gate; False
        when the gate has none left within the horizon (then ``deferred`` says when to try)."""
        if url in self.deferred and not await self._waited(gate, url):
            return False
        host = host_of(url)
        for _ in range(_TURNS):
            start = self.starts.get(url)
            if start is None:
                return True
            wait = start - time.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if self._throttled(gate, host, url):
                return False
            grant, _ = self.grants[host]
            # (where a pace is kept, a slot that frees past the batch's turns and a horizon is of no use)
            until = _last_turn(grant, start) + gate.rules.horizon if grant.spread > LATE_MAX else None
            if not await self._slot(host, gate.rules.horizon, until=until):
                self.deferred[url] = time.time() + RECHECK_SECONDS
                return False
            if self._throttled(gate, host, url):  # (the request whose slot it took may have been answered so)
                await self._free(host)
                return False
            grant, spacing = self.grants[host]
            now = time.time()
            if grant.spread > LATE_MAX:
                # The batch's turns are its own up to its last: a page late for its turn (the worker was busy)
                # starts a step after the batch's last request to the host, and so may one on time after it,
                # never in a turn of the gate's other holders.
                now = await self._paced_after(host, grant.spread)
                if now <= _last_turn(grant, start) + LATE_MAX:
                    self.started[host] = now
                    self.lead /= 2  # (taken: the next turn asked for again need not start as far ahead)
                    return True
            elif now - start <= LATE_MAX or now <= grant.at + gate.rules.horizon:
                return True  # (no pace kept: on time, or late in a slot of the grant, within its horizon)
            again = gate.acquire(host, 1, spacing=spacing, now=now, token=grant.token, rebook=True, lead=self.lead)
            self.lead = min(gate.rules.horizon / 2, max(2 * self.lead, 2 * (time.time() - now)))
            if again.starts:
                self.starts[url] = again.starts[0]
                # The gate was asked now: with no pace to keep, the grant's next pages go on in its slots
                # until a horizon from now (each asks for itself only if the host's step grew meanwhile).
                self.grants[host] = (replace(grant, at=again.at, spread=again.spread), spacing)
            # The slot serves the batch's other pages meanwhile (the gate still counts it for the grant).
            await self._free(host)
            if not again.starts:
                self.deferred[url] = again.later or now + RECHECK_SECONDS
                return False
        self.deferred[url] = time.time() + RECHECK_SECONDS
        return False

    async def _paced_after(self, host: str, step: float) -> float:
        """Waits, if need be, until ``step`` after the batch's last request to the host started; the time."""
        while True:
            now = time.time()
            due = self.started.get(host, 0.0) + step - LATE_MAX
            if now >= due:
                return now
            await asyncio.sleep(due - now)

    def _throttled(self, gate: HostGate, host: str, url: str) -> bool:
        """Whether the host asked the batch to slow down (a 429 or 503), deferring ``url`` if so. The first
        time, the host's grant is given back at once with that answer, so every worker slows down now, not
        when the batch ends; the batch's requests to it not yet sent go back to the queue, each at a turn of
        the slowed pace, instead of taking the turns granted at the old one. (Reported at the batch's end, a
        429 storm would be met by the rest of the batch's turns, and by other workers' batches granted turns
        meanwhile: a batch of 50 pages could send 50 requests into it.) Its requests still in flight are no
        longer counted against the host's limit; in a storm they are answered at once."""
        if host not in self.stopped:
            report = self.reports.get(host)
            if report is None or not report.throttled or host not in self.grants:
                return False
            now = time.time()
            spacing = self._give_back(gate, host, now)
            pace = gate.paced(host, 1, spacing=spacing, now=now)
            self.stopped[host] = (pace.starts[0] if pace.starts else pace.later or now + RECHECK_SECONDS, pace.spread)
        ask, step = self.stopped[host]
        self.deferred[url] = ask
        self.stopped[host] = (ask + step, step)
        return True

    async def _waited(self, gate: HostGate, url: str) -> bool:
        """For a URL of a host that had no free slot: asks the gate again when it said to, until the host's
        deadline, for all the batch's URLs to that host still waiting (one asker a host at a time); True when
        the URL was given a start."""
        host = host_of(url)
        if host not in self.full:
            return False
        urls, spacing, deadline = self.full[host]
        async with self._asking[host]:
            while (
                host not in self.grants
                and host not in self.stopped
                and url in self.deferred
                and self.deferred[url] <= deadline
            ):
                await asyncio.sleep(max(0.0, self.deferred[url] - time.time()))
                waiting = [u for u in urls if u in self.deferred]
                self._take(host, waiting, gate.acquire(host, len(waiting), spacing=spacing, now=time.time()), spacing)
        return url not in self.deferred and not self._throttled(gate, host, url)

    async def ended(self, url: str) -> None:
        """The URL's request is over (answered, or failed): its slot may serve a page of the batch waiting."""
        if url in self.starts:
            await self._free(host_of(url))

    async def _slot(self, host: str, most: float, *, until: float | None = None) -> bool:
        """Takes one of the host's grant's slots. A page waits for one while the batch's requests to the host
        keep ending (a batch whose requests take longer than the horizon is fetched whole, not sent back in
        part to come again in another invocation); it gives up when none freed a slot for ``most`` seconds,
        at ``until`` (epoch seconds), or when the invocation's time for waiting is over."""
        grant = self.grants.get(host)
        slots = grant[0].at_once if grant is not None else 1
        if self.running[host] < slots:
            self.running[host] += 1
            return True
        if self._ended is None:
            self._ended = asyncio.Condition()
        async with self._ended:
            while self.running[host] >= slots:
                freed = self.freed[host]

                def news(seen: int = freed) -> bool:
                    return self.running[host] < slots or self.freed[host] != seen

                wait = most if until is None else min(most, until - time.time())
                try:
                    async with asyncio.timeout(max(0.0, wait)):
                        await self._ended.wait_for(news)
                except TimeoutError:
                    return False
                if PATIENCE.out_of_time() or (until is not None and time.time() >= until):
                    return False
        self.running[host] += 1
        return True

    async def _free(self, host: str) -> None:
        """A slot of the host's grant is free: a page of the batch waiting for one may take it."""
        self.running[host] = max(0, self.running[host] - 1)
        self.freed[host] += 1
        if self._ended is not None:
            async with self._ended:
                self._ended.notify_all()

    def sent(self, url: str) -> None:
        """A request to ``url``'s host went on the wire now: the batch's next one to the host is paced from
        here, not from its turn (a new connection, a TLS handshake, or a busy event loop can put a step's
        worth between the two, and the host would see two requests less than a step apart)."""
        host = host_of(url)
        if host in self.started:
            self.started[host] = max(self.started[host], time.time())

    def observe(self, url: str, *, status: int | None, latency: float, retry_after: str | None = None) -> None:
        """One request's answer (``status`` None: no answer, the request failed) for its host's slow-down."""
        report = self.reports[host_of(url)]
        report.sent += 1
        if status is not None:
            self.latency[url] = latency
        if status in THROTTLING:
            report.throttled += 1
            report.retry_after = max(report.retry_after, parse_retry_after(retry_after) or 0.0)
        elif status is None or status == 408 or status >= 500:
            report.errors += 1
        else:
            report.latency += latency

    def release(self, gate: HostGate) -> None:
        """Gives every grant back with what its requests came to (unused slots included)."""
        now = time.time()
        for host in list(self.grants):
            self._give_back(gate, host, now)

    def _give_back(self, gate: HostGate, host: str, now: float) -> float:
        """Gives the host's grant back with its report (a report goes with one grant only); its spacing."""
        grant, spacing = self.grants.pop(host)
        report = self.reports.pop(host, None) or HostReport()
        report.granted_at = grant.at
        try:
            gate.release(host, grant, report, spacing=spacing, now=now)
        except Busy as busy:  # (the gate's store stayed busy: the grant lapses by itself, as a dead worker's)
            log.warning(
                "a grant is left to lapse: the gate's store stayed busy", extra={"host": host, "reason": str(busy)}
            )
        return spacing


def _last_turn(grant: Grant, start: float) -> float:
    """The last of a batch's turns at a host: its grant's, or the page's own ``start`` (a turn asked again)."""
    return max([*grant.starts, start])


@asynccontextmanager
async def waited_turn(gate: HostGate, url: str, spacing: float) -> AsyncIterator[Turns]:
    """One request's turn at its host, waited for (a sitemap is read by the worker that claimed it, and there
    are few of them; robots.txt likewise): the gate's slot is held until the block ends, and what the block
    observed is reported with it. (A sitemap's fetcher retries within the turn, spaced by its own back-off.)

    The request asks as a batch of one that is ``ahead`` (``HostGate.arrive``): with no turn within the
    horizon it books the host's next one (at most ``book_ahead`` away) and takes it when it comes. Asking for
    a turn within the horizon only, it would wait behind the page batches' bookings for as long as batches
    kept booking the host's next turns, that is until the host's backlog of pages thinned: a job's second
    sitemap read only after its first sitemap's pages were fetched, or never within its invocation."""
    host = host_of(url)
    turns = Turns()
    booked: float | None = None
    early = gate.rules.horizon / 2  # (asked again this long before a booked turn: within the horizon)
    try:
        while True:
            now = time.time()
            arrival = gate.arrive(host, [booked], spacing=spacing, now=now, ahead=True)
            grant = arrival.grant
            if grant.starts:
                turns.starts[url] = grant.starts[0]
                turns.grants[host] = (grant, spacing)
                if await turns.turn(gate, url):
                    break
                turns.release(gate)
                booked, until = None, turns.deferred.pop(url)
            elif arrival.turns[0] is not None:  # (a turn booked past the horizon: asked again just before it)
                booked = arrival.turns[0]
                until = booked - early
            elif grant.later is not None:  # (every slot held, a turn soon: asked again, the booked one kept)
                until = grant.later
            else:  # (a place in the host's line: asked again when the pace reaches it)
                booked = None
                until = min(arrival.later if arrival.later is not None else now, now + gate.rules.book_ahead)
            await asyncio.sleep(max(0.01, until - time.time()))
        yield turns
    finally:
        turns.release(gate)
