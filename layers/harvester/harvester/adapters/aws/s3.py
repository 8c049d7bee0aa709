"""Raw documents and job results in S3. Uploads stream from the spooled file the engine hands over."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, BinaryIO
from urllib.parse import quote

from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

from harvester.limits import SPOOL_IN_MEMORY

#: S3's least size of a multipart upload's part, but for the last one.
MIN_PART = 5 * 1024 * 1024
#: S3's most for one part copied (UploadPartCopy), and its most parts in an upload.
MAX_COPY = 5 * 1024**3
MAX_PARTS = 10_000
#: Keys a DeleteObjects request takes.
_DELETED_AT_ONCE = 1000
#: A large document (a job's records, a step's index file) is uploaded 8 MiB a part, at most two parts in memory
#: (s3transfer reads a file object's parts into memory, ten by default: 80 MiB), so two parts in flight at once:
#: what an upload holds stays about 16 MiB.
TRANSFER = TransferConfig(max_concurrency=4)
TRANSFER.max_in_memory_upload_chunks = 2
#: The error codes S3 answers a missing object with (GetObject: NoSuchKey; HeadObject: 404, no body).
_MISSING = ("NoSuchKey", "404", "NotFound")


@contextmanager
def missing_as_file_not_found(bucket: str, key: str) -> Iterator[None]:
    """S3's answer for a missing object as the ports say it (FileNotFoundError, as a folder's store raises),
    so that a caller tells "not there" from a failure to reach S3 the same way on both backends."""
    try:
        yield
    except ClientError as exc:
        if exc.response["Error"]["Code"] in _MISSING:
            raise FileNotFoundError(f"s3://{bucket}/{key}") from None
        raise


class S3DocumentStore:
    writes_inline = False  # (a PUT is a network round trip: made in a thread)

    def __init__(self, client: Any, bucket: str) -> None:
        self.client = client
        self.bucket = bucket

    def put(
        self,
        key: str,
        body: BinaryIO | bytes,
        *,
        content_type: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> str:
        extra: dict[str, Any] = {}
        if content_type:
            extra["ContentType"] = content_type
        if metadata:
            # S3 user metadata must be ASCII; URLs need not be.
            extra["Metadata"] = {k: quote(v, safe=":/?&=#%@+,;~") for k, v in metadata.items()}
        if isinstance(body, bytes):
            self.client.put_object(Bucket=self.bucket, Key=key, Body=body, **extra)
        else:
            self.client.upload_fileobj(body, self.bucket, key, ExtraArgs=extra, Config=TRANSFER)
        return self.location(key)

    @contextmanager
    def writer(self, key: str, *, content_type: str | None = None) -> Iterator[BinaryIO]:
        """A spooled file, uploaded at the end."""
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY) as out:
            yield out  # type: ignore[misc]
            out.seek(0)
            self.put(key, out, content_type=content_type)  # type: ignore[arg-type]

    def join(self, key: str, parts: Sequence[str], *, content_type: str | None = None) -> str:
        """One multipart upload: a run of a part of ``MIN_PART`` or more is copied by S3 itself
        (UploadPartCopy of a range), smaller runs are read and gathered into parts of ``MIN_PART`` (S3's least
        but for the last), the head of a large part filling what was gathered before it: at most one part's
        worth is held at once, whatever the sizes. Parts that make less than ``MIN_PART`` in all are read
        and stored with one PUT. Every read and copy is of the version of a part its size was read from (its
        ETag): a part written again meanwhile fails the join rather than mixing two versions."""
        heads = [self._head(part) for part in parts]  # (a missing part raises before anything is written)
        total = sum(size for size, _ in heads)
        if total // MIN_PART + 1 > MAX_PARTS:
            raise ValueError(f"{key}: {len(parts)} documents of {total:,} bytes make too many parts to join")
        extra: dict[str, Any] = {"ContentType": content_type} if content_type else {}
        if total < MIN_PART:
            body = b"".join(
                self._range(part, 0, size, etag) for part, (size, etag) in zip(parts, heads, strict=True) if size
            )
            self.client.put_object(Bucket=self.bucket, Key=key, Body=body, **extra)
            return self.location(key)
        upload = self.client.create_multipart_upload(Bucket=self.bucket, Key=key, **extra)["UploadId"]
        done: list[dict[str, Any]] = []
        try:
            gathered = bytearray()
            for part, (size, etag) in zip(parts, heads, strict=True):
                at = 0
                while at < size:
                    if not gathered and size - at >= MIN_PART:  # (a tail under MIN_PART is gathered)
                        end = size if size - at <= MAX_COPY else at + MAX_COPY
                        done.append(self._copy(key, upload, len(done) + 1, part, etag, at, end))
                        at = end
                        continue
                    need = MIN_PART - len(gathered)
                    take = need if size - at - need >= MIN_PART else min(need, size - at)
                    gathered += self._range(part, at, at + take, etag)
                    at += take
                    if len(gathered) >= MIN_PART:
                        done.append(self._send(key, upload, len(done) + 1, bytes(gathered)))
                        gathered.clear()
            if gathered:
                done.append(self._send(key, upload, len(done) + 1, bytes(gathered)))
            self.client.complete_multipart_upload(
                Bucket=self.bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": done}
            )
        except BaseException:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload)
            raise
        return self.location(key)

    def _send(self, key: str, upload: str, number: int, data: bytes) -> dict[str, Any]:
        answer = self.client.upload_part(Bucket=self.bucket, Key=key, UploadId=upload, PartNumber=number, Body=data)
        return {"PartNumber": number, "ETag": answer["ETag"]}

    def _copy(self, key: str, upload: str, number: int, source: str, etag: str, start: int, end: int) -> dict[str, Any]:
        answer = self.client.upload_part_copy(
            Bucket=self.bucket,
            Key=key,
            UploadId=upload,
            PartNumber=number,
            CopySource={"Bucket": self.bucket, "Key": source},
            CopySourceIfMatch=etag,
            CopySourceRange=f"bytes={start}-{end - 1}",
        )
        return {"PartNumber": number, "ETag": answer["CopyPartResult"]["ETag"]}

    def _head(self, key: str) -> tuple[int, str]:
        with missing_as_file_not_found(self.bucket, key):
            head = self.client.head_object(Bucket=self.bucket, Key=key)
        return int(head["ContentLength"]), str(head["ETag"])

    def _range(self, key: str, start: int, end: int, etag: str) -> bytes:
        with missing_as_file_not_found(self.bucket, key):
            answer = self.client.get_object(Bucket=self.bucket, Key=key, Range=f"bytes={start}-{end - 1}", IfMatch=etag)
        return bytes(answer["Body"].read())

    def get(self, key: str) -> bytes:
        with missing_as_file_not_found(self.bucket, key):
            return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        if length <= 0:
            return b""
        with missing_as_file_not_found(self.bucket, key):
            answer = self.client.get_object(Bucket=self.bucket, Key=key, Range=f"bytes={offset}-{offset + length - 1}")
        return bytes(answer["Body"].read())

    @contextmanager
    def reader(self, key: str) -> Iterator[BinaryIO]:
        """The object's body as it streams in."""
        with missing_as_file_not_found(self.bucket, key):
            body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"]
        try:
            yield body
        finally:
            body.close()

    def exists(self, key: str) -> bool:
        try:
            with missing_as_file_not_found(self.bucket, key):
                self.client.head_object(Bucket=self.bucket, Key=key)
        except FileNotFoundError:
            return False
        return True

    def keys(self, prefix: str) -> Iterator[str]:
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                yield obj["Key"]

    def delete(self, *keys: str) -> None:
        # (S3 answers a missing key as deleted)
        if len(keys) == 1:
            self.client.delete_object(Bucket=self.bucket, Key=keys[0])
            return
        for at in range(0, len(keys), _DELETED_AT_ONCE):
            objects = [{"Key": key} for key in keys[at : at + _DELETED_AT_ONCE]]
            answer = self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": objects, "Quiet": True})
            if answer.get("Errors"):
                failed = answer["Errors"][0]
                raise ClientError(
                    {
                        "Error": {
                            "Code": failed.get("Code", ""),
                            "Message": f"{failed.get('Key')}: {failed.get('Message')}",
                        }
                    },
                    "DeleteObjects",
                )

    def location(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"
