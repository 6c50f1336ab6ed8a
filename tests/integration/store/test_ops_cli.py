"""``cairn ops`` and ``cairn ops resolve`` against real stores built through the
public API: completed, failed, in-doubt and dead-claimant keys made by real runs
(crashes injected with the fault hook), then settled from the command line.

Every test runs on a SQLite file and on a PostgreSQL database: the CLI is given
the ``sqlite:///`` or ``postgresql://`` URL of the store as ``--store``.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Literal

import pytest
from typer.testing import CliRunner, Result

from cairn import Cairn, Context, OperationFailed, Permanent, TaskFailed
from cairn.cli import app as cli_app
from cairn.clock import FakeClock
from cairn.errors import InDoubtOperation
from cairn.store import Store, open_store
from cairn.task import TaskDef
from cairn.testing import set_fault_hook

_ENV_TO_CLEAR = ("CAIRN_STORE", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS")
# An owner on another machine: never judged gone by its pid, only by its lease.
OTHER_HOST_OWNER = "otherhost-0badc0de/4242/123456/feedf00d"
LEASE = 30.0
KEY = "charge/c1"
TASK_ID = "charge/order=c1"
LONG_NOTE = "refunded in full after the customer wrote in about a double charge on the card"


class Crash(BaseException):
    """A process dying at a fault point: nothing after it runs, nothing is recorded."""


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No store from the outer environment, and plain (non-terminal) Rich output."""
    for name in _ENV_TO_CLEAR:
        monkeypatch.delenv(name, raising=False)


def cli(*args: str) -> Result:
    """Run ``cairn ARGS`` in-process."""
    return CliRunner().invoke(cli_app, list(args))


def row(output: str, first: str) -> list[str]:
    """The whitespace-split cells of the output line that starts with ``first``."""
    for line in output.splitlines():
        cells = line.split()
        if cells and cells[0] == first:
            return cells
    raise AssertionError(f"no row starting with {first!r} in:\n{output}")


def keys_listed(output: str) -> list[str]:
    """The first column of a plain table, header left out."""
    return [line.split()[0] for line in output.splitlines()[1:] if line.strip()][:-1]


def assert_usage_error(result: Result, *words: str, code: int = 2) -> None:
    """Exit ``code``, one line on stderr naming ``words``, no traceback."""
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0], lines[0]


@dataclass
class Charges:
    """A Cairn app with a ``charge`` task that charges an order once, by key."""

    app: Cairn
    task: TaskDef[..., Any]
    clock: FakeClock
    called: list[str]

    def run(self, order: str = "c1") -> Any:
        return self.app.run(self.task, order=order)


def charges(
    url: str,
    clock: FakeClock,
    *,
    on_doubt: Literal["raise", "retry"] = "raise",
    lease: float = LEASE,
) -> Charges:
    """A new app (a new process, as far as the store can tell) on the store at ``url``."""
    app = Cairn(url, clock=clock, lease=lease)
    called: list[str] = []

    def pay(key: str, order: str) -> dict[str, Any]:
        called.append(key)
        return {"charged": order}

    @app.task
    def charge(ctx: Context, order: str) -> Any:
        return ctx.once(f"charge/{order}", pay, order, on_doubt=on_doubt)

    return Charges(app, charge, clock, called)


def crash_at(point: str) -> Any:
    """A fault hook that kills the run at ``point``."""

    def hook(at: str, task_id: str, seq: int, name: str) -> None:
        if at == point:
            raise Crash(f"killed at {at} of {name}")

    return hook


def crash_after_claim(url: str, clock: FakeClock, **options: Any) -> Charges:
    """Run ``charge(c1)`` and die once its key is claimed, before the charge is made."""
    first = charges(url, clock, **options)
    set_fault_hook(first.app, crash_at("after_claim"))
    with pytest.raises(Crash):
        first.run()
    first.app.close()
    return first


def other_host(url: str, after: FakeClock, **options: Any) -> Charges:
    """An app on another machine whose clock is past the crashed run's lease."""
    later = FakeClock(after.now() + timedelta(seconds=LEASE * 10))
    resumed = charges(url, later, **options)
    resumed.app.owner = OTHER_HOST_OWNER
    return resumed


@pytest.fixture
def url(store_url: str) -> str:
    """The test's store, once per backend (a SQLite file, a PostgreSQL database)."""
    return store_url


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    """The test's store opened through the public API, to check what the CLI did."""
    opened = open_store(url)
    yield opened
    opened.close()


@pytest.fixture
def in_doubt(url: str) -> Iterator[Charges]:
    """Key ``charge/c1`` in doubt for real: its claimant crashed after claiming it, and
    the task, resumed from another host, failed with InDoubtOperation. Yields the
    resuming app (to run the task again)."""
    first = crash_after_claim(url, FakeClock())
    resumed = other_host(url, first.clock)
    with pytest.raises(TaskFailed) as failed:
        resumed.run()
    assert failed.value.error["type"] == "cairn.errors.InDoubtOperation"
    assert isinstance(failed.value.__cause__, InDoubtOperation)
    yield resumed
    resumed.app.close()


# -- the audit log ------------------------------------------------------------------------
@dataclass(frozen=True)
class AuditLog:
    """A store with four keys: two charges at ``start``, a scoped refund and a
    declined charge two days later."""

    url: str
    start: datetime


@pytest.fixture
def log(url: str) -> AuditLog:
    """Build the audit-log store; ``start`` is three days before the real now."""
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(days=3)
    clock = FakeClock(start)
    app = Cairn(url, clock=clock)

    def pay(key: str, order: str) -> dict[str, Any]:
        if order == "bad":
            raise Permanent("card declined")
        return {"charged": order, "amount": 100}

    def refund(key: str) -> str:
        return LONG_NOTE

    @app.task
    def charge(ctx: Context, order: str) -> Any:
        return ctx.once(f"charge/{order}", pay, order)

    @app.task
    def give_back(ctx: Context, order: str) -> Any:
        return ctx.once(f"refund/{order}", refund, scope="billing")

    app.run(charge, order="a1")
    clock.advance(60)
    app.run(charge, order="a2")
    clock.advance(2 * 86400)
    app.run(give_back, order="a1")
    clock.advance(60)
    with pytest.raises(TaskFailed):
        app.run(charge, order="bad")
    app.close()
    return AuditLog(url, start)


def test_ops_lists_completed_operations(log: AuditLog) -> None:
    """Each key shows its task, step, status, calls, times and a short result; the
    summary counts keys and redundant runs over the whole store."""
    result = cli("ops", "--store", log.url)
    assert result.exit_code == 0, result.output
    header = result.stdout.splitlines()[0].split()
    assert header[:4] == ["key", "scope", "task", "step"]
    cells = row(result.stdout, "charge/a1")
    assert cells[1:6] == ["-", "charge/order=a1", "1", "completed", "1"]
    assert log.start.strftime("%Y-%m-%d") in cells
    assert '{"charged":"a1","amount":100}' in result.stdout
    refund = row(result.stdout, "refund/a1")
    assert refund[1:3] == ["billing", "give_back/order=a1"]
    assert LONG_NOTE[:40] in result.stdout
    assert LONG_NOTE not in result.stdout  # cut to a short result
    declined = row(result.stdout, "charge/bad")
    assert declined[4] == "failed"
    assert "Permanent: card declined" in result.stdout
    summary = result.stdout.splitlines()[-1]
    assert summary == "4 keys, 0 ran more than once (redundant-execution rate 0.0%)"


def test_ops_filters_by_prefix_task_and_status(log: AuditLog) -> None:
    """--prefix, --task and --status each narrow the list; the summary stays store-wide."""
    refunds = cli("ops", "--store", log.url, "--prefix", "refund/")
    assert keys_listed(refunds.stdout) == ["refund/a1"]
    assert refunds.stdout.splitlines()[-1].startswith("4 keys,")
    one_task = cli("ops", "--store", log.url, "--task", "charge/order=a2")
    assert keys_listed(one_task.stdout) == ["charge/a2"]
    failed = cli("ops", "--store", log.url, "--status", "failed")
    assert keys_listed(failed.stdout) == ["charge/bad"]
    assert "scope" not in failed.stdout.splitlines()[0]  # no scoped key shown
    nothing = cli("ops", "--store", log.url, "--prefix", "nope/")
    assert nothing.exit_code == 0
    assert "no operations match" in nothing.stderr


def test_ops_since_takes_iso_times_and_ages(log: AuditLog) -> None:
    """--since keeps keys first claimed at or after a time: ISO 8601 (a naive time is
    UTC; a date is its midnight UTC) or an age before now such as 36h or 7d."""
    later = ["refund/a1", "charge/bad"]
    naive = (log.start + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%S")
    shifted = (log.start + timedelta(days=1)).astimezone(timezone(timedelta(hours=2)))
    midnight = (log.start + timedelta(days=2)).date().isoformat()
    for since in (naive, shifted.isoformat(), midnight, "36h", "1.5d"):
        result = cli("ops", "--store", log.url, "--since", since)
        assert result.exit_code == 0, result.output
        assert keys_listed(result.stdout) == later, since
    everything = cli("ops", "--store", log.url, "--since", "7d")
    assert len(keys_listed(everything.stdout)) == 4
    exact = cli("ops", "--store", log.url, "--since", log.start.isoformat())
    assert len(keys_listed(exact.stdout)) == 4  # at or after: the first keys count


def test_ops_json_has_operations_and_rate(log: AuditLog) -> None:
    """--json prints the operations and the store-wide redundant-execution figures."""
    result = cli("ops", "--store", log.url, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["keys"], data["redundant_keys"], data["redundant_execution_rate"]) == (4, 0, 0.0)
    by_key = {op["key"]: op for op in data["operations"]}
    assert list(by_key) == ["charge/a1", "charge/a2", "refund/a1", "charge/bad"]
    first = by_key["charge/a1"]
    assert first["result"] == {"charged": "a1", "amount": 100}
    assert (first["task_id"], first["step_seq"], first["calls"]) == ("charge/order=a1", 1, 1)
    assert first["first_claimed_at"] == log.start.isoformat()
    assert first["in_doubt"] is False
    assert by_key["refund/a1"]["scope"] == "billing"
    assert by_key["charge/bad"]["error"]["type"] == "cairn.errors.Permanent"
    assert by_key["charge/bad"]["permanent"] is True


def test_ops_csv_has_a_header_and_one_row_per_key(log: AuditLog) -> None:
    """--csv writes a header row and one row per key that the csv module reads back."""
    result = cli("ops", "--store", log.url, "--csv")
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [r["key"] for r in rows] == ["charge/a1", "charge/a2", "refund/a1", "charge/bad"]
    assert rows[0]["task"] == "charge/order=a1"
    assert rows[0]["status"] == "completed"
    assert json.loads(rows[0]["result"]) == {"charged": "a1", "amount": 100}
    assert rows[2]["scope"] == "billing"
    assert rows[2]["result"] == json.dumps(LONG_NOTE)  # in full, not cut
    assert rows[3]["error"] == "cairn.errors.Permanent: card declined"
    assert rows[3]["completed_at"] == ""


def test_ops_limit_notes_that_more_exist(log: AuditLog) -> None:
    """--limit N shows the N oldest keys and says on stderr that more exist."""
    result = cli("ops", "--store", log.url, "--limit", "2")
    assert keys_listed(result.stdout) == ["charge/a1", "charge/a2"]
    assert "more exist" in result.stderr
    assert "more exist" not in cli("ops", "--store", log.url, "--limit", "0").stderr


def test_ops_bad_listing_options_exit_2(log: AuditLog, tmp_path: Path) -> None:
    """Unknown status, a bad --since, --json with --csv, --status with --in-doubt and a
    missing store each stop with one red line and exit 2, creating nothing."""
    assert_usage_error(cli("ops", "--store", log.url, "--status", "done"), "unknown status")
    assert_usage_error(cli("ops", "--store", log.url, "--since", "last week"), "--since")
    assert_usage_error(cli("ops", "--store", log.url, "--json", "--csv"), "--json or --csv")
    both = cli("ops", "--store", log.url, "--in-doubt", "--status", "claimed")
    assert_usage_error(both, "--in-doubt or --status")
    missing = tmp_path / "nothing.db"
    assert_usage_error(cli("ops", "--store", str(missing)), "no cairn store")
    assert not missing.exists()


# -- keys in doubt ------------------------------------------------------------------------
def test_in_doubt_key_is_listed(in_doubt: Charges, url: str, store: Store) -> None:
    """A key whose claimant crashed, found by a run on another host: marked in_doubt,
    the task failed, and `cairn ops --in-doubt` lists it (completed keys are not)."""
    op = store.get_operation("", KEY)
    assert op is not None
    assert op.status == "in_doubt"
    in_doubt.run("c2")  # a completed key, which --in-doubt leaves out
    result = cli("ops", "--store", url, "--in-doubt")
    assert result.exit_code == 0, result.output
    assert keys_listed(result.stdout) == [KEY]
    assert row(result.stdout, KEY)[1:4] == [TASK_ID, "1", "in_doubt"]
    assert "cairn ops resolve" in result.stderr
    data = json.loads(cli("ops", "--store", url, "--in-doubt", "--json").stdout)
    assert [(o["key"], o["in_doubt"]) for o in data["operations"]] == [(KEY, True)]


def test_claimed_key_of_a_dead_claimant_is_listed(url: str, store: Store) -> None:
    """A key left 'claimed' by a crashed attempt counts as in doubt once its claimant
    can no longer record (here: another owner took the task, moving its fence), while
    a claim whose attempt still holds a live lease does not."""
    # A clock at the real now and a long lease: the crashed claimant's lease is live.
    first = crash_after_claim(url, FakeClock(datetime.now(UTC)), lease=3600)
    alive = cli("ops", "--store", url, "--in-doubt")
    assert alive.exit_code == 0, alive.output
    assert keys_listed(alive.stdout) == []
    assert "no operations match" in alive.stderr
    assert cli("ops", "--store", url).stdout.splitlines()[1].endswith("  in progress")
    task = store.get_task(TASK_ID)
    assert task is not None
    moment = first.clock.now()
    assert store.claim_task(TASK_ID, task.fence, OTHER_HOST_OWNER, moment, moment, owner_gone=True)
    gone = cli("ops", "--store", url, "--in-doubt")
    assert keys_listed(gone.stdout) == [KEY]
    assert row(gone.stdout, KEY)[3] == "claimed"
    assert "its claimant died" in gone.stdout
    op = store.get_operation("", KEY)
    assert op is not None
    assert op.status == "claimed"  # listing only looks; it changes nothing


# -- settling keys -------------------------------------------------------------------------
def test_resolve_result_completes_the_key_and_reruns_the_task(
    in_doubt: Charges, url: str, store: Store
) -> None:
    """--result JSON completes the key with that result and moves the failed task back
    to pending; running it again returns the result without calling the function."""
    result = cli("ops", "resolve", KEY, "--result", '{"ok": true}', "--store", url)
    assert result.exit_code == 0, result.output
    assert f"'{KEY}': in_doubt -> completed" in result.stdout
    assert f"task {TASK_ID}: failed -> pending" in result.stdout
    op = store.get_operation("", KEY)
    assert op is not None
    assert (op.status, op.result, op.calls) == ("completed", '{"ok":true}', 1)
    task = store.get_task(TASK_ID)
    assert task is not None
    assert task.status == "pending"
    assert in_doubt.run() == {"ok": True}
    assert in_doubt.called == []


def test_resolve_retry_calls_the_function_again(in_doubt: Charges, url: str, store: Store) -> None:
    """--retry releases the key: the next run calls the function again with the same
    key, and the key's calls count both claims. --store may go before the subcommand."""
    result = cli("ops", "--store", url, "resolve", KEY, "--retry")
    assert result.exit_code == 0, result.output
    assert "in_doubt -> released" in result.stdout
    assert in_doubt.run() == {"charged": "c1"}
    assert in_doubt.called == [KEY]
    op = store.get_operation("", KEY)
    assert op is not None
    assert (op.status, op.calls) == ("completed", 2)


def test_resolve_fail_makes_the_next_run_raise_operation_failed(
    in_doubt: Charges, url: str, store: Store
) -> None:
    """--fail marks the key failed for good and leaves its task failed (requeueing it
    would only fail it again); retried by hand, the task raises OperationFailed and
    the function is not called."""
    result = cli("ops", "resolve", KEY, "--fail", "--store", url)
    assert result.exit_code == 0, result.output
    assert "in_doubt -> failed" in result.stdout
    op = store.get_operation("", KEY)
    assert op is not None
    assert (op.status, op.permanent) == ("failed", True)
    assert "operator" in (op.error or "")
    task = store.get_task(op.task_id)
    assert task is not None
    assert task.status == "failed"
    assert cli("retry", op.task_id, "--store", url).exit_code == 0
    with pytest.raises(TaskFailed) as failed:
        in_doubt.run()
    assert isinstance(failed.value.__cause__, OperationFailed)
    assert failed.value.error["type"] == "cairn.errors.OperationFailed"
    assert in_doubt.called == []


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ((KEY,), ("exactly one",)),
        ((KEY, "--retry", "--fail"), ("exactly one",)),
        ((KEY, "--result", "{}", "--retry"), ("exactly one",)),
        ((KEY, "--result", "{oops"), ("not valid JSON", "line 1")),
        (("charge/none", "--retry"), ("no operation charge/none",)),
        ((KEY, "--scope", "billing", "--retry"), ("no operation", "scope 'billing'")),
    ],
)
def test_resolve_usage_errors_change_nothing(
    in_doubt: Charges, url: str, store: Store, args: tuple[str, ...], words: tuple[str, ...]
) -> None:
    """No flag, two flags, invalid JSON and an unknown key each exit 2 with one red line
    and leave the key in doubt and the task failed."""
    assert_usage_error(cli("ops", "resolve", *args, "--store", url), *words)
    op = store.get_operation("", KEY)
    task = store.get_task(TASK_ID)
    assert op is not None
    assert task is not None
    assert (op.status, task.status) == ("in_doubt", "failed")


def test_resolve_refuses_completed_and_live_keys(url: str, store: Store) -> None:
    """A completed key cannot be resolved, nor one claimed by an attempt that still
    runs: exit 1 and nothing changes."""
    crash_after_claim(url, FakeClock(datetime.now(UTC)), lease=3600)
    live = cli("ops", "resolve", KEY, "--retry", "--store", url)
    assert_usage_error(live, "still running", "Nothing changed", code=1)
    done = charges(url, FakeClock())
    done.run("c2")
    completed = cli("ops", "resolve", "charge/c2", "--result", "1", "--store", url)
    assert_usage_error(completed, "completed already", code=1)
    for key, status in ((KEY, "claimed"), ("charge/c2", "completed")):
        op = store.get_operation("", key)
        assert op is not None
        assert op.status == status
    done.app.close()


# -- redundant execution --------------------------------------------------------------------
def test_redundant_execution_rate_counts_keys_run_twice(url: str) -> None:
    """A key whose function ran, then ran again after a crash (on_doubt="retry"),
    shows two calls and makes the summary 1 of 2 keys."""
    first = charges(url, FakeClock(), on_doubt="retry")
    set_fault_hook(first.app, crash_at("after_act"))
    with pytest.raises(Crash):
        first.run()
    first.app.close()
    resumed = other_host(url, first.clock, on_doubt="retry")
    assert resumed.run() == {"charged": "c1"}
    resumed.run("c2")
    assert first.called + resumed.called == [KEY, KEY, "charge/c2"]
    result = cli("ops", "--store", url)
    assert row(result.stdout, KEY)[4] == "2"  # key, task, step, status, calls
    assert row(result.stdout, "charge/c2")[4] == "1"
    summary = result.stdout.splitlines()[-1]
    assert summary == "2 keys, 1 ran more than once (redundant-execution rate 50.0%)"
    data = json.loads(cli("ops", "--store", url, "--json").stdout)
    assert (data["keys"], data["redundant_keys"], data["redundant_execution_rate"]) == (2, 1, 0.5)
    resumed.app.close()


def test_a_late_result_is_shown_beside_the_keys_own(url: str, store: Store) -> None:
    """A claimant that lost its task and learned what the outside world did keeps
    that only as the key's late result: `cairn ops` shows it after the key's own
    outcome, and --json and --csv carry it with its time."""
    clock = FakeClock()
    done = charges(url, clock)
    assert done.run() == {"charged": "c1"}
    done.app.close()
    assert store.record_late_result("", KEY, '{"charged": "c1", "late": true}', clock.now())
    table = cli("ops", "--store", url)
    assert table.exit_code == 0, table.output
    assert "late, from a claimant that had lost its task" in table.output
    listed = json.loads(cli("ops", "--store", url, "--json").stdout)
    (entry,) = [op for op in listed["operations"] if op["key"] == KEY]
    assert entry["result"] == {"charged": "c1"}
    assert entry["late_result"] == {"charged": "c1", "late": True}
    assert entry["late_at"] is not None
    (line,) = list(csv.DictReader(io.StringIO(cli("ops", "--store", url, "--csv").stdout)))
    assert json.loads(line["late_result"]) == {"charged": "c1", "late": True}
