"""Taking and giving back a shared limit's permits, around one step's call.

The limits themselves (``Rate``, ``Concurrency``, the app's ``LimitBook``) are
plain values in ``cairn.limits``; this module is the part that talks to the
store, as a machine that yields ``Wait`` while there is no room.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cairn.engine.run import Machine, Wait

if TYPE_CHECKING:
    from cairn.engine.run import TaskRun

# A full limit whose permits are held by running calls is asked again after this
# many seconds, doubling up to the cap: any of those calls may end at any moment.
FIRST_POLL = 0.01
MAX_POLL = 0.25
# Up to this fraction is added to every poll, so that many waiters do not all ask
# again in the same instant.
POLL_JITTER = 0.2


@dataclass(frozen=True, slots=True)
class Permit:
    limit: str
    permit: str


def acquire(run: TaskRun, name: str) -> Machine[Permit]:
    """Take a permit of limit ``name``, yielding ``Wait`` while there is no room."""
    limit = run.limits.get(name)
    permit = Permit(name, uuid.uuid4().hex)
    poll = FIRST_POLL
    while True:
        now = run.now()
        refused = run.store.acquire_permit(
            name,
            limit.capacity,
            limit.window,
            permit.permit,
            run.limits.owner,
            run.task_id,
            now,
            now + run.limits.lease,
        )
        if refused is None:
            return permit
        # An ended permit stops counting at a known time: wait exactly that (and
        # a hair more, so waiters do not all ask in the same instant). A held one
        # may end at any moment, so it is polled for, more slowly as time passes.
        if refused.held == 0 and refused.frees_at is not None:
            wait = max(0.0, (refused.frees_at - now).total_seconds())
            wait += random.random() * FIRST_POLL
        else:
            wait = poll
            if refused.frees_at is not None:
                wait = min(wait, max(0.0, (refused.frees_at - now).total_seconds()))
            wait *= 1 + random.random() * POLL_JITTER
            poll = min(poll * 2, MAX_POLL)
        yield Wait(wait)


def release(run: TaskRun, permit: Permit) -> None:
    """The call that held ``permit`` ended, however it ended."""
    run.store.release_permit(permit.limit, permit.permit, run.now())
