"""Opening the checkpointer's tables: create them, refuse a format this cairn
does not know, upgrade one it does (format 1) in the same transaction."""

from __future__ import annotations

from cairn.integrations.langgraph import _tables as t
from cairn.integrations.langgraph._packing import CheckpointFormatError
from cairn.integrations.langgraph._reading import Load
from cairn.integrations.langgraph._rewrite import Dump
from cairn.integrations.langgraph._upgrade import upgrade
from cairn.store.sqlcore import Tx


def setup(tx: Tx, backend: str, identity: str, coder: tuple[Load, Dump]) -> None:
    """Make the tables of format ``t.FORMAT`` (idempotent), upgrading older ones."""
    if backend == "postgres":
        tx.exec(*t.PG_CREATE_LOCK)
    tx.exec(t.META_DDL)
    rows = tx.exec(t.GET_FORMAT).rows
    found = int(rows[0][0]) if rows else None
    if found is not None and found != t.FORMAT and found not in t.UPGRADABLE:
        raise _unknown(found, identity)
    for statement in t.DDL[backend]:
        tx.exec(statement)
    if found is not None and found in t.UPGRADABLE:
        upgrade(tx, coder)
    if found != t.FORMAT:
        tx.exec(t.SET_FORMAT, (str(t.FORMAT),))


def _unknown(found: int, identity: str) -> CheckpointFormatError:
    if found > t.FORMAT:
        return CheckpointFormatError(
            f"the LangGraph tables in {identity} are in format {found}, written by a "
            f"newer cairn (this one knows up to {t.FORMAT}). Upgrade cairn "
            "(`pip install -U 'cairn-durable[langgraph]'`). Nothing was changed."
        )
    return CheckpointFormatError(
        f"the LangGraph tables in {identity} are in format {found}, which no cairn "
        f"release wrote (this one reads {', '.join(map(str, t.UPGRADABLE))} and "
        f"{t.FORMAT}). Nothing was changed."
    )
