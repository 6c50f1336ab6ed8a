"""A resumed 1,000-turn conversation, loaded: cairn against the Agents SDK, in CPU.

The same 1,000 turns (``bench.conversation.message_pair``: a ~120-character
user message and a ~400-character reply) are stored by cairn (``ctx.conversation``,
one ``extend`` a turn) and by the OpenAI Agents SDK's ``SQLiteSession`` (one
``add_items`` a turn), each in its own SQLite file. Then, alternating, cairn's
``load_conversation(...).messages`` (the parsed messages of the active context,
what a resume hands the model) and the SDK's ``get_items()`` are timed, CPU and
wall, ``--rounds`` times each; medians and their ratio are printed. No
compaction: every row is read.

    .venv/bin/python -m bench.conversation_load [--turns 1000] [--rounds 60]

Target: cairn's load at or below the SDK's (ratio <= 1.0).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.conversation import TASK_ID, message_pair
from cairn import Cairn, Context
from cairn.agent import load_conversation


def _stored_by_cairn(path: Path, turns: int) -> Cairn:
    app = Cairn(f"sqlite:///{path}")

    @app.task(name="bench")
    def chat(ctx: Context) -> int:
        conv = ctx.conversation("main")
        for i in range(turns):
            conv.extend(list(message_pair(i)))
        return len(conv)

    app.run(chat, task_id=TASK_ID)
    return app


def _timed(load: Callable[[], int], cpu: list[float], wall: list[float]) -> None:
    started_cpu, started_wall = time.process_time(), time.perf_counter()
    load()
    cpu.append(time.process_time() - started_cpu)
    wall.append(time.perf_counter() - started_wall)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args(argv)
    from agents import SQLiteSession

    directory = Path(tempfile.mkdtemp(prefix="cairn-bench-load-"))
    session = SQLiteSession(TASK_ID, str(directory / "sdk.db"))
    loop = asyncio.new_event_loop()
    app = _stored_by_cairn(directory / "cairn.db", args.turns)
    try:
        for i in range(args.turns):
            loop.run_until_complete(session.add_items(list(message_pair(i))))  # type: ignore[arg-type]
        store = app.store

        def cairn() -> int:
            view = load_conversation(store, TASK_ID)
            assert view is not None
            return len(view.messages)

        def sdk() -> int:
            return len(loop.run_until_complete(session.get_items()))

        assert cairn() == sdk() == 2 * args.turns  # the same messages, and warm
        times: dict[str, tuple[list[float], list[float]]] = {"cairn": ([], []), "sdk": ([], [])}
        for _ in range(args.rounds):
            _timed(cairn, *times["cairn"])
            _timed(sdk, *times["sdk"])
    finally:
        app.close()
        session.close()
        loop.close()
    ms = {k: [statistics.median(v) * 1e3 for v in pair] for k, pair in times.items()}
    print(
        f"{args.turns} turns, {args.rounds} alternating loads: "
        f"cairn CPU {ms['cairn'][0]:.2f} ms (wall {ms['cairn'][1]:.2f}), "
        f"Agents SDK CPU {ms['sdk'][0]:.2f} ms (wall {ms['sdk'][1]:.2f}); "
        f"cairn / SDK: CPU {ms['cairn'][0] / ms['sdk'][0]:.2f}x, "
        f"wall {ms['cairn'][1] / ms['sdk'][1]:.2f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
