"""The app ``cairn worker`` runs in the full-blob-store test (test_blob_store_full_worker.py).

Task ``big`` records three steps whose outputs go to the blob store
(``CAIRN_BLOBS``, a small tmpfs; the store itself is elsewhere). The first task
to reach its second part fills the blob store's disk (``CAIRN_TEST_FILL``),
once. Every call of ``part`` appends a line to ``CAIRN_TEST_CALLS``, so the test
counts how often each step's function ran.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from cairn import Cairn, Context
from tests.acceptance.disk_full_app import fill_once

BIG = 200_000  # characters in each step's output: above the inline limit
_writing = threading.Lock()


def part(n: int, i: int) -> str:
    with _writing, Path(os.environ["CAIRN_TEST_CALLS"]).open("a") as calls:
        calls.write(f"{n} {i}\n")
    if i == 1:
        fill_once()
    return f"{n}-{i}-" * (BIG // 4)


app = Cairn(inline_limit=1024)


@app.task
def big(ctx: Context, n: int) -> int:
    return sum(len(ctx.step(f"part {i}", part, n, i)) for i in range(3))
