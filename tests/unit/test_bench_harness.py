"""The side-by-side benchmark harness (``python -m bench``) runs its cairn parts.

Speed is never asserted here: this only checks that the harness's cairn-only
sections run end to end in ``--quick`` mode and print their tables, and that a
peer that is missing is skipped with a note saying how to install it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from bench import __main__ as harness
from bench import _peers


def test_quick_cairn_only_run_prints_every_sqlite_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the peers left out and no PostgreSQL, --quick runs the step,
    conversation and resume sections and prints a table for each, with the floor
    measured in the same run and each skipped peer named."""
    # The harness switches the peers' telemetry off for the whole process
    # (OTEL_SDK_DISABLED among them): put the environment back afterwards, or
    # a later test's OpenTelemetry exporter records nothing.
    for name in _peers.offline_variables():
        monkeypatch.setenv(name, os.environ.get(name, ""))
        monkeypatch.delenv(name)
    argv = ["--quick", "--no-peers", "--no-postgres", "--dir", str(tmp_path)]
    assert harness.main([*argv, "--only", "step", "conversation", "resume", "workers"]) == 0
    out = capsys.readouterr().out
    for heading in ("(1a) a durable step on SQLite", "(2) conversation growth", "(3a)", "(3b)"):
        assert heading in out
    assert "raw commit WAL/NORMAL (floor)" in out
    assert "cairn WAL/NORMAL (cairn default)" in out
    assert "cairn FULL + compact" in out
    assert "skipped dbos: --no-peers" in out
    assert "skipped openai-agents: --no-peers" in out
    assert "(1b) PostgreSQL skipped" in out
    assert "(4) workers skipped" in out
    assert "DBOS" not in out.replace("skipped dbos", "")
    assert list(tmp_path.iterdir()) == []  # every scratch file was removed


def test_a_peer_that_is_not_installed_is_reported_not_imported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A peer whose module cannot be found counts as missing, and its note tells
    how to install the peers rather than failing with an ImportError."""
    monkeypatch.setitem(_peers.PEERS, "no-such-peer", "no_such_peer_module.sub")
    assert not _peers.installed("no-such-peer")
    assert _peers.version("no-such-peer") == "not installed"
    note = _peers.missing_note("no-such-peer")
    assert "not installed" in note
    assert "pip install -e '.[bench]'" in note
