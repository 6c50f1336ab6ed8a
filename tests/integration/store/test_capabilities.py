"""Each backend's declared capabilities: what the suite gates on is what the
store says of itself, and what it says holds."""

from __future__ import annotations

import pytest

from cairn.blobs import default_blobs_url
from tests.integration.store.conftest import Backend


def test_the_opened_store_declares_the_capabilities_the_suite_reads(
    store_backend: Backend,
) -> None:
    """The store the test's URL opens declares the capabilities the suite skips
    and branches by, so a capability gate follows the store's own declaration."""
    store = store_backend.open()
    try:
        assert store.capabilities == store_backend.capabilities
    finally:
        store.close()


def test_a_store_keeps_blobs_beside_it_by_default_exactly_when_it_is_file_based(
    store_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no blob store configured, blobs go beside the store's file on a
    file-based backend, and nowhere by default on any other."""
    monkeypatch.delenv("CAIRN_BLOBS", raising=False)
    beside = default_blobs_url(store_backend.url)
    assert (beside is not None) == store_backend.capabilities.file_based
