"""An app that has not opted in to pickle never unpickles, whatever a store row
says: a record claiming the pickle codec could otherwise run code in it."""

from __future__ import annotations

import base64
import json
import pickle
import sqlite3
from pathlib import Path

import pytest

from cairn import Cairn, Context
from cairn.errors import CodecError
from cairn.worker import Worker

RAN: list[str] = []


def _mark() -> None:
    RAN.append("unpickled")


class Payload:
    """Unpickling it calls _mark: the sign that pickle.loads ran."""

    def __reduce__(self) -> tuple[object, tuple[()]]:
        return (_mark, ())


def job(ctx: Context) -> int:
    return 1


def crafted() -> str:
    return base64.b64encode(pickle.dumps(Payload(), protocol=5)).decode("ascii")


def test_a_json_app_refuses_a_result_recorded_with_pickle(tmp_path: Path) -> None:
    """A finished task whose row says codec "pickle" and holds a crafted result:
    a JSON app reading it gets a CodecError naming the opt-in, and the
    payload's code never runs; an app that opted in to pickle does run it."""
    path = tmp_path / "c.db"
    url = f"sqlite:///{path}"
    RAN.clear()
    with Cairn(url, codec="pickle") as pickled:
        pickled.run(pickled.task(name="job")(job), task_id="t")
    with sqlite3.connect(path) as conn:  # a hostile row, written behind cairn's back
        conn.execute("UPDATE tasks SET result = ? WHERE id = 't'", (crafted(),))
    conn.close()

    with Cairn(url) as plain:
        plain.task(name="job")(job)
        with pytest.raises(CodecError, match='codec="pickle"'):
            plain.result("t")
    assert RAN == []
    with Cairn(url, codec="pickle") as trusting:
        trusting.task(name="job")(job)
        trusting.result("t")
    assert RAN == ["unpickled"]


def test_a_json_worker_fails_a_pickled_task_without_unpickling_it(tmp_path: Path) -> None:
    """A pending task recorded with pickle (crafted arguments), claimed by a JSON
    app's worker: it fails with the error that names the opt-in, its arguments
    stay as recorded, and the payload's code never runs."""
    path = tmp_path / "c.db"
    url = f"sqlite:///{path}"
    RAN.clear()
    with Cairn(url, codec="pickle") as pickled:
        pickled.enqueue("b", pickled.task(name="job")(job), [{}])
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE tasks SET args = ?", (crafted(),))
    conn.close()

    with Cairn(url) as plain:
        plain.task(name="job")(job)
        Worker(plain, burst=True, idle_wait=0.01).run()
    with sqlite3.connect(path) as conn:
        (row,) = conn.execute("SELECT status, args, error FROM tasks").fetchall()
    conn.close()
    assert RAN == []
    assert row[0] == "failed"
    assert row[1] == crafted()
    assert 'codec="pickle"' in json.loads(row[2])["message"]
