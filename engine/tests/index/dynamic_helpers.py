"""Helpers for dynamic-bucket tests: where every key sits, and what the hash index says."""

from __future__ import annotations

import io
from collections import defaultdict

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import strata
from strata.format import binary_row
from strata.format.bucket import hash_rows
from strata.index.hash_index import read_hashes
from strata.manifest.index_manifest import INDEX_TYPE_HASH


def key_buckets(table: strata.Table) -> dict[tuple[bytes, tuple], set[int]]:
    """(partition, trimmed key) -> the buckets whose live data files hold it (deletes included)."""
    keys = [f"_KEY_{k}" for k in table.schema.trimmed_primary_keys]
    where: dict[tuple[bytes, tuple], set[int]] = defaultdict(set)
    for split in table.new_scan().plan().splits:
        for f in split.files:
            data = pq.read_table(io.BytesIO(table.file_io.read_bytes(f"{split.bucket_path}/{f.file_name}")),
                                 columns=keys)
            for key in zip(*(data.column(k).to_pylist() for k in keys), strict=True):
                where[(split.partition, key)].add(split.bucket)
    return where


def hash_index(table: strata.Table) -> dict[tuple[bytes, int], np.ndarray]:
    """(partition, bucket) -> the hashes of the bucket's live HASH index file."""
    snapshot = table.snapshot_manager.latest()
    entries = table.manifest_store.read_index_manifest(snapshot.index_manifest if snapshot else None)
    out = {}
    for e in entries:
        if e.index_type == INDEX_TYPE_HASH:
            assert (e.partition, e.bucket) not in out, f"two hash index files for bucket {e.bucket}"
            hashes = read_hashes(table.file_io, table.path, e)
            assert len(hashes) == e.row_count
            out[(e.partition, e.bucket)] = hashes
    return out


def check_placement(table: strata.Table) -> dict[tuple[bytes, tuple], int]:
    """Assert Paimon's dynamic-bucket invariants; (partition, key) -> bucket. Every key sits in one
    bucket, and its hash (BinaryRow hash of the trimmed key) is in that bucket's index file only."""
    placed = key_buckets(table)
    twice = {k: b for k, b in placed.items() if len(b) > 1}
    assert not twice, f"keys in two buckets: {list(twice.items())[:5]}"
    index = hash_index(table)
    types = [f.type.to_arrow() for f in table.schema.key_fields()]
    by_bucket: dict[tuple[bytes, int], list[tuple]] = defaultdict(list)
    for (partition, key), buckets in placed.items():
        by_bucket[(partition, next(iter(buckets)))].append(key)
    for (partition, bucket), keys in by_bucket.items():
        columns = [pa.array([k[i] for k in keys], t) for i, t in enumerate(types)]
        hashes = hash_rows(columns)
        assert np.isin(hashes, index[(partition, bucket)]).all(), f"unindexed keys in bucket {bucket}"
        for (other_partition, other_bucket), other in index.items():
            if other_partition == partition and other_bucket != bucket:
                assert not np.isin(hashes, other).any(), f"keys of bucket {bucket} indexed in {other_bucket}"
    return {k: next(iter(b)) for k, b in placed.items()}


def partition_row(value: str) -> bytes:
    return binary_row.serialize([value], [pa.string()])
