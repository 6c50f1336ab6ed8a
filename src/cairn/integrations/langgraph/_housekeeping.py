"""Removing and copying a thread's checkpoints: ``delete_for_runs``,
``copy_thread`` and ``prune``, each one transaction.

A list channel's value is a chain of appends (``_lists``), and a version's row
can be the base of versions other checkpoints name. So deleting a checkpoint
deletes its row and its writes, and then only the value rows that no remaining
checkpoint of its thread and namespace reaches: the versions the remaining
checkpoints name, and every base their appends stand on. ``collect`` finds
those from the rows' keys and bases, without decoding a value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from cairn.integrations.langgraph import _tables as t
from cairn.store.sqlcore import Tx

Load = Callable[[str, bytes | None], Any]  # a stored (type, data) pair, decoded
Place = tuple[str, str]  # thread id, checkpoint namespace

STRATEGIES = ("keep_latest", "delete")


def delete_runs(tx: Tx, run_ids: frozenset[str], load: Load) -> set[Place]:
    """Delete every checkpoint whose metadata names one of ``run_ids``, with its
    writes, then the rows no remaining checkpoint needs; the places touched."""
    touched: set[Place] = set()
    if not run_ids:
        return touched
    for thread, ns, checkpoint_id, kind, data in tx.exec(t.ALL_METADATA).rows:
        metadata = load(kind, data)
        if isinstance(metadata, dict) and metadata.get("run_id") in run_ids:
            tx.exec(t.DELETE_CHECKPOINT, (thread, ns, checkpoint_id))
            tx.exec(t.DELETE_CHECKPOINT_WRITES, (thread, ns, checkpoint_id))
            touched.add((thread, ns))
    for thread, ns in touched:
        collect(tx, thread, ns, load)
    return touched


def keep_latest(tx: Tx, thread: str, load: Load) -> None:
    """Delete every checkpoint of ``thread`` but the newest of each namespace, with
    their writes, then the rows the newest ones do not need."""
    for ns, newest in tx.exec(t.LATEST_PER_NAMESPACE, (thread,)).rows:
        tx.exec(t.DELETE_OLDER, (thread, ns, newest))
        tx.exec(t.DELETE_OLDER_WRITES, (thread, ns, newest))
    for (ns,) in tx.exec(t.THREAD_NAMESPACES, (thread, thread)).rows:
        collect(tx, thread, ns, load)


def copy_thread(tx: Tx, source: str, target: str) -> None:
    """Every row of ``source`` again under ``target`` (rows ``target`` has stay)."""
    for statement in t.COPY_THREAD:
        tx.exec(statement, (target, source))


def collect(tx: Tx, thread: str, ns: str, load: Load) -> None:
    """Delete the value rows of ``thread``/``ns`` that no stored checkpoint reaches."""
    named: set[tuple[str, str]] = set()
    for _, kind, data in tx.exec(t.NAMESPACE_BODIES, (thread, ns)).rows:
        body = load(kind, data)
        named.update((channel, str(v)) for channel, v in body["channel_versions"].items())
    links = {
        (channel, version): base if kind == "append" else None
        for channel, version, kind, base in tx.exec(t.NAMESPACE_LINKS, (thread, ns)).rows
    }
    needed = reached(named, links)
    unneeded = [(thread, ns, *key) for key in links if key not in needed]
    if unneeded:
        tx.exec_many(t.DELETE_BLOB, unneeded)


def reached(
    named: Iterable[tuple[str, str]], links: dict[tuple[str, str], str | None]
) -> set[tuple[str, str]]:
    """The (channel, version) rows ``named`` needs: each one and its chain of bases."""
    needed: set[tuple[str, str]] = set()
    for channel, version in named:
        cursor: str | None = version
        while cursor is not None and (channel, cursor) not in needed:
            needed.add((channel, cursor))
            cursor = links.get((channel, cursor))
    return needed
