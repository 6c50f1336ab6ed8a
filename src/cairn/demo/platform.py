"""The simulated ad platform: in-process functions, no network.

``apply`` is the one call with a side effect: it appends what it applied to a
JSON-lines ledger file, so the demo can count afterwards how often each app's
settings were really changed.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from cairn.demo._io import append_line, read_lines
from cairn.demo._sim import fraction, latency


class AdPlatform:
    """An ad platform whose state is a ledger file of applied changes."""

    def __init__(self, ledger: Path) -> None:
        self.ledger = ledger

    def fetch_settings(self, app_id: str) -> dict[str, Any]:
        """The app's current ad settings."""
        latency(40, 80, app_id, "fetch")
        return {
            "app_id": app_id,
            "bid_floor_usd": round(0.2 + 1.3 * fraction(app_id, "floor"), 2),
            "frequency_cap_per_hour": None,
        }

    def validate(self, app_id: str, changes: dict[str, Any]) -> dict[str, Any]:
        """Check the proposed changes against the platform's limits."""
        latency(30, 60, app_id, "validate")
        floor = min(float(changes["bid_floor_usd"]), 5.0)
        return {**changes, "bid_floor_usd": floor, "valid": True}

    def apply(self, key: str, app_id: str, changes: dict[str, Any]) -> dict[str, Any]:
        """Change the app's settings: the side effect, written to the ledger.

        Like many real APIs it does *not* deduplicate by itself: calling it twice
        changes the settings twice. cairn's operation key is what keeps it to one.
        """
        latency(60, 100, app_id, "apply")
        entry = {"app_id": app_id, "changes": changes, "key": key}
        append_line(self.ledger, json.dumps(entry, sort_keys=True))
        return {"app_id": app_id, "change_id": f"chg-{app_id}", "status": "applied"}

    def find_change(self, key: str) -> dict[str, Any] | None:
        """The change made under ``key``, if the platform has one (to reconcile a
        key whose outcome cairn did not get to record)."""
        for line in read_lines(self.ledger):
            entry = json.loads(line)
            if entry.get("key") == key:
                app_id = entry["app_id"]
                return {"app_id": app_id, "change_id": f"chg-{app_id}", "status": "applied"}
        return None

    def confirm(self, app_id: str, receipt: dict[str, Any]) -> dict[str, Any]:
        """Read the settings back and confirm the change is live."""
        latency(30, 60, app_id, "confirm")
        return {"app_id": app_id, "change_id": receipt["change_id"], "live": True}


def applies_per_app(ledger: Path) -> Counter[str]:
    """How many times the platform applied settings for each app."""
    return Counter(json.loads(line)["app_id"] for line in read_lines(ledger))
