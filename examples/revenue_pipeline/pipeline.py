"""The nightly revenue pipeline (scenario 2): five steps, checkpointed in chunks.

1. revenue per country from the ad-reporting API, one checkpoint per chunk of
   countries (``ctx.map``): after a quota error only the missing chunks are asked;
2. installs per app from two store APIs, behind a recorded token that is
   refreshed when rejected, and only the rejected apps asked again;
3. the day's rows upserted into the database;
4. anomalies: countries more than ±30% off the previous week, checked with a
   parallelism a rerun may change;
5. one report per date to the chat webhook, whatever reruns.
"""

from __future__ import annotations

from datetime import datetime
from functools import partial
from typing import Any

from cairn import Cairn, Concurrency, Context, Permanent, Rate, Retry, is_transient, op_key
from cairn.webhook import post_once

from . import clients
from .database import Database
from .report import anomalies, data_window, report_text, week_before
from .settings import CHUNK, STORES, Settings

# The store comes from $CAIRN_STORE, else ./.cairn/cairn.db. The limits hold
# across every process on that store: the reporting API's rate, and what the
# database's pool leaves for the upsert.
app = Cairn(limits={"reporting-api": Rate(20, per=60), "db": Concurrency(4)})

# Transient answers are retried in the step; a quota error (RetryAfter) waits as
# long as the API asks without spending an attempt; PERMISSION_DENIED is never retried.
API_RETRY = Retry(attempts=4, initial_delay=2.0, max_delay=60.0, retry_on=is_transient)
# A new token rejected this many times in a row is a credentials problem.
TOKEN_ROUNDS = 3


@app.schedule("30 4 * * *", tz="Asia/Tokyo", catchup="latest")
@app.task(retry=Retry(attempts=1))
def nightly_revenue(ctx: Context, fired_at: datetime) -> dict[str, Any]:
    """The pipeline for the Tokyo day before ``fired_at``. A failed run stops at
    once with its error recorded; run it again and only the missing work is done."""
    settings = Settings.from_env()
    window = ctx.record("window", data_window, fired_at)
    revenue = fetch_revenue(ctx, settings, window)
    installs = {store: fetch_installs(ctx, settings, store, window) for store in STORES}
    database = Database(
        settings.database, max_connections=settings.db_max_connections, latency=settings.db_latency
    )
    day = window["day"]
    ctx.step("upsert", database.upsert_day, day, revenue, installs, limit="db", retry=API_RETRY)
    moved = detect_anomalies(ctx, settings, database, day)
    text = report_text(window, revenue, installs, moved, ctx.now())
    post_once(ctx, op_key("daily-report", day), settings.chat_url, text)
    return {"day": day, "countries": len(revenue), "anomalies": moved, "report": text}


def fetch_revenue(ctx: Context, settings: Settings, window: dict[str, Any]) -> dict[str, int]:
    """Step 1: every country's revenue, one checkpoint per chunk of countries."""
    countries = settings.countries
    chunks = [list(countries[i : i + CHUNK]) for i in range(0, len(countries), CHUNK)]
    answers = ctx.map(
        partial(clients.fetch_revenue, settings.reporting_url, window),
        chunks,
        name="revenue",
        key="+".join,
        concurrency=settings.fetch_concurrency,
        retry=API_RETRY,
        limit="reporting-api",
    )
    return {country: micros for chunk in answers for country, micros in chunk.items()}


def fetch_installs(
    ctx: Context, settings: Settings, store: str, window: dict[str, Any]
) -> dict[str, int]:
    """Step 2, for one store: each app's installs under a recorded token.

    The token is recorded, so a resumed run reuses it. Apps whose answer was
    "token rejected" are asked again, and only they, under a new recorded token.
    """
    url = settings.store_url(store)
    installs: dict[str, int] = {}
    remaining = list(settings.apps)
    for round_ in range(1, TOKEN_ROUNDS + 1):
        token = ctx.record(f"{store}-token-{round_}", clients.issue_token, url)
        answers = ctx.map(
            partial(clients.fetch_installs, url, token, window),
            remaining,
            name=f"{store}-installs-{round_}",
            key=str,
            concurrency=settings.fetch_concurrency,
            retry=API_RETRY,
        )
        installs.update({a["app"]: a["installs"] for a in answers if not a.get("rejected")})
        remaining = [a["app"] for a in answers if a.get("rejected")]
        if not remaining:
            return installs
    raise Permanent(
        f"{store}: {TOKEN_ROUNDS} new tokens in a row were rejected; check the store credentials"
    )


def detect_anomalies(
    ctx: Context, settings: Settings, database: Database, day: str
) -> dict[str, float]:
    """Step 4: each country against the same day a week earlier, in parallel.

    Too much parallelism exhausts the database's connections: that fails the run
    (retrying at the same parallelism would only hammer the database again).
    Rerun with less; the countries already compared are not compared again.
    (``limit="db"`` here would have kept it from happening at all; it is left
    off so that the example can show the failure.)
    """
    comparisons = ctx.map(
        partial(database.compare_week, day, week_before(day)),
        list(settings.countries),
        name="anomalies",
        key=str,
        concurrency=settings.anomaly_parallelism,
    )
    return anomalies(comparisons)
