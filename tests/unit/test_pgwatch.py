"""The round-trip bound of a PostgreSQL store, and the connection settings it
sets (cairn.store.pgwatch; its watchdog at work: test_postgres_silence.py)."""

from __future__ import annotations

from typing import Any

import psycopg

from cairn.engine.owners import DEFAULT_LEASE_SECONDS
from cairn.store.pgwatch import DEFAULT_ROUND_TRIP, SILENCE_FLOOR, Watchdog, connection_settings


def no_connection(**settings: Any) -> psycopg.Connection[Any]:
    """A look at the server these tests never take."""
    raise AssertionError("the watchdog asked the server")


def test_the_default_bound_is_a_third_of_the_default_lease() -> None:
    """With no app asking, waits are bounded by a third of cairn's default lease."""
    assert DEFAULT_ROUND_TRIP == DEFAULT_LEASE_SECONDS / 3
    assert Watchdog(None, "here", connect=no_connection).silence == DEFAULT_ROUND_TRIP


def test_the_bound_an_app_asks_for_rules_and_the_shorter_of_two() -> None:
    """An app's bound replaces the default, longer or shorter; a second app on
    the same store lowers it, never raises it; nothing goes below the floor."""
    watchdog = Watchdog(None, "here", connect=no_connection)
    watchdog.bound(20.0)  # a 60 s lease
    assert watchdog.silence == 20.0
    watchdog.bound(30.0)
    assert watchdog.silence == 20.0
    watchdog.bound(5.0)
    assert watchdog.silence == 5.0
    watchdog.bound(0.1)
    assert watchdog.silence == SILENCE_FLOOR


def test_connection_settings_follow_the_bound_unless_the_url_sets_them() -> None:
    """Keepalives, tcp_user_timeout and connect_timeout are derived from the
    bound; a setting the URL gives is left to it."""
    assert connection_settings(10.0, {}) == {
        "connect_timeout": 10,
        "keepalives": 1,
        "keepalives_idle": 5,
        "keepalives_interval": 1,
        "keepalives_count": 3,
        "tcp_user_timeout": 10000,
    }
    assert connection_settings(1.0, {})["connect_timeout"] == 2  # libpq's own floor
    given = {"keepalives_idle": "42", "connect_timeout": "3"}
    settings = connection_settings(20.0, given)
    assert "keepalives_idle" not in settings
    assert "connect_timeout" not in settings
    assert settings["tcp_user_timeout"] == 20000
