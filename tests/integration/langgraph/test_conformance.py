"""LangGraph's own checkpointer conformance suite, on both cairn stores.

``langgraph-checkpoint-conformance`` registers a saver factory and runs its
capability suites against it (``validate``); each suite gets a fresh saver,
here on a fresh SQLite file or a fresh PostgreSQL database. CairnSaver declares
every capability by implementing it: the base ones (put, put_writes,
get_tuple, list, delete_thread) and the extended ones (delete_for_runs,
copy_thread, prune), so every suite runs.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import BASE_CAPABILITIES, EXTENDED_CAPABILITIES
from langgraph.checkpoint.conformance.report import CapabilityReport

from cairn.integrations.langgraph import CairnSaver

_files = itertools.count()


def run_suite(open_saver: Callable[[], CairnSaver]) -> CapabilityReport:
    """Every capability suite, each on a saver ``open_saver`` makes."""

    @checkpointer_test(name="CairnSaver")
    async def factory() -> AsyncIterator[CairnSaver]:
        saver = open_saver()
        try:
            yield saver
        finally:
            saver.close()

    return asyncio.run(validate(factory))


def check(report: CapabilityReport) -> None:
    """Every suite, base and extended, was detected, ran tests and passed them."""
    failures = {name: r.failures for name, r in report.results.items() if r.failures}
    assert report.passed_all_base(), failures
    for capability in BASE_CAPABILITIES:
        result = report.results[capability.value]
        assert result.detected
        assert result.tests_passed > 0
        assert result.tests_failed == 0
    for capability in EXTENDED_CAPABILITIES:
        result = report.results[capability.value]
        assert result.detected
        assert result.tests_passed > 0
        assert result.tests_failed == 0


def test_conformance_on_sqlite(tmp_path: Path) -> None:
    """The suite passes on a cairn SQLite store, a new file for each capability."""
    report = run_suite(lambda: CairnSaver(f"sqlite:///{tmp_path / f'lg-{next(_files)}.db'}"))
    check(report)


def test_conformance_on_postgres(pg_url: str) -> None:
    """The suite passes on a cairn PostgreSQL store (a fresh database for the run;
    every suite's threads are its own uuid4s, so they share it)."""
    report = run_suite(lambda: CairnSaver(pg_url))
    check(report)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_suite_can_fail(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The suite sees a broken saver: one whose list forgets the newest
    checkpoint fails the list capability (so the passes above mean something)."""

    class Forgetful(CairnSaver):
        def list(self, config, *, filter=None, before=None, limit=None):  # noqa: A002
            found = list(super().list(config, filter=filter, before=before, limit=limit))
            yield from found[1:]

    url = (
        f"sqlite:///{tmp_path / 'broken.db'}"
        if backend == "sqlite"
        else str(request.getfixturevalue("pg_url"))
    )
    report = run_suite(lambda: Forgetful(url))
    assert report.results["list"].tests_failed > 0
