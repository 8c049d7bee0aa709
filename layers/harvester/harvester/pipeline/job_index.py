"""A job's columnar URL index as its end writes it: a folder (``index_folder``) of Parquet files, one for each
step of the end that read records (``index_key``), each sorted by SURT key.

Each step builds the file of the records it read, with the index rows of the parts it adopted
(``build_step_index``), before it stores its piece; the last step builds its own and copies the pieces'
files into the folder (``store_index``; S3 copies them itself). So a step's index work is its own records'
whatever the job's size, and no row is read twice. A reader takes the folder as one table (DuckDB's
``read_parquet('.../index/*.parquet')``, an Athena or Spark table's location), as Common Crawl's columnar
index is a folder of files.

The records are the job's output and the index only their view (it can be made again from them: ``harvest
export --format parquet``), so a failure to build it is logged and does not hold back the result, which a
retry would not get past either (a /tmp too small for a huge step).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from harvester.archive.index import IndexLines, MadeRows, build_index
from harvester.archive.results import PARQUET_TYPE, index_folder, index_key
from harvester.patience import Busy
from harvester.pipeline.context import StepContext
from harvester.pipeline.part_documents import PartRows, keep_parts_index, parts_index_key

log = logging.getLogger(__name__)


def build_step_index(
    ctx: StepContext,
    job_id: str,
    copy: IndexLines,
    made_rows: Sequence[PartRows] = (),
    *,
    keep: Path | None = None,
    site: str | None = None,
    fetch: Callable[[str], Path] | None = None,
) -> Path | None:
    """Builds the index file of a step's records, from the copy of their lines and the index rows of the
    parts the step adopted (``made_rows``, each read through ``fetch`` when given: the part maker's copy),
    beside the copy (``index.parquet`` in its folder); None when it could not be made (logged). ``keep``:
    where to leave the records' own rows, unsorted (``build_index``).

    ``site``, for an end in one step: an index made of parts only is kept for the site too
    (``parts_index_key``), and the next job adopting the same parts takes its rows in their order, sorted
    already."""
    try:
        folder = Path(copy.folder)
        built = folder / "index.parquet"
        made = []
        for n, rows in enumerate(made_rows):
            if fetch is not None:
                path = fetch(rows.key)
            else:
                path = folder / f"rows-{n}.parquet"
                path.write_bytes(ctx.documents.get(rows.key))
            made.append(MadeRows(path, rows.change, rows.excluded))
        cache = presorted = None
        if site is not None and made_rows and not copy.written and not any(r.excluded for r in made_rows):
            cache = parts_index_key(site, [rows.key for rows in made_rows])
            try:
                (folder / "sorted.parquet").write_bytes(ctx.documents.get(cache))
                presorted = folder / "sorted.parquet"
            except FileNotFoundError:
                pass
        records = copy.finish() if copy.written or not made else None  # (None: every row is a part's)
        count = build_index(records, built, job_id=job_id, rows=made, keep=keep, sorted_rows=presorted)
        if cache is not None and presorted is None:
            assert site is not None
            keep_parts_index(ctx.documents, site, cache, built)
    except Busy:  # (our store, not the index: the step is made again, index and all)
        raise
    except Exception:
        log.exception("an index file of the job could not be built (its records are written)", extra={"job_id": job_id})
        return None
    log.info("job %s: URL index built (%d rows)", job_id, count, extra={"job_id": job_id, "rows": count})
    return built


def store_index(ctx: StepContext, job_id: str, files: Sequence[Path | str | None]) -> str | None:
    """Stores the job's index: its ``files`` in order, each the document of a piece an earlier step stored
    (copied), or the last step's own file (a path), or None for one that could not be built; and nothing
    else in the folder (files an earlier attempt of the end left there are deleted). Its location, or None
    when a file is missing (no index then: one without a step's rows would look whole). A piece's document
    that is gone raises ``FileNotFoundError``."""
    documents, folder = ctx.documents, index_folder(job_id)
    written: set[str] = set()

    def clear() -> None:
        documents.delete(*[key for key in documents.keys(folder) if key not in written])

    try:
        if files and None not in files:
            for n, file in enumerate(files):
                if isinstance(file, Path):
                    with file.open("rb") as body:
                        documents.put(index_key(job_id, n), body, content_type=PARQUET_TYPE)
                else:
                    assert file is not None
                    documents.join(index_key(job_id, n), [file], content_type=PARQUET_TYPE)
                written.add(index_key(job_id, n))
        clear()
    except (Busy, FileNotFoundError):
        raise
    except Exception:
        log.exception("the job's URL index could not be stored (its records are)", extra={"job_id": job_id})
        written.clear()
        try:  # (no part of it left to look whole)
            clear()
        except Exception:
            log.exception("a part of the job's URL index could not be deleted", extra={"job_id": job_id})
        return None
    if not written:
        log.error("the job's URL index is not stored: a step's file could not be built", extra={"job_id": job_id})
        return None
    return documents.location(folder)
