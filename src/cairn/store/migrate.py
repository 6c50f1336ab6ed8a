"""Numbered migration files, found beside this module, one folder per backend."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations(backend: str) -> list[Migration]:
    """Every migration of ``backend``, in version order."""
    folder = resources.files("cairn.store") / "migrations" / backend
    found: list[Migration] = []
    for entry in folder.iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), entry.name, entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"cairn's {backend} migrations are not numbered 1..n: {versions}")
    return found


def latest_version(backend: str) -> int:
    """The schema version this cairn writes."""
    return len(migrations(backend))
