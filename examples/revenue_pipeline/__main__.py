"""Run the pipeline once for a date: ``python -m examples.revenue_pipeline --help``
from the repository root, or ``python path/to/examples/revenue_pipeline --help``
from any directory."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, datetime, time
from pathlib import Path

if not __package__:
    # Run as a directory (``python path/to/examples/revenue_pipeline``): import
    # the modules beside this one as the package they are (PEP 366).
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    __package__ = "examples.revenue_pipeline"

from cairn import TaskFailed

from .pipeline import app, nightly_revenue
from .report import data_window
from .settings import TOKYO, Settings, env_name
from .simulated import ReportingServer, Simulation, StoreServer

FIRES_AT = time(4, 30)  # Asia/Tokyo, as the schedule says


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m examples.revenue_pipeline",
        description="Run the nightly revenue pipeline once, as fired at 04:30 Asia/Tokyo on "
        "--date. Run it again after a failure or a kill: only the missing work is done.",
    )
    parser.add_argument("--date", type=date.fromisoformat, required=True, help="YYYY-MM-DD")
    parser.add_argument("--workdir", type=Path, default=Path("revenue-run"))
    parser.add_argument("--simulate", action="store_true", help="start simulated services")
    parser.add_argument("--anomaly-parallelism", type=int, help="anomaly checks at once")
    sim = parser.add_argument_group("simulated failures (with --simulate)")
    sim.add_argument("--quota", type=int, help="RESOURCE_EXHAUSTED after this many calls")
    sim.add_argument("--deny", action="append", default=[], help="PERMISSION_DENIED country")
    sim.add_argument("--token-uses", type=int, help="a store token expires after N calls")
    sim.add_argument("--db-max-connections", type=int, default=8)
    sim.add_argument("--db-latency", type=float, default=0.0, help="seconds per anomaly query")
    return parser.parse_args(argv)


@contextmanager
def services(args: argparse.Namespace, fired_at: datetime) -> Iterator[Simulation | None]:
    """The simulated services, their settings put in the environment; or nothing."""
    if not args.simulate:
        yield None
        return
    reporting = ReportingServer(quota=args.quota, denied=frozenset(args.deny))
    apple = StoreServer("apple", token_uses=args.token_uses)
    google = StoreServer("google", token_uses=args.token_uses)
    with Simulation(Path.cwd(), reporting=reporting, apple=apple, google=google) as simulation:
        simulation.seed_previous_week(data_window(fired_at))
        knobs = {"db_max_connections": args.db_max_connections, "db_latency": args.db_latency}
        if args.anomaly_parallelism is not None:
            knobs["anomaly_parallelism"] = args.anomaly_parallelism
        os.environ.update(simulation.settings(**knobs).to_env())
        yield simulation


def main(argv: list[str]) -> int:
    args = parse(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    os.chdir(args.workdir)  # the cairn store (and the simulated database) live there
    if args.anomaly_parallelism is not None:  # the simulation sets it too
        os.environ[env_name("anomaly_parallelism")] = str(args.anomaly_parallelism)
    fired_at = datetime.combine(args.date, FIRES_AT, TOKYO)
    # The id a worker gives the 04:30 firing of that date: a manual run and the
    # scheduled one are the same task, so the work is never done twice.
    [schedule] = app.schedules()
    task_id = schedule.task_id(fired_at)
    with services(args, fired_at) as simulation, app:
        if _failed_before(task_id):
            print(f"{task_id} failed before; running it again (finished work is kept)")
            app.store.retry_task(task_id, app.clock.now())
        try:
            result = app.run(nightly_revenue, task_id=task_id, fired_at=fired_at)
        except TaskFailed as failed:
            print(f"{task_id} failed: {failed.error.get('message', failed)}", file=sys.stderr)
            print("fix the cause and run the same command again", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print(f"{task_id} stopped; run the same command again to resume", file=sys.stderr)
            return 130
        finally:
            if simulation is not None:
                _print_calls(simulation)
        print(result["report"])
        print(f"database: {Settings.from_env().database}")
    return 0


def _failed_before(task_id: str) -> bool:
    found = app.store.get_task(task_id)
    return found is not None and found.status in ("failed", "cancelled")


def _print_calls(simulation: Simulation) -> None:
    requested, _ = simulation.reporting.counts()
    print(f"this run: reporting API asked for {sum(requested.values())} country rows", end="")
    for server in (simulation.apple, simulation.google):
        tokens, by_app, _ = server.counts()
        print(f"; {server.name}: {tokens} token(s), {sum(by_app.values())} app call(s)", end="")
    print(f"; chat posts: {len(simulation.chat.posts)}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
