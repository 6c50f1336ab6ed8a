"""Appending and reading the demo's line files (the step log and the ledger)."""

from __future__ import annotations

import os
from pathlib import Path


def append_line(path: Path, line: str) -> None:
    """Append one line with a single ``write()`` on an O_APPEND descriptor.

    Lines from concurrent threads never interleave, and a SIGKILL cannot leave
    half a line behind. No fsync: the demo only kills processes, and the kernel
    keeps what was written.
    """
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def count_lines(path: Path) -> int:
    """Complete lines in ``path`` so far (0 if it does not exist yet)."""
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def read_lines(path: Path) -> list[str]:
    """The non-empty lines of ``path`` (none if it does not exist)."""
    if not path.exists():
        return []
    return [line for line in path.read_text().splitlines() if line.strip()]
