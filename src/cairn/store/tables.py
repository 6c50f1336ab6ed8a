"""Every table cairn keeps, each column described once.

This is the one place a column is listed. The column lists of
``cairn.store.sql`` and the row converters built from them, the export format
(``cairn.portable.transfer``), the statements that move and prune a batch and
find blob references (``cairn.store.sqlmove``) all read it, and a test checks
that a migrated store (both backends) has exactly these columns, table by
table. A migration that adds a column describes it here too, or that test fails.

A column's kind says how its value is kept, and how a record (and an export
file) holds it:

=======  =========================  =====================  ==========================
kind     SQLite                     PostgreSQL             record; export file
=======  =========================  =====================  ==========================
text     TEXT                       text                   str
integer  INTEGER                    integer; bigint: wide  int
real     REAL                       double precision       float
bool     INTEGER 0 or 1             integer 0 or 1         bool
time     TEXT, ISO 8601 in UTC      timestamptz            datetime; ISO text
micros   INTEGER, µs since epoch    bigint                 datetime; ISO text
packed   BLOB                       bytea                  JSON text; the same
=======  =========================  =====================  ==========================

(``packed`` is a message's JSON, stored as ``cairn.store.sql.pack_content``
makes it; ``micros`` is a time kept as a small integer, for rows there are
many of.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["text", "integer", "real", "bool", "time", "micros", "packed"]

# The declared type (SQLite) and the information_schema data types (PostgreSQL)
# a column of each kind is created with.
STORED_AS: dict[Kind, tuple[str, frozenset[str]]] = {
    "text": ("TEXT", frozenset({"text"})),
    "integer": ("INTEGER", frozenset({"integer", "bigint"})),
    "real": ("REAL", frozenset({"double precision"})),
    "bool": ("INTEGER", frozenset({"integer"})),
    "time": ("TEXT", frozenset({"timestamp with time zone"})),
    "micros": ("INTEGER", frozenset({"bigint"})),
    "packed": ("BLOB", frozenset({"bytea"})),
}


@dataclass(frozen=True, slots=True)
class Column:
    """One column: its name, its kind, and what the code must know about it."""

    name: str
    kind: Kind
    nullable: bool = False
    # The schema's DEFAULT: what a row written without this column gets (an
    # import of an older export file, which did not carry it, gives it this too).
    default: int | float | None = None
    # The store gives the value on insert (an identity): an import never writes
    # it; where an export carries it, rows that refer to it are mapped to the
    # importing store's own value.
    assigned: bool = False
    # Kept for the store's own use (the order tasks were enqueued in): never in
    # a record, never in an export file, which keeps that order by its row order.
    internal: bool = False
    # The table whose assigned key this column holds.
    refers_to: str | None = None
    # May hold a reference to the blob store (cairn.blobs.ref): backup, export
    # and gc look here for the blobs a store uses.
    blob_refs: bool = False
    # The references are inside its JSON text rather than the whole value (a
    # message's meta naming a handoff's archive: cairn.agent.handoff).
    refs_inside: bool = False
    # An integer PostgreSQL keeps in a bigint (64 bits), not an integer (32):
    # an import refuses a value too big for the column.
    wide: bool = False

    @property
    def required(self) -> bool:
        """A row must give this column: it has no NULL and no default to fall back on."""
        return not self.nullable and self.default is None


@dataclass(frozen=True, slots=True)
class Table:
    """One table: its columns in the order the schema has them."""

    name: str
    columns: tuple[Column, ...]

    @property
    def carried(self) -> tuple[Column, ...]:
        """The columns records and export files hold (all but internal ones)."""
        return tuple(c for c in self.columns if not c.internal)

    @property
    def written(self) -> tuple[Column, ...]:
        """The carried columns an insert gives (all but those the store assigns)."""
        return tuple(c for c in self.carried if not c.assigned)

    @property
    def identity(self) -> Column | None:
        """The carried column the store assigns on insert, if there is one."""
        return next((c for c in self.carried if c.assigned), None)

    def names(self, *, skip: tuple[str, ...] = ()) -> tuple[str, ...]:
        """The carried columns' names, in order, but those in ``skip``."""
        return tuple(c.name for c in self.carried if c.name not in skip)

    def listed(self, *, skip: tuple[str, ...] = ()) -> str:
        """``names`` as a SELECT list: ``"a, b, c"``."""
        return ", ".join(self.names(skip=skip))

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)


def _text(name: str, *, nullable: bool = False, blob_refs: bool = False) -> Column:
    return Column(name, "text", nullable=nullable, blob_refs=blob_refs)


def _time(name: str, *, nullable: bool = False) -> Column:
    return Column(name, "time", nullable=nullable)


def _int(name: str, *, default: int | None = None) -> Column:
    return Column(name, "integer", default=default)


CAIRN_META = Table("cairn_meta", (_text("key"), _text("value")))

BATCHES = Table("batches", (_text("name"), _text("task_name"), _time("created_at")))

TASKS = Table(
    "tasks",
    (
        Column("pos", "integer", assigned=True, internal=True, wide=True),
        _text("id"),
        _text("batch", nullable=True),
        _text("item_key", nullable=True),
        _text("name"),
        _text("args", blob_refs=True),
        _text("codec"),
        _text("status"),
        _int("attempts", default=0),
        _int("retry_base", default=0),
        Column("fence", "integer", default=0, wide=True),
        _text("owner", nullable=True),
        _time("lease_expires_at", nullable=True),
        _text("result", nullable=True, blob_refs=True),
        _text("error", nullable=True),
        _time("created_at"),
        _time("started_at", nullable=True),
        _time("finished_at", nullable=True),
        _time("updated_at"),
        _int("interruptions", default=0),
        _time("wake_at", nullable=True),
        _text("parent_id", nullable=True),
        # Schema 3: the app version the task was enqueued under (docs/versions.md).
        _text("version", nullable=True),
        # Schema 5: which run of the task this is; a rerun from a step makes the
        # next one (docs/reruns.md), and TASK_RUNS keeps how the earlier ones ended.
        _int("run", default=1),
        # Schema 8: claims take the highest priority first (docs/workers.md).
        _int("priority", default=0),
        # Schema 9: the entry the task's owner is running now (its position,
        # name, and when it began), noted by the lease heartbeat, not by the
        # step itself (cairn.engine.leases): the dashboard's and the stall
        # alert's "step in flight". Cleared by each claim; never exported.
        Column("step_now_seq", "integer", nullable=True, internal=True),
        Column("step_now", "text", nullable=True, internal=True),
        Column("step_now_at", "time", nullable=True, internal=True),
        # Schema 13: a debounced task's key, window and the events it absorbed;
        # a singleton task's key (held), or the key it is queued behind
        # (docs/debounce.md).
        _text("debounce_key", nullable=True),
        Column("debounce_ms", "integer", nullable=True),
        _int("debounce_events", default=0),
        _text("singleton_key", nullable=True),
        _text("singleton_queued", nullable=True),
    ),
)

STEPS = Table(
    "steps",
    (
        _text("task_id"),
        _int("seq"),
        _text("kind"),
        _text("name"),
        _text("status"),
        _text("output", nullable=True, blob_refs=True),
        _int("attempts"),
        _int("task_attempt"),
        _int("run_attempts"),
        _text("error", nullable=True),
        _time("retry_at", nullable=True),
        _time("started_at"),
        _time("finished_at"),
        Column("deferred", "real", default=0.0),
        # Schema 3: what produced the entry, and the code that kept it when changed.
        _text("fingerprint", nullable=True),
        _text("kept", nullable=True),
        # Schema 6: CRC-32 of kind, name and output (sql.entry_checksum), checked
        # when the history is loaded; the store's own, never in a record or an
        # export (an import works it out again for what it brings in).
        Column("checksum", "integer", nullable=True, internal=True, wide=True),
    ),
)

OPERATIONS = Table(
    "operations",
    (
        _text("scope"),
        _text("key"),
        _text("status"),
        _int("calls"),
        Column("permanent", "bool", default=0),
        _text("task_id"),
        _int("step_seq"),
        Column("claim_fence", "integer", wide=True),
        _text("result", nullable=True, blob_refs=True),
        _text("error", nullable=True),
        _time("first_claimed_at"),
        _time("claimed_at"),
        _time("completed_at", nullable=True),
        _time("updated_at"),
        # Schema 2: what a claimant learned after it had lost its task (audit only).
        _text("late_result", nullable=True, blob_refs=True),
        _time("late_at", nullable=True),
        # Schema 10: CRC-32 of the key and result (sql.op_checksum), checked when
        # the result is read back for a replay; the store's own, like a step's.
        Column("checksum", "integer", nullable=True, internal=True, wide=True),
    ),
)

SIGNALS = Table(
    "signals",
    (_text("task_id"), _text("name"), _text("payload"), _text("codec"), _time("sent_at")),
)

CONVERSATIONS = Table(
    "conversations",
    (Column("conv_id", "integer", assigned=True, wide=True), _text("task_id"), _text("name")),
)

MESSAGES = Table(
    "messages",
    (
        Column("conv_id", "integer", refers_to="conversations", wide=True),
        _int("idx"),
        _text("role"),
        Column("content", "packed", blob_refs=True),
        _int("tokens"),
        _text("kind"),
        Column("covers_until", "integer", nullable=True),
        Column("meta", "text", nullable=True, blob_refs=True, refs_inside=True),
        Column("created_at", "micros"),
        # Schema 10: CRC-32 of the stored content and covers_until
        # (sql.message_checksum), checked when the message is read back.
        Column("checksum", "integer", nullable=True, internal=True, wide=True),
    ),
)

LIMITS = Table("limits", (_text("name"), _time("closed_until", nullable=True)))

PERMITS = Table(
    "permits",
    (
        _text("limit_name"),
        _text("permit"),
        _text("owner"),
        _text("task_id"),
        Column("held", "bool"),
        _time("granted_at"),
        _time("ends_at"),
        # Schema 7: what the permit holds of a TokenRate or a budget (0: one call).
        Column("amount", "integer", default=0, wide=True),
    ),
)

SCHEDULES = Table(
    "schedules",
    (
        _text("name"),
        _text("task_name"),
        _text("cron"),
        _text("tz"),
        _time("covered_until"),
        _time("last_fired_at", nullable=True),
        _time("created_at"),
        _time("updated_at"),
    ),
)

# Schema 3: the versions each worker process claims, seen at its heartbeat.
WORKERS = Table("workers", (_text("owner"), _text("versions"), _time("seen_at")))

# Schema 5: one row per run of a task that a rerun superseded (docs/reruns.md):
# how that run ended, as the task row held it then (status, result, error,
# attempts, first start, finish), and where the next run forked from it
# (``fork_seq``: the entries before it are shared by both runs), when and by
# whom (the audit trail's actor).
TASK_RUNS = Table(
    "task_runs",
    (
        _text("task_id"),
        _int("run"),
        _int("fork_seq"),
        _text("status"),
        _text("result", nullable=True, blob_refs=True),
        _text("error", nullable=True),
        _int("attempts"),
        _time("started_at", nullable=True),
        _time("finished_at", nullable=True),
        _time("forked_at"),
        _text("forked_by"),
    ),
)

# Schema 5: the history entries a rerun took out of its task's history (its
# position ``fork_seq`` and after), under the run that recorded them. ``entry``
# is the whole entry as JSON (``cairn.store.entries``), so this table does not
# follow the steps table's column list; ``kind`` and ``name`` are columns for
# the diff and for the replay's read of completed operations, which leaves out
# an operation whose entry is superseded.
SUPERSEDED_ENTRIES = Table(
    "superseded_entries",
    (
        _text("task_id"),
        _int("run"),
        _int("seq"),
        _text("kind"),
        _text("name"),
        Column("entry", "text", blob_refs=True, refs_inside=True),
    ),
)

# Schema 5: the operator actions (retry, cancel, rerun, signal, resolve), from
# the CLI, the dashboard or the admin API: who (``cli:USER``, ``ui:TOKEN-NAME``,
# ``api:USER``), what, on which task or filter, when, and how many tasks it
# changed (NULL until the action returned: one whose process died in between
# shows with no count). ``detail`` is JSON, redacted (``cairn.redaction``).
AUDIT = Table(
    "audit",
    (
        Column("id", "integer", assigned=True, wide=True),
        _time("at"),
        _text("actor"),
        _text("action"),
        _text("target"),
        _text("detail", nullable=True),
        Column("count", "integer", nullable=True),
        _text("outcome", nullable=True),
    ),
)

# Schema 7: budgets (cairn.budgets), by scope ('batch:NAME', 'task:ID'): the
# caps (usd in nano-dollars), the warning share, how often raised, and when
# each alert fired; and the tasks parked on one until it is raised.
BUDGETS = Table(
    "budgets",
    (
        _text("scope"),
        Column("usd_nanos", "integer", nullable=True, wide=True),
        Column("tokens", "integer", nullable=True, wide=True),
        Column("warn_at", "real"),
        _int("raised", default=0),
        Column("spent_usd_nanos", "integer", default=0, wide=True),
        Column("spent_tokens", "integer", default=0, wide=True),
        _time("warned_at", nullable=True),
        _time("reached_at", nullable=True),
        _time("updated_at"),
    ),
)

BUDGET_PARKS = Table(
    "budget_parks",
    (_text("task_id"), _text("scope"), _time("parked_at"), _text("needed")),
)

# Schema 9: what a task logged (the ``logging`` module) while it ran, one row
# per task: its records as a JSON list (``cairn.engine.tasklogs``: time,
# attempt, level, logger, message; redacted), how many are kept, and how many
# were not (past the cap on their number and size).
TASK_LOGS = Table(
    "task_logs",
    (_text("task_id"), _text("lines"), _int("kept"), _int("dropped")),
)

# Schema 9: tasks finished and failed per closed hour (its start), and what the
# model calls finished in it cost, summed once
# by the metrics page's reader and kept (``cairn.admin.charts``): of the store,
# not of a batch; a derived figure, summed again if it is removed.
METRIC_HOURS = Table(
    "metric_hours",
    (_time("hour"), _int("finished"), _int("failed"), Column("cost", "real", default=0.0)),
)

TABLES: tuple[Table, ...] = (
    CAIRN_META,
    BATCHES,
    TASKS,
    STEPS,
    OPERATIONS,
    SIGNALS,
    CONVERSATIONS,
    MESSAGES,
    LIMITS,
    PERMITS,
    SCHEDULES,
    WORKERS,
    TASK_RUNS,
    SUPERSEDED_ENTRIES,
    AUDIT,
    BUDGETS,
    BUDGET_PARKS,
    TASK_LOGS,
    METRIC_HOURS,
)
BY_NAME: dict[str, Table] = {t.name: t for t in TABLES}
