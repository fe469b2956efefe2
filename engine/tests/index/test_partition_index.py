"""PartitionIndex, the in-memory hash -> bucket map of a dynamic-bucket partition, against a plain
dict placing one hash at a time: batches with repeated hashes, hashes seen in earlier batches,
buckets that fill up, and a hash map small enough to collide and grow at most batches. The hash
map itself against a dict, too. Each with the map's compiled probing (numba) and its numpy one."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from strata.index import hash_map
from strata.index.bucket_assigner import PartitionIndex
from strata.index.hash_map import HashBucketMap
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


PROBING = ["compiled", "numpy"]


@contextlib.contextmanager
def _map_config(probing: str, min_slots: int) -> Iterator[None]:
    """Maps made inside start with `min_slots` slots and probe as `probing` says."""
    if probing == "compiled":
        assert hash_map.compiled_kernels() is not None, "numba (the `numba` extra) is not installed"
    saved = hash_map.USE_COMPILED, hash_map.MIN_SLOTS
    hash_map.USE_COMPILED, hash_map.MIN_SLOTS = probing == "compiled", min_slots
    try:
        yield
    finally:
        hash_map.USE_COMPILED, hash_map.MIN_SLOTS = saved


@pytest.mark.parametrize("probing", PROBING)
@settings(max_examples=150, deadline=None)
@given(batches=BATCHES, target=st.integers(1, 30), min_slots=st.sampled_from([2, 8, 1024]))
def test_assignment_equals_a_dict_placing_hashes_one_at_a_time(probing, batches, target, min_slots):
    with _map_config(probing, min_slots):  # 2 and 8: probes wrap around the table, which grows at most batches
        _check(batches, target)


@pytest.mark.parametrize("probing", PROBING)
@settings(max_examples=150, deadline=None)
@given(batches=BATCHES, min_slots=st.sampled_from([2, 4, 1024]))
def test_hash_map_equals_a_dict(probing, batches, min_slots):
    model: dict[int, int] = {}
    with _map_config(probing, min_slots):
        index = HashBucketMap()
        for i, batch in enumerate(batches):
            keys = np.array(batch, dtype=np.int32)
            assert index.get(keys).tolist() == [model.get(h, -1) for h in batch]
            new = list(dict.fromkeys(h for h in batch if h not in model))
            values = [(i * 7 + j) % 32767 for j in range(len(new))]
            index.put(np.array(new, dtype=np.int32), np.array(values, dtype=np.int16))
            model.update(zip(new, values, strict=True))
            assert index.size == len(model) and 2 * index.size <= len(index.values)
            assert index.get(keys).tolist() == [model[h] for h in batch]


@pytest.mark.parametrize("probing", PROBING)
@settings(max_examples=150, deadline=None)
@given(batches=BATCHES, min_slots=st.sampled_from([2, 4, 1024]))
def test_hash_map_assign_equals_a_dict(probing, batches, min_slots):
    """assign: known keys answer their bucket, new ones get place()'s answers in order of first
    appearance (one per distinct key), and stay."""
    model: dict[int, int] = {}
    with _map_config(probing, min_slots):
        index = HashBucketMap()
        for i, batch in enumerate(batches):
            new = list(dict.fromkeys(h for h in batch if h not in model))
            values = [(i * 7 + j) % 32767 for j in range(len(new))]
            asked: list[int] = []
            buckets, added, placed = index.assign(
                np.array(batch, dtype=np.int32), lambda n, v=values, a=asked: a.append(n) or np.array(v, np.int64))
            model.update(zip(new, values, strict=True))
            assert asked == [len(new)] and added.tolist() == new and placed.tolist() == values
            assert buckets.tolist() == [model[h] for h in batch]
            assert index.size == len(model) and 2 * index.size <= len(index.values)
            assert index.get(np.array(list(model), dtype=np.int32)).tolist() == list(model.values())


@pytest.mark.parametrize("probing", PROBING)
def test_hash_map_assign_whose_placement_fails_leaves_the_map_as_it_was(probing):
    def refuse(count: int) -> np.ndarray:
        raise OverflowError(f"no room for {count}")

    with _map_config(probing, 8):  # a small table: the new keys take slots in the known keys' probe sequences
        index = HashBucketMap()
        index.put(np.arange(3, dtype=np.int32), np.array([5, 6, 7], np.int16))
        with pytest.raises(OverflowError, match="no room for 4"):
            index.assign(np.array([9, 0, 10, 9, 11, 12], np.int32), refuse)
        assert index.size == 3 and (index.values >= 0).sum() == 3
        assert index.get(np.array([0, 1, 2, 9, 10, 11, 12], np.int32)).tolist() == [5, 6, 7, -1, -1, -1, -1]
        buckets, added, _ = index.assign(np.array([12, 1], np.int32), lambda n: np.full(n, 4))
        assert buckets.tolist() == [4, 6] and added.tolist() == [12]


@pytest.mark.parametrize("probing", PROBING)
def test_hash_map_grows_for_the_new_keys_of_a_batch_not_for_its_rows(probing):
    with _map_config(probing, 1024):
        index = HashBucketMap()
        index.put(np.arange(300, dtype=np.int32), np.zeros(300, np.int16))
        known = np.tile(np.arange(300, dtype=np.int32), 100)  # 30k rows, every key known
        assert index.assign(known, lambda n: np.full(n, 1))[0].tolist() == [0] * len(known)
        assert len(index.values) == 1024
        batch = np.concatenate([known, np.repeat(np.arange(300, 600, dtype=np.int32), 10)])  # 300 new, ten times
        assert index.assign(batch, lambda n: np.full(n, 1))[0][-3000:].tolist() == [1] * 3000
        assert index.size == 600 and len(index.values) == 2048


def test_an_index_read_from_files_holding_one_hash_twice_keeps_the_first_files_bucket():
    """Files of other writers may overlap (a conflict Paimon's writers do not check): each file is
    kept as it is, and the key goes where the first file says, as every lookup before did."""
    files = {3: np.array([7, 1, 9], np.int32), 5: np.array([9, 4], np.int32)}
    entries = [IndexManifestEntry(FileKind.ADD, b"p", b, "HASH", f"index-{b}", 12, len(h)) for b, h in files.items()]
    index = PartitionIndex(b"p", entries, lambda e: files[e.bucket], 10, -1, "t")
    assert index.assign(np.array([9, 4, 7, 2], np.int32)).tolist() == [3, 5, 3, 3]
    assert sorted(index.bucket_hashes(5).tolist()) == [4, 9] and index.counts == {3: 4, 5: 2}


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
