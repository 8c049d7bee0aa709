"""A job's WARC files in S3: one object per page batch (``warc/<job>/<UTC time>-<id>.warc.gz``), each a
whole WARC file (its warcinfo record, then the batch's captures), with its CDXJ index beside it
(``….warc.gz.cdxj``). An object is written once and never changed, so a batch costs two PUTs whatever
its size; a record is read back with a ranged GET of its offset and length."""

from __future__ import annotations

import logging
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, BinaryIO

from msgspec.structs import replace

from harvester.adapters.aws.s3 import TRANSFER, missing_as_file_not_found
from harvester.archive.warc import Archived, cdxj_line, warcinfo
from harvester.limits import SPOOL_IN_MEMORY

SUFFIX = ".warc.gz"

log = logging.getLogger(__name__)

#: Keys a page of a listing holds (S3's most): a sweep may pause after each.
LISTED = 1000


class S3WarcStore:
    writes_inline = False  # (PUTs: made in a thread)

    def __init__(self, client: Any, bucket: str) -> None:
        self.client = client
        self.bucket = bucket

    def append(self, job_id: str, chunk: BinaryIO, captures: Sequence[Archived]) -> list[Archived]:
        stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
        name = f"{stamp}-{uuid.uuid4().hex[:12]}{SUFFIX}"  # (the job is its folder: a record names the key)
        key = f"warc/{job_id}/{name}"
        info = warcinfo(name)
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY) as body:
            body.write(info)
            shutil.copyfileobj(chunk, body, 1024 * 1024)
            body.seek(0)
            self.client.upload_fileobj(
                body, self.bucket, key, ExtraArgs={"ContentType": "application/warc"}, Config=TRANSFER
            )
        placed = [replace(c, filename=key, offset=c.offset + len(info)) for c in captures]
        index = "".join(cdxj_line(p) + "\n" for p in placed).encode()
        self.client.put_object(Bucket=self.bucket, Key=key + ".cdxj", Body=index, ContentType="text/plain")
        return placed

    def read(self, filename: str, offset: int, length: int) -> bytes:
        byte_range = f"bytes={offset}-{offset + length - 1}"
        with missing_as_file_not_found(self.bucket, filename):
            return self.client.get_object(Bucket=self.bucket, Key=filename, Range=byte_range)["Body"].read()

    def files(self, job_id: str) -> Iterator[str]:
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=f"warc/{job_id}/"):
            for obj in sorted(page.get("Contents", []), key=lambda o: o["Key"]):
                if obj["Key"].endswith(SUFFIX):
                    yield obj["Key"]

    def sweep(self, job_id: str, *, after: str | None = None, pause: Callable[[], bool] | None = None) -> str | None:
        """Deletes the job's WARC objects without their CDXJ index (a writer died between the two PUTs; no URL
        record names an object before its index is stored), a page of the listing at a time. An object and its
        index are listed one after the other (``X.warc.gz``, ``X.warc.gz.cdxj``), so an object is judged by
        the key after it, which may be on the next page: the position returned is the last key judged."""
        listing: dict[str, Any] = {"Bucket": self.bucket, "Prefix": f"warc/{job_id}/"}
        if after:
            listing["StartAfter"] = after
        judged, pending = after, None
        pages = self.client.get_paginator("list_objects_v2").paginate(**listing, PaginationConfig={"PageSize": LISTED})
        for page in pages:
            unindexed = []
            for key in (o["Key"] for o in page.get("Contents", [])):
                if pending is not None and key != pending + ".cdxj":
                    unindexed.append(pending)
                if pending is not None:
                    judged = pending
                pending = key if key.endswith(SUFFIX) else None
                if pending is None:
                    judged = key
            if unindexed:
                log.warning("WARC objects without their index deleted", extra={"job_id": job_id, "keys": unindexed})
                self.client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in unindexed], "Quiet": True}
                )
            if page.get("IsTruncated") and pause is not None and pause():
                return judged or ""
        if pending is not None:
            log.warning("WARC object without its index deleted", extra={"job_id": job_id, "key": pending})
            self.client.delete_object(Bucket=self.bucket, Key=pending)
        return None

    def close(self) -> None:
        pass
