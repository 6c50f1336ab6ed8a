"""``ctx.map``: one checkpointed step per item, up to N at once.

Positions stay deterministic whatever order items finish in: the map takes one
position for its head (kind ``map``, recording how many items it has), and item
``i`` is the step at the head's position + 1 + i, named ``name[key]``. A resumed
map replays the items that completed and runs only the others, and the number
of threads may differ between runs: it never enters the record.

Each item runs as an ordinary step (its own retries, its own fenced commit). An
item that fails does not stop the others: they run to the end, so their
checkpoints are kept, and then the first failure (in item order) is raised.
A lease lost or a cancel stops the map at once.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cairn.engine.run import Machine, TaskRun, adrive, drive
from cairn.engine.steps import EntryLabel, record_completed, step_machine
from cairn.keys import bounded_key
from cairn.retry import Retry

ItemKey = Callable[[Any], Any]


def item_names(name: str, items: Sequence[Any], key: ItemKey | None) -> list[str]:
    """The checkpoint name of each item, checked for clashes before anything runs."""
    names: list[str] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(items):
        if key is not None:
            label = str(key(item))
        elif isinstance(item, str | int) and not isinstance(item, bool):
            label = str(item)
        else:
            label = str(index)  # position in the list: keep the list's order stable
        # Refused as the item key the user gave, which is the text at fault.
        entry_name = bounded_key(f"{name}[{label}]", kind=f"ctx.map({name!r}) item key")
        if entry_name in seen:
            raise ValueError(
                f"ctx.map({name!r}): items {seen[entry_name]} and {index} have the same key "
                f"{label!r}; give map a key= that tells every item apart"
            )
        seen[entry_name] = index
        names.append(entry_name)
    return names


def open_map(run: TaskRun, name: str, count: int) -> int:
    """Write (or replay) the map's head; return the position of its first item."""
    seq = run.next_seq()
    record = run.replayed(seq, "map", name)
    what = EntryLabel("map", name, seq)
    if record is None:
        record_completed(run, seq, "map", name, run.encode(count, what), run.now())
    else:
        recorded = run.decode(record.output or "0", what)
        if recorded != count:
            run.diverge(seq, f"map {name} of {recorded} items", f"map {name} of {count} items")
    run.seq = seq + count  # the items take the next `count` positions
    return seq + 1


def _first_error(errors: dict[int, BaseException], fatal: list[BaseException]) -> None:
    if fatal:
        raise fatal[0]
    if errors:
        raise errors[min(errors)]


@dataclass(frozen=True, slots=True)
class MapPlan:
    """One map's items and how each runs: item ``i`` is a step named
    ``names[i]`` at position ``first_seq + i``."""

    run: TaskRun
    fn: Callable[[Any], Any]
    items: Sequence[Any]
    names: list[str]
    first_seq: int
    retry: Retry
    limit: str | None

    def machine(self, index: int) -> Machine[Any]:
        return step_machine(
            self.run,
            "step",
            self.names[index],
            self.fn,
            (self.items[index],),
            {},
            self.retry,
            limit=self.limit,
            seq=self.first_seq + index,
        )


def run_items(plan: MapPlan, concurrency: int) -> list[Any]:
    """Run the map's items on up to ``concurrency`` threads; results in item order."""
    run = plan.run
    results: list[Any] = [None] * len(plan.items)
    errors: dict[int, BaseException] = {}
    fatal: list[BaseException] = []
    todo = list(range(len(plan.items)))
    lock = threading.Lock()

    def work(own_thread: bool) -> None:
        try:
            while not fatal:
                with lock:
                    if not todo:
                        return
                    index = todo.pop(0)
                try:
                    results[index] = drive(plan.machine(index), run.clock)
                except Exception as exc:  # noqa: BLE001 - raised after the other items
                    errors[index] = exc
                except BaseException as exc:  # noqa: BLE001 - lease lost, cancel: stop all
                    fatal.append(exc)
        finally:
            if own_thread:
                run.store.close_thread()

    threads = min(concurrency, len(todo))
    if threads <= 1:
        work(own_thread=False)
    else:
        pool = [
            threading.Thread(target=work, args=(True,), name=f"cairn-map-{i}", daemon=True)
            for i in range(threads)
        ]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
    _first_error(errors, fatal)
    return results


async def arun_items(plan: MapPlan, concurrency: int) -> list[Any]:
    """Run an async map's items as coroutines, up to ``concurrency`` at once."""
    results: list[Any] = [None] * len(plan.items)
    errors: dict[int, BaseException] = {}
    fatal: list[BaseException] = []
    gate = asyncio.Semaphore(concurrency)

    async def one(index: int) -> None:
        async with gate:
            if fatal:
                return
            try:
                results[index] = await adrive(plan.machine(index), plan.run.clock)
            except Exception as exc:  # noqa: BLE001 - raised after the other items
                errors[index] = exc
            except BaseException as exc:  # noqa: BLE001 - lease lost, cancel: stop all
                fatal.append(exc)

    await asyncio.gather(*(one(index) for index in range(len(plan.items))))
    _first_error(errors, fatal)
    return results
