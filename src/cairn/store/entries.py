"""A history entry as one JSON text, for the entries a rerun supersedes.

A rerun takes a task's entries from the fork point on out of its history and
keeps them, under the run that recorded them, in ``superseded_entries``. Each
is kept whole as JSON built from the steps table's description
(``cairn.store.tables.STEPS``): a time as ISO text, everything else as the
record holds it. So that table does not follow the steps table's column list,
and a column added to ``steps`` later is carried without a change here; an
entry kept before that column existed reads back with the record's default.
"""

from __future__ import annotations

import json
from typing import Any

from cairn.clock import from_iso, to_iso
from cairn.store.records import StepRecord
from cairn.store.tables import STEPS

_TIMES = frozenset(c.name for c in STEPS.carried if c.kind == "time")
_DEFAULTS: dict[str, Any] = StepRecord._field_defaults


def entry_text(entry: StepRecord) -> str:
    """``entry`` as one JSON text (its fields by name)."""
    fields: dict[str, Any] = {}
    for name, value in entry._asdict().items():
        fields[name] = to_iso(value) if name in _TIMES and value is not None else value
    return json.dumps(fields, ensure_ascii=False, separators=(",", ":"))


def entry_of(text: str) -> StepRecord:
    """The entry ``entry_text`` made ``text`` from; a field it did not carry
    gets the record's default (None where the record has none)."""
    fields = json.loads(text)
    values: dict[str, Any] = {}
    for name in StepRecord._fields:
        value = fields.get(name, _DEFAULTS.get(name))
        values[name] = from_iso(value) if name in _TIMES and value is not None else value
    return StepRecord(**values)
