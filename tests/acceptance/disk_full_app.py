"""The app ``cairn worker`` runs in the disk-full test (test_disk_full_worker.py).

Task ``big`` records three large steps. The first step of any task to reach its
second part fills the disk the store lives on (``CAIRN_TEST_FILL``: a file to
write until the file system is full), once; every running task then meets the
full disk at its next write.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from cairn import Cairn, Context

BIG = 200_000  # characters in each step's output: more than a filled disk has left
_filling = threading.Lock()


def fill_once() -> None:
    """Write ``$CAIRN_TEST_FILL`` until the disk is full, unless it exists."""
    target = Path(os.environ["CAIRN_TEST_FILL"])
    with _filling:
        if target.exists():
            return
        chunk = b"\0" * 65536
        with target.open("wb", buffering=0) as handle:
            try:
                while handle.write(chunk):
                    pass
            except OSError:
                pass  # ENOSPC: full


def part(i: int) -> str:
    if i == 1:
        fill_once()
    return str(i) * BIG


app = Cairn(inline_limit=1 << 20)


@app.task
def big(ctx: Context, n: int) -> int:
    return sum(len(ctx.step(f"part {i}", part, i)) for i in range(3))
