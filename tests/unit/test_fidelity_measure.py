"""Fidelity's arithmetic: the sample of decision points, the intervals, the verdict,
and the errors that replace a meaningless 100%."""

from __future__ import annotations

import json

import pytest

from cairn.agent.fidelity import FidelityReport, NothingToProbe, Rate, fidelity
from cairn.agent.fidelity_points import stratified
from cairn.agent.handoff import archive_part
from cairn.blobs.in_store import hashes_in
from cairn.blobs.ref import BlobRef


def test_every_point_is_probed_up_to_the_cap() -> None:
    """Under the cap every candidate is chosen, in order."""
    candidates = [(p, 1 + p // 10) for p in range(0, 40, 2)]
    assert stratified(candidates, 20, seed=0) == [p for p, _ in candidates]


def test_beyond_the_cap_each_stratum_gets_its_share_of_a_seeded_sample() -> None:
    """30 points in a stratum of 20 and one of 10, capped at 6: 4 and 2 of them,
    the same ones for the same seed, other ones for another seed."""
    candidates = [(p, 1 if p < 20 else 2) for p in range(30)]
    chosen = stratified(candidates, 6, seed=1)
    assert len(chosen) == 6
    assert sum(p < 20 for p in chosen) == 4
    assert stratified(candidates, 6, seed=1) == chosen
    assert any(stratified(candidates, 6, seed=s) != chosen for s in range(2, 6))
    with pytest.raises(ValueError, match="above 0"):
        stratified(candidates, 0, seed=1)


def test_wilson_intervals() -> None:
    """The 95% Wilson score interval, against published values."""
    assert Rate(0, 10).interval == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert Rate(10, 10).interval == pytest.approx((0.7225, 1.0), abs=1e-4)
    assert Rate(5, 10).interval == pytest.approx((0.2366, 0.7634), abs=1e-4)


def test_the_verdict_is_below_only_when_the_whole_interval_is_under_the_band() -> None:
    """Against a floor of 20/20 (band 83.9%-100%): 5/20 is below it; 16/20, whose
    interval reaches into the band, is within; without a baseline, no verdict."""
    floor = Rate(20, 20)
    assert FidelityReport(20, 5, [], [], floor).verdict == "below the noise floor"
    assert FidelityReport(20, 16, [], [], floor).verdict == "within the noise floor"
    assert FidelityReport(20, 20, [], []).verdict == "no baseline"


def test_nothing_to_probe_is_an_error_not_a_perfect_score() -> None:
    """A history never over the threshold has no point after a compaction: an
    error saying so, and the decision function is never asked; probes=0 too."""
    asked: list[object] = []
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    with pytest.raises(NothingToProbe, match="no model turn came after a compaction"):
        fidelity(history, None, asked.append)
    long = history * 200
    with pytest.raises(ValueError, match="probes must be above 0"):
        fidelity(long, None, asked.append, 0, threshold=100, keep_tail=50)
    assert asked == []


def test_a_reference_inside_a_messages_meta_is_found() -> None:
    """The export, backup and gc see a blob named inside a JSON meta (a handoff's
    archive), quotes escaped as JSON writes them."""
    ref = BlobRef("ab" * 32, 10, "file:///tmp/x").text()
    meta = json.dumps({"handoff": {"archive": {"blob": ref, "rows": 3}}})
    assert hashes_in([meta, ref, "plain"]) == {"ab" * 32}


def test_archive_modes() -> None:
    """Inline puts the rows in the document; blob needs a blob store; anything
    else is refused by name."""
    assert archive_part([{"idx": 0}], "inline", None) == {"rows": [{"idx": 0}]}
    assert archive_part([], None, None) is None
    with pytest.raises(ValueError, match="needs a blob store"):
        archive_part([], "blob", None)
    with pytest.raises(ValueError, match="'inline', 'blob' or None"):
        archive_part([], "zip", None)
    written: list[str] = []

    def offload(text: str) -> str:
        written.append(text)
        return "!blob:x"

    part = archive_part([{"idx": 0}], "blob", offload)
    assert part == {"blob": "!blob:x", "rows": 1}
    assert [json.loads(text) for text in written] == [{"rows": [{"idx": 0}]}]
