"""PartitionIndex, the in-memory hash -> bucket map of a dynamic-bucket partition, against a plain
dict placing one hash at a time: batches with repeated hashes, hashes seen in earlier batches,
buckets that fill up, and a delta small enough to be merged into the main arrays often."""

from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
from hypothesis import given, settings

from strata.index import bucket_assigner
from strata.index.bucket_assigner import PartitionIndex
from strata.manifest.index_manifest import IndexManifestEntry
from strata.manifest.manifest_entry import FileKind

HASHES = st.integers(-(2**31), 2**31 - 1) | st.integers(-20, 20)  # wide, and a narrow range that repeats
BATCHES = st.lists(st.lists(HASHES, min_size=1, max_size=40), min_size=1, max_size=12)


def _place(model: dict[int, int], counts: dict[int, int], h: int, target: int) -> int:
    """Paimon's rule for one new hash: the lowest bucket with room, else the lowest free id."""
    for bucket in sorted(counts):
        if counts[bucket] < target:
            break
    else:
        bucket = next(b for b in range(len(counts) + 1) if b not in counts)
    counts[bucket] = counts.get(bucket, 0) + 1
    model[h] = bucket
    return bucket


def _written(written: dict[int, list[int]], bucket: int, hashes: np.ndarray) -> IndexManifestEntry:
    """A write of a bucket's index file that keeps its content."""
    written[bucket] = hashes.tolist()
    return IndexManifestEntry(FileKind.ADD, b"p", bucket, "HASH", f"index-{bucket}", 4 * len(hashes), len(hashes))


@settings(max_examples=150, deadline=None)
@given(batches=BATCHES, target=st.integers(1, 30), delta_min=st.sampled_from([1, 4, 1 << 16]))
def test_assignment_equals_a_dict_placing_hashes_one_at_a_time(batches, target, delta_min):
    default = bucket_assigner._DELTA_MIN
    bucket_assigner._DELTA_MIN = delta_min  # 1 and 4: the delta merges into the main arrays at most batches
    try:
        _check(batches, target)
    finally:
        bucket_assigner._DELTA_MIN = default


def _check(batches: list[list[int]], target: int) -> None:
    index = PartitionIndex(b"p", [], lambda e: np.empty(0, np.int32), target, -1, "t")
    model: dict[int, int] = {}
    counts: dict[int, int] = {}
    for batch in batches:
        new = {h for h in batch if h not in model}
        expected = [model[h] if h in model else _place(model, counts, h, target) for h in batch]
        assert index.assign(np.array(batch, dtype=np.int32)).tolist() == expected
        written: dict[int, list[int]] = {}
        commits = index.prepare_commit(lambda bucket, hashes, written=written: _written(written, bucket, hashes))
        assert {b for b, _, _ in commits} == {model[h] for h in new}
        for bucket, _, claim in commits:  # a changed bucket's file: all its hashes, once each; its claim: the new ones
            assert sorted(written[bucket]) == sorted(h for h, b in model.items() if b == bucket)
            assert sorted(claim.new_hashes.tolist()) == sorted(h for h in new if model[h] == bucket)
