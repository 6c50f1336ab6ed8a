"""Offload: values above the inline limit go to the blob store, and come back.

``BlobCodec`` wraps the codec a task runs with. It encodes as the codec does;
if the text is longer than ``inline_limit`` it writes the UTF-8 bytes to the
blob store under their sha256 (durably, before the record is committed) and
returns a reference (``cairn.blobs.ref``) for the record instead. Decoding a
reference reads the blob, checks its size and sha256, and decodes the text, so
replay never knows the difference. Small values pay one length check.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from typing import Any

from cairn.blobs.protocol import BlobStore
from cairn.blobs.ref import PREFIX, BlobRef, parse_ref
from cairn.codec import Codec
from cairn.errors import BlobCorrupt, BlobMissing, BlobStoreFull
from cairn.redaction import redact_value

log = logging.getLogger("cairn")

DEFAULT_INLINE_LIMIT = 64 * 1024
WARN_ABOVE = 50 * 1024 * 1024  # bytes of an encoded value that deserve a warning
_FRESH = 4  # values just written, kept to hand back without reading the blob


class Offloader:
    """Moves encoded text to the blob store and back, checking the hash."""

    def __init__(self, blobs: BlobStore, inline_limit: int = DEFAULT_INLINE_LIMIT) -> None:
        if inline_limit < 0:
            raise ValueError(f"inline_limit must be >= 0 bytes, not {inline_limit}")
        self.blobs = blobs
        self.inline_limit = inline_limit
        # The first run decodes what it just encoded (so it sees what replay will):
        # keep those few texts rather than read back what we just wrote.
        self._fresh: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def offload(self, text: str, *, remember: bool = True) -> str:
        """Write ``text`` to the blob store; return the reference to record.
        ``remember=False`` when the caller keeps the value itself (a conversation
        keeps its rows): the next ``load`` of the reference then reads the blob."""
        data = text.encode("utf-8")
        digest = hashlib.sha256(data).hexdigest()
        uri = self.blobs.put(digest, data)
        ref = BlobRef(digest, len(data), uri).text()
        if not remember:
            return ref
        with self._lock:
            self._fresh[ref] = text
            while len(self._fresh) > _FRESH:
                self._fresh.popitem(last=False)
        return ref

    def load(self, text: str) -> str:
        """The text a reference stands for, read from the blob store and checked."""
        with self._lock:
            fresh = self._fresh.pop(text, None)
        if fresh is not None:
            return fresh
        ref = parse_ref(text)
        try:
            data = self.blobs.get(ref.sha256)
        except BlobMissing:
            raise BlobMissing(
                f"blob {ref.uri} ({ref.size} bytes, sha256 {ref.sha256}) is missing from "
                f"the blob store at {self.blobs.url}; restore it there (from a backup or "
                "the machine the batch came from) and run again."
            ) from None
        if len(data) != ref.size or hashlib.sha256(data).hexdigest() != ref.sha256:
            raise BlobCorrupt(
                f"blob {ref.uri} is corrupt: the record says {ref.size} bytes with sha256 "
                f"{ref.sha256}, the blob store holds {len(data)} bytes with sha256 "
                f"{hashlib.sha256(data).hexdigest()}. Restore the blob from a backup."
            )
        return data.decode("utf-8")


class BlobCodec:
    """A codec that offloads its large outputs to the blob store."""

    def __init__(self, inner: Codec, offloader: Offloader) -> None:
        self.inner = inner
        self.name = inner.name
        self.offloader = offloader
        self._limit = offloader.inline_limit

    def encode(self, value: Any) -> str:
        text = redact_value(self.inner.encode(value))  # no known secret goes to the blobs
        # len() counts characters; UTF-8 is at least as long, so this never keeps
        # inline a value above the limit in bytes by more than its non-ASCII excess.
        if len(text) > self._limit:
            try:
                return self.offloader.offload(text)
            except BlobStoreFull as full:
                full.inline = text  # the engine may keep it in the store instead
                raise
        return text

    def decode(self, text: str) -> Any:
        if text.startswith(PREFIX):
            text = self.offloader.load(text)
        return self.inner.decode(text)


def warn_if_large(text: str, task_id: str, what: object) -> None:
    """Log a warning for an encoded value of ``WARN_ABOVE`` bytes or more."""
    if text.startswith(PREFIX):
        ref = parse_ref(text)
        size, where = ref.size, f"it went to the blob store ({ref.uri})"
    else:
        size, where = len(text), "it is stored inline"
    if size < WARN_ABOVE:
        return
    log.warning(
        "%s of task %r recorded a value of %.1f MB; %s, and every replay reads it back. "
        "Write large data somewhere of your own and return a reference to it (a path "
        "or URL) instead.",
        str(what).capitalize(),
        task_id,
        size / 1e6,
        where,
    )
