"""Large conversation messages in the blob store, and reading them back.

A message whose JSON text is longer than the app's ``inline_limit`` (64 KiB by
default) is written to the blob store before its row commits, and the row holds
a blob reference instead (``cairn.blobs.ref``: URI, size and sha256). The SQL
stores keep the reference as it is (``cairn.store.sql.pack_content``), so a
``MessageRecord`` read back carries either the message's JSON text or the
reference text. Every reader passes the records through a ``MessageReader``: it
hands inline JSON back untouched (one prefix check; message JSON starts with
``{``) and replaces a reference by the blob's text, checked against its size and
sha256. A missing or corrupt blob raises ``BlobMissing`` / ``BlobCorrupt``
naming the task, the conversation, the message index and the blob's URI.
"""

from __future__ import annotations

import json

from cairn.blobs import BlobStore, Offloader, default_blobs_url, open_blobs
from cairn.blobs.ref import PREFIX, parse_ref
from cairn.errors import BlobError, BlobMissing
from cairn.store.records import ActiveRow, MessageRecord


def offload_content(content: str, offloader: Offloader) -> str:
    """The text to store for a message whose JSON ``content`` is above the inline
    limit: its blob reference, once the blob is durable. The conversation keeps
    its rows in memory, so the offloader need not remember the text."""
    return offloader.offload(content, remember=False)


class MessageReader:
    """Resolves the blob references among stored message records.

    ``blobs`` is the blob store (or an app's ``Offloader``). Without one, a
    reader given ``store_url`` opens the default for that store when it first
    meets a reference (``$CAIRN_BLOBS``, else the directory beside a SQLite
    file); a reference with no blob store at all is an error that says so.
    """

    def __init__(
        self, blobs: Offloader | BlobStore | None = None, *, store_url: str | None = None
    ) -> None:
        self._blobs = blobs
        self._store_url = store_url
        self._offloader = blobs if isinstance(blobs, Offloader) else None

    def read(self, records: list[MessageRecord]) -> list[MessageRecord]:
        """``records`` with every offloaded message's content read back."""
        return [r if not r.content.startswith(PREFIX) else self.resolve(r) for r in records]

    def read_rows(self, rows: list[ActiveRow], task_id: str, conv: str) -> list[ActiveRow]:
        """``rows`` of conversation ``conv`` of ``task_id`` with every offloaded
        message read back and parsed."""
        return [r if type(r[1]) is dict else self.resolve_row(r, task_id, conv) for r in rows]

    def resolve_row(self, row: ActiveRow, task_id: str, conv: str) -> ActiveRow:
        """``row`` with its message read back from the blob store, parsed."""
        idx, reference, *rest = row
        where = f"task {task_id!r}, conversation {conv!r}, message {idx}"
        try:
            text = self._offloader_or_fail(str(reference)).load(str(reference))
        except BlobError as exc:
            raise type(exc)(f"{where}: {exc}") from exc
        return (idx, json.loads(text), *rest)

    def resolve(self, record: MessageRecord) -> MessageRecord:
        """``record`` with its content read back from the blob store if offloaded."""
        if not record.content.startswith(PREFIX):
            return record
        where = f"task {record.task_id!r}, conversation {record.conv!r}, message {record.idx}"
        try:
            text = self._offloader_or_fail(record.content).load(record.content)
        except BlobError as exc:
            raise type(exc)(f"{where}: {exc}") from exc
        return record._replace(content=text)

    def load(self, reference: str) -> str:
        """The text a blob reference stands for, read back and checked."""
        return self._offloader_or_fail(reference).load(reference)

    def _offloader_or_fail(self, reference: str) -> Offloader:
        if self._offloader is None:
            blobs = self._blobs
            if blobs is None and self._store_url is not None:
                url = default_blobs_url(self._store_url)
                blobs = None if url is None else open_blobs(url)
            if blobs is None:
                uri = parse_ref(reference).uri
                raise BlobMissing(
                    f"the message is in the blob store ({uri}) but no blob store is "
                    "configured here; pass the blob store (blobs=, or --blobs URL on the "
                    "command line, or set CAIRN_BLOBS)"
                )
            assert not isinstance(blobs, Offloader)
            self._offloader = Offloader(blobs)
        return self._offloader
