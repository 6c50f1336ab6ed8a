"""What the pipeline works on and where the outside services are.

The services come from environment variables, read when a run starts, so a
resumed run (or a worker) finds them the same way, and a rerun may change what
is not part of the work itself, such as the anomaly step's parallelism.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

TOKYO = ZoneInfo("Asia/Tokyo")  # the report, and the schedule
LOS_ANGELES = ZoneInfo("America/Los_Angeles")  # the store APIs

COUNTRIES = (
    "US", "JP", "DE", "FR", "GB", "KR", "BR", "IN",
    "CA", "AU", "IT", "ES", "MX", "NL", "SE", "TW",
    "ID", "TH", "VN", "PH", "TR", "PL", "SA", "AE",
)  # fmt: skip
CHUNK = 4  # countries per reporting call, and per checkpoint
STORES = ("apple", "google")
APPS = ("puzzle", "racer", "farm", "chess", "words", "tiles")
ANOMALY_THRESHOLD = 0.30  # more than ±30% off the same day a week earlier

# Each setting's environment variable: REVENUE_ and its name in capitals.
PREFIX = "REVENUE_"
REQUIRED = ("reporting_url", "apple_url", "google_url", "chat_url", "database")


def _words(text: str) -> tuple[str, ...]:
    return tuple(word for word in text.split(",") if word)


_PARSE: dict[str, Callable[[str], Any]] = {
    "str": str,
    "Path": Path,
    "int": int,
    "float": float,
    "tuple[str, ...]": _words,
}


@dataclass(frozen=True, kw_only=True)
class Settings:
    """The outside services, what to report on, and the knobs a rerun may turn."""

    reporting_url: str
    apple_url: str
    google_url: str
    chat_url: str
    database: Path
    countries: tuple[str, ...] = COUNTRIES
    apps: tuple[str, ...] = APPS
    fetch_concurrency: int = 4  # calls at once to each API
    anomaly_parallelism: int = 4  # anomaly checks at once, each on its own connection
    db_max_connections: int = 8
    db_latency: float = 0.0  # seconds each anomaly query holds its connection

    def store_url(self, store: str) -> str:
        return {"apple": self.apple_url, "google": self.google_url}[store]

    @classmethod
    def from_env(cls) -> Settings:
        missing = [env_name(key) for key in REQUIRED if env_name(key) not in os.environ]
        if missing:
            raise RuntimeError(
                f"set {', '.join(missing)} (the services' URLs and the database file), "
                "or run with --simulate"
            )
        found = {
            field.name: _PARSE[str(field.type)](os.environ[env_name(field.name)])
            for field in fields(cls)
            if env_name(field.name) in os.environ
        }
        return cls(**found)

    def to_env(self) -> dict[str, str]:
        """The environment variables that give these settings to a run."""
        return {env_name(field.name): _text(getattr(self, field.name)) for field in fields(self)}


def env_name(setting: str) -> str:
    return PREFIX + setting.upper()


def _text(value: object) -> str:
    return ",".join(value) if isinstance(value, tuple) else str(value)
