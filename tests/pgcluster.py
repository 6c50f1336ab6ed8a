"""A PostgreSQL cluster of a test's own, on a free port, that it may stop and start.

The shared server (``CAIRN_TEST_POSTGRES_URL``) is never stopped: other tests,
and other people's, use it. A test that needs a real outage makes a cluster
here instead, and the cluster is always dropped afterwards::

    with private_cluster() as cluster:
        store = PostgresStore(cluster.url())
        cluster.stop()
        ...
        cluster.start()

or, in a test, the ``pg_cluster`` fixture (one cluster per test worker, kept
between its tests: each test finds it running with only the ``postgres``
database, as a new one would be). Two ways to make one, whichever the
machine has:

* Debian's ``pg_createcluster`` (the version is the newest under
  ``/etc/postgresql``), driven with ``pg_ctlcluster --skip-systemctl-redirect``
  and dropped with ``pg_dropcluster --stop``;
* otherwise ``initdb`` and ``pg_ctl`` on a data directory of its own, run as
  the ``postgres`` user when the tests run as root (PostgreSQL refuses root).

Either way: trust authentication for the superuser ``postgres`` on 127.0.0.1,
and a stop is a fast shutdown (every session is ended with SQLSTATE 57P01, as in
a restart or a failover). Without the tools the tests that need a cluster are
skipped, except in CI (``CI=true``), where they fail.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import pytest

COMMAND_TIMEOUT = 120
_PREFIX = "cairn_test_"


class ClusterUnavailable(Exception):
    """This machine cannot make a private PostgreSQL cluster."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr}")


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class Cluster:
    """A running private cluster; ``stop`` and ``start`` it at will."""

    port: int
    name: str
    _stop: list[str] = field(repr=False)
    _start: list[str] = field(repr=False)

    def url(self, database: str = "postgres", **params: str) -> str:
        query = "&".join(f"{key}={value}" for key, value in params.items())
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}" + (
            f"?{query}" if query else ""
        )

    def stop(self) -> None:
        """A fast shutdown: every session is ended, and new ones are refused."""
        _run(self._stop)

    def start(self) -> None:
        """Start the server and wait until it is up."""
        _run(self._start)

    def accepts(self) -> bool:
        """Does the server accept a connection right now?"""
        import psycopg

        try:
            with psycopg.connect(self.url(), connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def wait_accepting(self, timeout: float = 60) -> float:
        """Poll until the server accepts a connection; the ``time.monotonic()``
        of the first one that did."""
        deadline = time.monotonic() + timeout
        while not self.accepts():
            if time.monotonic() > deadline:
                raise RuntimeError(f"cluster {self.name} did not accept connections in {timeout}s")
            time.sleep(0.01)  # real-sleep-ok: polling a real server process
        return time.monotonic()

    def create_database(self, name: str) -> str:
        """A new database in the cluster; its URL."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)


# -- Debian's cluster tools ------------------------------------------------------------------
def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise ClusterUnavailable(f"{name} is not installed")
    return found


def _debian_version() -> str | None:
    """The newest version the Debian tools manage, if they are here and may be
    used (they need root or the postgres user)."""
    config = Path("/etc/postgresql")
    tools = shutil.which("pg_createcluster") and shutil.which("pg_ctlcluster")
    allowed = os.geteuid() == 0 or (config.is_dir() and os.access(config, os.W_OK))
    if not tools or not allowed or not config.is_dir():
        return None
    versions = sorted((p.name for p in config.iterdir() if p.name.isdigit()), key=int)
    return versions[-1] if versions else None


def _drop_stale_debian(version: str) -> None:
    """Drop private clusters left by test processes that died before dropping them."""
    for path in Path("/etc/postgresql", version).glob(f"{_PREFIX}*"):
        pid = path.name.removeprefix(_PREFIX).split("_")[0]
        if pid.isdigit() and not _process_alive(int(pid)):
            subprocess.run(
                [_tool("pg_dropcluster"), "--stop", version, path.name],
                capture_output=True,
                timeout=COMMAND_TIMEOUT,
            )


@contextmanager
def _debian_cluster(version: str, name: str) -> Iterator[Cluster]:
    _drop_stale_debian(version)
    port = free_port()
    ctl = [_tool("pg_ctlcluster"), "--skip-systemctl-redirect", version, name]
    create = [_tool("pg_createcluster"), version, name, "-p", str(port), "--", "--auth=trust"]
    _run(create)
    try:
        cluster = Cluster(port, name, [*ctl, "stop"], [*ctl, "start"])
        cluster.start()
        yield cluster
    finally:
        _run([_tool("pg_dropcluster"), "--stop", version, name])


# -- initdb and pg_ctl -----------------------------------------------------------------------
def _as_postgres(command: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return command
    runuser = shutil.which("runuser")
    if runuser is None:
        raise ClusterUnavailable("running as root, and runuser is missing to drop to postgres")
    return [runuser, "-u", "postgres", "--", *command]


@contextmanager
def _initdb_cluster(name: str) -> Iterator[Cluster]:
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb is None or pg_ctl is None:
        raise ClusterUnavailable("neither pg_createcluster nor initdb and pg_ctl are installed")
    port = free_port()
    root = Path(tempfile.mkdtemp(prefix=name))
    data = root / "data"
    try:
        if os.geteuid() == 0:
            shutil.chown(root, "postgres", "postgres")
        _run(_as_postgres([initdb, "-D", str(data), "-U", "postgres", "--auth=trust"]))
        settings = f"-p {port} -k {root} -c listen_addresses=127.0.0.1"
        log = str(root / "server.log")
        control = [pg_ctl, "-D", str(data), "-l", log, "-o", settings, "-w"]
        cluster = Cluster(
            port,
            name,
            _as_postgres([*control, "-m", "fast", "stop"]),
            _as_postgres([*control, "start"]),
        )
        cluster.start()
        try:
            yield cluster
        finally:
            subprocess.run(cluster._stop, capture_output=True, timeout=COMMAND_TIMEOUT)
    finally:
        shutil.rmtree(root, ignore_errors=True)


_made = 0


@contextmanager
def private_cluster() -> Iterator[Cluster]:
    """A new cluster on a free port, started; stopped and dropped on exit.
    Raises ``ClusterUnavailable`` if this machine has no way to make one."""
    global _made
    _made += 1
    name = f"{_PREFIX}{os.getpid()}_{_made}"
    version = _debian_version()
    if version is not None:
        with _debian_cluster(version, name) as cluster:
            yield cluster
    else:
        with _initdb_cluster(name) as cluster:
            yield cluster


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI") == "true":
        pytest.fail(f"a private PostgreSQL cluster is required in CI: {reason}")
    pytest.skip(f"cannot make a private PostgreSQL cluster: {reason}")


class _Kept:
    """One worker's private cluster, made at the first test that asks and kept for
    the next ones (making one costs seconds): each test gets it running and with
    only the ``postgres`` database, as a new cluster would be."""

    def __init__(self) -> None:
        self._stack = ExitStack()
        self.cluster: Cluster | None = None

    def get(self) -> Cluster:
        if self.cluster is None:
            self.cluster = self._stack.enter_context(private_cluster())
        return self.cluster

    def reset(self) -> None:
        """After a test: running again, and every database it made dropped (even
        one it left refusing connections); a cluster that cannot be brought back
        is dropped, and the next test gets a new one."""
        cluster = self.cluster
        if cluster is None:
            return
        try:
            if not cluster.accepts():
                with suppress(RuntimeError):  # a start the test began may be under way
                    cluster.start()
                cluster.wait_accepting()
            _drop_databases(cluster)
        except Exception:
            self.close()
            raise

    def close(self) -> None:
        self.cluster = None
        self._stack.close()


def _drop_databases(cluster: Cluster) -> None:
    import psycopg

    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        names = conn.execute(
            "SELECT datname FROM pg_database WHERE datname <> 'postgres' AND NOT datistemplate"
        ).fetchall()
        for (name,) in names:
            conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def _kept_cluster() -> Iterator[_Kept]:
    kept = _Kept()
    try:
        yield kept
    finally:
        kept.close()


@pytest.fixture
def pg_cluster(_kept_cluster: _Kept) -> Iterator[Cluster]:
    """A private PostgreSQL cluster for one test at a time, which it may stop and
    start; after the test it is running again, with only the ``postgres``
    database (the worker's tests share one cluster, dropped at the end)."""
    try:
        import psycopg  # noqa: F401 - the cluster is no use without the driver
    except ImportError:
        _unavailable("psycopg is not installed (pip install -e '.[test]')")
    try:
        cluster = _kept_cluster.get()
    except ClusterUnavailable as exc:
        _unavailable(str(exc))
    try:
        yield cluster
    finally:
        _kept_cluster.reset()
