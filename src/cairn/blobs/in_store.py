"""Finding the blobs that a store's records refer to (backup, export, gc)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from cairn.blobs.ref import PREFIX, is_ref, parse_ref
from cairn.store.admin import AdminStore

PREFIX_BYTES = PREFIX.encode()
# A reference inside a JSON text (a handoff archive named in a message's meta:
# cairn.agent.handoff), its quotes escaped: !blob:{\"sha256\":\"…\", ...
_EMBEDDED = re.compile(r'!blob:\{\\"sha256\\":\\"([0-9a-f]{64})\\"')


def hashes_in(values: Iterable[object]) -> set[str]:
    """The sha256 of every blob reference among ``values`` (text, or the bytes of a
    message's ``content`` column, which holds an offloaded message's reference as is)."""
    found: set[str] = set()
    for value in values:
        if isinstance(value, bytes | bytearray | memoryview):
            raw = bytes(value)
            value = raw.decode() if raw.startswith(PREFIX_BYTES) else None
        if isinstance(value, str) and is_ref(value):
            found.add(parse_ref(value).sha256)
        elif isinstance(value, str) and PREFIX in value:
            found.update(_EMBEDDED.findall(value))
    return found


def referenced_blobs(store: AdminStore) -> set[str]:
    """Every blob any record of ``store`` refers to."""
    return hashes_in(store.blob_refs())
