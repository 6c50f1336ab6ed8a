"""Workflows that are broken on purpose, for the crash checker to catch.

Each looks fine when run once without a crash; each goes wrong after a crash at
some boundary:

- ``stale_variable``: a step reads the previous step's output from a module
  global that the previous step set. Replay returns the recorded output without
  calling that step, so after a crash the global is empty.
- ``unkeyed_charge``: a step charges a ledger directly, not through ``ctx.once``.
  A crash after the charge and before the step's result is committed charges
  again on resume. ``charge_in_a_step`` is the same bug with nothing around it.
- ``apply_without_reconcile``: the charge goes through ``ctx.once`` but with the
  default policy, so a crash after the charge leaves the key in doubt.
- ``branch_on_outside_state``: the task picks its first step by looking at a
  file the step itself writes, without recording what it saw; after a crash,
  replay takes the other branch.

The app makes one task attempt, so a broken case fails at once instead of
waiting out retry delays.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from cairn import Cairn, Context, Retry, op_key

app = Cairn(task_retry=Retry(attempts=1))

LEDGER = Path("ledger.jsonl")
SEEN = Path("seen.txt")
_settings: dict[str, Any] = {}  # the bug in stale_variable: state outside the record


def _charge(key: str, amount: int) -> dict[str, Any]:
    fd = os.open(LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps({"key": key, "amount": amount}) + "\n").encode())
    finally:
        os.close(fd)
    return {"charged": amount}


def ledger_entries() -> dict[str, int]:
    """Charges per key in the ledger (the crash check's effects)."""
    if not LEDGER.exists():
        return {}
    lines = [json.loads(line) for line in LEDGER.read_text().splitlines() if line.strip()]
    return dict(Counter(line["key"] for line in lines))


def _fetch(item: str) -> str:
    _settings["budget"] = len(item) * 10
    return "fetched"


def _analyze() -> int:
    return int(_settings["budget"]) + 1


@app.task
def stale_variable(ctx: Context, item: str) -> int:
    ctx.step("fetch", _fetch, item)
    return ctx.step("analyze", _analyze)


@app.task
def unkeyed_charge(ctx: Context, item: str) -> dict[str, Any]:
    amount = ctx.step("price", len, item)
    return ctx.step("charge", _charge, f"charge/{item}", amount)


@app.task
def charge_in_a_step(ctx: Context, item: str) -> dict[str, Any]:
    return ctx.step("charge", _charge, f"charge/{item}", len(item))


@app.task
def apply_without_reconcile(ctx: Context, item: str) -> dict[str, Any]:
    amount = ctx.step("price", len, item)
    return ctx.once(op_key("charge", item), _charge, amount)


def _mark_seen() -> str:
    SEEN.write_text("seen")
    return "marked"


@app.task
def branch_on_outside_state(ctx: Context, item: str) -> str:
    first = "again" if SEEN.exists() else "first"  # the bug: an unrecorded outside read
    ctx.step(first, _mark_seen)
    return ctx.step("finish", str.upper, item)
