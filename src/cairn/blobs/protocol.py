"""What a blob store does: keep bytes under their sha256, durably, and give them back."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class BlobInfo:
    """One stored blob, as a listing shows it."""

    sha256: str
    size: int
    modified: datetime  # last written or re-put: the gc grace period counts from here


@runtime_checkable
class BlobStore(Protocol):
    """Content-addressed storage for values too large to keep in the record.

    ``put`` returns only once the bytes are durable, so a record committed after
    it never points at nothing. Putting a blob that is already there refreshes
    its modification time (``cairn gc`` spares recent blobs: a task may be about
    to commit a record that refers to it).
    """

    url: str

    def uri(self, sha256: str) -> str:
        """Where the blob with this hash lives."""
        ...

    def put(self, sha256: str, data: bytes) -> str:
        """Store ``data`` (whose hash is ``sha256``) durably; return its URI."""
        ...

    def get(self, sha256: str) -> bytes:
        """The blob's bytes; raise ``BlobMissing`` if there is none."""
        ...

    def has(self, sha256: str) -> bool:
        """True if the blob is stored."""
        ...

    def blobs(self) -> Iterator[BlobInfo]:
        """Every stored blob, in no particular order."""
        ...

    def delete(self, sha256: str) -> None:
        """Remove the blob, if it is there."""
        ...
