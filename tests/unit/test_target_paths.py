"""A crash-test target naming a file that is not there says where it looked."""

from __future__ import annotations

from pathlib import Path

import pytest

from cairn.errors import ConfigurationError
from cairn.testing._targets import load_module


def test_a_missing_relative_file_names_the_directory_it_was_read_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``examples/review_apps.py`` run from another directory is refused with
    that directory named and the way out (a full path)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError) as refused:
        load_module("examples/review_apps.py")
    message = str(refused.value)
    assert f"a relative path is read from {tmp_path}" in message
    assert "give the file's full path" in message
