"""A job's listed batches read back as the state table keeps them (listed_batch.py): a few by key (a claim's,
a URL's), or every one of the job a batch at a time, each page's record folded from its listed record, its
state and its batch's outcomes."""

from __future__ import annotations

from collections.abc import Iterator

from harvester.adapters.aws.item_body import body_text
from harvester.adapters.aws.job_items import JobItems
from harvester.adapters.aws.listed_batch import StoredBatch, batch_sk, state_sk
from harvester.adapters.aws.state_table import batch_get
from harvester.model.records import SitemapURL, UrlStatus


def read_batches(jobs: JobItems, job_id: str, bids: set[str], *, outcomes: bool) -> dict[str, StoredBatch]:
    """The batches ``bids`` (records and states; with ``outcomes``, their outcomes too); a batch never
    committed is not among them."""
    keys = [jobs.key(job_id, sk) for bid in bids for sk in (batch_sk(bid), state_sk(bid))]
    items = {item["sk"]["S"]: item for item in batch_get(jobs.client, jobs.table, keys)}
    batches: dict[str, StoredBatch] = {}
    for bid in bids:
        records, states = items.get(batch_sk(bid)), items.get(state_sk(bid))
        if records is None or states is None:
            continue  # (never committed)
        batch = StoredBatch(bid, body_text(records).split("\n"))
        batch.read_states(states)
        batches[bid] = batch
    if outcomes:
        for batch in batches.values():
            read_outcomes(jobs, job_id, batch)
    return batches


def read_outcomes(jobs: JobItems, job_id: str, batch: StoredBatch) -> None:
    """The batch's outcome items that its states (read) name, folded."""
    for item in jobs.partition(job_id, f"BATCH#{batch.bid}#O#"):
        batch.add_outcomes(body_text(item), item["sk"]["S"])
    batch.fold_outcomes()


def folded(jobs: JobItems, job_id: str) -> Iterator[tuple[StoredBatch, int]]:
    """Every page of the job, a batch at a time (its items come together: the query's order)."""
    for batch in folded_batches(jobs, job_id):
        yield from ((batch, i) for i in range(len(batch.records)))


def folded_batches(jobs: JobItems, job_id: str, *, after: str | None = None) -> Iterator[StoredBatch]:
    """The job's batches with their states and outcomes, in the order of their ids; after the batch ``after``
    when given (its items sort before ``BATCH#<after>#~``)."""
    batch: StoredBatch | None = None
    start = {"ExclusiveStartKey": jobs.key(job_id, f"{batch_sk(after)}#~")} if after is not None else {}
    for item in jobs.partition(job_id, "BATCH#", **start):
        bid, _, rest = item["sk"]["S"].removeprefix("BATCH#").partition("#")
        if not rest:
            batch = StoredBatch(bid, body_text(item).split("\n"))
        elif batch is None or batch.bid != bid:
            continue  # (outcomes or states of a batch whose records are not there: never committed)
        elif rest.startswith("O#"):
            batch.add_outcomes(body_text(item), item["sk"]["S"])
        elif rest == "S":
            batch.read_states(item)
            batch.fold_outcomes()
            if not batch.settled_by() <= batch.read:
                # A settlement committed between the query's reading of the outcomes and of the states (a
                # query is no snapshot of a transaction): its outcomes are read now.
                read_outcomes(jobs, job_id, batch)
            yield batch
            batch = None


def job_pages(jobs: JobItems, job_id: str, *, status: UrlStatus | None = None) -> Iterator[SitemapURL]:
    for batch, i in folded(jobs, job_id):
        if status is None or batch.status(i) == status.value:
            yield batch.record(i, job_id)


def page_bodies(jobs: JobItems, job_id: str) -> Iterator[str]:
    for batch, i in folded(jobs, job_id):
        yield batch.body(i, job_id)
