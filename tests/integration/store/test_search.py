"""The task search finds any part of an id (a hashed one too), a task name or an
error text, in any case, whatever answers it: a scan of the tasks on SQLite
and on a PostgreSQL store without ``pg_trgm``, the trigram indexes of schema 11
on one with it (for terms of three characters or more; shorter terms scan
everywhere). tests/integration/test_postgres_search_index.py makes the
planner use the indexes and compares the answers with and without them.

Every test here runs on each backend (the conformance suite).
"""

from __future__ import annotations

from cairn import Cairn, Context
from cairn.admin import TaskQuery, iter_tasks
from cairn.store import admin

BATCH = "crawl"
# Item keys as given: plain ones, and one cairn hashes into its id (a slash
# and a space), whose id is "crawl/sha256:…"; the others' are "crawl/url=…".
ITEMS = ["alpha", "beta", "Gamma_1", "odd/page name"]


def _run(app: Cairn) -> dict[str, str]:
    """One task per item, failing with its own text for "beta" and the odd one;
    the ids by item."""

    @app.task(name="fetch_Page", retry=None)
    def fetch(ctx: Context, url: str) -> str:
        if url in ("beta", "odd/page name"):
            raise RuntimeError(f"HTTP 503 from upstream for {url}")
        return url

    app.run_batch(BATCH, fetch, [{"url": u} for u in ITEMS], concurrency=1, progress=False)
    tasks = list(admin(app.store).list_tasks(batch=BATCH))
    return {task.item_key or "": task.id for task in tasks}


def _found(app: Cairn, term: str) -> set[str]:
    return {task.id for task in iter_tasks(admin(app.store), TaskQuery(search=term))}


def test_search_finds_parts_of_ids_names_and_errors_in_any_case(any_app: Cairn) -> None:
    """A part of a plain id and of a hashed one, a task name in another case,
    words of an error message, LIKE's ``_`` as itself, one- and two-character
    terms (no trigram: a scan), and nothing for a term found nowhere."""
    ids = _run(any_app)
    odd = next(task_id for task_id in ids.values() if "sha256:" in task_id)
    every = set(ids.values())
    assert _found(any_app, "crawl/URL=ALPHA") == {"crawl/url=alpha"}
    assert _found(any_app, odd.split(":", 1)[1][3:11]) == {odd}
    assert _found(any_app, "sha256:") == {odd}
    assert _found(any_app, "FETCH_page") == every
    assert _found(any_app, "http 503 from") == {"crawl/url=beta", odd}
    assert _found(any_app, "a_1") == {"crawl/url=Gamma_1"}
    assert _found(any_app, "aX1") == set()
    assert _found(any_app, "MM") == {"crawl/url=Gamma_1"}
    assert _found(any_app, "_") == every  # in every name
    assert _found(any_app, "no such text") == set()
