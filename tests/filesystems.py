"""Real read-only and full file systems for tests.

The tests (and CI) run as root, and permission bits do not stop root, so these
use what does: the immutable flag (``chattr +i``: no process may write the file,
or create files in the directory), a read-only bind mount (``EROFS`` for every
write under it), and a small tmpfs mount that fills up (``ENOSPC``). Each undoes
itself on exit, even when the test fails.

Where the machine does not allow one (not root, a file system without the flag,
no mount permission), the test is skipped with the reason; under ``CI=true`` it
fails instead, as the PostgreSQL fixtures do, since CI must run these.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"this test must run in CI, but {reason}")
    pytest.skip(reason)


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, check=False)


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        unavailable(f"{name} is not installed")
    assert found is not None
    return found


@contextmanager
def immutable(*paths: Path) -> Iterator[None]:
    """``paths`` immutable (``chattr +i``) inside the block: a file cannot be
    written, a directory cannot gain or lose entries, not even by root."""
    chattr = _tool("chattr")
    done: list[Path] = []
    try:
        for path in paths:
            result = _run(chattr, "+i", str(path))
            if result.returncode != 0:
                unavailable(f"chattr +i {path} failed: {result.stderr.strip()}")
            done.append(path)
        yield
    finally:
        for path in reversed(done):
            _run(chattr, "-i", str(path))


@contextmanager
def read_only_mount(folder: Path) -> Iterator[Path]:
    """``folder`` seen through a read-only bind mount, at the path yielded."""
    mount, umount = _tool("mount"), _tool("umount")
    target = folder.with_name(folder.name + "-ro")
    target.mkdir()
    result = _run(mount, "--bind", str(folder), str(target))
    if result.returncode != 0:
        target.rmdir()
        unavailable(f"cannot bind-mount {folder}: {result.stderr.strip()}")
    try:
        result = _run(mount, "-o", "remount,bind,ro", str(target))
        if result.returncode != 0:
            unavailable(f"cannot remount {target} read-only: {result.stderr.strip()}")
        yield target
    finally:
        _unmount(umount, target)
        target.rmdir()


@contextmanager
def small_tmpfs(folder: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (e.g. ``"4m"``) mounted at ``folder`` (created)."""
    mount, umount = _tool("mount"), _tool("umount")
    folder.mkdir()
    result = _run(mount, "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(folder))
    if result.returncode != 0:
        folder.rmdir()
        unavailable(f"cannot mount a tmpfs at {folder}: {result.stderr.strip()}")
    try:
        yield folder
    finally:
        _unmount(umount, folder)
        folder.rmdir()


def fill(folder: Path) -> Path:
    """Write a file in ``folder`` until its file system is full; return it."""
    filler = folder / "filler"
    chunk = b"\0" * 65536
    with filler.open("wb", buffering=0) as handle:  # unbuffered: close() writes nothing
        try:
            while handle.write(chunk):
                pass
        except OSError:
            pass  # ENOSPC: full
    return filler


def _unmount(umount: str, target: Path) -> None:
    # A connection a failing test left open keeps the mount busy: detach it then.
    if _run(umount, str(target)).returncode != 0:
        _run(umount, "-l", str(target))
