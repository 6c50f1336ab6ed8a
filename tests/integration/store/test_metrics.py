"""``cairn.observe.metrics`` and ``cairn metrics`` agree with counts taken by the
tasks themselves while they really ran, on each backend."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

from cairn import Cairn, Context
from cairn.clock import FakeClock
from cairn.observe import compute
from cairn.observe.metrics import percentile
from cairn.retry import Retry

BATCH = "ad-review-2026-05-24"
ITEMS = 6
STUCK = 4  # this item's task is left running by a "dead" owner, then taken over
FAILS_TYPE = {1: KeyError, 3: ValueError}  # these items fail for good


class Tally:
    """What the task functions observed: every call, by (task, step) and by key."""

    def __init__(self) -> None:
        self.step_calls: Counter[tuple[str, str]] = Counter()
        self.op_calls: Counter[str] = Counter()
        self.task_starts: Counter[str] = Counter()


def build(app: Cairn, tally: Tally):
    @app.task(name="review", retry=Retry(attempts=2, initial_delay=1.0))
    def review(ctx: Context, n: int) -> int:
        tally.task_starts[ctx.task_id] += 1

        def fetch() -> int:
            tally.step_calls[(ctx.task_id, "fetch")] += 1
            # Even items fail their first call of fetch: one step retry each.
            if n % 2 == 0 and tally.step_calls[(ctx.task_id, "fetch")] == 1:
                raise ConnectionError("flaky")
            return n

        def score(value: int) -> int:
            tally.step_calls[(ctx.task_id, "score")] += 1
            assert isinstance(ctx_clock, FakeClock)
            ctx_clock.advance(2.0 + n)  # recorded durations: 2 + n seconds
            if n in FAILS_TYPE:
                raise FAILS_TYPE[n]("bad item")
            return value * 10

        def notify(key: str) -> str:
            tally.op_calls[key] += 1
            # Item 5's operation fails once and is called again: a redundant call.
            if n == 5 and tally.op_calls[key] == 1:
                raise TimeoutError("gateway timeout")
            return "sent"

        value = ctx.step("fetch", fetch, retry=Retry(attempts=3, initial_delay=0.5))
        result = ctx.step("score", score, value, retry=Retry(attempts=1))
        ctx.once(f"notify/{n}", notify, retry=Retry(attempts=3, initial_delay=0.5))
        return int(result)

    ctx_clock = app.clock
    assert isinstance(ctx_clock, FakeClock)
    return review


def run_with_takeover(app: Cairn, clock: FakeClock, tally: Tally) -> None:
    """Enqueue the batch; leave one task claimed by an owner whose lease then runs
    out (a crashed machine); then run the batch, which takes it over."""
    review = build(app, tally)
    app.enqueue(BATCH, review, [{"n": n} for n in range(ITEMS)])
    record = app.store.get_task(f"{BATCH}/n={STUCK}")
    assert record is not None
    lease = clock.now() + timedelta(seconds=30)
    assert app.store.claim_task(record.id, record.fence, "gone-host/1/0/x", lease, clock.now())
    clock.advance(60)
    # One at a time: the fake clock is shared, so recorded durations stay exact.
    items = [{"n": n} for n in range(ITEMS)]
    app.run_batch(BATCH, review, items, concurrency=1, progress=False)


def test_metrics_match_counts_from_a_real_run(any_app: Cairn, clock: FakeClock) -> None:
    """Restarts, retries, failures by type, redundant operations and step counts
    computed from the store equal what the task functions counted as they ran."""
    tally = Tally()
    run_with_takeover(any_app, clock, tally)
    m = compute(any_app.store)

    assert m.tasks_by_status == {"completed": ITEMS - len(FAILS_TYPE), "failed": len(FAILS_TYPE)}
    # One task was taken over while running, and it then completed.
    assert (m.restarts.interrupted_tasks, m.restarts.completed_after_interruption) == (1, 1)
    assert m.restarts.restart_success_rate == 1.0
    assert m.restarts.interruptions == 1
    # Each step call the functions saw is a recorded call (rows keep totals).
    assert m.retries.step_calls == sum(tally.step_calls.values())
    # Retries: calls beyond the first per (task, step).
    assert m.retries.step_retries == sum(c - 1 for c in tally.step_calls.values())
    # Failing tasks ran twice (task retry policy of 2 attempts), nobody else did.
    assert m.retries.task_retries == sum(c - 1 for c in tally.task_starts.values())
    assert m.failures_by_type == {"builtins.KeyError": 1, "builtins.ValueError": 1}
    redundant = sum(1 for c in tally.op_calls.values() if c > 1)
    assert (m.redundancy.operation_keys, m.redundancy.redundant_keys) == (len(tally.op_calls), 1)
    assert m.redundancy.redundant_execution_rate == redundant / len(tally.op_calls)
    assert m.redundancy.calls == sum(tally.op_calls.values())
    # The taken-over task (even n) retried fetch in its first call: a suspect.
    assert m.restarts.suspect_reruns == 1


def test_step_percentiles_and_batch_baseline(any_app: Cairn, clock: FakeClock) -> None:
    """Step durations are the recorded ones; a batch is compared with the median of
    its dated family."""
    tally = Tally()
    run_with_takeover(any_app, clock, tally)
    m = compute(any_app.store)
    score = next(s for s in m.steps if s.name == "score")
    # score advances the clock by 2 + n seconds; only completed steps count.
    durations = sorted(2.0 + n for n in range(ITEMS) if n not in FAILS_TYPE)
    assert score.count == len(durations)
    assert (score.p50, score.p90, score.p99) == (
        percentile(durations, 50),
        percentile(durations, 90),
        percentile(durations, 99),
    )
    (batch,) = m.batches
    assert batch.family == "ad-review"
    assert batch.unfinished == 0
    assert batch.wall_clock_seconds is not None
    assert batch.vs_family_median == 1.0
