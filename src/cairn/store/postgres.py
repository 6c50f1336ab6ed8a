"""The PostgreSQL store, for work spread over many processes and machines.

``pip install 'cairn[postgres]'`` (psycopg 3 and its pool). Same contract, same
SQL and same meaning as the SQLite store (``cairn.store.sqlbase``); what differs:

* Tables live in a schema of their own (``?schema=`` in the URL, default
  ``cairn``), so they never collide with an application's ``tasks`` table.
* Claims use ``FOR UPDATE SKIP LOCKED``: many workers claim without waiting on
  each other, and never the same task.
* Every statement runs on a pooled connection in autocommit mode; the per-step
  write is one statement, so one round trip. Statements are prepared by psycopg
  after a few uses.
* A lost connection (the server restarted, the network blinked) is retried with
  backoff, up to ``reconnect_timeout`` seconds; an exhausted pool waits, with a
  log line, instead of failing. Retried writes are safe: each checks the fence or
  is an idempotent upsert.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from cairn.errors import ConfigurationError, NotACairnStore, SchemaTooNew, StoreError
from cairn.store.migrate import latest_version, migrations
from cairn.store.protocol import Capabilities
from cairn.store.sqlbase import Result, SQLStore, Tx

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

log = logging.getLogger("cairn")
T = TypeVar("T")

_OWN_PARAMS = ("schema", "pool_size", "reconnect_timeout")
_POOL_WAIT = 5.0
# Distinct from any application's advisory locks: "cairn" as an integer.
_MIGRATE_LOCK = 0x636169726E


def _driver() -> Any:
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise ConfigurationError(
            "the PostgreSQL store needs psycopg 3: pip install 'cairn[postgres]'"
        ) from exc
    return psycopg, psycopg_pool


def split_url(url: str) -> tuple[str, dict[str, str]]:
    """The libpq URL without cairn's own query parameters, and those parameters."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    own = {k: v for k, v in query if k in _OWN_PARAMS}
    # quote, not quote_plus: libpq reads "+" literally (options=-c%20x=1 must stay).
    rest = urlencode([(k, v) for k, v in query if k not in _OWN_PARAMS], quote_via=quote)
    scheme = "postgresql" if parts.scheme in ("postgres", "postgresql") else parts.scheme
    return urlunsplit((scheme, parts.netloc, parts.path, rest, parts.fragment)), own


def redacted(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***``."""
    return _redacted(url)


def own_options(conninfo: str) -> str:
    """The ``options=`` the user's URL passes to the server, if any."""
    return dict(parse_qsl(urlsplit(conninfo).query)).get("options", "")


def _redacted(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class _PgTx:
    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def exec(self, statement: str, params: Sequence[Any] = ()) -> Result:
        cursor = self._conn.execute(_pg(statement), params)
        return Result(cursor.rowcount, cursor.fetchall() if cursor.description else [])

    def exec_many(self, statement: str, rows: Iterable[Sequence[Any]]) -> int:
        rows = list(rows)
        if not rows:
            return 0
        with self._conn.cursor() as cursor:
            cursor.executemany(_pg(statement), rows)
            return max(cursor.rowcount, 0)


_PG_TEXT: dict[str, str] = {}


def _pg(statement: str) -> str:
    """The statement with psycopg's placeholders (cached: asked once per call)."""
    text = _PG_TEXT.get(statement)
    if text is None:
        text = _PG_TEXT[statement] = statement.replace("?", "%s")
    return text


class PostgresStore(SQLStore):
    """A cairn store in a PostgreSQL database."""

    capabilities = Capabilities(multi_host=True, multi_process=True)
    claim_lock_clause: ClassVar[str] = " FOR UPDATE SKIP LOCKED"
    row_lock_clause: ClassVar[str] = " FOR UPDATE"

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        pool_size: int | None = None,
        reconnect_timeout: float | None = None,
        connect_timeout: float = 10.0,
        create: bool = True,
    ) -> None:
        driver, pool_driver = _driver()
        conninfo, own = split_url(url)
        self.url = url
        self.schema = schema or own.get("schema", "cairn")
        if not self.schema.isidentifier():
            raise ConfigurationError(f"schema {self.schema!r} must be a plain SQL identifier")
        self.pool_size = pool_size or int(own.get("pool_size", "10"))
        self.reconnect_timeout = (
            float(own.get("reconnect_timeout", "300"))
            if reconnect_timeout is None
            else reconnect_timeout
        )
        self._conninfo = conninfo
        self.identity = f"{_redacted(conninfo)}#schema={self.schema}"
        self._probe(driver, connect_timeout)
        self.integrity_errors = (driver.errors.UniqueViolation,)
        self._operational = driver.OperationalError
        self._pool_timeout = pool_driver.PoolTimeout
        self._pool: ConnectionPool[Any] = pool_driver.ConnectionPool(
            conninfo,
            min_size=1,
            max_size=self.pool_size,
            kwargs={
                "autocommit": True,
                # Added to any options= the user's URL gives, not instead of them.
                "options": " ".join(
                    filter(
                        None,
                        [own_options(conninfo), f"-c search_path={self.schema}", "-c timezone=UTC"],
                    )
                ),
            },
            open=False,
            name="cairn",
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout)
        except pool_driver.PoolTimeout as exc:
            self._pool.close()
            raise StoreError(
                f"cannot connect to PostgreSQL at {_redacted(conninfo)} within "
                f"{connect_timeout:.0f}s. Is the server running, and does the URL name a "
                "database that exists?"
            ) from exc
        self._channel = f"cairn_work_{self.schema}"
        self.announce_work = f"NOTIFY {self._channel}"
        self._listener: psycopg.Connection[Any] | None = None
        self._listener_lock = threading.Lock()
        try:
            self._migrate(create=create)
        except BaseException:
            self._pool.close()
            raise

    # -- schema --------------------------------------------------------------------
    def _version(self, conn: psycopg.Connection[Any]) -> int:
        row = conn.execute("SELECT to_regclass(%s)", (f"{self.schema}.cairn_meta",)).fetchone()
        if row is None or row[0] is None:
            return 0
        found = conn.execute(
            f"SELECT value FROM {self.schema}.cairn_meta WHERE key = 'schema_version'"
        ).fetchone()
        return int(found[0]) if found else 0

    def _probe(self, driver: Any, timeout: float) -> None:
        """Connect once, directly, so a wrong URL fails fast with the real cause
        (refused, no such database, authentication) instead of a pool timeout."""
        try:
            driver.connect(self._conninfo, connect_timeout=max(1, int(timeout))).close()
        except driver.OperationalError as exc:
            cause = " ".join(str(exc).split())
            raise StoreError(
                f"cannot connect to PostgreSQL at {_redacted(self._conninfo)}: {cause}. "
                "Check that the server is running and that the URL names a database "
                "that exists and a user that may connect."
            ) from None

    def _server_reachable(self) -> bool:
        driver, _ = _driver()
        try:
            driver.connect(self._conninfo, connect_timeout=2).close()
        except driver.OperationalError:
            return False
        return True

    def _migrate(self, *, create: bool) -> None:
        latest = latest_version("postgres")
        with self._pool.connection() as conn:
            version = self._version(conn)
            if version == 0 and not create:
                raise NotACairnStore(
                    f"there is no cairn store in schema {self.schema!r} of "
                    f"{_redacted(self._conninfo)}. Run a batch or `cairn migrate` first, "
                    "or pass the right ?schema=. Nothing was created."
                )
            if version > latest:
                raise SchemaTooNew(
                    f"schema {self.schema!r} of {_redacted(self.url)} was written by a newer "
                    f"cairn (schema {version}; this cairn knows up to {latest}). Upgrade "
                    "cairn (`pip install -U cairn`) to use it. Nothing was changed."
                )
            if version == latest:
                return
            with conn.transaction():
                # One migrator at a time, across every process and machine.
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATE_LOCK,))
                conn.execute(f"CREATE SCHEMA IF NOT EXISTS {self.schema}")
                current = self._version(conn)
                for migration in migrations("postgres")[current:]:
                    conn.execute(migration.sql.encode())  # a script: no parameters to bind
                    conn.execute(
                        "INSERT INTO cairn_meta (key, value) VALUES ('schema_version', %s) "
                        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                        (str(migration.version),),
                    )

    # -- the primitives the shared store is built on ------------------------------
    def _with_connection(self, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        delay, deadline = 0.1, None
        while True:
            try:
                with self._pool.connection(timeout=_POOL_WAIT) as conn:
                    return work(conn)
            except self._pool_timeout as exc:
                # A pool that cannot hand out a connection is either busy (wait)
                # or cannot reach the server (the reconnect deadline applies).
                if self._server_reachable():
                    log.warning(
                        "cairn: all %d PostgreSQL connections are in use; waiting for one "
                        "(raise pool_size in the store URL if this persists)",
                        self.pool_size,
                    )
                    continue
                deadline = self._lost(exc, deadline, delay)
            except self._operational as exc:
                deadline = self._lost(exc, deadline, delay)
            delay = min(delay * 2, 5.0)

    def _lost(self, exc: Exception, deadline: float | None, delay: float) -> float:
        """Log a lost connection and wait ``delay``; give up past the deadline."""
        now = time.monotonic()
        deadline = deadline or now + self.reconnect_timeout
        if now > deadline:
            raise StoreError(
                f"lost PostgreSQL at {_redacted(self._conninfo)} for more than "
                f"{self.reconnect_timeout:.0f}s: {' '.join(str(exc).split())}"
            ) from None
        log.warning(
            "cairn: PostgreSQL connection lost (%s); retrying in %.1fs",
            " ".join(str(exc).split()) or type(exc).__name__,
            delay,
        )
        time.sleep(delay)
        return deadline

    def _exec(self, statement: str, params: Sequence[Any] = (), *, patient: bool = True) -> Result:
        text = _pg(statement)

        def run(conn: psycopg.Connection[Any]) -> Result:
            cursor = conn.execute(text, params)
            return Result(cursor.rowcount, cursor.fetchall() if cursor.description else [])

        return self._with_connection(run)

    def _atomically(self, work: Callable[[Tx], T]) -> T:
        def run(conn: psycopg.Connection[Any]) -> T:
            with conn.transaction():
                return work(_PgTx(conn))

        return self._with_connection(run)

    def _ts(self, moment: datetime) -> datetime:
        return moment

    def _writing(self) -> nullcontext[None]:
        return nullcontext()

    def wait_for_work(self, timeout: float) -> bool:
        """LISTEN for the NOTIFY that enqueue sends, up to ``timeout`` seconds.

        Polling stays the fallback: a lost listener only means waiting the
        full timeout once, then listening again."""
        with self._listener_lock:
            try:
                if self._listener is None or self._listener.closed:
                    driver, _ = _driver()
                    self._listener = driver.Connection.connect(
                        self._conninfo, autocommit=True, connect_timeout=5
                    )
                    self._listener.execute(f"LISTEN {self._channel}")
                for _ in self._listener.notifies(timeout=timeout, stop_after=1):
                    return True
                return False
            except self._operational as exc:
                log.warning("cairn: not listening for new work (%s); polling", exc)
                self._listener = None
        time.sleep(timeout)
        return False

    def close(self) -> None:
        with self._listener_lock:
            if self._listener is not None:
                self._listener.close()
                self._listener = None
        self._pool.close()
