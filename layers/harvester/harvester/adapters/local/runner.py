"""Runs jobs on one machine (a job per site, side by side): the engine's steps driven by asyncio workers.

The workers play the part Lambda's SQS pollers play in AWS: take a message (from the dispatcher, which
serves hosts fairly), run its step, delete it when the step returned, hand it back (with a delay) when it
raised. A supervisor watches the jobs: it ends the run when every job's result is written, and when a job
has no message left but is not done (a message was lost to a kill between two writes, or the queue was
in memory) it resumes the job from its records.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import IO

from harvester.adapters.local import collector
from harvester.adapters.local.activity import Activity, activity
from harvester.adapters.local.crawl import SqliteCrawlDatabase
from harvester.adapters.local.database import Checkpointer, StateDirBusy, StorageFailed, connect, storage_failure
from harvester.adapters.local.defaults import DEFAULT_STATE_DIR
from harvester.adapters.local.dispatch import Dispatcher
from harvester.adapters.local.documents import FolderDocumentStore
from harvester.adapters.local.host_gate import SqliteHostGate
from harvester.adapters.local.memory_queue import FallbackQueue, MemoryTaskQueue
from harvester.adapters.local.queue import Received, SqliteTaskQueue
from harvester.adapters.local.scheduled_sites import SqliteScheduledSites
from harvester.adapters.local.state import SqliteStateStore
from harvester.adapters.local.warc_files import FolderWarcStore
from harvester.archive.results import result_key
from harvester.engine import Engine
from harvester.fetch import Fetcher, FetchPolicy
from harvester.model.messages import JobRequest, PageTask, SitemapTask, Unprocessable
from harvester.model.records import BulkProcessingJob, JobCounts, JobRecord, JobStatus, SitemapIngestionResult
from harvester.patience import Busy
from harvester.pipeline.jobs import conflict
from harvester.pipeline.sitemap_filter import SitemapCallbacks
from harvester.settings import EngineSettings
from harvester.sitemap import PageEntry

log = logging.getLogger(__name__)

DB_NAME = "harvest.db"
DOCUMENTS = "documents"
#: Pages handed to a worker at once (at most half the run's concurrency, so two batches overlap): one
#: claim, one settling transaction and one queue deletion for the lot.
PAGE_BATCH = 8
POLL_INTERVAL = 0.05
PROGRESS_INTERVAL = 0.2
#: How long the run's activity (``LocalRunner.activity``: three reads of the queue) is kept for the progress line.
ACTIVITY_INTERVAL = 1.0


class JobStuck(RuntimeError):
    """The job has open records but nothing left to do them with, even after resuming it."""


@dataclass
class LocalHarvest:
    """A state directory: its SQLite state and queue, its documents folder, and the engine over them."""

    state_dir: Path
    store: SqliteStateStore
    queue: FallbackQueue | MemoryTaskQueue
    documents: FolderDocumentStore
    warcs: FolderWarcStore
    crawldb: SqliteCrawlDatabase
    gate: SqliteHostGate
    #: The state directory's scheduled sites (``harvest schedule``).
    scheduled_sites: SqliteScheduledSites

    #: A throwaway discovery run's state (see StepContext.ephemeral): nothing in it outlives the run.
    ephemeral: bool = False

    @classmethod
    @contextlib.contextmanager
    def open(
        cls, state_dir: Path = DEFAULT_STATE_DIR, *, ephemeral: bool = False, memory_queue: bool = False
    ) -> Iterator[LocalHarvest]:
        """``memory_queue``: the tasks are kept in memory, not in the state file (a throwaway run's always
        are). A run killed then loses its queue, not its records: run again, it sends the job's open work
        again from them."""
        state_dir = Path(state_dir)
        conn = connect(state_dir / DB_NAME, durable=not ephemeral)
        warcs = FolderWarcStore(state_dir / DOCUMENTS)
        try:
            with contextlib.nullcontext() if ephemeral else Checkpointer(state_dir / DB_NAME):
                yield cls(
                    ephemeral=ephemeral,
                    state_dir=state_dir,
                    store=SqliteStateStore(conn, keep_pages=not ephemeral),
                    queue=MemoryTaskQueue() if ephemeral or memory_queue else FallbackQueue(SqliteTaskQueue(conn)),
                    documents=FolderDocumentStore(state_dir / DOCUMENTS),
                    warcs=warcs,
                    crawldb=SqliteCrawlDatabase(conn),
                    gate=SqliteHostGate(conn),
                    scheduled_sites=SqliteScheduledSites(conn),
                )
        finally:
            warcs.close()
            conn.close()

    def engine(self, fetcher: Fetcher, settings: EngineSettings | None = None) -> Engine:
        settings = settings or EngineSettings.from_env()
        self.gate.rules = settings.gate
        return Engine(
            store=self.store,
            queue=self.queue,
            documents=self.documents,
            warcs=self.warcs,
            fetcher=fetcher,
            crawldb=self.crawldb,
            settings=settings,
            counter=self.store if self.ephemeral else None,
            host_gate=self.gate,
        )

    def cancel(self, job_id: str, *, now: datetime) -> JobRecord:
        """Ends an unfinished job for good: its queued work dropped, no result written; the same crawl
        command then starts a new job. A job that has ended is returned as it is."""
        with exclusive(self.state_dir):
            job = self.store.get_job(job_id)
            if job is None:
                raise KeyError(job_id)
            if not job.status.final:
                if job.status is JobStatus.PENDING:  # (killed before it was seeded; end_job ends a job in progress)
                    self.store.mark_seeded(job_id)
                self.store.end_job(job_id, JobStatus.CANCELLED, end_time=now, error_message="cancelled by its user")
                self.queue.purge(job_id)
                self.store.release_leases(job_id)
            self.store.close_job(job_id)
            job = self.store.get_job(job_id)
            assert job is not None
            return job

    def delete(self, job_id: str) -> bool:
        """Forgets a job: its records and its result files (the crawl database and stored pages stay)."""
        with exclusive(self.state_dir):
            if not self.store.delete_job(job_id):
                return False
            self.queue.purge(job_id)
            self.documents.delete_folder(f"jobs/{job_id}")
            return True

    def result(self, job_id: str) -> SitemapIngestionResult | None:
        key = result_key(job_id)
        if not self.documents.exists(key):
            return None
        return SitemapIngestionResult.model_validate_json(self.documents.get(key))


class Holder:
    """The lock of a state directory as its crawl holds it: the file says the crawl's pid, then the jobs it
    runs, a line each (``running``), for `harvest jobs` to tell a running job from one left unfinished."""

    def __init__(self, handle: IO[str]) -> None:
        self._handle = handle

    def running(self, job_ids: Sequence[str]) -> None:
        handle = self._handle
        handle.seek(0)
        handle.truncate()
        handle.write("\n".join([str(os.getpid()), *job_ids]))
        handle.flush()


@contextlib.contextmanager
def exclusive(state_dir: Path) -> Iterator[Holder]:
    """One crawl per state directory at a time: two would hand out each other's in-flight messages."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / "lock"
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().split("\n", 1)[0].strip() or "another process"
            raise StateDirBusy(f"{state_dir} is in use by a running harvest crawl (pid {holder})") from None
        holder = Holder(handle)
        holder.running(())
        try:
            yield holder
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def running_jobs(state_dir: Path) -> tuple[str, list[str]] | None:
    """The pid of the crawl that holds the state directory and the jobs it runs, or None when none does."""
    try:
        handle = open(state_dir / "lock")  # noqa: SIM115 (closed below)
    except FileNotFoundError:
        return None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pid, *jobs = handle.read().split("\n")
            return pid.strip(), [job for job in jobs if job]
        fcntl.flock(handle, fcntl.LOCK_UN)
    return None


def new_job_id() -> str:
    return f"local-{datetime.now(UTC):%Y%m%dT%H%M%S}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class JobStart:
    """How a crawl takes up a job, for the user to be told before it runs: resumed, with what it had done,
    or new; and the unfinished jobs of the same site a new job leaves as they are (their options differ),
    each with the request fields that differ."""

    job_id: str
    site: str
    resumed: bool
    counts: JobCounts
    request: JobRequest
    started: datetime | None = None
    left: tuple[tuple[JobRecord, tuple[str, ...]], ...] = ()


def differences(before: JobRequest, after: JobRequest) -> tuple[str, ...]:
    """The fields of two requests of one site that differ (the job id aside): why one does not resume the other."""
    return tuple(
        name
        for name in JobRequest.__struct_fields__
        if name != "job_id" and getattr(before, name) != getattr(after, name)
    )


@dataclass
class CrawlOutcome:
    job: JobRecord
    result: SitemapIngestionResult | None  # None for an ephemeral run, which writes none
    resumed: bool


class LocalRunner:
    def __init__(
        self,
        harvest: LocalHarvest,
        *,
        policy: FetchPolicy | None = None,
        settings: EngineSettings | None = None,
        concurrency: int = 16,
        on_progress: Callable[[BulkProcessingJob], None] | None = None,
        callbacks: SitemapCallbacks | None = None,
        pause: Callable[[], Awaitable[object]] | None = None,
        found: Callable[[str, list[tuple[str, PageEntry]]], None] | None = None,
        on_start: Callable[[JobStart], None] | None = None,
        listed: Callable[[str, int, list[tuple[str, PageEntry]]], None] | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.harvest = harvest
        self.policy = policy or FetchPolicy.from_env()
        self.settings = settings or EngineSettings.from_env()
        self.concurrency = concurrency
        self.on_progress = on_progress
        self.callbacks = callbacks
        self.pause = pause
        self.found = found
        self.on_start = on_start
        self.listed = listed
        self._dispatcher: Dispatcher | None = None
        self._activity: tuple[float, Activity] | None = None

    async def crawl(self, request: JobRequest) -> CrawlOutcome:
        """Runs the job ``request`` describes to its end, resuming an unfinished one if there is one."""
        return (await self.crawl_all([request]))[0]

    async def crawl_all(self, requests: Sequence[JobRequest]) -> list[CrawlOutcome]:
        """Runs one job per request (each resumed if unfinished) side by side on the same workers, to the
        end of the last; the outcomes in the order of ``requests``."""
        if not requests:
            raise ValueError("nothing to crawl")
        requests = [request.validated() for request in requests]  # (a ValidationError before any write)
        harvest = self.harvest
        with exclusive(harvest.state_dir) as holder, collector.relaxed():
            retention = time.time() - self.settings.retention_days * 86400
            if expired := harvest.store.expire_jobs(retention):
                log.info("per-job records of old jobs expired", extra={"jobs": expired})
            jobs: list[tuple[str, bool]] = []
            for request in requests:
                existing = self._resumable(request)
                jobs.append((existing.job_id if existing else (request.job_id or new_job_id()), existing is not None))
            if len({job_id for job_id, _ in jobs}) < len(jobs):
                raise Unprocessable("two of the crawls asked for are the same job: give each site once")
            holder.running([job_id for job_id, _ in jobs])
            if self.on_start is not None:
                for request, (job_id, resumed) in zip(requests, jobs, strict=True):
                    self.on_start(self._start(request, job_id, resumed))
            async with Fetcher(self.policy, max_connections=max(self.concurrency * 2, 10)) as fetcher:
                engine = harvest.engine(fetcher, self.settings)
                engine.callbacks = self.callbacks
                engine.pause = self.pause
                engine.found = self.found
                engine.listed = self.listed
                for request, (job_id, resumed) in zip(requests, jobs, strict=True):
                    if resumed:
                        recovered = harvest.queue.recover(job_id)
                        released = harvest.store.release_leases(job_id)
                        log.info("resuming job", extra={"job_id": job_id, "messages": recovered, "leases": released})
                    engine.start_job(request, job_id=job_id)
                await self._run(engine, [job_id for job_id, _ in jobs])
            return [self._outcome(job_id, resumed) for job_id, resumed in jobs]

    def _start(self, request: JobRequest, job_id: str, resumed: bool) -> JobStart:
        store = self.harvest.store
        if resumed:
            job = store.get_job(job_id)
            started = job.start_time if job else None
            return JobStart(job_id, request.site, True, store.counts(job_id), request, started=started)
        left = tuple(
            (job, differences(job.request, request))
            for job in store.open_jobs()
            if job.job_id != job_id and job.request.origin == request.origin
        )
        return JobStart(job_id, request.site, False, JobCounts(), request, left=left)

    def _outcome(self, job_id: str, resumed: bool) -> CrawlOutcome:
        # What is left in the queue are duplicates of finished work. Closing the job is the run's last
        # write: until then, running the same command again resumes (and reports) this job.
        harvest = self.harvest
        harvest.queue.purge(job_id)
        harvest.store.close_job(job_id)
        job = harvest.store.get_job(job_id)
        result = None if harvest.ephemeral else harvest.result(job_id)
        if job is None or (result is None and not harvest.ephemeral):
            raise JobStuck(f"job {job_id} ended without a result in {harvest.state_dir}")
        return CrawlOutcome(job=job, result=result, resumed=resumed)

    def _resumable(self, request: JobRequest) -> JobRecord | None:
        """The job a crawl of ``request`` continues: the one it names, or the newest one doing the same
        thing if no run has closed it yet (it is unfinished, or a run was killed before reporting it)."""
        store = self.harvest.store
        if request.job_id:
            job = store.get_job(request.job_id)
            if job is not None and job.request.fingerprint() != request.fingerprint():
                raise Unprocessable(conflict(request.job_id, job.request, request))
            return job
        latest = store.latest_job(request.fingerprint())
        if latest is None or latest[1]:
            return None
        return latest[0]

    async def _run(self, engine: Engine, job_ids: list[str]) -> None:
        dispatcher = Dispatcher(
            self.harvest.queue, job_ids, per_host=self.settings.host_max_in_flight, budget=self.concurrency
        )
        done = asyncio.Event()
        workers = [asyncio.create_task(self._worker(engine, dispatcher, done)) for _ in range(self.concurrency)]
        self._dispatcher = dispatcher
        try:
            await self._supervise(engine, dispatcher, workers)
        finally:
            self._dispatcher = None
            done.set()
            for worker in workers:
                worker.cancel()
            ended = await asyncio.gather(*workers, return_exceptions=True)
        # A worker that died after the job's last write, before the supervisor looked again, died all the
        # same: what killed it (a worker catches what one task raises) is not lost with the job done.
        for outcome in ended:
            if isinstance(outcome, BaseException) and not isinstance(outcome, asyncio.CancelledError):
                raise outcome

    def activity(self) -> Activity | None:
        """What the run is doing now (None: it is not running): its tasks in flight and those waiting in the
        queue for a later time; read again at most every ``ACTIVITY_INTERVAL`` seconds."""
        dispatcher = self._dispatcher
        if dispatcher is None:
            return None
        now = time.time()
        if self._activity is None or now - self._activity[0] >= ACTIVITY_INTERVAL:
            self._activity = (now, activity(self.harvest.queue, dispatcher, dispatcher.job_ids, now=now))
        return self._activity[1]

    async def _supervise(self, engine: Engine, dispatcher: Dispatcher, workers: list[asyncio.Task[None]]) -> None:
        queue, store = self.harvest.queue, self.harvest.store
        last_progress = 0.0
        loop = asyncio.get_running_loop()
        running = list(dispatcher.job_ids)
        while running:
            for worker in workers:
                if worker.done() and not worker.cancelled() and worker.exception() is not None:
                    raise worker.exception()  # type: ignore[misc]
            report = self.on_progress is not None and loop.time() - last_progress >= PROGRESS_INTERVAL
            for job_id in list(running):
                job = store.get_job(job_id)
                assert job is not None
                if self.on_progress and (report or job.status.final):
                    view = engine.view(job_id)
                    if view is not None:
                        self.on_progress(view)
                if job.status.final and (job.result_key or self.harvest.ephemeral):
                    # None of its messages is handed out any more; the run waits for those a worker still
                    # holds (cancelled mid-write, what a write in a thread raised would be lost).
                    dispatcher.forget(job_id)
                    if dispatcher.busy[job_id] == 0:
                        running.remove(job_id)
                    continue
                ended = job.status.final and dispatcher.busy[job_id] == 0  # (its result unwritten: write it now)
                if ended or (not queue.holds(job_id) and dispatcher.busy[job_id] == 0):
                    try:
                        resumed = engine.resume(job_id, force=True)
                    except Busy as exc:  # (the state file stayed locked: looked at again in a moment)
                        log.warning("resuming a job waits: the state file stayed busy", extra={"error": str(exc)})
                        continue
                    job = store.get_job(job_id)
                    assert job is not None
                    nothing_sent = resumed.sitemaps_resent == 0 and resumed.pages_resent == 0
                    if nothing_sent and not (job.status.final and (job.result_key or self.harvest.ephemeral)):
                        raise JobStuck(f"job {job_id} has open records but no work left: {store.recount(job_id)}")
            if report:
                last_progress = loop.time()
            if running:
                await dispatcher.wait_idle(POLL_INTERVAL)

    async def _worker(self, engine: Engine, dispatcher: Dispatcher, done: asyncio.Event) -> None:
        batch_size = max(1, min(PAGE_BATCH, self.concurrency // 2))
        while not done.is_set():
            messages = dispatcher.take_batch(batch_size)
            if not messages:
                await dispatcher.wait(POLL_INTERVAL)
                continue
            try:
                await self._handle(engine, messages, dispatcher)
            finally:
                for message in messages:
                    dispatcher.done(message)

    async def _handle(self, engine: Engine, messages: list[Received], dispatcher: Dispatcher) -> None:
        """Handles a job request, a sitemap task, or a batch of one job's page tasks (as the Lambda handlers
        do an SQS batch): an invalid message is dead-lettered alone, a failing batch handed back whole."""
        queue = self.harvest.queue
        tasks: list[SitemapTask | PageTask | JobRequest] = []
        valid: list[Received] = []
        for message in messages:
            try:
                if message.queue == "sitemaps":
                    tasks.append(SitemapTask.model_validate_json(message.body))
                elif message.queue == "pages":
                    tasks.append(PageTask.model_validate_json(message.body))
                else:
                    tasks.append(JobRequest.model_validate_json(message.body))
            except ValueError as exc:  # (msgspec's ValidationError is one; a lone surrogate is another)
                log.error("invalid message dead-lettered", extra={"queue": message.queue, "error": str(exc)})
                queue.dead_letter(message, f"invalid {message.queue} message: {exc}")
                continue
            valid.append(message)
        if not valid:
            return
        try:
            task = tasks[0]
            if isinstance(task, SitemapTask):
                await engine.process_sitemap(task)
            elif isinstance(task, PageTask):
                pages = [t for t in tasks if isinstance(t, PageTask)]
                await engine.process_pages(pages, requests_over=partial(_requests_over, dispatcher, valid))
            else:
                engine.start_job(task, job_id=task.job_id or new_job_id())
        except Busy as exc:  # the state file stayed locked, even for the step's giving back: later, uncounted
            log.warning(
                "task handed back: the state file stayed busy", extra={"queue": valid[0].queue, "error": str(exc)}
            )
            delay = self.settings.busy_give_back_seconds
            for message in valid:
                with contextlib.suppress(Busy):  # (still locked: it stays in flight, and comes back when that lapses)
                    queue.release(message, delay_seconds=delay, reason=str(exc), counted=False)
            return
        except Exception as exc:  # one failing task must not stop the crawl: it is retried, then dead-lettered
            if (reason := storage_failure(exc)) is not None:  # ... but a full or damaged disk fails them all
                raise StorageFailed(self.harvest.state_dir, reason) from exc
            log.exception("task failed", extra={"queue": valid[0].queue, "bodies": [m.body for m in valid]})
            for message in valid:
                queue.release(message, delay_seconds=min(2**message.receive_count, 60), reason=repr(exc))
            return
        try:
            queue.delete(*valid)
        except Busy as exc:  # (done, not deleted: it comes back when its visibility lapses, and finds it done)
            log.warning("a task's message stays: the state file stayed busy", extra={"error": str(exc)})


def _requests_over(dispatcher: Dispatcher, messages: list[Received], job_id: str) -> None:
    """A job's pages of a worker's batch made their last request: their slots are the dispatcher's again."""
    dispatcher.requests_over([m for m in messages if m.job_id == job_id])
