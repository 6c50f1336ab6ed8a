"""``cairn ui``: the web dashboard of the store (the ``ui`` extra: Starlette, uvicorn, Jinja2)."""

from __future__ import annotations

from typing import Annotated

import typer

from cairn.clock import SystemClock
from cairn.errors import ConfigurationError
from cairn.observe._time import parse_duration

from ._consoles import fail
from ._store_option import DEFAULT_URL, StoreOption, opened_store

_Token = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="CAIRN_UI_TOKEN",
        help="Required on every request; needed to bind beyond 127.0.0.1.",
    ),
]
_TokenName = Annotated[
    str | None,
    typer.Option(
        "--token-name",
        envvar="CAIRN_UI_TOKEN_NAME",
        metavar="NAME",
        help="Who the dashboard's actions are written to the audit trail as "
        "(ui:NAME); default: the user running it.",
    ),
]
_AllowHost = Annotated[
    list[str] | None,
    typer.Option(
        "--allow-host",
        metavar="NAME",
        help="Also answer requests for this Host name (NAME or NAME:PORT); repeatable. "
        "Others get 421, against DNS rebinding.",
    ),
]


def ui_command(
    host: Annotated[str, typer.Option("--host", help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port (0: any).")] = 8484,
    token: _Token = None,
    token_name: _TokenName = None,
    allow_host: _AllowHost = None,
    stall_after: Annotated[
        str, typer.Option("--stall-after", metavar="DURATION", help="Stall threshold.")
    ] = "15m",
    store: StoreOption = DEFAULT_URL,
) -> None:
    """Serve a dashboard: batches with progress, rate and ETA; tasks with search,
    filters and paging; a task's steps, errors and timeline; conversations,
    operations, stalls and metrics; live updates. Buttons: retry, cancel, signal,
    resolve an operation in doubt, rerun from a step; bulk retry, cancel and
    rerun on a filter, each confirmed first; every action in the audit trail."""
    try:
        # The dashboard's libraries are an extra: import them only when asked for.
        from cairn.ui.server import DashboardServer, UIConfig
    except ImportError as exc:
        fail(
            f"the dashboard needs the ui extra ({exc.name or exc} is not installed): "
            "pip install 'cairn-durable[ui]'"
        )
    try:
        threshold = parse_duration(stall_after)
    except ValueError as exc:
        fail(str(exc))
    with opened_store(store) as opened:
        config = UIConfig(
            opened,
            SystemClock().now,
            token=token,
            stall_after=threshold,
            allow_hosts=tuple(allow_host or ()),
            actor_name=token_name or "",
        )
        try:
            server = DashboardServer((host, port), config)
        except (ConfigurationError, OSError) as exc:
            fail(f"cannot serve the dashboard at {host}:{port}: {exc}")
        typer.echo(f"cairn dashboard at {server.url}/", err=True)
        try:
            server.serve_forever()  # until Ctrl-C or SIGTERM
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
