"""A session outside any task: a task of its own, claimed for each call.

The conversation machinery writes under a task's fence, so a session used
outside a task gets a task of its own (id: the session id, name
``SESSION_TASK``). Each call creates it if it is new, claims it through the
engine's one claim path (a copy killed mid-call is taken over as any orphan
is), opens the conversation positioned at its end, does its work and hands
the task back as pending. Its compactions are entries of that task's history,
after the ones already there.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from cairn.agent.conversation import Conversation
from cairn.agent.pricing import DEFAULT_PRICES
from cairn.agent.summarize import ExtractiveSummarizer
from cairn.agent.tokens import DEFAULT_COUNTER
from cairn.app import Cairn
from cairn.engine.claim import claim_task, release
from cairn.engine.config import EngineConfig
from cairn.engine.run import TaskRun
from cairn.errors import ConfigurationError, TaskBusy
from cairn.store.records import NewTask, TaskRecord

SESSION_TASK = "cairn.openai_agents.session"
_STORE_METHODS = ("claim_task", "open_conversation", "append_messages", "load_active_messages")


def _app_of(store: Any) -> tuple[Cairn, bool]:
    """The app to reach ``store`` through, and whether the session owns it."""
    if isinstance(store, Cairn):
        return store, False
    if store is None or isinstance(store, str):
        return Cairn(store), True
    if all(callable(getattr(store, name, None)) for name in _STORE_METHODS):
        return Cairn(store), False
    raise ConfigurationError(
        f"CairnSession(store=...) takes a cairn store URL (sqlite:///path.db, "
        f"postgresql://...), a cairn Store or a Cairn app, not {type(store).__name__}. "
        "An Agents SDK session of another kind cannot hold a cairn session; inside a "
        "task, pass ctx= instead."
    )


class SessionTask:
    """The task a standalone session lives in."""

    def __init__(self, session_id: str, store: Any) -> None:
        self.session_id = session_id
        self._app, self._owned = _app_of(store)
        self._app.store  # noqa: B018 - opened now: a store that is not cairn's fails here

    def close(self) -> None:
        if self._owned:
            self._app.close()

    @contextmanager
    def conversation(self, name: str, **options: Any) -> Iterator[Conversation]:
        """Conversation ``name`` of the session's task, at its end, under a claim."""
        engine = self._app.engine()
        claimed = self._claim(engine)
        try:
            run = _task_run(engine, claimed)
            conv = _opened(run, name, options)
            yield conv
        finally:
            engine.store.release_task(claimed.id, claimed.fence, engine.clock.now())
            release(engine, claimed.id)

    def _claim(self, engine: EngineConfig) -> TaskRecord:
        sid = self.session_id
        now = engine.clock.now()
        engine.store.create_task(NewTask(sid, SESSION_TASK, "{}", "json"), now)
        record = engine.store.get_task(sid)
        assert record is not None  # just created or already there
        if record.name != SESSION_TASK:
            raise ConfigurationError(
                f"{sid!r} is the id of a task of {record.name!r} in this store, not of an "
                "Agents SDK session; give the session another id (or open it inside that "
                "task with ctx=)"
            )
        if record.status in ("completed", "failed", "cancelled"):
            raise ConfigurationError(
                f"session {sid!r} is {record.status} in this store (an operator ended its "
                "task), so it takes no more writes; its rows can still be read with "
                f"`cairn conversation {sid}`. Give the session another id."
            )
        claimed = claim_task(engine, record)
        if claimed is None:
            raise TaskBusy(
                f"session {sid!r} is in use by another call or process right now; "
                "call it again when that one is done",
                task_id=sid,
            )
        return claimed


def _task_run(engine: EngineConfig, claimed: TaskRecord) -> TaskRun:
    history = engine.store.load_history(claimed.id)
    run = TaskRun(
        store=engine.store,
        codec=engine.codec_named(claimed.codec),
        clock=engine.clock,
        task_id=claimed.id,
        batch=None,
        fence=claimed.fence,
        attempt=claimed.attempts,
        history=history,
        leases=engine.leases,
        takeover_grace=engine.takeover_grace,
        hook=engine.fault_hook,
        poll_interval=engine.poll_interval,
        offloader=engine.offloader,
        engine=engine,
    )
    run.seq = max(history, default=0)  # new entries go after the recorded ones
    return run


def _opened(run: TaskRun, name: str, options: dict[str, Any]) -> Conversation:
    conv = Conversation(
        run,
        name,
        threshold=options["threshold"],
        keep_tail=options["keep_tail"],
        summarizer=options["summarizer"] or ExtractiveSummarizer(),
        counter=options["counter"] or DEFAULT_COUNTER,
        prices=options["prices"] or DEFAULT_PRICES,
        client=None,
        summary_tokens=800,
        max_context=options["max_context"],
    )
    conv.open(None, None)
    # No code replays here: the conversation goes on from its last row.
    for row in sorted(conv._restored.rows(), key=lambda r: r.idx):
        conv.take(conv.row_at(row.idx))
    return conv
