"""Released migrations are frozen: a store made by an earlier cairn was built by
exactly these files, so editing one would leave that store with a schema no
migration describes. A schema change is a new numbered file."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import cairn.store

MIGRATIONS = Path(cairn.store.__file__).parent / "migrations"

# sha256 of every released migration file. Add a line when a new migration is
# released; never change one.
RELEASED = {
    "postgres/0001_initial.sql": (
        "b29d526c568413741e9bb0582315185991433faa8b2695cd43aa3835659f3fc7"
    ),
    "postgres/0002_claims_and_late_outcomes.sql": (
        "2bbf972faeb6082bf4d7edecb385eca415caa602db0448e7ee7b15e754c4ebf1"
    ),
    "postgres/0003_fingerprints_and_versions.sql": (
        "517422bfc0a128cbf8006fc5bb0010775ce4dc332a80d5ccfc207a34ee8484ac"
    ),
    "postgres/0004_tasks_by_name_and_parent.sql": (
        "9eb03668ba558b4560e1c5de3aee726740f4da60cc2ebab57df736725b0e17fb"
    ),
    "postgres/0005_reruns_and_audit.sql": (
        "288180c7087001c6b893f6f190e7e5a43e417483b113bc3b02a2b2e712b0bcfe"
    ),
    "postgres/0006_entry_checksums.sql": (
        "dc7b59a2b8326191c6db6156c04e0fc50f7116457fa5bf050d3e3b3751b8f348"
    ),
    "postgres/0007_token_limits_and_budgets.sql": (
        "e926c88c5d14b6a7913a6dea2395c1cfa1dc612fe3ce18a4d7af144c8f49d23c"
    ),
    "postgres/0008_task_priority.sql": (
        "c3bbcedb18413676f669120c596840097b578487536c01cf5ad9a7a80dfcc403"
    ),
    "postgres/0009_in_flight_logs_and_hours.sql": (
        "9c2d039b2e41441a1eccd02e99cf3130bb2909468a08a16e2da6c5f3a5fdd50b"
    ),
    "postgres/0010_value_checksums.sql": (
        "e9681e69a1b63c9c7138dc043c261073daacbffbfe6118db6919924071520f69"
    ),
    "postgres/0011_search_trigrams.sql": (
        "e2c4b0b519e93468e8f46247024f78c0f0de435fae4761558d5fb8d36d9c65c1"
    ),
    "postgres/0012_fair_claims.sql": (
        "45d2b344d38c17bcc9403ed693d1f1dfc61e28d33f2a3e3f4a16c83f8b155465"
    ),
    "postgres/0013_debounce_and_singleton.sql": (
        "c8d02e2582c7aa40e65c145f1def0c279fa4e86a86fd94d0eb217b9aca8698e3"
    ),
    "sqlite/0001_initial.sql": ("349d82616b1eb61253e11592a348213d2e256fe6e5d4e5626d4c7a3b9fe8a862"),
    "sqlite/0002_claims_and_late_outcomes.sql": (
        "47640a9a877925cb04764c7c792a3d808a19c7d827ca7904bb47b04c645fe54e"
    ),
    "sqlite/0003_fingerprints_and_versions.sql": (
        "d7dd4d1e980b18d5cc02c1c88b7c091117e9fea723edbc61770db532dc4079cd"
    ),
    "sqlite/0004_tasks_by_name_and_parent.sql": (
        "08fc13b2bc4c2cf1111ffeedaec9f620f890d0444436afc8b499e3903534f0ed"
    ),
    "sqlite/0005_reruns_and_audit.sql": (
        "60c0f56a8593dcfbc1f88295af1cc3ca07bcacdcea2cfeb735d07b6bd6a21d1d"
    ),
    "sqlite/0006_entry_checksums.sql": (
        "b79fb681e3d599a8c18e45b37e07861ca2eaa516889e7e4be80dce2ddb70fc89"
    ),
    "sqlite/0007_token_limits_and_budgets.sql": (
        "b79538eec684cf08b803d631e770e7f33a1ce0960ca4a79ce0a96109004049d6"
    ),
    "sqlite/0008_task_priority.sql": (
        "c3bbcedb18413676f669120c596840097b578487536c01cf5ad9a7a80dfcc403"
    ),
    "sqlite/0009_in_flight_logs_and_hours.sql": (
        "cd39eb9480757b575054f69688c8b386aae87d326a103da4bf29fa09825b5fbe"
    ),
    "sqlite/0010_value_checksums.sql": (
        "fc57c2a502607627831bb868d1c298e2bb6361609257b50140179756fde39ced"
    ),
    "sqlite/0011_search_trigrams.sql": (
        "19ae92883babc1512ef445793f3c9344281318777ce5cd3b49753da846047801"
    ),
    "sqlite/0012_fair_claims.sql": (
        "45d2b344d38c17bcc9403ed693d1f1dfc61e28d33f2a3e3f4a16c83f8b155465"
    ),
    "sqlite/0013_debounce_and_singleton.sql": (
        "652e689cb91cfa8cd36446dae452cd531f85b1a9b0a1ded4961ac54615728839"
    ),
}


@pytest.mark.parametrize("name", sorted(RELEASED))
def test_a_released_migration_is_never_edited(name: str) -> None:
    """Each released migration file exists and its bytes hash to the recorded
    sha256; the failure says to add a new numbered file instead."""
    path = MIGRATIONS / name
    assert path.is_file(), f"released migration {name} is gone; it must stay as released"
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest == RELEASED[name], (
        f"{name} was edited (sha256 {digest}, released as {RELEASED[name]}). Stores "
        "made by earlier cairns were built by the released file: restore it, and add "
        "the change as a new numbered file (e.g. 0003_<what>.sql) for every backend."
    )


@pytest.mark.parametrize("backend", ["postgres", "sqlite"])
def test_every_migration_of_every_backend_is_released(backend: str) -> None:
    """The table lists every migration file of each backend (1 to 3, which the
    schema-1 fixture and the upgrade tests are built on, and each one after),
    so no file, of either backend, can drop out of the check or escape it."""
    released = sorted(name.split("/")[1] for name in RELEASED if name.startswith(backend))
    assert [name[:4] for name in released[:3]] == ["0001", "0002", "0003"]
    files = sorted(p.name for p in (MIGRATIONS / backend).glob("*.sql"))
    assert files == released, "add the new migration's sha256 to RELEASED"
