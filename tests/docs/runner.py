"""Run one documented block in a fresh temporary directory, the way a reader would.

A ```python block runs as a script with this interpreter; a ```console or ```sh
block runs in one bash process, so a session's background jobs and files carry
from one command to the next. Each command's output is cut out of the whole by a
marker line the runner prints after it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.docs.blocks import ROOT, Block, Command, Page, output_matches, session_commands

# Seconds for one block (a story of chapters gets this for each of its
# sessions): a hang guard, generous so a loaded machine never fails it.
TIMEOUT = 90.0
_MARK = "@@cairn-docs-command-done@@"
_BASH = shutil.which("bash") or "/bin/bash"
# bash's own words for a foreground job killed by a signal: "bash: line 3: 41 Killed  python ..."
_KILLED = re.compile(r"^.*: line \d+: +\d+ Killed .*$", re.MULTILINE)


@dataclass(frozen=True)
class Outcome:
    """What running one block did: the problems found (none: it passed)."""

    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def run_block(page: Page, block: Block) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="cairn-doc-") as scratch:
        workdir = Path(scratch)
        # A reader runs the examples from a checkout: examples/ is where they see it.
        (workdir / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
        for name, source in page.named_files().items():
            target = workdir / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(source, encoding="utf-8")
        if block.lang == "python":
            return _run_python(block, workdir)
        return _run_session(block, workdir)


def run_story(chain: list[Page]) -> dict[str, Outcome]:
    """The sessions of a chain of chapters, in order, in one bash process and directory."""
    sessions = [
        block
        for page in chain
        for block in page.blocks
        if block.lang != "python" and block.not_run is None
    ]
    with tempfile.TemporaryDirectory(prefix="cairn-doc-") as scratch:
        workdir = Path(scratch)
        (workdir / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
        for page in chain:
            for name, source in page.named_files().items():
                (workdir / name).parent.mkdir(parents=True, exist_ok=True)
                (workdir / name).write_text(source, encoding="utf-8")
        commands = [(block, command) for block in sessions for command in session_commands(block)]
        # The whole story runs in one process: the bound grows with its sessions
        # (all the tutorial's chapters took over 90 s together at load 20).
        bound = TIMEOUT * max(1, len(sessions))
        checked = _run_commands([command for _, command in commands], workdir, bound)
        if isinstance(checked, Outcome):
            return {block.id: checked for block in sessions}
        problems: dict[str, list[str]] = {block.id: [] for block in sessions}
        for (block, _), found in zip(commands, checked, strict=True):
            problems[block.id].extend(found)
        return {block_id: Outcome(tuple(found)) for block_id, found in problems.items()}


def _environment() -> dict[str, str]:
    """The reader's shell: this venv first on PATH, no store chosen by the caller."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("CAIRN_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"  # stdout and stderr interleave as a terminal shows them
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    return env


def _run(
    argv: list[str], workdir: Path, timeout: float = TIMEOUT
) -> subprocess.CompletedProcess[str] | None:
    """Run argv in its own process group; None if it outlived ``timeout`` (the group
    is killed then, so a session's background job cannot outlive the test)."""
    with subprocess.Popen(
        argv,
        cwd=workdir,
        env=_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            return None
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)  # anything the block left behind
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


def _run_python(block: Block, workdir: Path) -> Outcome:
    script = workdir / (block.file_name or "example.py")
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(block.text, encoding="utf-8")
    done = _run([sys.executable, str(script.relative_to(workdir))], workdir)
    if done is None:
        return Outcome((f"did not finish within {TIMEOUT:.0f} s",))
    problems = []
    if done.returncode != 0:
        problems.append(f"exited {done.returncode}\n--- stderr ---\n{done.stderr}")
    if block.expected_output is not None and not output_matches(block.expected_output, done.stdout):
        problems.append(
            f"printed something else\n--- shown ---\n{block.expected_output}\n"
            f"--- printed ---\n{done.stdout}\n--- stderr ---\n{done.stderr}"
        )
    return Outcome(tuple(problems))


def _run_session(block: Block, workdir: Path) -> Outcome:
    checked = _run_commands(session_commands(block), workdir)
    if isinstance(checked, Outcome):
        return checked
    return Outcome(tuple(problem for found in checked for problem in found))


def _run_commands(
    commands: list[Command], workdir: Path, timeout: float = TIMEOUT
) -> Outcome | list[list[str]]:
    """Run commands in one bash process: each one's problems, or an Outcome if it broke."""
    # After each command: its status after a marker line, then that status set
    # again, so that the next command's `$?` is the command's, as in a terminal.
    script = "exec 2>&1\n" + "".join(
        f'{command.line}\n_cairn_status=$?; printf "\\n{_MARK} %s\\n" "$_cairn_status"; '
        '(exit "$_cairn_status")\n'
        for command in commands
    )
    done = _run([_BASH, "-c", script], workdir, timeout)
    if done is None:
        return Outcome((f"did not finish within {timeout:.0f} s",))
    pieces = re.split(rf"\n?{_MARK} (\d+)\n", done.stdout)
    outputs, codes = pieces[0:-1:2], [int(code) for code in pieces[1::2]]
    if len(codes) != len(commands):
        return Outcome((f"the session stopped early:\n{done.stdout}",))
    return [
        _check_command(command, _KILLED.sub("Killed", printed), code)
        for command, printed, code in zip(commands, outputs, codes, strict=True)
    ]


def _check_command(command: Command, printed: str, code: int) -> list[str]:
    if command.expected is None:  # a ```sh line: it must succeed, its output is not shown
        if code != 0:
            return [f"$ {command.line}\nexited {code}:\n{printed}"]
        return []
    if not output_matches(command.expected, printed):
        shown = f"--- shown ---\n{command.expected}"
        return [f"$ {command.line}\n{shown}\n--- printed (exit {code}) ---\n{printed}"]
    return []
