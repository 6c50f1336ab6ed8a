"""``cairn prune`` (delete finished batches' records) and ``cairn gc`` (delete
blobs no record refers to)."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

import typer

from cairn.clock import SystemClock
from cairn.errors import CairnError
from cairn.portable import DEFAULT_GRACE, collect_garbage, prune
from cairn.retention import describe_policies, next_run, noted_policies, planned, run_chunks
from cairn.store.admin import admin

from ._blobs_option import BlobsOption, blobs_for
from ._consoles import fail, note
from ._store_option import DEFAULT_URL, StoreOption, opened_store
from .ops import parse_since

PolicyOption = Annotated[
    bool,
    typer.Option(
        "--policy",
        help="Apply the retention policy the app's workers noted in the store "
        "(Cairn(retention=...)) now, instead of --finished-before; with "
        "--dry-run, show what it would delete and when it next runs.",
    ),
]


def prune_command(
    finished_before: Annotated[
        str | None,
        typer.Option(
            "--finished-before",
            metavar="DATE",
            help="Delete batches whose tasks all finished before this: ISO 8601 "
            "(2026-05-01) or an age (30d, 12h).",
        ),
    ] = None,
    policy: PolicyOption = False,
    batch: Annotated[str | None, typer.Option("--batch", "-b", help="Only this batch.")] = None,
    include_unfinished: Annotated[
        bool,
        typer.Option(
            "--include-unfinished",
            help="Also delete batches that still have pending or running tasks.",
        ),
    ] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would go.")] = False,
    store: StoreOption = DEFAULT_URL,
) -> None:
    """Delete the records (tasks, history, operations, conversations) of finished
    batches. Their blobs go at the next `cairn gc`."""
    if policy:
        alone = finished_before is None and batch is None and not include_unfinished
        _prune_by_policy(store, dry_run=dry_run, alone=alone)
        return
    if finished_before is None:
        fail("give --finished-before DATE (or --policy, for the app's retention policy)")
    before = parse_since(finished_before, SystemClock().now())
    with opened_store(store) as opened:
        try:
            plan = prune(
                opened,
                before,
                batch=batch,
                include_unfinished=include_unfinished,
                dry_run=dry_run,
            )
        except CairnError as exc:
            fail(str(exc))
    verb = "would delete" if dry_run else "deleted"
    for name in plan.pruned:
        typer.echo(f"{verb} batch {name}")
    if plan.unfinished:
        note(
            f"kept {len(plan.unfinished)} batch(es) with pending or running tasks: "
            + ", ".join(plan.unfinished[:10])
        )
    if plan.recent:
        note(f"kept {len(plan.recent)} batch(es) finished on or after {before.isoformat()}")
    note(f"{verb} {len(plan.pruned)} batch(es); run `cairn gc` to free their blobs")


def _prune_by_policy(url: str, *, dry_run: bool, alone: bool) -> None:
    """``--policy``: what the noted retention policy deletes now (or would)."""
    if not alone:
        fail("--policy takes no --finished-before, --batch or --include-unfinished")
    now = SystemClock().now()
    with opened_store(url) as opened:
        try:
            target = admin(opened, "cairn prune --policy")
            policies = noted_policies(target)
            if not policies:
                fail(
                    f"{url} has no retention policy noted: give Cairn(retention=...) and "
                    "start a worker (it notes the policy), or use --finished-before"
                )
            for line in describe_policies(policies, next_run(target)):
                note(line)
            plan = planned(target, policies, now)
            if not dry_run:
                for _ in run_chunks(target, policies, now):
                    pass
        except CairnError as exc:
            fail(str(exc))
    verb = "would delete" if dry_run else "deleted"
    for expiry in plan:
        typer.echo(
            f"{verb} {expiry.count} {expiry.status} task(s) of batch {expiry.batch} "
            f"finished before {expiry.before.isoformat(timespec='seconds')}"
        )
    total = sum(e.count for e in plan)
    note(f"{verb} {total} task(s); run `cairn gc` to free their blobs")


def _grace(text: str) -> timedelta:
    at = SystemClock().now()
    return at - parse_since(text, at)


def gc_command(
    grace: Annotated[
        str,
        typer.Option(
            "--grace",
            metavar="AGE",
            help="Keep unreferenced blobs younger than this (a running task may be "
            "about to commit a record naming it).",
        ),
    ] = f"{int(DEFAULT_GRACE.total_seconds() // 3600)}h",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would go.")] = False,
    store: StoreOption = DEFAULT_URL,
    blobs: BlobsOption = None,
) -> None:
    """Delete blobs that no record of the store refers to, older than the grace
    period. Only for a blob store that this one store uses."""
    period = _grace(grace)
    with opened_store(store) as opened:
        target = blobs_for(store, blobs)
        if target is None:
            fail(f"{store} has no blob store; pass --blobs URL")
        try:
            report = collect_garbage(
                opened, target, SystemClock().now(), grace=period, dry_run=dry_run
            )
        except CairnError as exc:
            fail(str(exc))
    verb = "would delete" if dry_run else "deleted"
    for digest in report.deleted:
        typer.echo(f"{verb} {target.uri(digest)}")
    note(
        f"{verb} {len(report.deleted)} blob(s), {report.deleted_bytes} bytes; kept "
        f"{report.referenced} referenced and {report.young} younger than {grace}"
    )
