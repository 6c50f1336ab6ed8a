"""The peer libraries: which are installed, their versions, and keeping them offline.

They come from the ``bench`` extra (``pip install -e '.[bench]'``) and are imported
only inside the functions that use them, so the cairn-only parts of the harness,
the type checker and the linter all work without them.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager

# distribution name -> the module the harness imports from it
PEERS = {
    "dbos": "dbos",
    "langgraph": "langgraph.graph",
    "langgraph-checkpoint-sqlite": "langgraph.checkpoint.sqlite",
    "openai-agents": "agents",
}

# Nothing may reach the network while a benchmark runs: the peers' tracing and
# telemetry are switched off before any of them is imported.
_OFFLINE_ENV = {
    "OPENAI_AGENTS_DISABLE_TRACING": "1",  # the Agents SDK's trace exporter
    "LANGSMITH_TRACING": "false",  # LangSmith tracing (LangGraph)
    "LANGCHAIN_TRACING_V2": "false",
    "OTEL_SDK_DISABLED": "true",  # any OpenTelemetry SDK a peer might start
}


def go_offline() -> None:
    """Set the variables that keep the peers' tracing off (before importing them)."""
    os.environ.update(_OFFLINE_ENV)


def offline_variables() -> list[str]:
    """The names of the variables ``go_offline`` sets."""
    return list(_OFFLINE_ENV)


def offline_settings() -> str:
    return ", ".join(f"{k}={v}" for k, v in _OFFLINE_ENV.items())


_left_out: set[str] = set()


@contextmanager
def left_out(every_peer: bool) -> Iterator[None]:
    """Inside, every peer counts as missing if ``every_peer`` (``--no-peers``)."""
    if every_peer:
        _left_out.update(PEERS)
    try:
        yield
    finally:
        _left_out.clear()


def installed(distribution: str) -> bool:
    """Whether the peer's module can be imported here (and was not left out)."""
    if distribution in _left_out:
        return False
    try:
        return importlib.util.find_spec(PEERS[distribution]) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def missing_note(distribution: str) -> str:
    if _left_out:
        return f"skipped {distribution}: --no-peers"
    return (
        f"skipped {distribution}: not installed "
        "(install the peers with: .venv/bin/pip install -e '.[bench]')"
    )


def environment() -> str:
    """The versions a reader needs to reproduce a table."""
    peers = ", ".join(f"{name} {version(name)}" for name in PEERS)
    return (
        f"Python {platform.python_version()} ({sys.platform}), SQLite {sqlite3.sqlite_version}, "
        f"cairn {version('cairn')}; peers: {peers}; {os.cpu_count()} CPUs"
    )
