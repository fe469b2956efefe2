"""Checks shared by the bench tests."""

from __future__ import annotations

import pytest


def assert_fastest_of_rounds(row: dict, rounds: int) -> None:
    """A row of alternating rounds (strata.bench.spec.alternating): each side's fastest round
    counts, and the ratio of the median rounds is reported beside it."""
    details = row["details"]
    assert details["rounds"] == rounds
    mine, ref = details["seconds_by_round"], details["reference_seconds_by_round"]
    assert len(mine) == len(ref) == rounds and min(mine) > 0 and min(ref) > 0
    assert row["seconds"] == pytest.approx(min(mine), abs=1e-3)
    assert row["reference_seconds"] == pytest.approx(min(ref), abs=1e-3)
    assert row["ratio"] == pytest.approx(min(ref) / min(mine), rel=1e-2)
    assert row["median_ratio"] == pytest.approx(sorted(ref)[rounds // 2] / sorted(mine)[rounds // 2], rel=1e-2)
