"""A blob store in an S3 bucket (AWS, Cloudflare R2, MinIO, any S3-compatible
service), through boto3: ``pip install 'cairn-durable[s3]'``.

URL: ``s3://bucket/prefix?endpoint_url=http://127.0.0.1:9000&region=auto``.
Without ``endpoint_url`` it is read from ``$CAIRN_S3_ENDPOINT_URL``, then left to
boto3 (``$AWS_ENDPOINT_URL``, AWS itself). Credentials come from boto3's usual
chain (environment, ``~/.aws``, instance roles); never put them in the URL.
A PUT that returns has been stored durably by the service.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

from cairn.blobs.protocol import BlobInfo
from cairn.errors import BlobError, BlobMissing, ConfigurationError

_MISSING_CODES = frozenset({"404", "NoSuchKey", "NotFound"})


def _client(endpoint_url: str | None, region: str | None) -> Any:
    try:
        import boto3
    except ImportError as err:
        raise ConfigurationError(
            "an s3:// blob store needs boto3: pip install 'cairn-durable[s3]'"
        ) from err
    return boto3.client("s3", endpoint_url=endpoint_url, region_name=region)


class S3BlobStore:
    """Blobs as objects ``prefix/ab/ab12…`` in one bucket."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        client: Any = None,
    ) -> None:
        if not bucket:
            raise ConfigurationError("an s3 blob store needs a bucket: s3://bucket/prefix")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self._s3 = client if client is not None else _client(endpoint_url, region)

    @classmethod
    def from_url(cls, url: str) -> S3BlobStore:
        parts = urlsplit(url)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        unknown = set(query) - {"endpoint_url", "region"}
        if unknown:
            raise ConfigurationError(
                f"unknown option(s) {sorted(unknown)} in blob store URL {url!r}; "
                "s3:// URLs take endpoint_url= and region="
            )
        endpoint = query.get("endpoint_url") or os.environ.get("CAIRN_S3_ENDPOINT_URL")
        return cls(parts.netloc, parts.path, endpoint_url=endpoint, region=query.get("region"))

    def _key(self, sha256: str) -> str:
        name = f"{sha256[:2]}/{sha256}"
        return f"{self.prefix}/{name}" if self.prefix else name

    def uri(self, sha256: str) -> str:
        return f"s3://{self.bucket}/{self._key(sha256)}"

    def put(self, sha256: str, data: bytes) -> str:
        # Always PUT, even if the object exists: it refreshes LastModified, which
        # gc's grace period counts from.
        self._call("put_object", Bucket=self.bucket, Key=self._key(sha256), Body=data)
        return self.uri(sha256)

    def get(self, sha256: str) -> bytes:
        try:
            reply = self._call("get_object", Bucket=self.bucket, Key=self._key(sha256))
        except BlobMissing:
            raise BlobMissing(f"no blob {sha256} at {self.uri(sha256)}") from None
        body: bytes = reply["Body"].read()
        return body

    def has(self, sha256: str) -> bool:
        try:
            self._call("head_object", Bucket=self.bucket, Key=self._key(sha256))
        except BlobMissing:
            return False
        return True

    def blobs(self) -> Iterator[BlobInfo]:
        pages = self._s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=f"{self.prefix}/" if self.prefix else ""
        )
        for page in pages:
            for item in page.get("Contents", []):
                name = str(item["Key"]).rsplit("/", 1)[-1]
                if len(name) == 64:
                    yield BlobInfo(name, int(item["Size"]), item["LastModified"])

    def delete(self, sha256: str) -> None:
        self._call("delete_object", Bucket=self.bucket, Key=self._key(sha256))

    def _call(self, method: str, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self._s3, method)(**kwargs)
        except ClientError as err:
            code = str(err.response.get("Error", {}).get("Code", ""))
            if code in _MISSING_CODES:
                raise BlobMissing(str(err)) from err
            raise BlobError(f"the S3 blob store {self.url} refused {method}: {err}") from err
        except BotoCoreError as err:
            raise BlobError(f"the S3 blob store {self.url} could not be reached: {err}") from err
