"""The text recorded in place of a value that went to the blob store.

A reference is ``!blob:`` followed by compact JSON with the blob's ``sha256``,
``size`` (bytes of the encoded value) and ``uri`` (where it was written)::

    !blob:{"sha256":"9f86d0…","size":20971532,"uri":"file:///data/cairn.db-blobs/9f/9f86d0…"}

It can never be taken for a codec's output: compact JSON (``JsonCodec``) starts
with one of ``{["-0123456789tfn``, and ``PickleCodec`` writes base64, which has
no ``!``. A codec of your own must not write text that starts with ``!blob:``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from cairn.errors import BlobCorrupt

PREFIX = "!blob:"


@dataclass(frozen=True, slots=True)
class BlobRef:
    """Where an offloaded value lives, and how to know it is the right one."""

    sha256: str
    size: int
    uri: str

    def text(self) -> str:
        """The reference as it is recorded."""
        body = {"sha256": self.sha256, "size": self.size, "uri": self.uri}
        return PREFIX + json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def is_ref(text: str | None) -> bool:
    """True if ``text`` is a recorded blob reference."""
    return text is not None and text.startswith(PREFIX)


def parse_ref(text: str) -> BlobRef:
    """The reference that ``text`` records (``is_ref(text)`` must hold)."""
    try:
        body = json.loads(text[len(PREFIX) :])
        ref = BlobRef(str(body["sha256"]), int(body["size"]), str(body["uri"]))
    except (ValueError, KeyError, TypeError) as err:
        raise BlobCorrupt(f"the record holds a damaged blob reference: {text[:200]!r}") from err
    if len(ref.sha256) != 64 or not all(c in "0123456789abcdef" for c in ref.sha256):
        raise BlobCorrupt(f"the record holds a blob reference with a bad sha256: {text[:200]!r}")
    return ref
