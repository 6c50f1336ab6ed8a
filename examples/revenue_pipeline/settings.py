"""What the pipeline works on and where the outside services are.

The services come from environment variables, read when a run starts, so a
resumed run (or a worker) finds them the same way, and a rerun may change what
is not part of the work itself, such as the anomaly step's parallelism.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
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

ENV = {
    "reporting_url": "REVENUE_REPORTING_URL",
    "apple_url": "REVENUE_APPLE_URL",
    "google_url": "REVENUE_GOOGLE_URL",
    "chat_url": "REVENUE_CHAT_URL",
    "database": "REVENUE_DATABASE",
    "db_max_connections": "REVENUE_DB_MAX_CONNECTIONS",
    "db_latency": "REVENUE_DB_LATENCY",
    "anomaly_parallelism": "REVENUE_ANOMALY_PARALLELISM",
}


@dataclass(frozen=True, kw_only=True)
class Settings:
    """The outside services, and the knobs a rerun may turn."""

    reporting_url: str
    apple_url: str
    google_url: str
    chat_url: str
    database: Path
    db_max_connections: int = 8
    db_latency: float = 0.0  # seconds each anomaly query holds its connection
    anomaly_parallelism: int = 4

    def store_url(self, store: str) -> str:
        return {"apple": self.apple_url, "google": self.google_url}[store]

    @classmethod
    def from_env(cls) -> Settings:
        required = ("reporting_url", "apple_url", "google_url", "chat_url", "database")
        missing = [ENV[key] for key in required if ENV[key] not in os.environ]
        if missing:
            raise RuntimeError(
                f"set {', '.join(missing)} (the services' URLs and the database file), "
                "or run with --simulate"
            )
        env = os.environ
        return cls(
            reporting_url=env[ENV["reporting_url"]],
            apple_url=env[ENV["apple_url"]],
            google_url=env[ENV["google_url"]],
            chat_url=env[ENV["chat_url"]],
            database=Path(env[ENV["database"]]),
            db_max_connections=int(env.get(ENV["db_max_connections"], "8")),
            db_latency=float(env.get(ENV["db_latency"], "0")),
            anomaly_parallelism=int(env.get(ENV["anomaly_parallelism"], "4")),
        )

    def to_env(self) -> dict[str, str]:
        """The environment variables that give these settings to a run."""
        return {name: str(getattr(self, key)) for key, name in ENV.items()}
