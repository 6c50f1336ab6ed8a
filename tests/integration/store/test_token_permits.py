"""Token limits and budgets in the store, on each backend: the amounts a permit
holds, a limit a provider's 429 closed, a dead holder's reservation, and a
budget's reserve, settle, raise and alerts (``cairn.store.sqlbudgets``).

Times are given to the store as values, so nothing here waits.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from cairn.store import Store
from cairn.store.records import BudgetRefused
from tests.integration.store.conftest import Backend

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
WINDOW = timedelta(seconds=60)
LEASE = timedelta(seconds=10)
OWNER = "owner-1"


@pytest.fixture
def store(store_backend: Backend) -> Iterator[Store]:
    opened = store_backend.open()
    yield opened
    opened.close()


def take(store: Store, permit: str, amount: int, now: datetime, *, requests: int = 100) -> object:
    """Ask for ``amount`` tokens of a 1,000-token, ``requests``-call limit."""
    return store.acquire_permit(
        "tpm", requests, WINDOW, permit, OWNER, "task-1", now, now + LEASE,
        amount=amount, amount_capacity=1000,
    )  # fmt: skip


def test_a_token_limit_lends_only_the_amount_that_fits(store: Store) -> None:
    """Reservations of 600 and 400 fill 1,000 tokens; one more token is refused,
    and the refusal says when the earliest ended permit stops counting."""
    assert take(store, "a", 600, T0) is None
    assert take(store, "b", 400, T0) is None
    store.release_permit("tpm", "a", T0 + timedelta(seconds=1))
    refused = take(store, "c", 1, T0 + timedelta(seconds=2))
    assert refused is not None
    assert refused.frees_at == T0 + timedelta(seconds=1) + WINDOW  # type: ignore[attr-defined]


def test_settling_frees_the_unused_part_of_a_reservation_at_once(store: Store) -> None:
    """A call that reserved 900 and reported 250 leaves room for 750 more in the
    same window, not for 751."""
    assert take(store, "a", 900, T0) is None
    assert take(store, "b", 750, T0) is not None
    store.settle_permit("tpm", "a", 250, T0 + timedelta(seconds=1))
    assert take(store, "c", 751, T0 + timedelta(seconds=2)) is not None
    assert take(store, "d", 750, T0 + timedelta(seconds=2)) is None


def test_the_request_cap_of_a_token_limit_counts_calls(store: Store) -> None:
    """With requests=2, a third call is refused however few tokens it needs."""
    assert take(store, "a", 1, T0, requests=2) is None
    assert take(store, "b", 1, T0, requests=2) is None
    assert take(store, "c", 1, T0, requests=2) is not None


def test_a_closed_limit_lends_nothing_until_the_time_the_provider_asked(store: Store) -> None:
    """After ``close_limit`` (a 429 with Retry-After) every caller is refused
    until then, with that time as when it frees; an earlier close does not
    shorten it; afterwards the limit lends again."""
    until = T0 + timedelta(seconds=30)
    store.close_limit("tpm", until)
    store.close_limit("tpm", T0 + timedelta(seconds=5))
    refused = take(store, "a", 1, T0 + timedelta(seconds=10))
    assert refused is not None
    assert refused.frees_at == until  # type: ignore[attr-defined]
    assert take(store, "a", 1, until + timedelta(milliseconds=1)) is None


def test_a_dead_holders_reservation_comes_back_after_its_lease_and_window(
    store: Store,
) -> None:
    """A holder that never settles (killed): its reservation counts until its
    lease runs out, then for the window after (its request may have reached
    the provider), and not a moment longer."""
    assert take(store, "dead", 1000, T0) is None
    lapsed = T0 + LEASE + WINDOW
    assert take(store, "b", 1, lapsed - timedelta(milliseconds=1)) is not None
    assert take(store, "b", 1000, lapsed) is None


def reserve(store: Store, permit: str, usd: int, tokens: int = 0) -> object:
    return store.reserve_budget(
        ["batch:b", "task:none"], permit, OWNER, "task-1", usd, tokens, T0, T0 + LEASE
    )


def test_a_budget_reserves_all_or_nothing_and_settles_to_what_was_used(store: Store) -> None:
    """A budget of 1,000 nano-dollars: 700 reserved, 400 more refused (naming the
    scope, the measure, what counts and the cap); settled to 200, the rest is
    free; the spend is what settled calls used. A scope with no budget is not
    charged."""
    store.declare_budget("batch:b", 1000, None, 0.8, T0)
    assert reserve(store, "a", 700) == ("batch:b",)
    refused = reserve(store, "b", 400)
    assert refused == BudgetRefused("batch:b", "usd", 700, 1000, 0)
    budget = store.get_budget("batch:b")
    assert budget is not None
    assert (budget.spent_usd_nanos, budget.held_usd_nanos) == (700, 700)
    store.settle_budget(["batch:b"], "a", 200, 30)
    store.settle_budget(["batch:b"], "a", 200, 30)  # a retried settle counts once
    assert reserve(store, "b", 800) == ("batch:b",)
    budget = store.get_budget("batch:b")
    assert budget is not None
    assert (budget.spent_usd_nanos, budget.held_usd_nanos, budget.spent_tokens) == (1000, 800, 30)


def test_a_token_budget_refuses_what_would_pass_its_tokens(store: Store) -> None:
    """Budget(tokens=100): 100 tokens fit, one more does not; dollars are not capped."""
    store.declare_budget("batch:b", None, 100, 0.8, T0)
    assert reserve(store, "a", 10**9, 100) == ("batch:b",)
    refused = reserve(store, "b", 0, 1)
    assert isinstance(refused, BudgetRefused)
    assert refused.measure == "tokens"


def test_declaring_again_keeps_a_raised_budget_and_a_raise_rearms_alerts(store: Store) -> None:
    """A second declaration changes nothing (a raise stands); each alert is noted
    by the first caller only, until a raise re-arms both; raising a budget that
    does not exist answers None."""
    store.declare_budget("batch:b", 1000, None, 0.8, T0)
    assert store.mark_budget_alert("batch:b", "reached", T0)
    assert not store.mark_budget_alert("batch:b", "reached", T0)
    assert store.raise_budget("batch:b", 5000, None, T0) == []
    store.declare_budget("batch:b", 1000, None, 0.8, T0)
    budget = store.get_budget("batch:b")
    assert budget is not None
    assert (budget.usd_nanos, budget.raised, budget.reached_at) == (5000, 1, None)
    assert store.mark_budget_alert("batch:b", "reached", T0)
    assert store.raise_budget("batch:nope", 1, None, T0) is None
    assert [b.scope for b in store.budgets_like("batch:")] == ["batch:b"]
