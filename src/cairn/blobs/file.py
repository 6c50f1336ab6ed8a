"""A blob store in a local directory: ``root/ab/ab12…`` (the sha256 in hex).

Writes go to a temporary file in the same directory, are fsynced, renamed into
place, and the directory is fsynced too: after ``put`` returns, the blob
survives a crash or a power cut, so the record that refers to it (committed
after) never points at nothing.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from cairn.blobs.protocol import BlobInfo
from cairn.errors import BlobMissing, BlobStoreFull

_TMP = ".tmp-"
# No space left, or the user's quota used up: space an operator must free.
_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FileBlobStore:
    """Blobs as files under one directory (created on the first write)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).absolute()
        self.url = self.root.as_uri()

    def _path(self, sha256: str) -> Path:
        return self.root / sha256[:2] / sha256

    def uri(self, sha256: str) -> str:
        return self._path(sha256).as_uri()

    def put(self, sha256: str, data: bytes) -> str:
        try:
            return self._put(sha256, data)
        except OSError as exc:
            if exc.errno not in _FULL:
                raise
            raise BlobStoreFull(
                path=str(self.root), reason=exc.strerror or str(exc), size=len(data)
            ) from exc

    def _put(self, sha256: str, data: bytes) -> str:
        path = self._path(sha256)
        try:
            if path.stat().st_size == len(data):
                os.utime(path)  # a fresh reference: restart gc's grace period
                return path.as_uri()
        except FileNotFoundError:
            pass
        self._make_dir(path.parent)
        tmp = path.parent / f"{_TMP}{sha256[:16]}-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            with tmp.open("wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            tmp.replace(path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(path.parent)
        return path.as_uri()

    def _make_dir(self, directory: Path) -> None:
        if directory.is_dir():
            return
        created_root = not self.root.is_dir()
        directory.mkdir(parents=True, exist_ok=True)
        _fsync_dir(self.root)
        if created_root:
            _fsync_dir(self.root.parent)

    def get(self, sha256: str) -> bytes:
        try:
            return self._path(sha256).read_bytes()
        except FileNotFoundError:
            raise BlobMissing(f"no blob {sha256} at {self.uri(sha256)}") from None

    def has(self, sha256: str) -> bool:
        return self._path(sha256).is_file()

    def blobs(self) -> Iterator[BlobInfo]:
        if not self.root.is_dir():
            return
        for sub in sorted(self.root.iterdir()):
            if not sub.is_dir() or len(sub.name) != 2:
                continue
            for path in sub.iterdir():
                if path.name.startswith(_TMP) or len(path.name) != 64:
                    continue
                with contextlib.suppress(FileNotFoundError):
                    stat = path.stat()
                    yield BlobInfo(
                        path.name, stat.st_size, datetime.fromtimestamp(stat.st_mtime, UTC)
                    )

    def delete(self, sha256: str) -> None:
        self._path(sha256).unlink(missing_ok=True)
