"""The demo's closing lines explain themselves: a key called twice after the kill
is said to be the design (not a failure beside "every step ran exactly once"),
with the count of keys called once, and every line fits 80 columns (what Rich
uses when the output is piped)."""

from __future__ import annotations

import io
from collections import Counter

from rich.console import Console

from cairn.demo.batch import STEPS
from cairn.demo.check import Verdict
from cairn.demo.report import outcome


def _verdict(apps: int, called_again: int) -> Verdict:
    """A clean run of ``apps`` apps: every step once, every app applied once, and
    ``called_again`` apply keys claimed twice (their first call cut off by the kill)."""
    ids = [f"app-{n:03d}" for n in range(1, apps + 1)]
    expected = [(f"b/{app_id}", step) for app_id in ids for step in STEPS]
    return Verdict(
        batch_total=apps,
        batch_completed=apps,
        runs=Counter(expected),
        run1_by_step=Counter(step for _, step in expected[: len(expected) // 2]),
        run2_by_step=Counter(step for _, step in expected[len(expected) // 2 :]),
        applies=Counter(ids),
        expected=expected,
        op_calls={f"b/{key}/apply": 2 if n < called_again else 1 for n, key in enumerate(ids)},
    )


def _printed(verdict: Verdict) -> list[str]:
    out = io.StringIO()
    outcome(Console(file=out, force_terminal=False, width=80), verdict)
    return out.getvalue().splitlines()


def test_keys_called_again_after_the_kill_are_counted_and_explained() -> None:
    """120 apps, 3 keys called again: the line says 3 took a second call, by
    design, and why, with no "117/120"-like count that reads as a shortfall;
    the ledger line still says each app was applied once; no line is wrapped."""
    lines = _printed(_verdict(120, 3))
    text = "\n".join(lines)
    assert "every step ran exactly once: 720/720" in text
    assert "apply: one operation key per app (120 keys); 3 took a second call, by design:" in text
    assert "117" not in text
    assert "the kill cut their first call off before the platform acted" in text
    assert "found no change, and they took the call" in text
    assert "No change reached it twice, as its ledger shows:" in text
    assert lines[-1] == "ad platform: each app's settings applied exactly once (120/120)"
    assert max(len(line) for line in lines) <= 80


def test_one_key_called_again_reads_in_the_singular() -> None:
    """One key called again: "that call", not "those calls"."""
    text = "\n".join(_printed(_verdict(30, 1)))
    assert "(30 keys); 1 took a second call, by design:" in text
    assert "the kill cut its first call off" in text
    assert "and it took the call" in text


def test_no_key_called_again_is_one_line() -> None:
    """No key called again: one line saying each was called once, no explanation."""
    lines = _printed(_verdict(30, 0))
    assert "apply: one operation key per app (30 keys), each called once" in lines
    assert not any("as designed" in line for line in lines)
