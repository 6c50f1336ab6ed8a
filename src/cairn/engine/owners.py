"""Who owns a task: this process's identity, and whether another owner still lives.

An owner string is ``host/pid/start/nonce``. ``host`` joins the hostname with the
kernel's boot id, so a reboot or a container with a recycled hostname never looks
like the same host. ``start`` is the process's start time in clock ticks since
boot, so a recycled pid is not mistaken for the owner. On the same host, a task
whose owner process is gone can be reclaimed at once, without waiting for its
lease to expire: that is how a restart after SIGKILL resumes immediately.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Literal

from cairn.store.records import OperationRecord, TaskRecord


@dataclass(frozen=True, slots=True)
class Owner:
    host: str
    pid: int
    start: str
    nonce: str

    def __str__(self) -> str:
        return f"{self.host}/{self.pid}/{self.start}/{self.nonce}"

    @classmethod
    def parse(cls, text: str) -> Owner | None:
        parts = text.split("/")
        if len(parts) != 4 or not parts[1].isdigit():
            return None
        return cls(parts[0], int(parts[1]), parts[2], parts[3])


@cache
def _host_id() -> str:
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        boot = "noboot"
    return f"{socket.gethostname()}-{boot}"


def _process_start(pid: int) -> str | None:
    """The process's start time in ticks since boot; "?" where it cannot be read;
    None if the process does not exist (or is a zombie that runs nothing)."""
    if not _HAVE_PROC:
        return "?" if _pid_exists(pid) else None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        return "?"
    # Fields counted after the parenthesised command name, which may itself
    # contain spaces or parentheses: state is field 3, starttime field 22.
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None  # killed, not yet reaped by its parent
    return fields[19]


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_HAVE_PROC = Path("/proc/self/stat").exists()


@cache
def _current(pid: int) -> Owner:
    # Keyed by pid so a forked child gets its own identity.
    return Owner(_host_id(), pid, _process_start(pid) or "?", uuid.uuid4().hex[:8])


def current_owner() -> Owner:
    """This process's identity."""
    return _current(os.getpid())


def owner_is_gone(owner_text: str | None) -> bool:
    """True only if we can be sure the owning process no longer runs.

    An owner on another host is never known to be gone: only its lease can say.
    """
    if owner_text is None:
        return True
    owner = Owner.parse(owner_text)
    if owner is None or owner.host != _host_id():
        return False
    start = _process_start(owner.pid)
    if start is None:
        return True
    return owner.start not in ("?", start)


# Tasks this process is running right now, in any thread or event loop, under
# any app, keyed by (store, task id): two apps on two stores may each run a task
# of the same id. A task still marked ours in the store but absent here was left
# behind by an interrupted call (Ctrl-C in a REPL, say) and may be taken up again.
# Each with the fence it runs under.
_active: dict[tuple[str, str], int] = {}
_active_lock = threading.Lock()

# Claims made by this process are serialised with the take-over check, so a task
# we have just claimed is marked active before any other thread of ours can see
# it "running under our owner but not active" and take it over.
claim_lock = threading.RLock()


def mark_active(store: str, task_id: str, fence: int) -> None:
    """``task_id`` of the store whose identity is ``store`` now runs here, under ``fence``."""
    with _active_lock:
        _active[store, task_id] = fence


def mark_inactive(store: str, task_id: str) -> None:
    with _active_lock:
        _active.pop((store, task_id), None)


def is_active_here(store: str, task_id: str) -> bool:
    with _active_lock:
        return (store, task_id) in _active


def runs_here_at(store: str, task_id: str, fence: int) -> bool:
    """True if a thread or event loop of this process runs ``task_id`` under ``fence``."""
    with _active_lock:
        return _active.get((store, task_id)) == fence


# -- when another owner's running task may be taken over ---------------------------------
TakeoverReason = Literal["interrupted", "gone", "lapsed"]
# ``Cairn(lease=...)`` unless given; what a reader without the app (the CLI) assumes.
DEFAULT_LEASE_SECONDS = 30.0
# Beyond the lease, a taker waits one heartbeat interval and a reconnect more
# before it counts a lease as lapsed: an owner cut off from the store by an
# outage shorter than its lease renews within about a second of the store's
# return, and must find its task still its own.
_RECONNECT_SLACK = timedelta(seconds=2)


def takeover_grace(lease: timedelta) -> timedelta:
    """How long past its expiry a lease is still honoured by a taker: a third of a
    lease (one missed heartbeat) and two seconds (a reconnect)."""
    return lease / 3 + _RECONNECT_SLACK


def lease_lapsed(task: TaskRecord, now: datetime, grace: timedelta) -> bool:
    """True if the task's lease expired more than ``grace`` before ``now``."""
    expires = task.lease_expires_at
    return expires is not None and expires + grace < now


def takeover_reason(
    task: TaskRecord, *, me: str, store: str, now: datetime, grace: timedelta
) -> TakeoverReason | None:
    """Why this process may take over the running ``task``, or None to leave it be.

    ``interrupted``: it is ours, but no thread or event loop of ours runs it (an
    interrupted call left it). ``gone``: its owner process is known to be dead
    (same host only). ``lapsed``: its lease expired more than ``grace`` ago.
    """
    if task.owner == me:
        return None if is_active_here(store, task.id) else "interrupted"
    if owner_is_gone(task.owner):
        return "gone"
    if lease_lapsed(task, now, grace):
        return "lapsed"
    return None


def claimant_alive(
    op: OperationRecord, claimant: TaskRecord | None, now: datetime, grace: timedelta
) -> bool:
    """True if the attempt that claimed ``op`` may still record an outcome: its
    task still runs under the claim's fence, its lease has not lapsed, and its
    owner process is not known to be gone. (A claim of the caller's own task is
    judged by the caller, which knows what it runs.)"""
    if claimant is None or claimant.status != "running" or claimant.fence != op.claim_fence:
        return False
    return not lease_lapsed(claimant, now, grace) and not owner_is_gone(claimant.owner)


# What the claim on a key says about the attempt that holds it: ``alive``, it
# may still record; ``gone``, its task still holds the claim's fence but its
# owner process is known to be dead; ``dead``, its task stopped or moved on,
# or its lease lapsed.
ClaimantState = Literal["alive", "dead", "gone"]


def claimant_state(
    op: OperationRecord, claimant: TaskRecord | None, now: datetime, grace: timedelta
) -> ClaimantState:
    """How the attempt that claimed ``op`` stands (``ClaimantState``); a claim
    of the caller's own task is judged by the caller, which knows what it runs."""
    if claimant_alive(op, claimant, now, grace):
        return "alive"
    if claimant is not None and claimant.fence == op.claim_fence and owner_is_gone(claimant.owner):
        return "gone"
    return "dead"


# A claim younger than this many leases may belong to a process that was only
# paused (SIGSTOP, a suspended machine, a long GC or swap storm) and wakes to
# send its request after all; an older one is very unlikely to. Only a
# heuristic for the warnings: the guard (ctx.before_send) is what stops such
# a process.
MAY_ACT_LEASES = 10


def owner_alive_here(owner_text: str | None) -> int | None:
    """The pid of ``owner_text``'s process if it runs on this host now (stopped
    or not); None if it does not, or if that cannot be known (another host)."""
    owner = None if owner_text is None else Owner.parse(owner_text)
    if owner is None or owner.host != _host_id():
        return None
    start = _process_start(owner.pid)
    if start is None or owner.start not in ("?", start):
        return None
    return owner.pid


def claimant_may_act(
    op: OperationRecord, claimant: TaskRecord | None, now: datetime, lease: timedelta
) -> str | None:
    """Why the attempt that claimed ``op`` (its lease lapsed) may still wake and
    act, in words, or None if cairn can tell it cannot or has no sign that it
    may. Its process still running on this host says so for sure; a claim
    younger than ``MAY_ACT_LEASES`` leases says it may (a process only paused)."""
    if claimant is not None and claimant.fence == op.claim_fence:
        pid = owner_alive_here(claimant.owner)
        if pid is not None:
            return f"its process (pid {pid}) still exists on this host, stopped or busy"
        if owner_is_gone(claimant.owner):
            return None
    age = (now - op.claimed_at).total_seconds()
    if age < lease.total_seconds() * MAY_ACT_LEASES:
        return (
            f"it claimed the key only {age:.0f}s ago (a lease is {lease.total_seconds():g}s), "
            "so its process may have been paused rather than killed"
        )
    return None


def claim_abandoned(
    op: OperationRecord, claimant: TaskRecord | None, now: datetime, grace: timedelta
) -> bool:
    """True if ``op`` is still ``claimed`` by an attempt that can no longer
    record an outcome: the key is in doubt though its status does not say so
    yet. What ``cairn ops`` and the dashboard show."""
    return op.status == "claimed" and claimant_state(op, claimant, now, grace) != "alive"
