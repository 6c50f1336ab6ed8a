"""The task search's trigram indexes on PostgreSQL (schema 11): the planner
answers a search for a term of three characters or more from them, the answers
are the same with and without them, and a store whose database role may not
create the ``pg_trgm`` extension is migrated all the same, without them.

Each test has a database of its own; the role test creates a login role of its
own on the server and drops it after.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from cairn.admin import TaskQuery, iter_tasks, task_page
from cairn.store import admin, open_store, sqlviews
from cairn.store.migrate import latest_version
from cairn.store.postgres import PostgresStore
from tests.conftest import postgres_admin_url, with_database

TRIGRAM_INDEXES = {"tasks_id_trigrams", "tasks_name_trigrams", "tasks_error_trigrams"}
# Enough tasks that a sequential scan costs the planner more than the indexes.
GENERATED = 30_000
# A few tasks to find among the generated ones: ids, names and errors of every
# kind a search meets (a hashed id, LIKE's wildcards, another letter case).
SPECIAL = [
    ("ads/sha256:9f2c41d0a7be3e15", "review", None),
    ("ads/item=Quota_50%", "review", None),
    ("mail/item=7", "send_Newsletter", '{"type": "httpx.ReadTimeout", "message": "after 31s"}'),
    ("mail/item=8", "send", '{"type": "builtins.ValueError", "message": "Bad Gateway"}'),
]
TERMS = [
    "9f2c41",  # part of a hashed id
    "ADS/SHA256",  # an id's start, another case
    "quota_50%",  # LIKE's wildcards meaning themselves
    "_50",
    "newsletter",  # part of a name, another case
    "readtimeout",  # part of an error's type
    "bad gateway",  # part of an error's message
    "nothing like it",  # absent
    "m=",  # two characters: no trigram, a scan
    "7",
]
GENERATE = (
    "INSERT INTO tasks (id, batch, item_key, name, args, codec, status, error, created_at, "
    "updated_at) SELECT 'gen/item=' || n, NULL, 'item=' || n, 'crawl', '{}', 'json', "
    "'completed', NULL, now(), now() FROM generate_series(1, %s) AS n"
)
ADD = (
    "INSERT INTO tasks (id, batch, item_key, name, args, codec, status, error, created_at, "
    "updated_at) VALUES (%s, %s, %s, %s, '{}', 'json', %s, %s, now(), now())"
)


def _sql(url: str, *statements: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement.encode())


def _filled(url: str) -> None:
    """``GENERATED`` crawl tasks and the ``SPECIAL`` ones, then ANALYZE (as the
    store does after a bulk change): the indexes take each entry at insert
    (``fastupdate`` off), so no vacuum is needed before they serve a search."""
    with psycopg.connect(url, autocommit=True, options="-c search_path=cairn") as conn:
        conn.execute(GENERATE, (GENERATED,))
        for task_id, name, error in SPECIAL:
            key = task_id.split("/", 1)[1]
            status = "failed" if error else "completed"
            conn.execute(ADD, (task_id, None, key, name, status, error))
        conn.execute("ANALYZE tasks")


def _expected(term: str) -> set[str]:
    """What a search for ``term`` must find: the term in the id, name or error, any case."""
    rows = [(f"gen/item={n}", "crawl", None) for n in range(1, GENERATED + 1)] + SPECIAL
    low = term.lower()
    return {
        task_id
        for task_id, name, error in rows
        if any(low in (text or "").lower() for text in (task_id, name, error))
    }


def _found(url: str, term: str) -> set[str]:
    """Every task a search for ``term`` finds, through cairn's admin API."""
    store = open_store(url)
    try:
        found = {task.id for task in iter_tasks(admin(store), TaskQuery(search=term))}
        assert task_page(admin(store), TaskQuery(search=term)).total == min(len(found), 1000)
        return found
    finally:
        store.close()


def _plan(url: str, term: str) -> str:
    """``EXPLAIN`` of the first page of a search for ``term``, as the store reads it."""
    where, params = sqlviews.task_query_filter(
        TaskQuery(search=term), lambda moment: moment, PostgresStore.case_blind_like
    )
    statement = sqlviews.find_tasks(where, newer=False).replace("?", "%s")
    with psycopg.connect(url, options="-c search_path=cairn") as conn:
        rows = conn.execute(f"EXPLAIN {statement}", (*params, 51)).fetchall()
    return "\n".join(row[0] for row in rows)


def _indexes(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        found = conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'cairn'")
        return {row[0] for row in found}


def test_the_migration_builds_the_trigram_indexes(pg_url: str) -> None:
    """Where the role may create pg_trgm (the test server's superuser), schema 11
    has a GIN trigram index on each column a search reads."""
    assert _indexes(pg_url) >= TRIGRAM_INDEXES


def test_a_rare_term_is_read_through_the_trigram_indexes(pg_url: str) -> None:
    """With 30,000 tasks, the plan of a search for a rare term of three characters
    or more ORs the three trigram indexes; a term of two characters, which has no
    trigram, is a scan of the table (and finds the same as it would without
    the indexes: the next test)."""
    _filled(pg_url)
    for term in ("9f2c41", "bad gateway", "nothing like it"):
        plan = _plan(pg_url, term)
        assert "BitmapOr" in plan, plan
        for index in TRIGRAM_INDEXES:
            assert f"Bitmap Index Scan on {index}" in plan, plan
    assert "trigrams" not in _plan(pg_url, "m=")


def test_searches_find_the_same_with_the_indexes_and_without(pg_url: str) -> None:
    """Each term finds exactly the tasks whose id, name or error holds it, in
    any case: first with the planner kept off sequential scans (so every term
    that has trigrams is answered from the indexes), then with the indexes
    dropped (a scan, as on a store without pg_trgm)."""
    _filled(pg_url)
    database = pg_url.rsplit("/", 1)[1]
    _sql(postgres_admin_url(), f"ALTER DATABASE {database} SET enable_seqscan = off")
    assert "trigrams" in _plan(pg_url, "9f2c41")
    with_indexes = {term: _found(pg_url, term) for term in TERMS}
    _sql(pg_url, *(f"DROP INDEX cairn.{index}" for index in TRIGRAM_INDEXES))
    _sql(postgres_admin_url(), f"ALTER DATABASE {database} RESET enable_seqscan")
    assert "trigrams" not in _plan(pg_url, "9f2c41")
    for term in TERMS:
        assert with_indexes[term] == _expected(term), term
        assert _found(pg_url, term) == _expected(term), term
    assert with_indexes["9f2c41"] == {"ads/sha256:9f2c41d0a7be3e15"}
    assert with_indexes["_50"] == {"ads/item=Quota_50%"}


def _as_role(url: str, role: str) -> str:
    """``url`` logged in as ``role`` (no password: the test server trusts 127.0.0.1)."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, f"{role}@{host}", parts.path, parts.query, parts.fragment))


def _documented_statements() -> str:
    """The SQL docs/workers.md gives for adding the indexes later."""
    text = (Path(__file__).parents[2] / "docs" / "workers.md").read_text(encoding="utf-8")
    block = text.split("```sql\n", 1)[1].split("```", 1)[0]
    return "\n".join(line.strip() for line in block.splitlines())


def test_the_statements_in_the_docs_add_the_indexes_later(pg_url: str) -> None:
    """On a store migrated without the indexes (dropped here), the statements
    docs/workers.md gives build them, and a rare term is read through them."""
    _sql(pg_url, *(f"DROP INDEX cairn.{index}" for index in TRIGRAM_INDEXES))
    _filled(pg_url)
    assert "trigrams" not in _plan(pg_url, "9f2c41")
    _sql(pg_url, _documented_statements(), "ANALYZE cairn.tasks")
    assert _indexes(pg_url) >= TRIGRAM_INDEXES
    assert "BitmapOr" in _plan(pg_url, "9f2c41")
    assert _found(pg_url, "9f2c41") == _expected("9f2c41")


# Two ways a store's role gets no trigram index, as a DBA would leave them: the
# extension installed in a schema the role may not use; or an object of the
# role's own in its schema with a name pg_trgm needs, so CREATE EXTENSION fails.
# (A role that may migrate cairn may create the database's schemas, which is
# all a trusted extension like pg_trgm asks on PostgreSQL 13 and later; what
# is left is a server without the contrib package, or an older server.)
WITHOUT_TRIGRAMS = {
    "extension in a schema the role may not use": (
        "CREATE SCHEMA ext",
        "CREATE EXTENSION pg_trgm SCHEMA ext",
    ),
    "CREATE EXTENSION refused": (
        "CREATE SCHEMA cairn AUTHORIZATION {role}",
        "SET ROLE {role}",
        "CREATE FUNCTION cairn.show_trgm(text) RETURNS text[] LANGUAGE sql "
        "AS 'SELECT NULL::text[]'",
    ),
}


@pytest.fixture(params=sorted(WITHOUT_TRIGRAMS))
def role_without_trigrams(request: pytest.FixtureRequest, pg_template: str) -> Iterator[str]:
    """A URL for a login role that owns a new database (so it may migrate cairn
    there) where it cannot have the trigram indexes (``WITHOUT_TRIGRAMS``)."""
    stamp = f"{os.getpid()}_{time.monotonic_ns()}"
    role, database = f"cairn_noext_{stamp}", f"cairn_noext_db_{stamp}"
    admin_url = postgres_admin_url()
    _sql(
        admin_url,
        f"CREATE ROLE {role} LOGIN",
        f"CREATE DATABASE {database} OWNER {role} TEMPLATE template0",
    )
    try:
        setup = WITHOUT_TRIGRAMS[request.param]
        _sql(with_database(admin_url, database), *(s.format(role=role) for s in setup))
        yield _as_role(with_database(admin_url, database), role)
    finally:
        _sql(admin_url, f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        _sql(admin_url, f"DROP ROLE IF EXISTS {role}")


def test_a_store_without_pg_trgm_migrates_and_searches_by_a_scan(
    role_without_trigrams: str,
) -> None:
    """The migration does not fail for lack of the extension: the store reaches
    the latest schema, has no trigram index, and a search still finds parts of
    ids, names and error texts (by a scan)."""
    assert urlsplit(role_without_trigrams).username != urlsplit(postgres_admin_url()).username
    store = open_store(role_without_trigrams)
    try:
        assert isinstance(store, PostgresStore)
        assert store.found_schema == 0
        assert store.schema_version == latest_version("postgres")
    finally:
        store.close()
    assert not TRIGRAM_INDEXES & _indexes(role_without_trigrams)
    _filled(role_without_trigrams)
    for term in ("9f2c41", "newsletter", "bad gateway", "m=", "nothing like it"):
        assert _found(role_without_trigrams, term) == _expected(term), term
