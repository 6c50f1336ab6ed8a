"""The pure parts: the data window, the anomaly rule, and the report's text."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from .settings import ANOMALY_THRESHOLD, TOKYO


def data_window(fired_at: datetime) -> dict[str, Any]:
    """The Tokyo day before ``fired_at``: its date, and [from, to) in UTC."""
    day = fired_at.astimezone(TOKYO).date() - timedelta(days=1)
    start = datetime.combine(day, time(0), TOKYO)
    return {
        "day": day.isoformat(),
        "from": start.astimezone(UTC),
        "to": (start + timedelta(days=1)).astimezone(UTC),
    }


def week_before(day: str) -> str:
    return (date.fromisoformat(day) - timedelta(days=7)).isoformat()


def change(comparison: dict[str, Any]) -> float | None:
    """The relative change from a week earlier, or None without both numbers."""
    now, before = comparison["now"], comparison["before"]
    if now is None or not before:
        return None
    return float(now / before - 1)


def anomalies(comparisons: list[dict[str, Any]]) -> dict[str, float]:
    """The countries more than ±30% off the previous week, with their change."""
    found = {}
    for comparison in comparisons:
        moved = change(comparison)
        if moved is not None and abs(moved) > ANOMALY_THRESHOLD:
            found[comparison["country"]] = round(moved, 4)
    return found


def report_text(
    window: dict[str, Any],
    revenue: dict[str, int],
    installs: dict[str, dict[str, int]],
    moved: dict[str, float],
    generated_at: datetime,
) -> str:
    """The daily report, with every time shown in Asia/Tokyo."""
    start, end = window["from"].astimezone(TOKYO), window["to"].astimezone(TOKYO)
    dollars = sum(revenue.values()) / 1_000_000
    per_store = ", ".join(f"{store} {sum(apps.values()):,}" for store, apps in installs.items())
    lines = [
        f"Daily revenue for {window['day']} (Asia/Tokyo)",
        f"Window: {start:%Y-%m-%d %H:%M %Z} to {end:%Y-%m-%d %H:%M %Z}",
        f"Revenue: ${dollars:,.2f} across {len(revenue)} countries",
        f"Installs: {per_store}",
    ]
    if moved:
        shown = ", ".join(f"{country} {delta:+.1%}" for country, delta in sorted(moved.items()))
        lines.append(f"Anomalies (over ±30% vs {week_before(window['day'])}): {shown}")
    else:
        lines.append("Anomalies: none")
    lines.append(f"Generated {generated_at.astimezone(TOKYO):%Y-%m-%d %H:%M %Z}")
    return "\n".join(lines)
