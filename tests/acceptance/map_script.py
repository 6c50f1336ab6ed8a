"""A task whose ``ctx.map`` SIGKILLs its own process part way through.

    python -m tests.acceptance.map_script STORE_URL COUNTS_FILE [--kill-after K]

Task ``fetch_all`` maps ``fetch`` over 40 countries, 4 at a time. ``fetch``
appends ``country pid`` to the counts file (one line per time it really ran),
then returns. With ``--kill-after K`` the process SIGKILLs itself right after
the K-th item's checkpoint is committed. Prints the result as JSON on success.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path

from cairn import Cairn, Context
from cairn.testing import set_fault_hook

COUNTRIES = [f"c{i:02d}" for i in range(40)]
TASK_ID = "revenue"
CONCURRENCY = 4

app = Cairn()
counts_file = Path(os.devnull)


def fetch(country: str) -> str:
    fd = os.open(counts_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{country} {os.getpid()}\n".encode())
    finally:
        os.close(fd)
    return country.upper()


@app.task
def fetch_all(ctx: Context) -> list[str]:
    return list(ctx.map(fetch, COUNTRIES, concurrency=CONCURRENCY))


def kill_after(committed: int) -> None:
    lock = threading.Lock()
    seen = [0]

    def hook(point: str, task_id: str, seq: int, name: str) -> None:
        if point != "after_step":
            return
        with lock:
            seen[0] += 1
            if seen[0] == committed:
                os.kill(os.getpid(), signal.SIGKILL)

    set_fault_hook(app, hook)


def main() -> int:
    global counts_file
    parser = argparse.ArgumentParser()
    parser.add_argument("store")
    parser.add_argument("counts", type=Path)
    parser.add_argument("--kill-after", type=int, default=0)
    options = parser.parse_args()
    counts_file = options.counts
    app.use_store(options.store)
    if options.kill_after:
        kill_after(options.kill_after)
    print(json.dumps(app.run(fetch_all, task_id=TASK_ID)))
    app.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
