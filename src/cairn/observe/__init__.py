"""See cairn working: durability metrics, stall alerts, daily reports, exporters.

Everything here reads the store; nothing changes how tasks run. See
docs/observability.md.
"""

from __future__ import annotations

from cairn.observe.metrics import Metrics, compute
from cairn.store.reports import Window

__all__ = ["Metrics", "Window", "compute"]
