"""The simulated review agent. It stands in for an LLM: no network, no model.

Its answers depend only on the app id, the way a model called with temperature 0
on the same conversation would answer, so the demo is repeatable.
"""

from __future__ import annotations

from typing import Any

from cairn.demo._sim import fraction, latency, pick

ISSUES = (
    "bid floor below the tier-1 market rate",
    "no frequency cap on interstitials",
    "mediation waterfall not refreshed in 90 days",
    "rewarded video disabled on a games app",
)


def analyze(app_id: str, settings: dict[str, Any]) -> dict[str, Any]:
    """Read the app's ad settings and name what looks wrong (a simulated LLM call)."""
    latency(150, 300, app_id, "analyze")
    issue = pick(ISSUES, app_id, "issue")
    return {
        "app_id": app_id,
        "issue": issue,
        "current_floor": settings["bid_floor_usd"],
        "tokens_in": 900 + int(600 * fraction(app_id, "tokens_in")),
        "tokens_out": 120 + int(180 * fraction(app_id, "tokens_out")),
    }


def propose(app_id: str, analysis: dict[str, Any]) -> dict[str, Any]:
    """Turn the analysis into concrete setting changes (a simulated LLM call)."""
    latency(150, 300, app_id, "propose")
    raise_by = round(0.05 + 0.25 * fraction(app_id, "raise"), 2)
    return {
        "bid_floor_usd": round(analysis["current_floor"] + raise_by, 2),
        "frequency_cap_per_hour": 3 + int(4 * fraction(app_id, "cap")),
        "reason": analysis["issue"],
    }
