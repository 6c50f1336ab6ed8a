"""``cairn ui`` without the ``ui`` extra says what to install; the rest of the CLI
does not need it; and binding beyond this machine still requires a token."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cairn import Cairn
from cairn.clock import FakeClock
from cairn.errors import ConfigurationError
from cairn.store import admin
from cairn.ui.server import DashboardServer, UIConfig

# Runs the CLI as if uvicorn were not installed (None in sys.modules: import fails).
WITHOUT_UVICORN = "import sys; sys.modules['uvicorn'] = None; from cairn.cli import main; main()"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_UVICORN, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_cairn_ui_without_the_extra_says_what_to_install(db_path: Path) -> None:
    """``cairn ui`` exits 2 with one line naming the missing package and the
    install command; no traceback."""
    done = _cli("ui", "--port", "0", "--store", f"sqlite:///{db_path}")
    assert done.returncode == 2
    assert "pip install 'cairn-durable[ui]'" in done.stderr
    assert "uvicorn" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_rest_of_the_cli_does_not_need_the_extra(app: Cairn) -> None:
    """Other commands work without the dashboard's libraries."""
    app.store  # noqa: B018 - opening it creates the store file
    done = _cli("tasks", "--store", app.store_url)
    assert done.returncode == 0, done.stderr


def test_binding_beyond_loopback_needs_a_token(app: Cairn, clock: FakeClock) -> None:
    """Binding 0.0.0.0 without a token is refused with a sentence saying what to
    do; with one it binds."""
    with pytest.raises(ConfigurationError, match="give a --token"):
        DashboardServer(("0.0.0.0", 0), UIConfig(admin(app.store), clock.now))  # noqa: S104
    config = UIConfig(admin(app.store), clock.now, token="s3cret")  # noqa: S106
    server = DashboardServer(("0.0.0.0", 0), config)  # noqa: S104
    server.server_close()
