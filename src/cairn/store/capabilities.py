"""What a store backend can do, declared once per backend.

The engine, the CLI and the conformance tests read this instead of asking which
backend a store is: a new backend states its abilities here and the shared
tests gate on them (``tests/integration/store/``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend can do, read by the engine and the conformance tests."""

    # Several processes on several hosts may share the store.
    multi_host: bool
    # Writers in several processes on one host may share the store.
    multi_process: bool
    # The store is one file on this machine: with no blob store configured, its
    # blobs go to a directory beside the file, and the CLI checks the file is a
    # cairn store before opening it.
    file_based: bool
