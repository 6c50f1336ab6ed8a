"""``CairnSession``: the Agents SDK's ``Session`` on a cairn conversation.

Where it lives, decided by how it is made:

- ``CairnSession(name, ctx=ctx)`` inside a task: conversation ``name`` of that
  task. Its appends replay as the task replays (the Nth add of a run is the
  Nth row), so a resumed ``Runner.run`` reads the history it had, and its
  compactions are entries of the task's history.
- ``CairnSession(session_id, store=...)`` anywhere else: the session is a task
  of its own in that store, with id ``session_id`` and the name
  ``cairn.openai_agents.session``, holding the conversation ``session``.
  ``store`` is a store URL, a cairn ``Store`` or a ``Cairn`` app (default:
  ``$CAIRN_STORE``, as ``Cairn()``). Each call claims that task, does its work
  under the task's fence and hands it back (pending: no worker runs it, since
  no app registers the name), so two processes using one session take turns,
  and one that is killed mid-call leaves nothing half written.

Either way it is append-only: ``add_items`` appends one row per item (one
commit for all of them), ``pop_item`` appends a marker, ``clear_session`` a
summary row that stands for everything before it, empty. Past ``threshold``
tokens it compacts like any conversation (a summary plus the recent tail, the
head kept as the archive: ``cairn conversation``), so ``get_items`` returns
the summary, as a user message, and the items after it. A summarizer's model
calls count in ``cairn cost``. Past ``max_context`` (twice the threshold unless
given) a failing summarizer's place is taken by the extractive fallback
(``cairn.agent.fallback``), so what ``get_items`` returns stays bounded.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Self

from agents.items import TResponseInputItem
from agents.memory import SessionSettings

from cairn.agent._window import Row
from cairn.agent.conversation import Conversation
from cairn.agent.summarize import Summarizer, summary_message
from cairn.agent.tokens import count_message
from cairn.context import Context
from cairn.errors import ConfigurationError
from cairn.integrations.openai_agents._items import items_of, messages_of, pop_marker
from cairn.integrations.openai_agents._standalone import SessionTask
from cairn.names import check_name

if TYPE_CHECKING:
    from cairn.agent.pricing import PriceTable
    from cairn.agent.tokens import TokenCounter

CONVERSATION = "session"


class CairnSession:
    """An Agents SDK session kept in a cairn conversation (see the module doc)."""

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        *,
        ctx: Context | None = None,
        store: Any = None,
        threshold: int = 8000,
        keep_tail: int = 2000,
        summarizer: Summarizer | None = None,
        counter: TokenCounter | None = None,
        prices: PriceTable | None = None,
        session_settings: SessionSettings | None = None,
        max_context: int | None = None,
    ) -> None:
        check_name("session id", session_id)
        if ctx is not None and store is not None:
            raise ConfigurationError(
                "CairnSession takes ctx= (a conversation of that task) or store= (a "
                "session of its own in that store), not both"
            )
        if ctx is not None and not isinstance(ctx, Context):
            raise ConfigurationError(f"CairnSession(ctx=...) takes a task's ctx, not {ctx!r}")
        self.session_id = session_id
        self.session_settings = session_settings
        self._ctx = ctx
        self._options: dict[str, Any] = {
            "threshold": threshold,
            "keep_tail": keep_tail,
            "summarizer": summarizer,
            "counter": counter,
            "prices": prices,
            "max_context": max_context,  # None: twice the threshold (cairn.agent.fallback)
        }
        self._own = None if ctx is not None else SessionTask(session_id, store)

    # -- the Session protocol ---------------------------------------------------------
    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The items of the session, oldest first (the latest ``limit`` of them)."""
        with self._conversation() as conv:
            items = [item for _, _, item in _entries(conv)]
        return items if limit is None else items[max(0, len(items) - limit) :]  # type: ignore[return-value]

    async def compacted_context(self) -> tuple[Any, list[Any]] | None:
        """The session's summary item and the items after it, if it has been
        compacted (None otherwise, or after ``clear_session`` with nothing
        compacted since): what a run's next model call sends (``_compacting``)."""
        with self._conversation() as conv:
            summary = conv._window.summary
            if summary is None or (summary.meta or {}).get("session_cleared"):
                return None
            entries = _entries(conv)
        if not entries:
            return None
        return entries[0][2], [item for _, _, item in entries[1:]]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` (one commit), then compact if over the threshold."""
        with self._conversation() as conv:
            conv.extend(messages_of(items))
            compacted = conv.compact()
            if inspect.isawaitable(compacted):
                await compacted

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the latest item and return it (None if there is none)."""
        with self._conversation() as conv:
            entries = _entries(conv)
            if not entries:
                return None
            idx, position, item = entries[-1]
            conv.append(pop_marker(idx, position))
        return item  # type: ignore[return-value]

    async def clear_session(self) -> None:
        """Empty the session: later reads start after this point. The rows stay
        in the archive."""
        with self._conversation() as conv:
            if conv.position > 0:
                _clear(conv)

    def close(self) -> None:
        """Close the store if the session opened it (a URL or ``$CAIRN_STORE``)."""
        if self._own is not None:
            self._own.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    # -- where the conversation comes from ----------------------------------------------
    @contextmanager
    def _conversation(self) -> Iterator[Conversation]:
        if self._ctx is not None:
            yield self._ctx.conversation(self.session_id, **self._present())
            return
        assert self._own is not None
        with self._own.conversation(CONVERSATION, **self._options) as conv:
            yield conv

    def _present(self) -> dict[str, Any]:
        return {key: value for key, value in self._options.items() if value is not None}


def _entries(conv: Conversation) -> list[tuple[int, int, dict[str, Any]]]:
    rows = [
        (row.idx, row.message)
        for row in conv._window.rows()
        if not (row.kind == "summary" and (row.meta or {}).get("session_cleared"))
    ]
    return items_of(rows)


def _clear(conv: Conversation) -> None:
    """Append (or, replaying, re-read) the summary row that empties the session."""
    if conv.replaying:
        row = conv.row_at(conv.position)
        if row.kind != "summary" or not (row.meta or {}).get("session_cleared"):
            conv.diverge(row, "clear_session()")
        conv.take(row)
        return
    before = conv.stats
    tail = conv._window.tail
    message = summary_message("")
    meta = {
        "session_cleared": True,
        "covers_until": conv.position - 1,
        "archived_messages": before.archived_messages + len(tail),
        "archived_tokens": before.archived_tokens + sum(row.tokens for row in tail),
        "compactions": before.compactions,
    }
    tokens = count_message(message, conv.counter)
    row = Row(conv.position, message, tokens, "summary", conv.position - 1, meta)
    conv.write(row)
    conv.take(row)
