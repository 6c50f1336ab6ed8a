"""The lowest-versions files .ci/run installs pin what pyproject.toml's extras allow.

.ci/run runs the provider and framework tests a second time on the lowest
version each model-SDK extra allows (.ci/lowest-providers.txt,
.ci/lowest-frameworks.txt). A pin that drifts from its extra's lower bound
would test a version no user can be held to, and an extra left out would not
be tested at its floor at all.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FILES = (ROOT / ".ci" / "lowest-providers.txt", ROOT / ".ci" / "lowest-frameworks.txt")
# The extras whose floors are tested: the model SDKs, what redaction runs
# through, and the PostgreSQL driver.
SDK_EXTRAS = ("openai", "anthropic", "openai-agents", "pydantic-ai", "notify", "otel", "postgres")
_REQUIREMENT = re.compile(r"^([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?\s*(==|>=)\s*([0-9][^\s;#]*)")


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def _floors() -> dict[str, str]:
    """Each package of the SDK extras and its lower bound."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    floors: dict[str, str] = {}
    for extra in SDK_EXTRAS:
        for requirement in extras[extra]:
            match = _REQUIREMENT.match(requirement)
            assert match is not None, requirement
            floors[_name(match[1])] = match[3]
    return floors


def _pins() -> list[tuple[str, str, bool]]:
    """(package, version, has a comment saying why) for each == line of the files."""
    pins = []
    for path in FILES:
        for line in path.read_text().splitlines():
            match = _REQUIREMENT.match(line)
            if match is not None and match[2] == "==":
                pins.append((_name(match[1]), match[3], "#" in line))
    return pins


def _version(text: str) -> tuple[int, ...]:
    """A release's numbers, trailing zeros left out (1.40 is 1.40.0)."""
    parts = [int(part) for part in re.findall(r"\d+", text)]
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def test_each_pin_is_its_extras_lower_bound() -> None:
    """A pinned package of an SDK extra is pinned at that extra's lower bound, or
    above it with a comment saying why (a framework that asks for more)."""
    floors = _floors()
    for package, version, explained in _pins():
        floor = floors.get(package)
        if floor is None:
            continue
        if explained:
            assert _version(version) >= _version(floor), (package, version, floor)
        else:
            assert _version(version) == _version(floor), f"{package}=={version}; floor {floor}"


def test_every_sdk_extra_is_tested_at_its_floor() -> None:
    """Every package of the SDK extras is pinned in one of the files."""
    pinned = {package for package, _, _ in _pins()}
    assert not set(_floors()) - pinned, set(_floors()) - pinned
