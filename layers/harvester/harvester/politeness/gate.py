"""The per-host gate: when the next request to a host may start, and how many may be in flight at once.

Pure moves on one host's state, so that every store keeps the same rules with its own primitives (a
conditional write on a DynamoDB item, a table in the local state file): :func:`admit` hands out start
times for some requests, :func:`settle` gives their slots back with what the responses said.

Why a shared state: twenty page functions at once, each keeping its own pacing, would give a host twenty
times the rate its job asked for. Here every worker of every job asks the one host state: request starts are
``spacing`` apart (the job's ``rate_limit_delay`` or the site's ``Crawl-delay``, or the host's slow-down when
longer) and at most ``max_in_flight`` are out at once (Scrapy's CONCURRENT_REQUESTS_PER_DOMAIN). A grant
holds its slots until settled or, if its worker died, until ``slot_seconds`` pass.

Requests the gate has no turn for within the horizon are told when to ask again: at the host's next free
turn when no slot is free (when one frees is unknown), else, held back by the pace, each at a turn of its own
(the first at the next free turn, each further one a turn later), so that a polite crawl's waiting pages
come back about when their turns come instead of all at the next one, where one would get it and the others
be deferred again, each time a claim, a release and a message.

The slow-down is AutoThrottle's rule with errors as its signal: a 429 or 503 doubles it (at least to one
second, at most ``slowdown_max``) and pushes the next start past the ``Retry-After`` asked for; healthy
responses halve its distance to the latency target (latency over the allowed concurrency) and, once there,
switch it off. Other failures (a 500, a timeout) neither slow nor speed the host: they may be the page's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Protocol

from msgspec import Struct, field

#: A slow-down below this is switched off: the host is back to its job's own pace.
_SLOWDOWN_OFF = 0.001
#: The least a 429 or 503 slows a host to, whatever its pace before.
SLOWDOWN_FLOOR = 1.0
#: How soon a request refused for want of a free slot asks again (its slot's end is unknown).
RECHECK_SECONDS = 0.5
#: A turn missed by more than this (the worker was busy when it came) is not taken: firing late would
#: crowd the next holder's turn. The worker asks for another.
LATE_MAX = 0.01


class GateRules(Struct, frozen=True):
    #: Requests to one host in flight at once, across every worker and job.
    max_in_flight: int = 8
    #: Starts are granted at most this far ahead: a worker waits that long at most; later ones are deferred
    #: through the queue (a Lambda bills the time it sleeps).
    horizon: float = 2.0
    #: A grant not settled after this long is taken to be lost (its worker died) and its slots freed.
    slot_seconds: float = 240.0
    #: The most a slow-down spaces requests to one host.
    slowdown_max: float = 60.0
    #: The longest ``Retry-After`` honoured for the whole host.
    retry_after_max: float = 600.0
    #: Turns past the horizon are booked at most this far ahead for a batch that comes back for them (it
    #: waits once, in the queue); a batch the host has no turn for within it comes back later unbooked. It
    #: bounds how long a page sent later (the priority lane's) waits behind the bookings made before it.
    book_ahead: float = 30.0
    #: Requests turned away without a booking take places in the host's waiting line behind the bookings,
    #: counted at most this far ahead (SQS's longest delay, 15 minutes): one whose place is further comes
    #: back then, uncounted, and asks again.
    line_max: float = 900.0
    #: A batch whose first turn is within the horizon takes the turns it was given up to this long after
    #: that first one: its pages are fetched at the host's pace in one invocation rather than sent back in
    #: part (at the default pace, 0.05 s, a batch of 50 pages takes 2.5 s).
    span: float = 5.0

    def __post_init__(self) -> None:
        if self.max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, got {self.max_in_flight}")
        for name in ("horizon", "slot_seconds", "slowdown_max", "retry_after_max", "book_ahead", "span", "line_max"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)!r}")


class HostState(Struct):
    """One host's gate as stored. ``grants``: token → [slots, epoch seconds they lapse at]."""

    next_start: float = 0.0
    slowdown: float = 0.0
    grants: dict[str, list[float]] = field(default_factory=dict)
    #: 429/503 answers seen, for reports.
    throttled: int = 0
    #: When the slow-down last grew: a 429 to a request granted before then was sent at the old pace, and
    #: does not make it grow again (a burst of concurrent 429s is one signal, not one per request).
    slowed_at: float = 0.0
    #: Where the host's waiting line ends: the turn the pace reaches once every request sent back without a
    #: booking so far has had its own (each batch of them comes back about when the pace reaches its place).
    line: float = 0.0
    #: Where the bookings ended when the host last slowed down: every turn booked before the slow-down lies
    #: before it (counted at the old pace: not kept), every turn booked since at or after it (kept).
    slowed_from: float = 0.0

    def in_flight(self, now: float) -> int:
        return int(sum(count for count, until in self.grants.values() if until > now))

    def dumps(self) -> str:
        data = {
            "n": self.next_start,
            "s": self.slowdown,
            "g": self.grants,
            "t": self.throttled,
            "a": self.slowed_at,
            "l": self.line,
            "f": self.slowed_from,
        }
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def loads(cls, text: str) -> HostState:
        data = json.loads(text)
        slowed_at = data.get("a", 0.0)
        slowed_from = data.get("f")
        if slowed_from is None:  # (stored without it: every turn booked before its slow-down is within book_ahead)
            slowed_from = slowed_at + GateRules().book_ahead if slowed_at else 0.0
        return cls(data["n"], data["s"], data["g"], data.get("t", 0), slowed_at, data.get("l", 0.0), slowed_from)

    def copy(self) -> HostState:
        grants = {k: list(v) for k, v in self.grants.items()}
        return HostState(
            self.next_start, self.slowdown, grants, self.throttled, self.slowed_at, self.line, self.slowed_from
        )


class Grant(Struct, frozen=True):
    """What the gate allowed of ``want`` requests: a start time for each of the first ``len(starts)``, and
    when the others may ask again (``later`` for the first, each further one ``spread`` after it; None when
    all were granted)."""

    token: str
    starts: tuple[float, ...] = ()
    later: float | None = None
    #: When it was granted (the ``now`` it was granted at).
    at: float = 0.0
    #: The host's step between starts when it was granted.
    spread: float = 0.0
    #: How many of its requests may be in flight at once (the slots it holds); None: all of them.
    slots: int | None = None

    @property
    def at_once(self) -> int:
        return len(self.starts) if self.slots is None else self.slots

    def asks(self, n: int) -> list[float]:
        """When each of ``n`` requests not granted asks again."""
        if self.later is None:
            return []
        return [self.later + i * self.spread for i in range(n)]


class HostReport(Struct):
    """What the requests of one grant came to, for the host's slow-down."""

    sent: int = 0
    #: 429 and 503 answers, and the longest Retry-After among them (seconds).
    throttled: int = 0
    retry_after: float = 0.0
    #: Other failures (5xx, timeouts, broken connections): no speed-up on their account.
    errors: int = 0
    #: Seconds from request to response headers, summed over the healthy answers.
    latency: float = 0.0
    #: When the grant was made (epoch seconds; None: not known): a 429 to a request granted before the
    #: host last slowed down was sent at the old pace.
    granted_at: float | None = None


def admit(
    state: HostState,
    token: str,
    want: int,
    *,
    spacing: float,
    now: float,
    rules: GateRules,
    rebook: bool = False,
    lead: float = 0.0,
) -> Grant:
    """Grants start times to up to ``want`` requests, each ``spacing`` (or the slow-down) after the last one
    granted, within the horizon, and as many of the free slots as they can use: the grant's requests take
    their turns through its slots (``Grant.slots``), one ending freeing its slot for the next, with no move
    of the gate (not a write of the host's item for each page past the slots). Records the grant under
    ``token``.

    ``rebook``: requests of the grant ``token`` that missed their turns (their worker was busy) ask for new
    ones, keeping their slots: only the turn was missed. (Were the slot given back to ask again, a request
    the gate then had no turn for would leave its batch counting a slot the gate no longer does: one request
    more than ``max_in_flight`` could reach the host.) Their new turns start ``lead`` from now at the soonest:
    a turn granted for now would be missed again by the time the answer reached the worker."""
    _expire(state, now)
    held = state.grants.get(token)
    step = max(spacing, state.slowdown)
    if rebook and held is not None:
        starts, start = _turns(state, want, step, now, rules, lead=lead)
        if starts:
            state.next_start = start
            held[1] = now + rules.slot_seconds
        return _grant(token, starts, start, want, now=now, step=step, slots=0)
    room = max(0, rules.max_in_flight - state.in_flight(now))
    starts, start = _turns(state, want if room else 0, step, now, rules)
    slots = min(len(starts), room)
    if starts:
        state.next_start = start
        held = state.grants.setdefault(token, [0, 0.0])
        held[0] += slots
        held[1] = now + rules.slot_seconds
    if not room and want:  # no free slot: when one frees is unknown, so all ask again soon
        return Grant(token, (), max(start, now + RECHECK_SECONDS), at=now, slots=0)
    return _grant(token, starts, start, want, now=now, step=step, slots=slots)  # (the pace may hold some back)


class Arrival(Struct, frozen=True):
    """What the gate made of a batch's requests to a host as they arrived (:func:`arrive`): ``turns`` holds
    each request's turn in the order they asked (None: none). The turns in ``grant.starts`` are granted (the
    batch fetches those now, through the grant's slots); the other turns are booked (the batch sends those
    requests back to the queue, each keeping its turn); the requests without a turn hold places in the host's
    waiting line from ``later`` (about when the pace reaches the first; they ask again shortly before). A
    grant without starts whose ``later`` is within the horizon found every slot held: the batch waits for one
    in the container."""

    grant: Grant
    turns: tuple[float | None, ...] = ()
    later: float | None = None

    @property
    def every_slot_held(self) -> bool:
        """Every slot of the host was held: nothing moved, and the batch may ask again at ``grant.later``."""
        return not self.grant.starts and self.grant.later is not None and all(t is None for t in self.turns)


def arrive(
    state: HostState,
    token: str,
    turns: Sequence[float | None],
    *,
    spacing: float,
    now: float,
    rules: GateRules,
    lead: float = 0.0,
    ahead: bool = False,
) -> Arrival:
    """One move for a batch's requests to a host as they arrive, each asking with the turn booked for it
    when its batch was sent back (None: none). A booked turn still ahead is kept (the host's pace moved past
    it when it was booked) unless it was booked before the host last slowed down (``HostState.slowed_from``:
    it was counted at the old pace); the others take the
    host's next turns, ``spacing`` (or the slow-down) apart and ``lead`` from now at the soonest (the batch's
    claim comes between this move and its first request), up to ``book_ahead`` from now, a span's worth of
    them at a time and only whole: a batch is not cut where the bookings end (a part booked and a part lined
    would each be claimed and settled apart).

    When the batch's first turn is within the horizon, its turns up to ``span`` after that first one are
    granted, with up to half the free slots (recorded under ``token``, as :func:`admit` does); the
    later ones are booked (the pace moves past them, no slot is held). The requests left without a turn take
    the next places in the host's waiting line, behind the bookings and the requests turned away before them
    (``HostState.line``, up to ``line_max`` ahead): ``later`` is the turn the pace reaches the first of them
    at, if every request ahead comes back for its turn. So a host's backlog comes back about when it can be
    served, once, rather than every ``book_ahead``; and as the line holds no turn, a request sent after
    them still takes the host's next turns ahead of the line when it is ``ahead`` (the priority lane's, and
    requests back from the line: their places have come); any other takes them only within the horizon (the
    host would be idle) while requests wait in the line, and otherwise joins it, so that it does not take the
    turns the line's places were counted on. With every slot held and a turn within the horizon, nothing
    moves: the batch waits for a slot (``later`` is soon)."""
    _expire(state, now)
    step = max(spacing, state.slowdown)
    kept = [t if t is not None and t >= now - LATE_MAX and t >= state.slowed_from else None for t in turns]
    start = max(now + lead, state.next_start)
    queued = state.line > start  # (requests wait in the host's line)
    reach = now + (rules.horizon if queued and not ahead else rules.book_ahead)
    taken = start
    given: list[float | None] = []
    # The requests without a turn take them a piece at a time, a piece being the turns a span holds (what a
    # grant fetches in one go), and a piece only whole: granted now (its first turn within the horizon) or
    # booked within reach; a piece cut where the bookings end would be claimed and settled in two parts.
    piece = int(rules.span / step) + 1 if step > 0 else len(kept)
    wanting, left, refused = kept.count(None), 0, False
    for turn in kept:
        if turn is None:
            if not left and not refused and start <= reach:
                size = min(piece, wanting)
                left = size if start <= now + rules.horizon or start + (size - 1) * step <= reach else 0
            refused = not left
            if left:
                turn, start, left = start, start + step, left - 1
            wanting -= 1
        given.append(turn)
    first = min((t for t in given if t is not None), default=None)
    soon: tuple[float, ...] = ()
    if first is not None and first <= now + rules.horizon:
        soon = tuple(t for t in given if t is not None and t <= first + rules.span)
    room = max(0, rules.max_in_flight - state.in_flight(now))
    if soon and not room:
        return Arrival(
            Grant(token, (), max(first or now, now + RECHECK_SECONDS), at=now, slots=0), (None,) * len(given)
        )
    state.next_start = max(state.next_start, start)
    if queued:  # (turns taken ahead of the line push its places back: those given from now on are counted so)
        state.line += start - taken
    # At most half the free slots (at least one): the batch booked next starts before this one's last
    # requests are answered, and finding every slot held it would wait for one in the container.
    slots = min(len(soon), max(1, (room + 1) // 2))
    if slots:
        held = state.grants.setdefault(token, [0, 0.0])
        held[0] += slots
        held[1] = now + rules.slot_seconds
    later = None
    if waiting := given.count(None):
        place = max(state.line, start)
        if place <= now + rules.line_max:
            state.line = place + waiting * step
        later = min(place, now + rules.line_max)
    return Arrival(Grant(token, soon, None, at=now, spread=step, slots=slots), tuple(given), later)


def paced(state: HostState, want: int, *, spacing: float, now: float, rules: GateRules) -> Grant:
    """What :func:`admit` would grant of ``want`` requests by the host's pace alone, granting nothing (its
    ``starts`` are not held): a batch claims only the pages its host's pace has a turn for within the
    horizon (past the host's free slots, a page takes its turn through a slot its batch's requests free),
    and sends the others back to the queue unclaimed, each to ask again for a turn of its own."""
    step = max(spacing, state.slowdown)
    starts, start = _turns(state, want, step, now, rules)
    return _grant("", starts, start, want, now=now, step=step, slots=None)


def _grant(
    token: str, starts: list[float], start: float, want: int, *, now: float, step: float, slots: int | None
) -> Grant:
    """``starts`` granted of ``want``; the others ask again from ``start``, a step apart."""
    return Grant(token, tuple(starts), None if len(starts) == want else start, at=now, spread=step, slots=slots)


def _turns(
    state: HostState, most: int, step: float, now: float, rules: GateRules, *, lead: float = 0.0
) -> tuple[list[float], float]:
    """Up to ``most`` start times ``step`` apart from the host's next (``lead`` from now at the soonest),
    within the horizon; and the one after."""
    start = max(now + lead, state.next_start)
    starts: list[float] = []
    while len(starts) < most and start <= now + rules.horizon:
        starts.append(start)
        start += step
    return starts, start


def settle(state: HostState, token: str, report: HostReport, *, spacing: float, now: float, rules: GateRules) -> None:
    """Gives the grant's slots back and moves the slow-down by what its responses said."""
    state.grants.pop(token, None)
    _expire(state, now)
    if report.throttled:
        state.throttled += report.throttled
        if report.granted_at is None or report.granted_at >= state.slowed_at:
            state.slowdown = min(rules.slowdown_max, max(2 * state.slowdown, 2 * spacing, SLOWDOWN_FLOOR))
            state.slowed_at = now
            state.slowed_from = max(state.next_start, now)
        pause = min(report.retry_after, rules.retry_after_max) if report.retry_after else state.slowdown
        state.next_start = max(state.next_start, now + pause)
    elif report.sent and not report.errors and state.slowdown:
        target = report.latency / report.sent / rules.max_in_flight
        slowdown = max(target, (state.slowdown + target) / 2)
        state.slowdown = 0.0 if slowdown - target < _SLOWDOWN_OFF else slowdown


def _expire(state: HostState, now: float) -> None:
    for token in [t for t, (_, until) in state.grants.items() if until <= now]:
        del state.grants[token]


class HostGate(Protocol):
    """The per-host gate every worker of every job asks before a request (see harvester.politeness.gate):
    one state per host, shared through the state store, so politeness holds however many workers run."""

    rules: GateRules

    def acquire(
        self,
        host: str,
        want: int,
        *,
        spacing: float,
        now: float,
        token: str | None = None,
        rebook: bool = False,
        lead: float = 0.0,
    ) -> Grant:
        """Start times (epoch seconds) for up to ``want`` requests to ``host``, at least ``spacing`` apart,
        and when the rest may ask again. Never raises for contention: it grants less. ``token``: add to
        that grant instead of making a new one; with ``rebook``, new turns for requests of that grant that
        missed theirs, which keep their slots, ``lead`` from ``now`` at the soonest."""

    def arrive(
        self,
        host: str,
        turns: Sequence[float | None],
        *,
        spacing: float,
        now: float,
        lead: float = 0.0,
        ahead: bool = False,
    ) -> Arrival:
        """A batch's requests to ``host`` as they arrive, each with the turn booked for it before (None:
        none): turns granted now, turns booked past the horizon, places in the host's waiting line for the
        others (see ``politeness.gate.arrive``, and ``ahead`` there). Never raises for contention: it grants
        and books less."""

    def paced(self, host: str, want: int, *, spacing: float, now: float) -> Grant:
        """What the host's pace alone leaves a turn for within the horizon, granting nothing (see
        ``politeness.gate.paced``): the pages of a batch it has none for go back to the queue unclaimed."""

    def release(self, host: str, grant: Grant, report: HostReport, *, spacing: float, now: float) -> None:
        """Frees the grant's slots and tells the host what its requests came to (its slow-down moves)."""
