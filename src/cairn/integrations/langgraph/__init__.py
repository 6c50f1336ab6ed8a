"""A LangGraph checkpointer on cairn's stores: ``pip install 'cairn-durable[langgraph]'``.

``CairnSaver(store)`` is a ``BaseCheckpointSaver`` (sync and async) on a cairn
SQLite file or PostgreSQL schema, beside the store's own tables. A list channel
(a graph's messages) is kept as appends and each row is compressed against the
rows before it, so a thread's storage and the time of a turn stay proportional
to what the turn adds, and each text is stored once. See docs/langgraph.md.
"""

from __future__ import annotations

try:
    import langgraph.checkpoint.base  # noqa: F401 - only to name the extra if it is missing
except ImportError as exc:  # pragma: no cover - depends on the environment
    from cairn.errors import ConfigurationError

    raise ConfigurationError(
        "cairn.integrations.langgraph needs LangGraph: pip install 'cairn-durable[langgraph]'"
    ) from exc

from cairn.integrations.langgraph._packing import CheckpointFormatError
from cairn.integrations.langgraph.saver import CairnSaver

__all__ = ["CairnSaver", "CheckpointFormatError"]
