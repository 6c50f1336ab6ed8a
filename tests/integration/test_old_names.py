"""Entry names an older cairn recorded and this one refuses, in a real SQLite file.

Since cairn refuses step, recorded input and map names that are blank or hold a
NUL (``InvalidName``, tests/integration/store/test_bad_strings.py), such a name
is never written. A SQLite store written before that refusal may hold one (SQLite
keeps a NUL in text; PostgreSQL never could). A task of such a store that is
resumed replays the entry recorded under that name, as it would any other: the
refusal is for new writes, and replaying writes nothing new. A new entry with
such a name is still refused.

Each test makes the store as the older cairn left it: cairn records the entry
under a placeholder name, then the row's name is rewritten with ``sqlite3``
straight in the file, to the name the older cairn wrote.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cairn import Cairn, Context, InvalidName, Retry, TaskFailed
from cairn.store import admin

PLACEHOLDER = "placeholder"
OLD_NAMES = {"a NUL": "fetch\x00page", "blank": " "}

# Each kind of entry the older cairn recorded without checking its name: a step,
# a recorded input, a map (its head and items carry the name).
Feed = Callable[[Context, str, Counter[str]], Any]


def _counted(calls: Counter[str], value: Any) -> Callable[..., Any]:
    def call(*_: Any) -> Any:
        calls["called"] += 1
        return value

    return call


FEEDS: dict[str, Feed] = {
    "step": lambda ctx, name, calls: ctx.step(name, _counted(calls, {"page": 1})),
    "recorded input": lambda ctx, name, calls: ctx.record(name, _counted(calls, [1, 2])),
    "map": lambda ctx, name, calls: ctx.map(
        lambda item: _counted(calls, item * 10)(), [1, 2], name=name
    ),
}


class Stop(Exception):
    """Ends the first run after the entry was recorded, so a later run replays it."""


def _crawl_app(url: str, feed: Feed, names: dict[str, Any], calls: Counter[str]) -> Any:
    app = Cairn(url)

    @app.task(name="crawl", retry=Retry(attempts=1))
    def crawl(ctx: Context) -> Any:
        learned = feed(ctx, str(names["entry"]), calls)
        if names["stop"]:
            raise Stop("the first run ends here")
        return learned

    return app, crawl


def _rename_as_the_older_cairn_wrote(path: Path, old_name: str) -> None:
    """Rewrite, in the file itself, every history row named after the
    placeholder (a map's head and its items) to carry ``old_name`` instead,
    with no checksum: a cairn before schema 6 wrote none."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT seq, name FROM steps WHERE task_id = 'crawl'").fetchall()
        renamed = [
            (name.replace(PLACEHOLDER, old_name), seq) for seq, name in rows if PLACEHOLDER in name
        ]
        assert renamed, rows
        conn.executemany(
            "UPDATE steps SET name = ?, checksum = NULL WHERE task_id = 'crawl' AND seq = ?",
            renamed,
        )
        conn.commit()
        (stored,) = conn.execute("SELECT name FROM steps WHERE task_id = 'crawl' AND seq = 1")
        assert stored[0].startswith(old_name), stored  # the file holds the name as given
    finally:
        conn.close()


# What an older cairn could record: a map's items were named ``name[key]`` and
# checked as operation keys, which refused a NUL before the map's head was
# written, so a map name with a NUL was never stored; a blank one was.
RECORDED = [(kind, fault) for kind in sorted(FEEDS) for fault in sorted(OLD_NAMES)]
RECORDED.remove(("map", "a NUL"))


@pytest.mark.parametrize(("kind", "fault"), RECORDED)
def test_a_name_recorded_by_an_older_cairn_replays_and_only_new_ones_are_refused(
    tmp_path: Path, kind: str, fault: str
) -> None:
    """A step, recorded input or map whose name (blank, or holding a NUL) an
    older cairn wrote into a SQLite file: the task, run again by this cairn with
    the same code, replays the entry without calling its function and finishes
    with its recorded value. A new entry given such a name afterwards is still
    refused with InvalidName, its function not called."""
    path = tmp_path / "old.db"
    url = f"sqlite:///{path}"
    old_name = OLD_NAMES[fault]
    calls: Counter[str] = Counter()
    names: dict[str, Any] = {"entry": PLACEHOLDER, "stop": True}
    app, crawl = _crawl_app(url, FEEDS[kind], names, calls)
    with app, pytest.raises(TaskFailed):
        app.run(crawl, task_id="crawl")
    first_calls = calls["called"]
    assert first_calls >= 1
    _rename_as_the_older_cairn_wrote(path, old_name)

    names.update(entry=old_name, stop=False)
    app, crawl = _crawl_app(url, FEEDS[kind], names, calls)
    with app:
        assert admin(app.store).retry_task("crawl", app.clock.now())
        learned = app.run(crawl, task_id="crawl")
        assert calls["called"] == first_calls, "the recorded entry ran again"
        assert learned == {"step": {"page": 1}, "recorded input": [1, 2], "map": [10, 20]}[kind]

        # The same code in a new task: nothing is recorded there, so the name
        # would be a new write, and it is refused before the function runs.
        with pytest.raises(TaskFailed) as refused:
            app.run(crawl, task_id="new")
        assert isinstance(refused.value.__cause__, InvalidName), refused.value
        assert calls["called"] == first_calls
