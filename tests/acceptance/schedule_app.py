"""The app that ``cairn worker`` subprocesses run in the schedule acceptance test.

``heartbeat`` is scheduled every two seconds (a six-field cron expression, seconds
last). Its body appends ``<fired_at> <pid>`` to the file named by
``CAIRN_TEST_COUNTS``: one line per time the body really ran, counted outside the
store, so a firing run twice shows as two lines.
"""

from __future__ import annotations

import os
from datetime import datetime

from cairn import Cairn, Context

app = Cairn()


@app.schedule("* * * * * */2", tz="Asia/Tokyo", catchup="none")
@app.task
def heartbeat(ctx: Context, fired_at: datetime) -> str:
    # One O_APPEND write per line: whole lines even from several processes.
    fd = os.open(os.environ["CAIRN_TEST_COUNTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{fired_at.isoformat()} {os.getpid()}\n".encode())
    finally:
        os.close(fd)
    return fired_at.isoformat()
