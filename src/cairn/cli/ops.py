"""``cairn ops``: the audit log of operations (``ctx.once`` keys), and
``cairn ops resolve KEY`` to settle a key left in doubt.

A key is in doubt when the attempt that claimed it died between claiming and
recording: cairn cannot know whether the outside world acted, so it never calls
the function again on its own. A claim whose attempt crashed stays ``claimed``
until some run looks at the key, so the listing judges each claim's attempt
itself (task row, fence, lease, owner process) rather than trusting the status.
"""

from __future__ import annotations

import csv
import json
import re
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, get_args

import typer
from rich.text import Text

from cairn.admin.operations import OperationView, Resolved, operations, resolve
from cairn.admin.views import parse_error
from cairn.blobs.ref import is_ref
from cairn.clock import SystemClock
from cairn.store import AdminStore
from cairn.store.records import OperationStatus

from ._actor import cli_actor
from ._consoles import fail, note, stderr_console, stdout_console
from ._field_text import MISSING, clip, error_line, iso_time, short_time, stored_value
from ._json_output import JsonOption, print_json, value_for_json
from ._store_option import DEFAULT_URL, StoreOption, opened_store
from ._tables import RowTable, status_text

__all__ = ["ops_app", "parse_since"]

OPERATION_STATUSES: tuple[str, ...] = get_args(OperationStatus)
DEFAULT_LIMIT = 200
_RESULT_WIDTH = 60
_AGE = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_CSV_COLUMNS = (
    "key",
    "scope",
    "task",
    "step",
    "status",
    "in_doubt",
    "calls",
    "permanent",
    "first_claimed_at",
    "claimed_at",
    "completed_at",
    "result",
    "error",
    "late_result",
    "late_at",
)
_SETTLE_HINT = "settle a key with `cairn ops resolve KEY --result JSON | --retry | --fail`"

ops_app = typer.Typer(add_completion=False, pretty_exceptions_show_locals=False)


# -- parsing --------------------------------------------------------------------------
def parse_since(text: str, at: datetime, *, option: str = "--since") -> datetime:
    """``--since`` (or ``option``): ISO 8601 (naive means UTC) or an age before
    ``at`` (90m, 24h, 7d)."""
    age = _AGE.match(text.strip())
    if age is not None:
        return at - timedelta(seconds=float(age.group(1)) * _AGE_UNITS[age.group(2)])
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        fail(
            f"{option} {text!r} is not a time; use ISO 8601 such as 2026-05-24 or "
            "2026-05-24T09:30:00+02:00, or an age such as 90m, 24h or 7d"
        )
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def _check_listing(status: str | None, in_doubt: bool, as_json: bool, as_csv: bool) -> None:
    if status is not None and status not in OPERATION_STATUSES:
        fail(f"unknown status {status!r}; use one of: {', '.join(OPERATION_STATUSES)}")
    if status is not None and in_doubt:
        fail("give --in-doubt or --status, not both")
    if as_json and as_csv:
        fail("give --json or --csv, not both")


# -- cairn ops --------------------------------------------------------------------------
# The listing options of `cairn ops`, named here so its signature reads as a list.
PrefixOption = Annotated[
    str | None, typer.Option("--prefix", "-p", help="Only keys starting with this text.")
]
SinceOption = Annotated[
    str | None,
    typer.Option(
        "--since",
        metavar="TIME",
        help="Only keys first claimed at or after TIME: ISO 8601 (2026-05-24, "
        "2026-05-24T09:30:00+02:00; a time without an offset is taken as UTC) or an "
        "age such as 90m, 24h, 7d.",
    ),
]
TaskOption = Annotated[
    str | None, typer.Option("--task", "-t", help="Only keys claimed by this task.")
]
InDoubtOption = Annotated[
    bool,
    typer.Option(
        "--in-doubt",
        help="Only keys in doubt: marked in_doubt, or still claimed by an attempt that "
        "died (its task stopped, moved on, lost its lease or its process is gone).",
    ),
]
StatusOption = Annotated[
    str | None,
    typer.Option("--status", "-s", help=f"Only this status: {', '.join(OPERATION_STATUSES)}."),
]
LimitOption = Annotated[
    int, typer.Option("--limit", "-n", min=0, help="Show at most this many keys (0: all).")
]
CsvOption = Annotated[
    bool, typer.Option("--csv", help="Print CSV with a header row, for spreadsheets.")
]


@ops_app.callback(invoke_without_command=True)
def ops_command(
    ctx: typer.Context,
    store: StoreOption = DEFAULT_URL,
    prefix: PrefixOption = None,
    since: SinceOption = None,
    task: TaskOption = None,
    in_doubt: InDoubtOption = False,
    status: StatusOption = None,
    limit: LimitOption = DEFAULT_LIMIT,
    as_json: JsonOption = False,
    as_csv: CsvOption = False,
) -> None:
    """List operations (ctx.once keys): who claimed each, how it ended, how often it ran.

    Under the list: how many keys ran their function more than once in the whole
    store (the redundant-execution rate; a fraction in --json).
    """
    if ctx.invoked_subcommand is not None:
        listing = (prefix, since, task, status)
        if any(v is not None for v in listing) or in_doubt or as_json or as_csv:
            fail("listing options go with `cairn ops`, not with its subcommands")
        return
    _check_listing(status, in_doubt, as_json, as_csv)
    since_at = None if since is None else parse_since(since, SystemClock().now())
    with opened_store(store) as opened:
        rows = _fetch(opened, prefix, since_at, task, status, in_doubt, limit)
        redundant, keys = opened.operation_call_counts()
    more = limit != 0 and len(rows) > limit
    _print_listing(rows[:limit] if more else rows, redundant, keys, as_json, as_csv)
    if more:
        note(f"showing the first {limit} key(s); more exist (raise --limit, or --limit 0 for all)")


def _print_listing(
    rows: list[OperationView], redundant: int, keys: int, as_json: bool, as_csv: bool
) -> None:
    """``rows`` as CSV, JSON or a table; ``redundant`` of the store's ``keys`` ran
    their function more than once."""
    if as_csv:
        _print_csv(rows)
    elif as_json:
        print_json(
            {
                "operations": [_op_dict(row) for row in rows],
                "keys": keys,
                "redundant_keys": redundant,
                "redundant_execution_rate": redundant / keys if keys else 0.0,
            }
        )
    else:
        _print_table(rows, redundant, keys)


def _fetch(
    store: AdminStore,
    prefix: str | None,
    since: datetime | None,
    task_id: str | None,
    status: str | None,
    in_doubt: bool,
    limit: int,
) -> list[OperationView]:
    """The matching rows, one past ``limit`` so the caller can tell more exist."""
    return operations(
        store,
        task_id=task_id,
        prefix=prefix,
        statuses=None if status is None else (status,),
        since=since,
        only_in_doubt=in_doubt,
        limit=None if limit == 0 else limit + 1,
        now=SystemClock().now(),
    )


# -- output ----------------------------------------------------------------------------
def _outcome(row: OperationView) -> str:
    """The result (cut short), or the error, or what the key is waiting for."""
    op = row.record
    if op.status == "completed":
        return clip(stored_value(op.result, row.codec), _RESULT_WIDTH)
    if row.waiting is not None:
        return row.waiting
    if op.error is not None:
        return error_line(op.error, width=_RESULT_WIDTH)
    return MISSING


def _late(row: OperationView) -> str:
    """What a claimant that had lost its task learned, if one reported: it never
    became the key's result, but it says the outside world acted for that claim."""
    op = row.record
    if op.late_result is None:
        return ""
    value = clip(stored_value(op.late_result, row.codec), _RESULT_WIDTH)
    return f"; late, from a claimant that had lost its task ({short_time(op.late_at)}): {value}"


def _print_table(rows: list[OperationView], redundant: int, keys: int) -> None:
    console = stdout_console()
    scoped = any(row.record.scope for row in rows)
    columns = ["key", *(["scope"] if scoped else []), "task", "step", "status", "calls"]
    columns += ["first claimed", "completed", "result or error"]
    table = RowTable(console, columns, right=("step", "calls"), free=("result or error",))
    for row in rows:
        op = row.record
        table.add_row(
            op.key,
            *([op.scope or MISSING] if scoped else []),
            op.task_id,
            str(op.step_seq),
            status_text(op.status),
            str(op.calls),
            short_time(op.first_claimed_at),
            short_time(op.completed_at),
            _outcome(row) + _late(row),
        )
    if table.row_count:
        table.print()
    else:
        note("no operations match")
    rate = 100 * redundant / keys if keys else 0.0
    console.print(
        Text(f"{keys} keys, {redundant} ran more than once (redundant-execution rate {rate:.1f}%)"),
        soft_wrap=True,
    )
    if any(row.in_doubt for row in rows):
        note(_SETTLE_HINT)


def _result_value(row: OperationView) -> Any:
    # JSON-codec results are JSON already; other codecs stay text (never unpickled here).
    return value_for_json(row.record.result, row.codec)


def _op_dict(row: OperationView) -> dict[str, Any]:
    op = row.record
    return {
        "key": op.key,
        "scope": op.scope,
        "task_id": op.task_id,
        "step_seq": op.step_seq,
        "status": op.status,
        "in_doubt": row.in_doubt,
        "calls": op.calls,
        "permanent": op.permanent,
        "first_claimed_at": iso_time(op.first_claimed_at),
        "claimed_at": iso_time(op.claimed_at),
        "completed_at": iso_time(op.completed_at),
        "updated_at": iso_time(op.updated_at),
        "result": _result_value(row),
        "error": parse_error(op.error),
        "late_result": value_for_json(op.late_result, row.codec),
        "late_at": iso_time(op.late_at),
    }


def _print_csv(rows: list[OperationView]) -> None:
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(_CSV_COLUMNS)
    for row in rows:
        op = row.record
        plain = row.codec == "json" and not is_ref(op.result)
        result = op.result if plain else stored_value(op.result, row.codec)
        writer.writerow(
            (
                op.key,
                op.scope,
                op.task_id,
                op.step_seq,
                op.status,
                str(row.in_doubt).lower(),
                op.calls,
                str(op.permanent).lower(),
                iso_time(op.first_claimed_at),
                iso_time(op.claimed_at),
                iso_time(op.completed_at) or "",
                result or "",
                error_line(op.error, width=None),
                "" if op.late_result is None else stored_value(op.late_result, row.codec),
                iso_time(op.late_at) or "",
            )
        )


# -- cairn ops resolve --------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Decision:
    """What the operator says happened to a key."""

    status: str
    value: Any = None  # the outside world's result, when it did happen
    permanent: bool = False


def _decision(result: str | None, retry: bool, give_up: bool) -> _Decision:
    if (result is not None) + retry + give_up != 1:
        fail(
            "say what happened with exactly one of: --result JSON (it happened; this is "
            "its result), --retry (it did not; call again) or --fail (give up on it)"
        )
    if retry:
        return _Decision("released")
    if give_up:
        return _Decision("failed", permanent=True)
    assert result is not None  # exactly one was given
    try:
        return _Decision("completed", value=json.loads(result))
    except ValueError as exc:
        fail(
            f"--result is not valid JSON ({exc}); pass it as JSON, e.g. --result '{{\"ok\": true}}'"
        )


@ops_app.command("resolve")
def resolve_command(
    ctx: typer.Context,
    key: Annotated[str, typer.Argument(metavar="KEY", help="The operation's key.")],
    scope: Annotated[str, typer.Option("--scope", help="The key's scope, if it has one.")] = "",
    result: Annotated[
        str | None,
        typer.Option(
            "--result", metavar="JSON", help="It happened; this (JSON) is what it returned."
        ),
    ] = None,
    retry: Annotated[
        bool, typer.Option("--retry", help="It did not happen; call its function again.")
    ] = False,
    give_up: Annotated[
        bool, typer.Option("--fail", help="Give up on it: later calls raise OperationFailed.")
    ] = False,
    yes: Annotated[
        bool,
        typer.Option(
            "--yes",
            help="With --retry: call again even though the key's claimant may still "
            "wake and send its own request (cairn warns and stops without it).",
        ),
    ] = False,
    store: StoreOption = DEFAULT_URL,
) -> None:
    """Settle a key that is in doubt (or failed): it happened, it did not, or give up.

    If the task that claimed it has failed, it is moved back to pending: the next
    run_batch of its batch (or app.run of it) runs it again, and the key answers
    as settled here.
    """
    decision = _decision(result, retry, give_up)
    with opened_store(_store_url(ctx, store)) as opened:

        def settle(confirmed: bool) -> Resolved:
            return resolve(
                opened,
                scope,
                key,
                decision.status,
                result=decision.value,
                permanent=decision.permanent,
                now=SystemClock().now(),
                actor=cli_actor(),
                confirmed=confirmed,
            )

        resolved = settle(yes)
        if resolved.needs_confirmation and _asked(resolved.message):
            resolved = settle(True)
    if resolved.needs_confirmation:
        fail(f"{resolved.message} To call it again anyway, add --yes.", code=1)
    if not resolved.changed:
        fail(resolved.message, code=1 if resolved.found else 2)
    for sentence in resolved.messages:
        stdout_console().print(Text(sentence), soft_wrap=True)
    if resolved.note is not None:
        note(resolved.note)


def _asked(warning: str) -> bool:
    """At a terminal: the warning, then the question; elsewhere False (--yes is
    how a script confirms)."""
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return False
    stderr_console().print(Text(f"warning: {warning}", style="yellow"), soft_wrap=True)
    return typer.confirm("Call its function again anyway?", default=False, err=True)


def _store_url(ctx: typer.Context, store: str) -> str:
    """``--store`` given to ``cairn ops`` counts for ``cairn ops resolve`` too."""
    source = ctx.get_parameter_source("store")
    parent = ctx.parent.params.get("store") if ctx.parent is not None else None
    if (source is not None and source.name == "COMMANDLINE") or not parent:
        return store
    return str(parent)
