"""Retention that runs itself: how long finished tasks are kept, by status and
by batch name, applied by the workers in small chunks.

``Cairn(url, retention=Retention(completed="30d", failed="90d"))`` keeps a
batch's completed tasks 30 days after they finished and its failed ones 90;
a status without an age is kept for ever. Several policies may be given: a
batch takes the first whose ``batches`` pattern (``fnmatch``: ``nightly-*``)
matches its name; a batch no pattern matches is kept. Tasks run outside a batch
are not touched (``cairn prune`` has no say over them either).

Every ``every`` (an hour by default) one worker of the store takes the run's
turn (``Store.take_turn`` on the store's own note: one statement, so two
workers never run it at once) and then deletes, one chunk of ``chunk`` tasks
per turn of its main loop, each chunk one short transaction beside the claims:
never a long lock. A batch with a task pending, running or waiting is not
touched (checked in the statement that picks each chunk). A batch's row goes
with its last task. After a run that deleted something, the blobs no record
refers to any more are collected (``cairn.blobs.gc``, with its grace period).

The policy is written into the store when a worker starts, so ``cairn prune
--policy`` and the dashboard show it, with the next run's time.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from fnmatch import fnmatchcase

from cairn.blobs.gc import collect_garbage
from cairn.blobs.protocol import BlobStore
from cairn.clock import Clock
from cairn.errors import ConfigurationError, StoreError
from cairn.store.admin import AdminStore
from cairn.store.records import FINISHED_STATUSES

log = logging.getLogger("cairn.retention")

POLICY_NOTE = "retention_policy"  # the policies, as JSON, in the store's notes
NEXT_RUN_NOTE = "retention_next_run"  # when the next run is due (ISO 8601, UTC)
DEFAULT_EVERY = timedelta(hours=1)
DEFAULT_CHUNK = 200
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_STATUSES = ("completed", "failed", "cancelled")

Age = timedelta | str | None


def parse_age(value: Age, what: str) -> timedelta | None:
    """``value`` as a timedelta: a timedelta, or text such as ``30d``, ``12h``,
    ``90m``, ``2w``; None stays None (kept for ever)."""
    if value is None or isinstance(value, timedelta):
        age = value
    else:
        found = _AGE.match(str(value))
        if found is None:
            raise ConfigurationError(
                f"Retention {what}={value!r} is not an age: give a timedelta or text "
                "such as '30d', '12h', '90m' or '2w'."
            )
        age = timedelta(seconds=float(found[1]) * _UNITS[found[2]])
    if age is not None and age <= timedelta(0):
        raise ConfigurationError(f"Retention {what} must be longer than zero, not {age}.")
    return age


def _check_pattern(batches: object) -> None:
    if not isinstance(batches, str) or not batches or "\x00" in batches:
        raise ConfigurationError(
            f"Retention batches={batches!r}: give a batch-name pattern such as "
            "'nightly-*' ('*' for every batch)."
        )


@dataclass(frozen=True)
class Retention:
    """How long a batch's finished tasks are kept after they finished, by status
    (None: for ever), for batches whose name matches ``batches``."""

    completed: timedelta | None = None
    failed: timedelta | None = None
    cancelled: timedelta | None = None
    batches: str = "*"

    def __init__(
        self,
        *,
        completed: Age = None,
        failed: Age = None,
        cancelled: Age = None,
        batches: str = "*",
    ) -> None:
        _check_pattern(batches)
        object.__setattr__(self, "completed", parse_age(completed, "completed"))
        object.__setattr__(self, "failed", parse_age(failed, "failed"))
        object.__setattr__(self, "cancelled", parse_age(cancelled, "cancelled"))
        object.__setattr__(self, "batches", batches)

    def ages(self) -> Iterator[tuple[str, timedelta]]:
        """Each status this policy deletes, with how long it is kept."""
        for status in _STATUSES:
            age = getattr(self, status)
            if age is not None:
                yield status, age

    def as_json(self) -> dict[str, object]:
        """The policy as the store notes it (ages in seconds)."""
        ages = {status: age.total_seconds() for status, age in self.ages()}
        return {"batches": self.batches, **ages}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Retention:
        def age(status: str) -> timedelta | None:
            seconds = data.get(status)
            return None if seconds is None else timedelta(seconds=float(str(seconds)))

        return cls(
            batches=str(data.get("batches", "*")),
            completed=age("completed"),
            failed=age("failed"),
            cancelled=age("cancelled"),
        )


def policies_of(given: Retention | Sequence[Retention] | None) -> tuple[Retention, ...]:
    """``Cairn(retention=...)`` as a tuple of policies, checked."""
    if given is None:
        return ()
    policies = (given,) if isinstance(given, Retention) else tuple(given)
    for policy in policies:
        if not isinstance(policy, Retention):
            raise ConfigurationError(
                f"retention= takes Retention(...) policies, not {type(policy).__name__}"
            )
    return policies


def policy_for(policies: Sequence[Retention], batch: str) -> Retention | None:
    """The first policy whose pattern matches ``batch``."""
    return next((p for p in policies if fnmatchcase(batch, p.batches)), None)


def noted_policies(store: AdminStore) -> tuple[Retention, ...]:
    """The policies a worker wrote into ``store`` (none if no worker did)."""
    text = store.meta_value(POLICY_NOTE)
    return () if text is None else tuple(Retention.from_json(p) for p in json.loads(text))


def note_policies(store: AdminStore, policies: Sequence[Retention]) -> None:
    """Write ``policies`` into ``store``'s notes, for the CLI and the dashboard."""
    store.put_meta(POLICY_NOTE, json.dumps([p.as_json() for p in policies]))


def next_run(store: AdminStore) -> datetime | None:
    """When the next run is due, as the store notes it (None: never run)."""
    text = store.meta_value(NEXT_RUN_NOTE)
    return None if text is None else datetime.fromisoformat(text)


def describe_policies(policies: Sequence[Retention], due: datetime | None) -> list[str]:
    """Lines saying the policies and the next run (the CLI and the dashboard)."""
    lines = [f"batches {p.batches}: {describe(p)}" for p in policies]
    when = "at a worker's next turn" if due is None else due.isoformat(timespec="seconds")
    return [*lines, f"next run: {when}"]


def describe(policy: Retention) -> str:
    """One policy's ages: ``completed 30d, failed 90d, cancelled kept``."""
    return ", ".join(f"{status} {_age_text(getattr(policy, status))}" for status in _STATUSES)


def _age_text(age: timedelta | None) -> str:
    if age is None:
        return "kept"
    seconds = int(age.total_seconds())
    for unit in ("w", "d", "h", "m"):
        if seconds % _UNITS[unit] == 0:
            return f"{seconds // _UNITS[unit]}{unit}"
    return f"{seconds}s"


@dataclass(frozen=True)
class Expiry:
    """Tasks one run deletes: ``count`` of ``batch`` in ``status``, finished before ``before``."""

    batch: str
    status: str
    before: datetime
    count: int


def planned(store: AdminStore, policies: Sequence[Retention], now: datetime) -> list[Expiry]:
    """What a run at ``now`` would delete (``cairn prune --policy --dry-run``)."""
    found: list[Expiry] = []
    for batch, expiry in _expiries(store, policies, now):
        count = store.count_expired(batch, expiry[0], expiry[1])
        if count:
            found.append(Expiry(batch, expiry[0], expiry[1], count))
    return found


def _expiries(
    store: AdminStore, policies: Sequence[Retention], now: datetime
) -> Iterator[tuple[str, tuple[str, datetime]]]:
    """(batch, (status, finished before)) for each finished batch a policy covers."""
    for batch in store.batch_names():
        policy = policy_for(policies, batch)
        if policy is None:
            continue
        counts = store.batch_statuses(batch)
        if any(c.status not in FINISHED_STATUSES for c in counts):
            continue  # an unfinished batch is not touched
        present = {c.status for c in counts}
        for status, age in policy.ages():
            if status in present:
                yield batch, (status, now - age)


def run_chunks(
    store: AdminStore,
    policies: Sequence[Retention],
    now: datetime,
    *,
    chunk: int = DEFAULT_CHUNK,
    blobs: BlobStore | None = None,
) -> Iterator[int]:
    """One run, a statement at a time: yields after each (the tasks it deleted),
    so a caller spreads the run over its own loop. Blobs are collected at the end
    of a run that deleted something."""
    deleted = 0
    for batch, (status, before) in _expiries(store, policies, now):
        while True:
            gone = store.expire_tasks(batch, status, before, chunk)
            deleted += gone
            yield gone
            if gone < chunk:
                break
    if deleted and blobs is not None:
        report = collect_garbage(store, blobs, now)
        log.info("cairn retention: %d blob(s) no record refers to deleted", len(report.deleted))
    if deleted:
        log.info("cairn retention: %d finished task(s) deleted", deleted)


class Housekeeper:
    """A worker's retention: ``tick`` (from its main loop, about once a second)
    takes the run's turn when it is due, then deletes one chunk per tick."""

    def __init__(
        self,
        store: AdminStore,
        policies: Sequence[Retention],
        clock: Clock,
        *,
        every: timedelta = DEFAULT_EVERY,
        chunk: int = DEFAULT_CHUNK,
        blobs: BlobStore | None = None,
    ) -> None:
        self._store, self._policies, self._clock = store, tuple(policies), clock
        self._every, self._chunk, self._blobs = every, chunk, blobs
        self._run: Iterator[int] | None = None
        self._looked_at = float("-inf")
        self.deleted = 0  # tasks this worker's runs deleted

    def start(self) -> None:
        """Note the policies in the store (the CLI and the dashboard read them)."""
        if self._policies:
            note_policies(self._store, self._policies)

    def tick(self) -> None:
        """Take the turn if it is due (looked at once a minute), or go on with a run."""
        if not self._policies:
            return
        try:
            if self._run is None:
                self._maybe_start()
            elif (gone := next(self._run, None)) is None:
                self._run = None
            else:
                self.deleted += gone
        except StoreError as exc:  # the store says what is wrong; the next turn tries again
            self._run = None
            log.warning("cairn retention: a run stopped (%s)", " ".join(str(exc).split()))

    def _maybe_start(self) -> None:
        moment = self._clock.monotonic()
        if moment - self._looked_at < min(60.0, self._every.total_seconds()):
            return
        self._looked_at = moment
        now = self._clock.now()
        due, then = _iso(now), _iso(now + self._every)
        if self._store.take_turn(NEXT_RUN_NOTE, due, then):
            self._run = run_chunks(
                self._store, self._policies, now, chunk=self._chunk, blobs=self._blobs
            )


def _iso(moment: datetime) -> str:
    """A time as the notes keep it: UTC, to the microsecond, so text sorts as time."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds")
