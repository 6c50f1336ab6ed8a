"""A full disk under the blob store is handled like a full store disk.

The blob store lives on a small tmpfs (tests/filesystems.py) that a step fills
while it works; the SQLite store is on the ordinary disk. The task is handed
back (pending, no attempt spent), not failed; the error is one clear line
naming the blob store, its path and what to do; the value that did not fit is
kept in the store itself, so the step that produced it is not called again;
and once space is freed, the same call goes on to the end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from cairn import BlobStoreFull, Cairn, Context, StoreError
from cairn.clock import FakeClock
from tests.filesystems import fill, small_tmpfs

BIG = 200_000  # characters in each step's output: above the inline limit, and
# more than a filled tmpfs has left


def _parts(calls: list[int], blobs: Path, fillers: list[Path]) -> Callable[[int], str]:
    def part(i: int) -> str:
        calls.append(i)
        if i == 1:
            fillers.append(fill(blobs))  # the disk fills while this step works
        return str(i) * BIG

    return part


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_full_blob_store_hands_the_task_back_and_the_same_call_goes_on(
    mode: str, tmp_path: Path
) -> None:
    """The step whose output no longer fits in the blob store ran once: its value
    is kept in the store, the task is handed back pending with the blob store's
    clear error, and after space is freed the same app.run finishes with every
    step's function called exactly once."""
    calls: list[int] = []
    fillers: list[Path] = []
    with small_tmpfs(tmp_path / "blobs", "1m") as blobs:
        app = Cairn(
            f"sqlite:///{tmp_path / 'cairn.db'}", blobs=str(blobs), inline_limit=1024,
            clock=FakeClock(),
        )  # fmt: skip
        part = _parts(calls, blobs, fillers)

        if mode == "sync":

            @app.task
            def big(ctx: Context) -> int:
                return sum(len(ctx.step(f"part {i}", part, i)) for i in range(3))

        else:

            async def apart(i: int) -> str:
                return part(i)

            @app.task
            async def big(ctx: Context) -> int:
                total = 0
                for i in range(3):
                    total += len(await ctx.step(f"part {i}", apart, i))
                return total

        def run() -> int:
            if mode == "sync":
                return int(app.run(big, task_id="big"))
            return int(asyncio.run(app.arun(big, task_id="big")))

        with pytest.raises(BlobStoreFull) as full:
            run()
        message = str(full.value)
        assert isinstance(full.value, StoreError)
        assert "\n" not in message
        assert f"the disk holding the blob store {blobs} is full" in message
        assert "No space left on device" in message
        assert "step 'part 1' (position 2) of task 'big'" in message
        assert "kept in the store itself, so it is not computed again" in message
        assert "Free space there" in message
        assert "then run again" in message

        task = app.store.get_task("big")
        assert task is not None
        assert (task.status, task.attempts) == ("pending", 1)  # handed back; no attempt spent
        history = app.store.load_history("big")
        assert [(r.name, r.status) for r in history.values()] == [
            ("part 0", "completed"),
            ("part 1", "completed"),
        ]
        assert history[1].output is not None
        assert history[1].output.startswith("!blob:")
        assert history[2].output == '"' + "1" * BIG + '"'  # kept inline
        assert calls == [0, 1]

        for filler in fillers:
            filler.unlink()
        assert run() == 3 * BIG
        assert calls == [0, 1, 2]  # each step's function ran once in all
        app.close()
