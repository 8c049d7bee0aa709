"""Raw documents and job results in S3. Uploads stream from the spooled file the engine hands over."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO
from urllib.parse import quote

from botocore.exceptions import ClientError

from harvester.limits import SPOOL_IN_MEMORY

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
            self.client.upload_fileobj(body, self.bucket, key, ExtraArgs=extra)
        return self.location(key)

    @contextmanager
    def writer(self, key: str, *, content_type: str | None = None) -> Iterator[BinaryIO]:
        """A spooled file, uploaded at the end."""
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY) as out:
            yield out  # type: ignore[misc]
            out.seek(0)
            self.put(key, out, content_type=content_type)  # type: ignore[arg-type]

    def get(self, key: str) -> bytes:
        with missing_as_file_not_found(self.bucket, key):
            return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()

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

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=key)  # (S3 answers a missing key as deleted)

    def location(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"
