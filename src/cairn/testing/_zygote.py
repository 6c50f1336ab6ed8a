"""Start many short Python processes cheaply, each with fresh user state.

Crash testing runs a user's task dozens of times, each in a new process, so
that nothing the task kept in memory (a module global, a cache) survives a
crash. A fresh interpreter costs ~0.3 s to import cairn; this module pays it
once: a *zygote* process imports cairn and then forks one child per run. The
child imports the user's code itself, after the fork, so every run starts
from user modules as fresh as in a new interpreter.

The zygote reads one JSON request per line on stdin and answers on stdout
with ``{"pid": N}`` when the child starts and ``{"pid": N, "exit": code}``
when it ends (negative: killed by that signal, as in ``subprocess``). It runs
one child at a time. Where ``os.fork`` does not exist, each run is a fresh
interpreter instead (``python -m cairn.testing._case_runner --once REQUEST_FILE``).
The zygote's program is ``cairn.testing._case_runner``, a module nothing else
imports, so ``python -m`` runs it cleanly.

A zygote may *preload* libraries (``--preload agents,openai``): it imports them
before its first fork, so a framework that takes seconds to import (the
OpenAI Agents SDK) is imported once, not once a run. Every child still starts
from the modules as they stand right after that import, since no run's
changes reach the zygote; the user's own modules are never preloaded. A
preload that leaves a thread running is refused (a fork keeps only the
thread that forked, so the child would not be what a new interpreter is).

A request: ``entry`` ("module:function", called with ``spec``), ``spec`` (any
JSON), ``cwd``, ``env`` (added to the environment), ``output`` (the file that
gets the child's stdout and stderr) and ``timeout`` (seconds; the child ends
itself with SIGALRM after it). The launcher adds the parent's environment and
``sys.path`` as they are at each start, so a zygote kept for reuse (``borrowed``)
starts children exactly as a new one would.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import math
import os
import queue
import signal
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import IO, Any

CAN_FORK = hasattr(os, "fork")


@dataclass(frozen=True, slots=True)
class Request:
    """One run: call ``entry(spec)`` in a new process."""

    entry: str
    spec: dict[str, Any]
    cwd: str
    output: str
    env: dict[str, str] = field(default_factory=dict)
    timeout: float | None = None
    sys_path: list[str] = field(default_factory=list)

    def complete(self) -> Request:
        """This request with the calling process's environment and import path."""
        env = {**os.environ, "PYTHONPATH": child_pythonpath(), **self.env}
        return replace(self, env=env, sys_path=child_pythonpath().split(os.pathsep))


def child_pythonpath() -> str:
    """A PYTHONPATH under which a child imports what this process can, plus
    modules in the current directory (as ``python -m`` would)."""
    entries = [str(Path.cwd()), *(path for path in sys.path if path)]
    return os.pathsep.join(dict.fromkeys(entries))


# -- the child side ----------------------------------------------------------------


def _enter_child(request: Request) -> None:
    """Become the run: own directory, environment and output; then call the entry."""
    if request.timeout is not None:
        signal.alarm(max(1, math.ceil(request.timeout)))
    os.chdir(request.cwd)
    os.environ.clear()
    os.environ.update(request.env)
    sys.path[:] = [*request.sys_path, *(p for p in sys.path if p not in request.sys_path)]
    out = os.open(request.output, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    os.close(null)
    module_name, _, function_name = request.entry.partition(":")
    getattr(importlib.import_module(module_name), function_name)(request.spec)


def _run_child(request: Request) -> int:
    try:
        _enter_child(request)
    except BaseException:  # noqa: BLE001 - whatever ends the run, report it and exit
        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return 0


# -- the zygote side ------------------------------------------------------------------


def _reply(message: dict[str, Any]) -> None:
    # Unbuffered: a forked child must never inherit half-written replies.
    os.write(1, (json.dumps(message) + "\n").encode())


def preload(modules: Sequence[str]) -> None:
    """Import ``modules`` in this process, before any fork; refuse one that leaves
    a thread running."""
    for name in modules:
        importlib.import_module(name)
    main = threading.main_thread()
    running = [thread.name for thread in threading.enumerate() if thread is not main]
    if running:
        raise RuntimeError(
            f"preloading {', '.join(modules)} started threads ({', '.join(running)}): a forked "
            "child would run without them, so it cannot be preloaded; leave it out of preload="
        )


def serve(modules: Sequence[str] = ()) -> None:
    """The zygote's loop: one request per stdin line, one child at a time, after
    importing the ``modules`` to preload."""
    try:
        preload(modules)
    except Exception as exc:  # noqa: BLE001 - the launcher raises it with the message
        _reply({"pid": -1, "exit": -1, "error": f"{type(exc).__name__}: {exc}"})
        return
    for line in sys.stdin:
        if not line.strip():
            continue
        request = Request(**json.loads(line))
        pid = os.fork()
        if pid == 0:
            os._exit(_run_child(request))
        _reply({"pid": pid})
        _, status = os.waitpid(pid, 0)
        _reply({"pid": pid, "exit": os.waitstatus_to_exitcode(status)})


def run_once(request_file: str) -> int:
    """Run the request in ``request_file`` in this very process (no fork); returns
    its exit code."""
    return _run_child(Request(**json.loads(Path(request_file).read_text())))


# -- the parent's handle ----------------------------------------------------------------

PROGRAM = "cairn.testing._case_runner"
ExitSource = Callable[[float | None], int]


class Running:
    """One started run: its pid, and a way to wait for it or kill it."""

    def __init__(self, pid: int, exit_code: ExitSource) -> None:
        self.pid = pid
        self._exit_code = exit_code
        self.exit_code: int | None = None

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit code once the run has ended; None if ``timeout`` passed first."""
        if self.exit_code is None:
            try:
                self.exit_code = self._exit_code(timeout)
            except (queue.Empty, subprocess.TimeoutExpired):
                return None
        return self.exit_code

    def kill(self) -> None:
        """SIGKILL the run, unless it has already ended."""
        if self.exit_code is None:
            # ProcessLookupError: it ended on its own a moment ago.
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


class Launcher:
    """Starts runs through one zygote (or fresh interpreters), one at a time:
    wait for each run to end before starting the next."""

    def __init__(self, *, fresh_interpreters: bool = False, preload: Sequence[str] = ()) -> None:
        self._fresh = fresh_interpreters or not CAN_FORK
        # A fresh interpreter imports whatever the run imports, preloaded or not.
        self.preload = tuple(preload)
        self._zygote: subprocess.Popen[bytes] | None = None
        self._current: Running | None = None
        self._replies: queue.Queue[dict[str, Any]] = queue.Queue()

    def start(self, request: Request) -> Running:
        """Start ``request`` now."""
        request = request.complete()
        if self._fresh:
            # Through a file, not argv: the environment is no business of `ps`.
            spec_file = Path(f"{request.output}.request.json")
            spec_file.write_text(json.dumps(asdict(request)))
            command = [sys.executable, "-m", PROGRAM, "--once", str(spec_file)]
            process = subprocess.Popen(command, env=request.env, cwd=request.cwd)
            self._current = Running(process.pid, process.wait)
            return self._current
        zygote = self._running_zygote()
        assert zygote.stdin is not None
        # BrokenPipeError: the zygote has ended (a refused preload); its last reply says why.
        with contextlib.suppress(BrokenPipeError):
            zygote.stdin.write((json.dumps(asdict(request)) + "\n").encode())
            zygote.stdin.flush()
        reply = self._replies.get()
        pid = reply["pid"]
        if pid < 0:
            raise RuntimeError(
                reply.get("error", "cairn's test zygote process ended; see its output above")
            )
        self._current = Running(pid, self._next_exit)
        return self._current

    def close(self) -> None:
        """Stop the zygote, killing a run still going (an interrupted caller's)."""
        if self._current is not None:
            self._current.kill()
            self._current = None
        zygote, self._zygote = self._zygote, None
        if zygote is not None:
            assert zygote.stdin is not None
            assert zygote.stdout is not None
            with contextlib.suppress(BrokenPipeError):
                zygote.stdin.close()
            zygote.wait()
            zygote.stdout.close()

    @property
    def usable(self) -> bool:
        """False once its zygote has ended."""
        return self._fresh or self._zygote is None or self._zygote.poll() is None

    def __enter__(self) -> Launcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _next_exit(self, timeout: float | None) -> int:
        return int(self._replies.get(timeout=timeout)["exit"])

    def _running_zygote(self) -> subprocess.Popen[bytes]:
        if self._zygote is None:
            command = [sys.executable, "-m", PROGRAM]
            if self.preload:
                command += ["--preload", ",".join(self.preload)]
            self._zygote = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env={**os.environ, "PYTHONPATH": child_pythonpath()},
            )
            assert self._zygote.stdout is not None
            threading.Thread(
                target=_read_replies, args=(self._zygote.stdout, self._replies), daemon=True
            ).start()
        return self._zygote


def _read_replies(stream: IO[bytes], replies: queue.Queue[dict[str, Any]]) -> None:
    for line in stream:
        replies.put(json.loads(line))
    replies.put({"pid": -1, "exit": -1})  # the zygote is gone: unblock any waiter


# -- zygotes kept for reuse -----------------------------------------------------------------

_idle: list[Launcher] = []
_idle_lock = threading.Lock()


@contextmanager
def borrowed(
    *, fresh_interpreters: bool = False, preload: Sequence[str] = ()
) -> Iterator[Launcher]:
    """A launcher for the duration of a ``with``: an idle zygote that preloaded the
    same modules if there is one (starting one costs ~0.3 s, and more with
    ``preload``), kept afterwards for the next caller."""
    if fresh_interpreters:
        with Launcher(fresh_interpreters=True) as launcher:
            yield launcher
        return
    wanted = tuple(preload)
    with _idle_lock:
        same = [index for index, idle in enumerate(_idle) if idle.preload == wanted]
        launcher = _idle.pop(same[-1]) if same else Launcher(preload=wanted)
    try:
        yield launcher
    except BaseException:
        launcher.close()  # a run may still be going: never hand this one out again
        raise
    if launcher.usable:
        with _idle_lock:
            _idle.append(launcher)


@atexit.register
def _close_idle() -> None:
    with _idle_lock:
        while _idle:
            _idle.pop().close()
