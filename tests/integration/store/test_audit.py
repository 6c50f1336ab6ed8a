"""The audit trail (``AdminStore.begin_audit`` / ``end_audit`` / ``audit_page``,
``cairn.admin.audit``): each operator action written before it acts and
completed after, paged newest first, redacted.

Every test runs on SQLite and on PostgreSQL (``store_url``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cairn.admin.actions import RETRY, apply_to_task
from cairn.admin.audit import Actor, audit, audit_page
from cairn.admin.operations import resolve
from cairn.admin.signals import send_signal
from cairn.clock import FakeClock
from cairn.redaction import register_secret
from cairn.store import AdminStore, admin, open_store
from cairn.store.records import NewTask

ME = Actor("ui", "night-shift")


@pytest.fixture
def store(store_url: str) -> Iterator[AdminStore]:
    opened = admin(open_store(store_url))
    yield opened
    opened.close()


def test_an_entry_is_written_before_the_action_and_completed_after(
    store: AdminStore, clock: FakeClock
) -> None:
    """Inside the action the entry is there with no count; after it, with the
    count and the sentence; an error leaving the action is its outcome."""
    with audit(store, ME, "retry", "task t", clock.now(), {"why": "flaky"}) as entry:
        (inside,) = store.audit_page(None, 10)
        assert (inside.actor, inside.count, inside.outcome) == ("ui:night-shift", None, None)
        entry.done(3, "3 tasks moved")
    (after,) = store.audit_page(None, 10)
    assert (after.count, after.outcome, after.detail) == (3, "3 tasks moved", '{"why": "flaky"}')
    assert after.at == clock.now()
    with pytest.raises(RuntimeError), audit(store, ME, "cancel", "task u", clock.now()):
        raise RuntimeError("store went away")
    newest = store.audit_page(None, 10)[0]
    assert (newest.action, newest.count) == ("cancel", None)
    assert newest.outcome == "error: RuntimeError: store went away"


def test_pages_run_newest_first_and_end(store: AdminStore, clock: FakeClock) -> None:
    """Entries page newest first by id, each page older than the last."""
    for n in range(5):
        with audit(store, ME, "retry", f"task {n}", clock.now()) as entry:
            entry.done(1, "ok")
    first = audit_page(store, size=2)
    assert [e.target for e in first.rows] == ["task 4", "task 3"]
    second = audit_page(store, before=first.older, size=2)
    assert [e.target for e in second.rows] == ["task 2", "task 1"]
    last = audit_page(store, before=second.older, size=2)
    assert [e.target for e in last.rows] == ["task 0"]
    assert last.older is None


def test_each_admin_action_is_audited_with_its_count(store: AdminStore, clock: FakeClock) -> None:
    """A retry, a refused retry, a signal and a resolve each leave one entry
    saying who, what, on what and how many tasks changed."""
    now = clock.now()
    store.enqueue([NewTask("t", "job", "{}", "json")], now)
    apply_to_task(store, RETRY, "t", now, actor=ME)  # pending: refused, 0 changed
    send_signal(store, "t", "approval", {"ok": True}, now, actor=ME)
    resolve(store, "", "nonesuch", "released", permanent=False, now=now, actor=ME)
    rows = audit_page(store).rows
    assert [(e.action, e.target, e.count) for e in rows] == [
        ("resolve", "operation nonesuch", 0),
        ("signal", "task t", 1),
        ("retry", "task t", 0),
    ]
    assert "only failed or cancelled tasks can be retried" in (rows[2].outcome or "")
    assert rows[1].detail == '{"signal": "approval"}'


def test_a_secret_never_reaches_the_trail(store: AdminStore, clock: FakeClock) -> None:
    """A registered secret in the target, the detail or the outcome is stored
    redacted."""
    secret = "sk-test-abcdefghijklmnopqrstuv0123"
    register_secret(secret)
    with audit(store, ME, "signal", f"task {secret}", clock.now(), {"token": secret}) as e:
        e.done(0, f"refused {secret}")
    (entry,) = store.audit_page(None, 10)
    for text in (entry.target, entry.detail or "", entry.outcome or ""):
        assert secret not in text
        assert "[redacted]" in text or "redacted" in text.lower()
