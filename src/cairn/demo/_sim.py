"""Deterministic chance for the simulated services: same inputs, same answer."""

from __future__ import annotations

import hashlib
import time


def fraction(*parts: str) -> float:
    """A number in [0, 1) fixed by ``parts`` (a seeded hash, not ``random``)."""
    digest = hashlib.sha256("/".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def pick(options: tuple[str, ...], *parts: str) -> str:
    """One of ``options``, fixed by ``parts``."""
    return options[int(fraction(*parts) * len(options))]


def latency(low_ms: int, high_ms: int, *parts: str) -> None:
    """Take as long as a real call would: between ``low_ms`` and ``high_ms``."""
    time.sleep((low_ms + (high_ms - low_ms) * fraction("latency", *parts)) / 1000)
