"""A durable conversation: an agent's messages, one row each, compacted as it grows.

    conv = ctx.conversation("main", system="You are ...", threshold=8000,
                            keep_tail=2000, summarizer=ExtractiveSummarizer())
    conv.append(user("Review the report"))
    reply = ctx.llm(conv, model="gpt-4o-mini", tools=TOOLS)

Storage, and why
----------------
Each conversation gets a small integer key (``conv_id``, a row of the
``conversations`` table) the first time it is opened; the object looks it up
once and keeps it. Each message is one row of the ``messages`` table, keyed by
(conv_id, idx), where idx is its position in the conversation: the task id and
the name are stored once per conversation, not in every row and index entry.
An append is one fenced ``INSERT … SELECT … WHERE EXISTS`` (the task row with
our fence): one statement, one commit, nothing else written. Rows are never updated or rewritten, so
storage grows linearly with the conversation. A compaction appends one more
row, of kind ``summary``, whose ``covers_until`` says which messages it stands
in for; nothing is deleted, so the compacted head stays in the table as the
archive. A message whose JSON is above the app's ``inline_limit`` goes to the
blob store before its row is written, and the row holds the reference
(``cairn.agent.message_blobs``); rows read back are resolved and hash-checked.

The rows themselves are the record that replay reads, keyed by their position
in the conversation; appends take no position in the task's history (no
``steps`` row per message, which would double the rows and the bytes). This
works because a task's code runs again from the top on resume and appends to a
conversation in the same order: the Nth append of a run is the row at idx N.
So an append at a position the store already holds is *re-read* (and checked
against the stored message: a different one raises ``NonDeterminismError``)
instead of written again. Model calls (``ctx.llm``) and compactions are
history entries (kinds ``llm`` and ``conv``) made by the ordinary step machine,
so their replay is the step's replay; their outputs hold only the usage, cost
and the idx of the row they wrote, never the message text a second time.

Active context and restore
--------------------------
The active context is the system prompt, the latest summary, and the messages
after what it covers. Opening a conversation reads exactly those rows (one
probe of an index for the latest summary, then a primary-key range), so the
cost is proportional to the active part, never to the whole history:
``conv.restored`` is that context, as the agent had it when it stopped. While
the task's code replays its earlier turns, ``conv.messages`` is the context as
it stood at that point of the code (archived rows are re-read in pages of
500, no model is called, nothing is written); when replay reaches the end of
the record it is ``conv.restored`` again, and the agent goes on from there.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from cairn.agent._window import Row, Window, rows_of
from cairn.agent.archive import StoredMessage, iter_history
from cairn.agent.clearing import Cleared, ToolResultClearing, to_clear
from cairn.agent.compaction import compaction_machine
from cairn.agent.conversation_stats import ConversationStats, stats_of
from cairn.agent.fallback import bound_of
from cairn.agent.handoff import archive_part, build_handoff, seed_rows
from cairn.agent.message_blobs import MessageReader, offload_content
from cairn.agent.messages import Message, dumps, normalize, text_of
from cairn.agent.pricing import DEFAULT_PRICES, PriceTable
from cairn.agent.summarize import (
    ExtractiveSummarizer,
    Summarizer,
    is_async_summarizer,
    summary_text,
)
from cairn.agent.tokens import (
    TokenCounter,
    count_message,
    counter_for,
    describe_counter,
    framing_of,
)
from cairn.codec import refuse_surrogates
from cairn.engine.run import adrive, drive
from cairn.errors import NonDeterminismError, StoreError
from cairn.names import check_name
from cairn.redaction import redact_value
from cairn.store.records import MessageRecord

if TYPE_CHECKING:
    from cairn.context import Context
    from cairn.engine.run import TaskRun

PAGE = 500
DEFAULT_THRESHOLD = 8000
DEFAULT_KEEP_TAIL = 2000
DEFAULT_SUMMARY_TOKENS = 800


class Conversation:
    """An agent's message history inside a task (see the module doc)."""

    def __init__(
        self,
        run: TaskRun,
        name: str,
        *,
        threshold: int,
        keep_tail: int,
        summarizer: Summarizer,
        counter: TokenCounter,
        prices: PriceTable,
        client: Any,
        summary_tokens: int,
        clear_tool_results: ToolResultClearing | None = None,
        max_context: int | None = None,
    ) -> None:
        if not 0 < keep_tail < threshold:
            raise ValueError(
                f"conversation {name!r}: keep_tail ({keep_tail}) must be above 0 and below "
                f"threshold ({threshold}), or every call would compact again"
            )
        self._run = run
        self.name = name
        self.threshold = threshold
        self.keep_tail = keep_tail
        # The hard bound on the active context (cairn.agent.fallback).
        self.max_context = bound_of(name, threshold, max_context)
        self.summarizer = summarizer
        self.counter = counter
        self.prices = prices
        self.client = client
        self.summary_tokens = summary_tokens
        self.clearing = clear_tool_results
        self._window = Window()
        self._restored = Window()
        self._pos = 0  # the next position the task's code reaches
        self._end = 0  # the next position the store does not hold yet
        self._cache: dict[int, Row] = {}  # rows read but not reached yet
        # (prompt tokens the provider counted, first idx it did not count)
        self._anchor: tuple[int, int] | None = None
        self._failed_at = -1  # a failed compaction is not retried at the same position
        # The last model call, for the counterfactual of the next one: (its reply's
        # idx, the provider's input and output tokens, its input without compaction),
        # and whether the context was compacted or cleared since (cairn.agent.costs).
        self._last_call: tuple[int, int, int, int] | None = None
        self._edited = False
        # After a compaction that failed or left too much (a miss), none is tried
        # before the context reaches _hold_until tokens (cairn.agent.compaction).
        self._misses = 0
        self._hold_until = 0
        self._conv_id = -1  # the store's key for this conversation, set by open()
        # Messages above the inline limit go to the blob store (cairn.agent.message_blobs).
        self._offloader = run.offloader
        self._inline_limit = -1 if run.offloader is None else run.offloader.inline_limit
        self._reader = MessageReader(run.offloader)
        self.handed_off: dict[str, Any] | None = None
        # The tool schemas the reply rows recorded so far, by digest (cairn.agent.llm).
        self.tool_schemas: dict[str, list[dict[str, Any]]] = {}

    # -- what the agent reads --------------------------------------------------------
    @property
    def task_id(self) -> str:
        return self._run.task_id

    @property
    def messages(self) -> list[Message]:
        """The active context at this point of the task's code: system prompt, the
        latest summary, then the messages after it. What ``ctx.llm`` sends."""
        return self._window.messages()

    @property
    def system_prompt(self) -> Any:
        """The system prompt's content (None without one): part of what
        produced each model call's entry (``cairn.agent.llm.model_fingerprint``)."""
        row = self._window.system
        return None if row is None else row.message.get("content")

    @property
    def restored(self) -> list[Message]:
        """The active context as the store held it when this conversation was
        opened: after a crash, what the agent had when it stopped."""
        return self._restored.messages()

    @property
    def summary(self) -> str | None:
        """The running summary, or None before the first compaction."""
        row = self._window.summary
        return None if row is None else summary_text(row.message)

    @property
    def tokens(self) -> int:
        """Tokens of the active context as a prompt: the provider's count at the
        last call plus ``counter``'s count of what came after, or ``counter``'s
        count of all of it (with the reply's priming, for an exact counter)."""
        if self._anchor is None:
            return self._window.tokens() + framing_of(self.counter).per_prompt
        counted, first = self._anchor
        return counted + sum(row.tokens for row in self._window.tail if row.idx >= first)

    @property
    def counter_name(self) -> str:
        """What the counts between model calls come from: ``o200k_base (exact)``,
        ``cl100k_base (exact)`` or ``estimate`` (``cairn.agent.tokens``)."""
        return describe_counter(self.counter)

    @property
    def position(self) -> int:
        """How many rows the conversation holds at this point of the code."""
        return self._pos

    @property
    def replaying(self) -> bool:
        """True while the task's code is re-reading what is already recorded."""
        return self._pos < self._end

    @property
    def stats(self) -> ConversationStats:
        return stats_of(self._window, self._pos)

    def __len__(self) -> int:
        return len(self._window.rows())

    def __repr__(self) -> str:
        return (
            f"<Conversation {self.name!r} of task {self.task_id!r}: {self._pos} rows, "
            f"{len(self)} active, {self.tokens} tokens ({self.counter_name})>"
        )

    # -- appending ---------------------------------------------------------------------
    def append(self, message: Mapping[str, Any] | Any) -> None:
        """Add one message (OpenAI chat shape). Written at once, in one commit; on
        replay the stored message is re-read instead."""
        self._check_live_task()
        plain = normalize(message)
        if self._pos < self._end:
            row = self.row_at(self._pos)
            if row.kind != "message" or row.message != plain:
                self.diverge(row, f"message {describe(plain)}")
            self.take(row)
            return
        row = Row(self._pos, plain, count_message(plain, self.counter))
        self.write(row)
        self.take(row)

    def extend(self, messages: Iterable[Mapping[str, Any] | Any]) -> None:
        """Add several messages in order. Those the record holds already are
        checked as ``append`` checks them; the new ones are written together, in
        one commit, all or none: a user message and its reply cost one commit."""
        self._check_live_task()
        fresh: list[Row] = []
        for message in messages:
            plain = normalize(message)
            if not fresh and self._pos < self._end:
                row = self.row_at(self._pos)
                if row.kind != "message" or row.message != plain:
                    self.diverge(row, f"message {describe(plain)}")
                self.take(row)
                continue
            fresh.append(Row(self._pos + len(fresh), plain, count_message(plain, self.counter)))
        if not fresh:
            return
        records = [self.record(row) for row in fresh]
        if not self._run.append_messages(self._conv_id, records):
            self._run.lost()
        self._end = max(self._end, fresh[-1].idx + 1)
        for row in fresh:
            self.take(row)

    # -- tool-result clearing ----------------------------------------------------------------
    def clear_tool_results(self) -> Cleared:
        """Clear the tool results the policy clears now (``cairn.agent.clearing``)
        and return them as ``ctx.llm`` records them. Nothing without a policy."""
        if self.clearing is None:
            return []
        rows = [(r.idx, r.message, r.tokens, r.cleared) for r in self._window.tail]
        cleared = to_clear(self.clearing, rows, self.counter)
        self._window.clear(cleared)
        if cleared:
            # The provider's count at the last call included what was just cleared.
            self._anchor = None
            self._edited = True
        return cleared

    def uncompacted_input(self, input_tokens: int) -> int:
        """The input tokens this call would have had with nothing ever compacted or
        cleared, built from the provider's counts: the last call's counterfactual
        plus the provider's growth since (exact when nothing was compacted or
        cleared in between; else the last reply and the new messages, estimated
        and scaled to the provider's count of this prompt)."""
        stats = self.stats
        if self._last_call is None:
            return input_tokens + max(0, stats.full_tokens - stats.active_tokens)
        idx, last_input, last_output, last_uncompacted = self._last_call
        if not self._edited:
            return last_uncompacted + input_tokens - last_input
        new = sum(r.full_tokens for r in self._window.tail if r.idx > idx and r.kind == "message")
        # The new messages in the provider's tokens: cairn's estimate of them,
        # scaled by how the provider's count of this very prompt compares with
        # cairn's estimate of it.
        scale = input_tokens / stats.active_tokens if stats.active_tokens > 0 else 1.0
        return last_uncompacted + last_output + round(new * scale)

    # -- compaction -----------------------------------------------------------------------
    def compact(self, *, force: bool = False) -> Any:
        """Compact now if the active context is over ``threshold`` (or at once with
        ``force``). ``ctx.llm`` does this by itself before each call. Returns the
        ``Compaction`` (None if nothing was due), or an awaitable of it when the
        summarizer is async."""
        machine = compaction_machine(self, force=force)
        if is_async_summarizer(self.summarizer):
            return adrive(machine, self._run.clock)
        return drive(machine, self._run.clock)

    # -- the archive and handoff -------------------------------------------------------------
    def history(self, *, include_summaries: bool = True) -> Iterator[StoredMessage]:
        """Every stored row up to this point, archived ones included, oldest first;
        a handoff's carried archive first (each of its rows marked ``carried``)."""
        for stored in iter_history(self._run.store, self.task_id, self.name, blobs=self._reader):
            if stored.carried is None and stored.idx >= self._pos:
                return
            if include_summaries or stored.kind == "message":
                yield stored

    def handoff(
        self, metadata: Mapping[str, Any] | None = None, *, archive: str | None = None
    ) -> dict[str, Any]:
        """The compressed state as a portable JSON document: system prompt, summary,
        tail, counts and ``metadata``; with ``archive="inline"`` or ``"blob"``, every
        row so far too (``cairn.agent.handoff``). Start a new task from it with
        ``ctx.conversation(name, start_from=doc)``."""
        rows = None if archive is None else [row.to_json() for row in self.history()]
        part = archive_part(rows or [], archive, self._offload_text())
        return build_handoff(
            self.task_id, self.name, self._window, self.stats, metadata, self._run.now(), part
        )

    def _offload_text(self) -> Callable[[str], str] | None:
        """Writes a text to the app's blob store and returns its reference."""
        offloader = self._offloader
        if offloader is None:
            return None
        return lambda text: offload_content(text, offloader)

    # -- the machinery (used by cairn.agent's own modules) ----------------------------------
    def open(self, system: str | Mapping[str, Any] | None, start_from: Any) -> None:
        conv_id = self._run.open_conversation(self.name)
        if conv_id is None:
            self._run.lost()
        self._conv_id = conv_id
        loaded = self._run.store.load_active_rows(self.task_id, self.name)
        rows = rows_of(self._reader.read_rows(loaded, self.task_id, self.name))
        self._cache = {row.idx: row for row in rows}
        self._end = rows[-1].idx + 1 if rows else 0
        self._restored = Window.from_rows(rows)
        # A handoff's archive is written to the blob store only when seeding.
        offload = self._offload_text() if self._end == 0 else None
        seed = seed_rows(system, start_from, self.counter, offload)
        if self._end == 0 and seed:
            seed_records = [self.record(r) for r in seed]
            if not self._run.append_messages(self._conv_id, seed_records):
                self._run.lost()
            self._end = len(seed)
            self._restored = Window.from_rows(seed)
        for row in seed:
            if self._end > row.idx:
                stored = self.row_at(row.idx)
                if (stored.kind, stored.message) != (row.kind, row.message):
                    self.diverge(stored, f"{row.kind} {describe(row.message)} (from the opening)")
                row = stored
            self.take(row)
            if row.idx == 0 and row.meta is not None:
                # The stored row's record: on replay the seed holds the archive
                # inline, the store a reference to the blob it was written to.
                self.handed_off = row.meta.get("handoff")

    def row_at(self, idx: int) -> Row:
        """The stored row at ``idx`` (read in pages while replaying)."""
        row = self._cache.get(idx)
        if row is None:
            page = self._reader.read(
                self._run.store.load_messages(self.task_id, self.name, idx, PAGE)
            )
            self._cache.update((record.idx, Row.of(record)) for record in page)
            row = self._cache.get(idx)
            if row is None:
                raise StoreError(
                    f"conversation {self.name!r} of task {self.task_id!r} has no row {idx} "
                    f"though it ends at {self._end}; the store was changed under it"
                )
        return row

    def take(self, row: Row) -> None:
        """The code has reached ``row``: it becomes part of the window."""
        self._cache.pop(row.idx, None)
        self._window.add(row)
        self._pos = row.idx + 1
        if row.kind == "summary":
            self._anchor = None
            self._edited = True
        elif row.meta is not None and "usage" in row.meta:
            usage = row.meta["usage"]
            if "tool_schemas" in row.meta:
                self.tool_schemas[row.meta["tools"]] = row.meta["tool_schemas"]
            if "uncompacted_input" in row.meta:
                self._last_call = (
                    row.idx,
                    int(usage["input_tokens"]),
                    int(usage["output_tokens"]),
                    int(row.meta["uncompacted_input"]),
                )
                self._edited = False
            if not usage.get("estimated"):
                # The provider counted the whole prompt up to this reply.
                self._anchor = (int(usage["input_tokens"]), row.idx)

    def record(self, row: Row) -> MessageRecord:
        meta = None if row.meta is None else json.dumps(row.meta, separators=(",", ":"))
        # No known secret is stored (cairn.redaction), not even one a model echoed.
        content = redact_value(dumps(row.message))
        # Refused here, named, before anything is written (the driver would
        # raise UnicodeEncodeError from inside the write).
        refuse_surrogates(
            content, row.message, f"conversation {self.name!r}, {row.kind} at position {row.idx}"
        )
        if self._inline_limit >= 0 and len(content) > self._inline_limit:
            assert self._offloader is not None
            content = offload_content(content, self._offloader)  # durable before the row
        return MessageRecord(
            self.task_id,
            self.name,
            row.idx,
            row.role,
            content,
            row.tokens,
            "summary" if row.kind == "summary" else "message",
            row.covers_until,
            meta,
            self._run.now(),
        )

    def write(self, row: Row) -> None:
        """Append ``row`` to the store under the task's fence."""
        if not self._run.append_message(self._conv_id, self.record(row)):
            self._run.lost()
        self._end = max(self._end, row.idx + 1)
        self._cache[row.idx] = row

    def diverge(self, row: Row, current: str) -> NoReturn:
        """The code asks for something else than the record holds at this position."""
        recorded = f"{row.kind} {describe(row.message)}"
        error = NonDeterminismError(
            task_id=self.task_id,
            seq=row.idx,
            recorded=f"conversation {self.name!r} row {row.idx}: {recorded}",
            current=current,
        )
        self._run.poisoned = error
        raise error

    def _check_live_task(self) -> None:
        if self._run.poisoned is not None:
            raise self._run.poisoned


def describe(message: Mapping[str, Any]) -> str:
    text = " ".join(text_of(message).split())
    return f"{message.get('role')} {text[:60]!r}"


# -- opening, once per task attempt ----------------------------------------------------------
_open: dict[int, tuple[int, dict[str, Conversation]]] = {}


def _forget(key: int) -> None:
    _open.pop(key, None)


def open_conversation(
    ctx: Context,
    name: str = "main",
    *,
    system: str | Mapping[str, Any] | None = None,
    threshold: int = DEFAULT_THRESHOLD,
    keep_tail: int = DEFAULT_KEEP_TAIL,
    summarizer: Summarizer | None = None,
    counter: TokenCounter | None = None,
    model: str | None = None,
    prices: PriceTable | None = None,
    client: Any = None,
    start_from: Mapping[str, Any] | str | None = None,
    summary_tokens: int = DEFAULT_SUMMARY_TOKENS,
    clear_tool_results: ToolResultClearing | None = None,
    max_context: int | None = None,
) -> Conversation:
    """``ctx.conversation``: open (or create) conversation ``name`` of the task.

    Asked again in the same task attempt, it returns the same object. Without a
    ``counter``, the one for ``model`` (``cairn.agent.tokens.counter_for``): exact
    for an OpenAI model with the ``tokens`` extra, else the estimate."""
    check_name("conversation name", name)
    run: TaskRun = ctx._run
    key = id(run)
    attempt, known = _open.get(key, (run.attempt, {}))
    if attempt != run.attempt:  # a new attempt replays from the top: start over
        known = {}
    if key not in _open:
        weakref.finalize(run, _forget, key)
    _open[key] = (run.attempt, known)
    if name in known:
        return known[name]
    conv = Conversation(
        run,
        name,
        threshold=threshold,
        keep_tail=keep_tail,
        summarizer=summarizer or ExtractiveSummarizer(max_tokens=summary_tokens),
        counter=counter or counter_for(model),
        prices=prices or DEFAULT_PRICES,
        client=client,
        summary_tokens=summary_tokens,
        clear_tool_results=clear_tool_results,
        max_context=max_context,
    )
    conv.open(system, start_from)
    known[name] = conv
    return conv
