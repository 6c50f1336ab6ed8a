"""cairn side by side with its peers, in one run: ``python -m bench``.

Sections (``--only`` picks some):

  step          a durable step: cairn vs DBOS Transact on SQLite (matched WAL and
                synchronous settings, and each library's default) and PostgreSQL,
                against the raw commit floor measured in the same rounds
  conversation  a conversation's growth: cairn vs LangGraph (SqliteSaver) vs the
                OpenAI Agents SDK (SQLiteSession): bytes, time per turn, load time
  langgraph     one LangGraph thread on cairn's checkpointer (CairnSaver, format 3
                and format 1) vs SqliteSaver: bytes over the text (file and
                tables; PostgreSQL too), time per turn, first vs last 10%, load
  resume        resume latency with many finished tasks, and of a crashed task
                (cairn only)
  workers       multi-worker throughput on PostgreSQL (cairn only)
  groupcommit   100 async tasks x 50 steps, and 16 threads, in one process, group
                commit on and off, against 1/(raw commit latency) measured in the
                same rounds: SQLite (synchronous NORMAL and FULL) and PostgreSQL
                (cairn only)

The peers come from the ``bench`` extra (``.venv/bin/pip install -e '.[bench]'``);
a peer that is not installed is skipped with a note. Their tracing/telemetry is
switched off: nothing here reaches the network. Every contender runs once per
round and rounds repeat (``--runs``); tables give medians, and every ratio is a
median of per-round ratios, against the floor measured in the same round.

    .venv/bin/python -m bench [--runs 5] [--quick] [--only step conversation ...]
        [--postgres-url URL | --no-postgres] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench import _peers
from bench._stats import filesystem_of

SECTIONS = ("step", "conversation", "langgraph", "resume", "workers", "groupcommit")
DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--runs", type=int, default=None, help="rounds per section (5; quick: 1)")
    parser.add_argument(
        "--quick", action="store_true", help="small sizes and one round: a smoke test, not data"
    )
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--steps", type=int, default=None, help="steps per task (2000)")
    parser.add_argument(
        "--turns", type=int, nargs="+", default=None, help="conversation sizes (200 1000)"
    )
    parser.add_argument(
        "--lg-turns", type=int, nargs="+", default=None, help="LangGraph thread sizes (1000)"
    )
    parser.add_argument(
        "--finished", type=int, default=None, help="finished tasks for resume (10000)"
    )
    parser.add_argument("--tasks", type=int, default=None, help="tasks for workers (400)")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("CAIRN_TEST_POSTGRES_URL") or DEFAULT_POSTGRES,
        help="a server's maintenance database; bench_peers_* databases are made and dropped",
    )
    parser.add_argument("--no-postgres", action="store_true", help="skip everything PostgreSQL")
    parser.add_argument(
        "--no-peers", action="store_true", help="cairn and the floors only, even if peers exist"
    )
    parser.add_argument("--dir", type=Path, default=None, help="where the SQLite files go")
    args = parser.parse_args(argv)
    quick = args.quick
    args.runs = args.runs or (1 if quick else 5)
    args.steps = args.steps or (200 if quick else 2000)
    args.turns = args.turns or ([20, 50] if quick else [200, 1000])
    args.lg_turns = args.lg_turns or ([50] if quick else [1000])
    args.finished = args.finished or (300 if quick else 10_000)
    args.tasks = args.tasks or (20 if quick else 400)
    if args.no_postgres:
        args.postgres_url = None
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    _peers.go_offline()  # before any peer is imported
    started = time.perf_counter()
    with (
        _peers.left_out(args.no_peers),
        tempfile.TemporaryDirectory(prefix="cairn-bench-peers-", dir=args.dir) as name,
    ):
        workdir = Path(name)
        print(f"{_peers.environment()}")
        print(f"files on {filesystem_of(workdir)}; peers offline: {_peers.offline_settings()}")
        print(f"command: python -m bench {' '.join(argv) if argv is not None else ''}".rstrip())
        print()
        for section in args.only:
            print(run_section(section, args, workdir), flush=True)
            for stale in workdir.iterdir():
                stale.unlink()
    print(f"done in {time.perf_counter() - started:.0f} s")
    return 0


def run_section(section: str, args: argparse.Namespace, workdir: Path) -> str:
    if section == "step":
        from bench import side_steps

        return side_steps.main(workdir, args.runs, args.steps, args.postgres_url)
    if section == "conversation":
        from bench import side_conversation

        return side_conversation.main(workdir, args.runs, args.turns)
    if section == "langgraph":
        from bench import side_langgraph

        return side_langgraph.main(workdir, args.runs, args.lg_turns, args.postgres_url)
    if section == "groupcommit":
        from bench import group_commit

        tasks, steps = (20, 10) if args.quick else (100, 50)
        return group_commit.main(
            workdir, args.runs, tasks, steps, ["NORMAL", "FULL"], args.postgres_url
        )
    from bench import side_resume

    if section == "resume":
        batches = side_resume.resume_batches(workdir, args.finished, max(args.runs, 5))
        task = side_resume.resume_task(workdir, args.steps, args.runs)
        return f"{batches}\n{task}"
    if args.postgres_url is None:
        return "(4) workers skipped: no PostgreSQL (--no-postgres)\n"
    counts = [1, 2] if args.quick else [1, 2, 4]
    return side_resume.workers(args.postgres_url, args.tasks, counts, args.runs)


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
