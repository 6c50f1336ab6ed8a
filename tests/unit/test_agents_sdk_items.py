"""Agents SDK items as conversation messages (cairn.integrations.openai_agents._items).

Items with a role are stored as they are; function calls of one add share an
assistant message with tool_calls; outputs are tool messages; anything else an
assistant message without text. Reading gives the items back exactly, with pop
markers applied.
"""

from __future__ import annotations

from cairn.agent._window import Row, split_point, tool_pairs_intact
from cairn.agent.messages import normalize
from cairn.integrations.openai_agents._items import items_of, messages_of, pop_marker
from tests.agents_sdk import ITEMS


def test_every_item_comes_back_and_the_messages_are_chat_shaped() -> None:
    """The messages are valid chat messages whose tool calls and results pair
    up, and reading them gives the items back in order."""
    messages = messages_of(ITEMS)
    assert [normalize(m) for m in messages] == messages
    assert [m["role"] for m in messages] == [
        "user",
        "assistant",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    assert tool_pairs_intact(messages)
    rows = list(enumerate(messages))
    assert [item for _, _, item in items_of(rows)] == ITEMS


def test_a_pop_marker_removes_its_item_and_only_that() -> None:
    """A marker names (row, position): the second call of a shared row goes,
    the first stays; a marker whose row is not read any more removes nothing."""
    messages = messages_of(ITEMS)
    rows = [*enumerate(messages), (len(messages), pop_marker(2, 1))]
    items = [item for _, _, item in items_of(rows)]
    assert items == [item for item in ITEMS if item.get("call_id") != "c2" or "output" in item]
    folded = [(idx, m) for idx, m in rows if idx >= 3]
    assert len(items_of(folded)) == 3


def test_compaction_never_cuts_between_calls_made_together() -> None:
    """The calls of one add are one row, so the cut that keeps their results
    moves back before all of them, never between."""
    rows = [Row(i, m, 10) for i, m in enumerate(messages_of(ITEMS))]
    cut = split_point(rows, keep_tail=25)
    assert rows[cut].message["role"] != "tool"
    assert tool_pairs_intact([r.message for r in rows[cut:]])
