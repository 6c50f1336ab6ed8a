"""The conversation part of the store contract, on each backend.

Rows are appended under the task's fence, one statement each; the active context
(row 0, the latest summary, the rows after what it covers) is read in one query
whose cost does not grow with the archived head.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest

from cairn.store import AdminStore, open_store
from cairn.store.records import (
    MessageKind,
    MessageRecord,
    NewTask,
    StepKind,
    StepRecord,
)

NOW = datetime(2026, 5, 24, 9, 0, tzinfo=UTC)
TASK = "agent/run=1"


@pytest.fixture
def store(store_url: str) -> Iterator[AdminStore]:
    """A fresh store of each backend."""
    opened = open_store(store_url)
    yield opened
    opened.close()


def claimed_fence(store: AdminStore, task_id: str = TASK) -> int:
    store.create_task(NewTask(task_id, "agent", "{}", "json", "agents", task_id), NOW)
    claimed = store.claim_task(task_id, 0, "me", NOW, NOW)
    assert claimed is not None
    return claimed.fence


def opened_conversation(store: AdminStore, fence: int, name: str = "main") -> int:
    conv_id = store.open_conversation(TASK, name, fence)
    assert conv_id is not None
    return conv_id


def _row(
    idx: int, role: str = "user", *, kind: MessageKind = "message", covers: int | None = None
) -> MessageRecord:
    content = f'{{"role":"{role}","content":"message {idx}"}}'
    return MessageRecord(TASK, "main", idx, role, content, 5, kind, covers, None, NOW)


def test_active_context_is_row_zero_the_latest_summary_and_what_follows(store: AdminStore) -> None:
    """With two summaries recorded, the active read returns the system row, the
    latest summary and the rows after its covers_until, in idx order; the rows it
    covers, and the older summary, stay stored and readable page by page."""
    fence = claimed_fence(store)
    conv_id = opened_conversation(store, fence)
    rows = [_row(0, "system"), *(_row(i) for i in range(1, 6))]
    rows += [_row(6, kind="summary", covers=3), _row(7), _row(8)]
    rows += [_row(9, kind="summary", covers=6), _row(10)]
    for row in rows:
        assert store.append_message(conv_id, row, fence)
    active = store.load_active_messages(TASK, "main")
    assert [r.idx for r in active] == [0, 7, 8, 9, 10]
    assert active[0].created_at == NOW
    assert [r.idx for r in store.load_messages(TASK, "main", 0, 4)] == [0, 1, 2, 3]
    assert [r.idx for r in store.load_messages(TASK, "main", 4, 100)] == list(range(4, 11))
    (summary,) = store.conversation_summaries(TASK)
    assert (summary.conv, summary.rows, summary.summaries, summary.next_idx) == ("main", 11, 2, 11)
    assert summary.message_tokens == 9 * 5
    assert store.load_active_messages(TASK, "other") == []


def test_a_stale_fence_appends_nothing_not_even_part_of_a_batch(store: AdminStore) -> None:
    """An append under a fence that moved returns False and writes no row; a
    several-row append is all or nothing."""
    fence = claimed_fence(store)
    conv_id = opened_conversation(store, fence)
    assert store.append_messages(conv_id, [_row(0, "system"), _row(1)], fence)
    stale = fence
    assert store.claim_task(TASK, fence, "other", NOW, NOW, owner_gone=True)  # the fence moves
    assert not store.append_message(conv_id, _row(2), stale)
    assert not store.append_messages(conv_id, [_row(2), _row(3)], stale)
    assert [r.idx for r in store.load_messages(TASK, "main", 0, 10)] == [0, 1]


def test_opening_a_conversation_gives_one_key_per_task_and_name(store: AdminStore) -> None:
    """open_conversation creates a conversation's key once and returns the same key
    on every later open, under any fence; another name or task gets another key;
    a stale fence cannot create one (None), though it still finds one that exists."""
    fence = claimed_fence(store)
    main = opened_conversation(store, fence)
    assert store.open_conversation(TASK, "main", fence) == main
    other = store.open_conversation(TASK, "other", fence)
    assert other is not None
    assert other != main
    second = claimed_fence(store, "agent/run=2")
    assert store.open_conversation("agent/run=2", "main", second) not in (None, main, other)
    assert store.claim_task(TASK, fence, "other", NOW, NOW, owner_gone=True)  # the fence moves
    assert store.open_conversation(TASK, "late", fence) is None
    assert store.open_conversation(TASK, "main", fence) == main


def test_recorded_calls_lists_model_calls_and_compactions_of_a_batch(store: AdminStore) -> None:
    """recorded_calls yields the completed llm and conv entries of a batch's tasks
    (or of one task), with the task's codec, and nothing else."""
    fence = claimed_fence(store)
    kinds: tuple[StepKind, ...] = ("step", "llm", "conv", "llm")
    for seq, kind in enumerate(kinds, start=1):
        output = '{"ok":true}'
        step = StepRecord(
            TASK, seq, kind, f"{kind} main", "completed", output, 1, 1, 1, None, None, NOW, NOW
        )
        assert store.record_step(step, fence, first=True)
    calls = list(store.recorded_calls(batch="agents"))
    assert [(c.seq, c.kind, c.codec) for c in calls] == [
        (2, "llm", "json"),
        (3, "conv", "json"),
        (4, "llm", "json"),
    ]
    assert len(list(store.recorded_calls(task_id=TASK))) == 3
    assert list(store.recorded_calls(batch="nothing")) == []


def message_content(text: str) -> str:
    return json.dumps({"role": "user", "content": text}, ensure_ascii=False)


# Short JSON; long prose that compresses well; long JSON that barely compresses.
CONTENTS = [
    message_content("short, née ünïcode ✓"),
    message_content("the quarterly figures moved again, " * 30),
    message_content(base64.b64encode(bytes(range(256)) * 2).decode()),
]


def test_message_content_and_time_read_back_exactly_whatever_the_stored_form(
    store: AdminStore,
) -> None:
    """Short, compressible and incompressible JSON (non-ASCII included) reads back
    as the same text, and created_at, given in another zone with microseconds,
    reads back as the same instant in UTC."""
    fence = claimed_fence(store)
    conv_id = opened_conversation(store, fence)
    moment = datetime(2026, 5, 24, 11, 0, 0, 123457, tzinfo=timezone(timedelta(hours=2)))
    for idx, content in enumerate(CONTENTS):
        row = MessageRecord(TASK, "main", idx, "user", content, 5, "message", None, None, moment)
        assert store.append_message(conv_id, row, fence)
    loaded = store.load_messages(TASK, "main", 0, 10)
    assert [r.content for r in loaded] == CONTENTS
    assert all(r.created_at == moment and r.created_at.tzinfo is UTC for r in loaded)


def compact(message: dict[str, object]) -> str:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"))


# Each stored form: plain messages of each role (short, long, with escapes), a
# plain-looking one whose JSON is not the compact form (kept as its JSON), and
# messages of other shapes (a tool result, a list content, keys in another order).
FORMS = [
    compact({"role": "system", "content": "You review apps."}),
    compact({"role": "user", "content": 'quote " backslash \\ newline \n tab \t née ✓'}),
    compact({"role": "assistant", "content": "the quarterly figures moved again, " * 60}),
    '{"role":"user","content":"\\u00e9scaped"}',
    compact({"role": "tool", "tool_call_id": "call_1", "content": "42"}),
    compact({"role": "user", "content": [{"type": "text", "text": "parts"}]}),
    compact({"content": "order", "role": "user"}),
    compact({"role": "assistant", "content": None, "tool_calls": [{"id": "c", "x": "y" * 2000}]}),
]


def test_every_stored_form_reads_back_as_text_and_as_the_parsed_message(store: AdminStore) -> None:
    """Whatever form a message is stored in (its text alone, compressed or not, or
    its JSON), the record reads back the exact JSON text written, and the active
    rows a resume reads (load_active_rows) hold the same message parsed, in order."""
    fence = claimed_fence(store)
    conv_id = opened_conversation(store, fence)
    moment = datetime(2026, 5, 24, 11, 0, 0, 123457, tzinfo=UTC)
    for idx, content in enumerate(FORMS):
        role = json.loads(content)["role"]
        row = MessageRecord(TASK, "main", idx, role, content, 5, "message", None, None, moment)
        assert store.append_message(conv_id, row, fence)
    assert [r.content for r in store.load_messages(TASK, "main", 0, 20)] == FORMS
    assert [r.content for r in store.load_active_messages(TASK, "main")] == FORMS
    active = store.load_active_rows(TASK, "main")
    assert [row[0] for row in active] == list(range(len(FORMS)))
    assert [row[1] for row in active] == [json.loads(c) for c in FORMS]
