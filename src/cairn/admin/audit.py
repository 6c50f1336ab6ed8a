"""The audit trail: every operator action, whoever made it and from where.

Each action of ``cairn.admin`` that changes a task or an operation (retry,
cancel, rerun, signal, resolve; one task, a batch, or a filter) writes an
entry before it acts (who, what, on which task or filter, when) and completes
it after (how many tasks it changed, and the sentence it answered), like an
operation's claim and record: an action whose process died in between still
shows, with no count. Who: ``cli:USER`` (the OS user running ``cairn``),
``ui:NAME`` (the dashboard's token name, or the OS user running the dashboard
when it has no token), ``api:USER`` (the admin API called from Python).
Everything stored passes through ``cairn.redaction.redact``.
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any

from cairn.redaction import redact
from cairn.store import AdminStore
from cairn.store.records import AuditRecord

__all__ = ["Actor", "AuditEntry", "AuditPage", "api_actor", "audit", "audit_page", "os_user"]

# An outcome sentence is kept to this many characters.
_OUTCOME_ROOM = 500
DEFAULT_SIZE = 50


def os_user() -> str:
    """The name of the user running this process (``unknown`` if it has none)."""
    try:
        return getpass.getuser() or "unknown"
    except (KeyError, OSError):  # no such user in the password database (a container)
        return "unknown"


@dataclass(frozen=True, slots=True)
class Actor:
    """Who makes an action: through what (``cli``, ``ui``, ``api``) and as whom."""

    via: str
    name: str

    def __str__(self) -> str:
        return f"{self.via}:{self.name}"


def api_actor() -> Actor:
    """The actor of an admin call made from Python without one: ``api:USER``."""
    return Actor("api", os_user())


class AuditEntry:
    """One action's entry, written on entering (``audit``); ``done`` says how
    many tasks it changed and what it answered, written on leaving. An error
    that leaves the block is written as the outcome, and passes on."""

    def __init__(self, store: AdminStore, entry: int) -> None:
        self._store = store
        self._entry = entry
        self._count: int | None = None
        self._outcome: str | None = None

    def done(self, count: int, outcome: str) -> None:
        self._count = count
        self._outcome = outcome

    def __enter__(self) -> AuditEntry:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        outcome = self._outcome
        if error is not None:
            outcome = f"error: {type(error).__name__}: {error}"
        text = None if outcome is None else redact(outcome)[:_OUTCOME_ROOM]
        self._store.end_audit(self._entry, self._count, text)


def audit(
    store: AdminStore,
    actor: Actor | None,
    action: str,
    target: str,
    now: datetime,
    detail: Mapping[str, Any] | None = None,
) -> AuditEntry:
    """Write the entry of an action about to be made, and return it to complete."""
    text = None if detail is None else redact(json.dumps(detail, ensure_ascii=False, default=str))
    who = str(actor or api_actor())
    return AuditEntry(store, store.begin_audit(now, redact(who), action, redact(target), text))


@dataclass(frozen=True, slots=True)
class AuditPage:
    """Audit entries, newest first; ``older`` is the id to ask for the next page
    with (None: this is the last)."""

    rows: list[AuditRecord]
    older: int | None


def audit_page(
    store: AdminStore, *, before: int | None = None, size: int = DEFAULT_SIZE
) -> AuditPage:
    """The newest ``size`` audit entries older than entry ``before`` (all, if None)."""
    if not 1 <= size <= 1000:
        raise ValueError(f"a page holds 1 to 1000 audit entries; {size} asked for")
    found = store.audit_page(before, size + 1)
    rows = found[:size]
    return AuditPage(rows, rows[-1].id if len(found) > size else None)
