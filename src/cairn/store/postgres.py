"""The PostgreSQL store, for work spread over many processes and machines.

``pip install 'cairn-durable[postgres]'`` (psycopg 3). Same contract, same SQL and same
meaning as the SQLite store (``cairn.store.sqlbase``); what differs:

* Tables live in a schema of their own (``?schema=`` in the URL, default
  ``cairn``), so they never collide with an application's ``tasks`` table.
* Claims use ``FOR UPDATE SKIP LOCKED``: many workers claim without waiting on
  each other, and never the same task.
* Every statement runs on a connection of cairn's own pool
  (``cairn.store.pgpool``) in autocommit mode; the per-step write is one
  statement, so one round trip. Statements are prepared by psycopg after a few
  uses.
* Lease renewals run on a connection of their own, outside the pool (a pool
  of one), so threads holding every pooled connection never starve the
  heartbeat and make tasks change hands.
* A lost connection (the server restarted, the network blinked) is retried on
  a new one, reconnecting with a short backoff (0.05 s doubling to 0.5 s), for up
  to ``reconnect_timeout`` seconds; then ``StoreUnavailable``. Retried writes
  are safe: each is idempotent (a fenced upsert, a fenced update to the same
  values), or recognises what its first try left, its answer lost
  (``SQLCore._write_once``: the read runs only on a try after a lost
  connection, so a first try costs what it did).
* Any other error is the server's answer, not an outage: it is raised at once as
  a ``StoreError`` that says what was refused and what to do (a read-only
  server raises ``StoreReadOnly``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import nullcontext
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from cairn.errors import (
    ConfigurationError,
    NotACairnStore,
    SchemaTooNew,
    StoreError,
)
from cairn.redaction import shown_url
from cairn.store.capabilities import Capabilities
from cairn.store.driver_errors import (
    one_line,
    postgres_connect_failed,
    postgres_refused,
    statement_target,
    unstorable_text,
)
from cairn.store.migrate import latest_version, migrations
from cairn.store.sqlbase import SQLStore
from cairn.store.sqlcore import STREAM_PAGE, Own, Result, Tx

if TYPE_CHECKING:
    import psycopg

    from cairn.store.pgpool import ConnectionPool
    from cairn.store.pgwatch import Watchdog

log = logging.getLogger("cairn")
T = TypeVar("T")

_OWN_PARAMS = ("schema", "pool_size", "reconnect_timeout")
# Distinct from any application's advisory locks: "cairn" as an integer.
_MIGRATE_LOCK = 0x636169726E

# This backend's own statements: the schema, its version, waking idle workers.
# (The store's SQL is shared with every SQL backend: cairn.store.sql.)
_META_TABLE = "SELECT to_regclass(%s)"
_VERSION = "SELECT value FROM {schema}.cairn_meta WHERE key = 'schema_version'"
_SET_VERSION = (
    "INSERT INTO cairn_meta (key, value) VALUES ('schema_version', %s) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)
_LOCK_MIGRATIONS = "SELECT pg_advisory_xact_lock(%s)"
_SNAPSHOT = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"
_CREATE_SCHEMA = "CREATE SCHEMA IF NOT EXISTS {schema}"
_NOTIFY = "NOTIFY {channel}"
_LISTEN = "LISTEN {channel}"


def _driver() -> Any:
    """psycopg and cairn's pool over it (imported only when a store is opened:
    the driver is an extra)."""
    try:
        import psycopg

        from cairn.store import pgpool
    except ImportError as exc:
        raise ConfigurationError(
            "the PostgreSQL store needs psycopg 3: pip install 'cairn-durable[postgres]'"
        ) from exc
    return psycopg, pgpool


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


def _check_conninfo(driver: Any, conninfo: str) -> None:
    """Refuse a URL libpq cannot parse (a mistyped parameter such as ``sslmod``)
    before a pool is built on it, naming the forms cairn accepts."""
    try:
        driver.conninfo.conninfo_to_dict(conninfo)
    except driver.Error as exc:
        detail = " ".join(str(exc).split())
        raise ConfigurationError(
            f"store URL {_redacted(conninfo)!r} is not a PostgreSQL URL libpq can read: "
            f"{detail}. cairn's own parameters are {', '.join(_OWN_PARAMS)}; every other "
            "one must be a libpq parameter (https://www.postgresql.org/docs/current/"
            "libpq-connect.html#LIBPQ-PARAMKEYWORDS). Write "
            "postgresql://user@host:5432/dbname?schema=NAME."
        ) from None


def _own_number(own: dict[str, str], name: str, default: str, kind: Callable[[str], T]) -> T:
    """cairn's own numeric URL parameter ``name``, refused clearly if it is no number."""
    text = own.get(name, default)
    try:
        return kind(text)
    except ValueError:
        raise ConfigurationError(
            f"the store URL's {name}={text!r} is not a number; write for example {name}={default}."
        ) from None


def _redacted(url: str) -> str:
    return shown_url(url)


class _PgTx:
    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn
        self.statement = ""  # the last one started, to name it if it is refused

    def exec(self, statement: str, params: Sequence[Any] = ()) -> Result:
        self.statement = statement
        cursor = self._conn.execute(_pg(statement), params)
        return Result(cursor.rowcount, cursor.fetchall() if cursor.description else [])

    def exec_many(self, statement: str, rows: Iterable[Sequence[Any]]) -> int:
        self.statement = statement
        rows = list(rows)
        if not rows:
            return 0
        with self._conn.cursor() as cursor:
            cursor.executemany(_pg(statement), rows)
            return max(cursor.rowcount, 0)

    def stream(self, statement: str, params: Sequence[Any] = ()) -> Iterator[tuple[Any, ...]]:
        # A plain cursor brings the whole result over before the first row; a
        # server-side cursor (DECLARE ... FETCH) brings a page at a time. It
        # needs a transaction, which a Tx always is.
        self.statement = statement
        with self._conn.cursor(name="cairn_stream") as cursor:
            cursor.execute(_pg(statement), params)
            while page := cursor.fetchmany(STREAM_PAGE):
                yield from page


_PG_TEXT: dict[str, str] = {}


def _pg(statement: str) -> str:
    """The statement with psycopg's placeholders (cached: asked once per call)."""
    text = _PG_TEXT.get(statement)
    if text is None:
        text = _PG_TEXT[statement] = statement.replace("?", "%s")
    return text


class PostgresStore(SQLStore):
    """A cairn store in a PostgreSQL database."""

    capabilities = Capabilities(multi_host=True, multi_process=True, file_based=False)
    claim_lock_clause: ClassVar[str] = " FOR UPDATE SKIP LOCKED"
    row_lock_clause: ClassVar[str] = " FOR UPDATE"
    share_lock_clause: ClassVar[str] = " FOR SHARE"
    find_text_function: ClassVar[str] = "strpos"
    case_blind_like: ClassVar[str] = "ILIKE"
    refresh_task_statistics: ClassVar[str | None] = "ANALYZE tasks"

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        pool_size: int | None = None,
        reconnect_timeout: float | None = None,
        connect_timeout: float | None = None,
        round_trip: float | None = None,
        create: bool = True,
    ) -> None:
        driver, pgpool = _driver()
        conninfo, own = split_url(url)
        _check_conninfo(driver, conninfo)
        self.url = url
        self.schema = schema or own.get("schema", "cairn")
        if not self.schema.isidentifier():
            raise ConfigurationError(f"schema {self.schema!r} must be a plain SQL identifier")
        self.pool_size = pool_size or _own_number(own, "pool_size", "10", int)
        self.reconnect_timeout = (
            _own_number(own, "reconnect_timeout", "300", float)
            if reconnect_timeout is None
            else reconnect_timeout
        )
        self._conninfo = conninfo
        self.identity = f"{_redacted(conninfo)}#schema={self.schema}"
        self._driver_error: type[Exception] = driver.Error
        # Bounds every wait on every connection of the store (cairn.store.pgwatch).
        self._watchdog: Watchdog = pgpool.Watchdog(
            round_trip, _redacted(conninfo), self._look_connection
        )
        settings = self._pool_settings(connect_timeout)
        self._pool: ConnectionPool = pgpool.ConnectionPool(
            conninfo, size=self.pool_size, **settings
        )
        # The lease keeper's own connection (opened at its first renewal, and
        # again after a loss, as the pool does): threads that hold every pooled
        # connection never keep a lease from being renewed.
        self._lease_pool: ConnectionPool = pgpool.ConnectionPool(conninfo, size=1, **settings)
        try:
            self._pool.open()
        except driver.Error as exc:
            raise postgres_connect_failed(_redacted(conninfo), exc) from None
        self._channel = f"cairn_work_{self.schema}"
        self.announce_work = _NOTIFY.format(channel=self._channel)
        self._listener: psycopg.Connection[Any] | None = None
        self._listener_lock = threading.Lock()
        self._listen_delay = 0.0  # 0 while listening; the next retry's wait otherwise
        self.schema_version = latest_version("postgres")
        self.found_schema = self.schema_version  # set by _migrate; 0 when it creates the schema
        try:
            self._migrate(create=create)
        except BaseException:
            self.close()
            raise

    def _pool_settings(self, connect_timeout: float | None) -> dict[str, Any]:
        """What every connection of the store's pools is opened with."""
        # Added to any options= the user's URL gives, not instead of them.
        options = [own_options(self._conninfo), f"-c search_path={self.schema}", "-c timezone=UTC"]
        return {
            "options": " ".join(filter(None, options)),
            "where": _redacted(self._conninfo),
            "reconnect_timeout": self.reconnect_timeout,
            "connect_timeout": connect_timeout,
            "watchdog": self._watchdog,
        }

    def _look_connection(self, **settings: Any) -> psycopg.Connection[Any]:
        """A connection on which the watchdog asks the server what a silent
        connection's process is doing (itself unwatched: the watchdog bounds it)."""
        return self._pool.connect(watched=False, application_name="cairn watchdog", **settings)

    def bound_round_trips(self, seconds: float) -> None:
        """Abandon a wait on a connection that stays silent ``seconds`` while the
        server is not working on its statement (cairn.store.pgwatch); the app
        passes a third of its lease. Two apps on one store: the shorter wins."""
        self._watchdog.bound(seconds)

    # -- schema --------------------------------------------------------------------
    def _version(self, conn: psycopg.Connection[Any]) -> int:
        row = conn.execute(_META_TABLE, (f"{self.schema}.cairn_meta",)).fetchone()
        if row is None or row[0] is None:
            return 0
        found = conn.execute(_VERSION.format(schema=self.schema).encode()).fetchone()
        return int(found[0]) if found else 0

    def _migrate(self, *, create: bool) -> None:
        latest = latest_version("postgres")

        def migrate(conn: psycopg.Connection[Any]) -> None:
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
                    "cairn (`pip install -U cairn-durable`) to use it. Nothing was changed."
                )
            if version == latest:
                return
            with conn.transaction():
                # One migrator at a time, across every process and machine.
                conn.execute(_LOCK_MIGRATIONS, (_MIGRATE_LOCK,))
                conn.execute(_CREATE_SCHEMA.format(schema=self.schema).encode())
                current = self._version(conn)
                self.found_schema = current
                for migration in migrations("postgres")[current:]:
                    conn.execute(migration.sql.encode())  # a script: no parameters to bind
                    conn.execute(_SET_VERSION, (str(migration.version),))

        self._run(migrate, lambda: f"the migration of schema {self.schema}")

    # -- the primitives the shared store is built on ------------------------------
    def _run(
        self,
        work: Callable[[psycopg.Connection[Any]], T],
        what: Callable[[], str],
        *,
        patient: bool = True,
        pool: ConnectionPool | None = None,
    ) -> T:
        """``work`` on a pooled connection (again on a new one if the connection
        is lost); any other driver error becomes a ``StoreError`` naming
        ``what()`` was refused ("a write to tasks")."""
        try:
            return (pool or self._pool).run(work, patient=patient)
        except self._driver_error as exc:
            raise self._refused(exc, what()) from exc
        except UnicodeEncodeError as exc:
            # Raised by the driver while it encodes a parameter, before anything
            # is sent: the value is wrong, not the store (as on SQLite).
            raise unstorable_text(exc) from exc

    def _refused(self, exc: Exception, what: str) -> StoreError:
        """The error to raise for ``what`` the server (or driver) refused."""
        driver, _ = _driver()
        return postgres_refused(
            exc,
            what,
            where=_redacted(self._conninfo),
            schema=self.schema,
            user=self._user(),
            data_error=isinstance(exc, driver.DataError),
        )

    def _user(self) -> str:
        return urlsplit(self._conninfo).username or "(the default user)"

    def _exec(self, statement: str, params: Sequence[Any] = (), *, patient: bool = True) -> Result:
        return self._statement(self._pool, statement, params, patient)

    def _exec_lease(self, statement: str, params: Sequence[Any], *, patient: bool = True) -> Result:
        return self._statement(self._lease_pool, statement, params, patient)

    def _statement(
        self, pool: ConnectionPool, statement: str, params: Sequence[Any], patient: bool
    ) -> Result:
        """One statement on a connection of ``pool``, in its own transaction."""
        text = _pg(statement)

        def run(conn: psycopg.Connection[Any]) -> Result:
            cursor = conn.execute(text, params)
            return Result(cursor.rowcount, cursor.fetchall() if cursor.description else [])

        return self._run(run, lambda: statement_target(statement), patient=patient, pool=pool)

    def _write_once(
        self, statement: str, params: Sequence[Any], own: Own, *, patient: bool = True
    ) -> Result:
        text = _pg(statement)
        tries = 0

        def run(conn: psycopg.Connection[Any]) -> Result:
            nonlocal tries
            tries += 1
            if tries > 1:  # the connection was lost: the first try may have committed
                found = _PgTx(conn).exec(*own)
                if found.rows:
                    return Result(len(found.rows), found.rows)
            cursor = conn.execute(text, params)
            return Result(cursor.rowcount, cursor.fetchall() if cursor.description else [])

        return self._run(run, lambda: statement_target(statement), patient=patient)

    def _atomically(self, work: Callable[[Tx], T]) -> T:
        return self._transaction(work)

    def _atomically_once(self, work: Callable[[Tx], T], own: Callable[[Tx], T | None]) -> T:
        return self._transaction(work, again=own)

    def _snapshot(self, work: Callable[[Tx], T]) -> T:
        # The default, READ COMMITTED, takes a new snapshot for each statement:
        # a batch read table by table would mix moments.
        return self._transaction(work, first=_SNAPSHOT)

    def _transaction(
        self,
        work: Callable[[Tx], T],
        first: str | None = None,
        again: Callable[[Tx], T | None] | None = None,
    ) -> T:
        tries: list[_PgTx] = []

        def run(conn: psycopg.Connection[Any]) -> T:
            tries.append(_PgTx(conn))
            with conn.transaction():
                if first is not None:
                    conn.execute(first.encode())
                if again is not None and len(tries) > 1:
                    # The connection was lost: the first try may have committed.
                    found = again(tries[-1])
                    if found is not None:
                        return found
                return work(tries[-1])

        return self._run(run, lambda: statement_target(tries[-1].statement if tries else ""))

    def _ts(self, moment: datetime) -> datetime:
        return moment

    def _writing(self) -> nullcontext[None]:
        return nullcontext()

    # -- waking idle workers -------------------------------------------------------
    def wait_for_work(self, timeout: float) -> bool:
        """LISTEN for the NOTIFY that enqueue sends, up to ``timeout`` seconds.

        A lost listening connection is opened again within the same call, with
        the pool's backoff (0.05 s doubling to 0.5 s), so listening resumes
        within about half a second of the server's return. Work announced while
        it was away went unheard, so the first wait after a reconnect returns
        True at once: idle threads look for work."""
        deadline = time.monotonic() + timeout
        with self._listener_lock:
            while True:
                remaining = deadline - time.monotonic()
                if self._listener is None:
                    if not self._listen():
                        if remaining <= 0:
                            return False
                        time.sleep(min(self._listen_delay, remaining))
                        continue
                    if self._listen_delay:
                        self._listen_delay = 0.0
                        log.warning("cairn: listening for new work again")
                        return True
                listener = self._listener
                assert listener is not None
                try:
                    for _ in listener.notifies(timeout=max(remaining, 0.0), stop_after=1):
                        return True
                    return False
                except self._driver_error as exc:
                    self._drop_listener(exc)

    def _listen(self) -> bool:
        """Open the listening connection; False (logged once an outage) if not."""
        conn = None
        try:
            conn = self._pool.connect(connect_timeout=5)
            conn.execute(_LISTEN.format(channel=self._channel).encode())
        except self._driver_error as exc:
            if conn is not None:
                conn.close()
            self._drop_listener(exc)
            return False
        # Waiting for a notification is silent by design: only the LISTEN above
        # is bounded. (A dead listener only delays wake-ups: idle threads poll.)
        self._watchdog.unwatch(conn)
        self._listener = conn
        return True

    def _drop_listener(self, exc: Exception) -> None:
        _, pgpool = _driver()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        if not self._listen_delay:
            log.warning("cairn: not listening for new work (%s); polling", one_line(exc))
            self._listen_delay = pgpool.FIRST_DELAY
        else:
            self._listen_delay = min(self._listen_delay * 2, pgpool.MAX_DELAY)

    def close(self) -> None:
        with self._listener_lock:
            if self._listener is not None:
                self._listener.close()
                self._listener = None
        self._pool.close()
        self._lease_pool.close()
        self._watchdog.close()
