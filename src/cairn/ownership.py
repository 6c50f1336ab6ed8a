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
from functools import cache
from pathlib import Path


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
# any app. A task still marked ours in the store but absent here was left behind
# by an interrupted call (Ctrl-C in a REPL, say) and may be taken up again.
_active: set[str] = set()
_active_lock = threading.Lock()

# Claims made by this process are serialised with the take-over check below, so
# a task we have just claimed is marked active before any other thread of ours
# can see it "running under our owner but not active" and take it over.
claim_lock = threading.RLock()


def mark_active(task_id: str) -> None:
    with _active_lock:
        _active.add(task_id)


def mark_inactive(task_id: str) -> None:
    with _active_lock:
        _active.discard(task_id)


def is_active_here(task_id: str) -> bool:
    with _active_lock:
        return task_id in _active


def may_take_over(task_id: str, owner: str | None, lease_expired: bool, me: str) -> bool:
    """May this process claim a running task held by ``owner``?"""
    if owner == me:
        return not is_active_here(task_id)
    return lease_expired or owner_is_gone(owner)
