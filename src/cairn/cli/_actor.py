"""Who the command's actions are written to the audit trail as: ``cli:USER``."""

from __future__ import annotations

from cairn.admin.audit import Actor, os_user


def cli_actor() -> Actor:
    """The OS user running ``cairn``, through the CLI."""
    return Actor("cli", os_user())
