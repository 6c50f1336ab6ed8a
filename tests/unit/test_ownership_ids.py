"""Owner identities, and when cairn may be sure that an owner process is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cairn.engine.owners import Owner, current_owner, owner_is_gone


def _spawn_idle_child() -> subprocess.Popen[bytes]:
    """A child that does nothing until killed."""
    idle = "import time; time.sleep(60)"  # real-sleep-ok: the child idles until killed
    return subprocess.Popen([sys.executable, "-c", idle])


def _same_host_owner(pid: int, start: str = "?") -> str:
    return str(Owner(current_owner().host, pid, start, "feedbeef"))


def test_current_owner_parses_back() -> None:
    """The owner string this process writes parses back to the same identity."""
    owner = current_owner()
    assert Owner.parse(str(owner)) == owner
    assert owner.pid == os.getpid()


def test_owner_of_a_reaped_process_is_gone() -> None:
    """A pid on this host whose process has exited and been reaped is gone."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert owner_is_gone(_same_host_owner(child.pid))


def test_killed_but_unreaped_process_is_gone() -> None:
    """A zombie (killed, not yet reaped by its parent) runs nothing, so it is gone."""
    child = _spawn_idle_child()
    try:
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        stat = Path(f"/proc/{child.pid}/stat")
        while stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the child did not die"
            time.sleep(0.01)  # real-sleep-ok: waiting on a real subprocess to die
        assert owner_is_gone(_same_host_owner(child.pid))
    finally:
        child.wait()


def test_our_own_process_is_not_gone() -> None:
    """This very process is alive, so its owner string is not gone."""
    assert not owner_is_gone(str(current_owner()))


def test_a_live_child_is_not_gone() -> None:
    """A running child process, with its real start time, is not gone."""
    child = _spawn_idle_child()
    try:
        start = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        assert not owner_is_gone(_same_host_owner(child.pid, start))
        assert not owner_is_gone(_same_host_owner(child.pid, "?"))
    finally:
        child.kill()
        child.wait()


def test_owner_on_another_host_is_never_gone() -> None:
    """An owner on another host may still run: only its lease can tell, never a pid."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not owner_is_gone(str(Owner("elsewhere-0badc0de", child.pid, "1", "feedbeef")))


@pytest.mark.parametrize(
    "garbage",
    ["", "not an owner", "a/b/c/d", "host/12/start", "host/12/start/nonce/extra", "//////"],
)
def test_garbage_owner_is_not_gone(garbage: str) -> None:
    """An owner string cairn cannot parse is never taken as proof that the owner died."""
    assert not owner_is_gone(garbage)


def test_no_owner_at_all_is_gone() -> None:
    """A task with no owner recorded has nobody to wait for."""
    assert owner_is_gone(None)


def test_reused_pid_is_detected_by_start_time() -> None:
    """Our pid with another start time is an earlier process whose pid was reused: gone."""
    me = current_owner()
    assert me.start != "?", "this test needs /proc to read start times"
    impostor = Owner(me.host, me.pid, str(int(me.start) + 12345), me.nonce)
    assert owner_is_gone(str(impostor))
