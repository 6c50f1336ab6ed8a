"""Step-name templates: one name for every step written by the same line of code.

A task that loops writes ``fetch-1``, ``fetch-2``, ...; ``ctx.map("score", items)``
writes ``score[alice]``, ``score[bob]``, ... Metrics, reports, span names and
dashboards group by the template instead (``fetch-*``, ``score[*]``), so the
number of groups depends on the code, never on how many tasks or items ran.

The rule, in order:

* a map item ``name[label]`` -> ``name[*]`` (the label is the item's key);
* the hashed tail of a shortened key (``~`` and 32 hex digits) -> ``~*``;
* a UUID, a run of 12 or more hex digits holding a digit, or a run of digits
  (with ``.``/``:``/``-`` between digits, as in a date or a time) that stands
  as a word of its own -> ``*``.

``step_template`` is the one place this rule is written.
"""

from __future__ import annotations

import re

_MAP_ITEM = re.compile(r"\[[^\[\]]*\]$")
_HASHED = re.compile(r"~[0-9a-f]{32}$")
_UUID = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")
_HEX = re.compile(r"(?<![0-9A-Za-z])(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{12,}(?![0-9A-Za-z])")
# Digits standing as a word: fetch-17, page_3_of_9, v2026-05-24, 06:00.
_NUMBER = re.compile(r"(?<![A-Za-z])\d+(?:[.:\-]\d+)*(?![0-9A-Za-z])")


def step_template(name: str) -> str:
    """The template of a step name: ``fetch-17`` -> ``fetch-*``,
    ``score[alice]`` -> ``score[*]``, ``page-3-of-9`` -> ``page-*-of-*``."""
    template = _MAP_ITEM.sub("[*]", name)
    template = _HASHED.sub("~*", template)
    template = _UUID.sub("*", template)
    template = _HEX.sub("*", template)
    return _NUMBER.sub("*", template)
