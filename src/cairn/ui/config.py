"""What the dashboard's pages need to know, set once when the server starts."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from cairn.admin.audit import Actor, os_user
from cairn.store.admin import AdminStore

PAGE_SIZE = 50


@dataclass
class UIConfig:
    """The store, the time, the token, the stall threshold, the Host names
    answered besides the loopback ones and the bound address, the form secret,
    how often a live page refreshes, and the name its actions are written to
    the audit trail under (the token's name; empty: the OS user running it)."""

    store: AdminStore
    now: Callable[[], datetime]
    token: str | None = None
    stall_after: float = 15 * 60.0
    page_size: int = PAGE_SIZE
    csrf: str = ""
    allow_hosts: tuple[str, ...] = ()
    poll_seconds: float = 2.0
    actor_name: str = ""

    def actor(self) -> Actor:
        """Who the dashboard's actions are written to the audit trail as: ``ui:NAME``."""
        return Actor("ui", self.actor_name or os_user())


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
