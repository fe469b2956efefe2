"""Deterministic benchmark data (numpy, seeded): the same generator feeds every workload.

Columns: ``id BIGINT`` (the key), ``k2 INT``, ``v1 DOUBLE``, ``v2 STRING`` (16 random letters),
``ts TIMESTAMP(6)`` and ``dt STRING``, the partition, with 4 values. ``dt`` is a function of
``id`` (``id % 4``), so an update of a key always lands in the partition of that key.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

SEED = 20240601
DTS = ("2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04")
STRING_WIDTH = 16
TS_BASE_US = 1_704_067_200_000_000  # 2024-01-01T00:00:00
TS_SPAN_US = 30 * 86_400_000_000

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("k2", pa.int32()),
    pa.field("v1", pa.float64()),
    pa.field("v2", pa.string()),
    pa.field("ts", pa.timestamp("us")),
    pa.field("dt", pa.string(), nullable=False),
])

# Sizes at scale 1.0
W1_ROWS = 2_000_000
W2_BASE_ROWS = 1_000_000
W2_COMMIT_ROWS = 100_000
COMMITS = 10
W4_RANGE = 1000


def scaled(n: int, scale: float, minimum: int = 10) -> int:
    return max(minimum, round(n * scale))


def rows_for(ids: np.ndarray, rng: np.random.Generator) -> pa.Table:
    """A table with the given ids and fresh random values."""
    n = len(ids)
    ids = np.asarray(ids, dtype=np.int64)
    k2 = rng.integers(0, 1_000_000, n, dtype=np.int32)
    v1 = rng.random(n) * 1000.0
    letters = rng.integers(ord("a"), ord("z") + 1, size=n * STRING_WIDTH, dtype=np.uint8)
    offsets = np.arange(0, STRING_WIDTH * (n + 1), STRING_WIDTH, dtype=np.int64)
    v2 = pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(letters)).cast(pa.string())
    ts = pa.array(TS_BASE_US + rng.integers(0, TS_SPAN_US, n, dtype=np.int64), pa.int64()).view(
        pa.timestamp("us"))
    dt = pa.array(DTS).take(pa.array(ids % len(DTS)))
    return pa.Table.from_arrays([pa.array(ids), pa.array(k2), pa.array(v1), v2, ts, dt], schema=SCHEMA)


def w1_chunks(scale: float) -> list[pa.Table]:
    """W1: COMMITS chunks of new rows with consecutive ids."""
    rng = np.random.default_rng(SEED + 1)
    per = scaled(W1_ROWS, scale) // COMMITS
    return [rows_for(np.arange(i * per, (i + 1) * per), rng) for i in range(COMMITS)]


@dataclass
class UpsertData:
    base: pa.Table
    commits: list[pa.Table]

    @property
    def max_id(self) -> int:
        return max(int(self.base["id"].to_numpy().max()),
                   *(int(c["id"].to_numpy().max()) for c in self.commits))


def w2_data(scale: float, commits: int = COMMITS) -> UpsertData:
    """W2: a base of rows, then `commits` commits, each half updates of existing keys, half new
    keys (the first COMMITS are the same whatever `commits` is)."""
    rng = np.random.default_rng(SEED + 2)
    n0 = scaled(W2_BASE_ROWS, scale)
    per = scaled(W2_COMMIT_ROWS, scale, minimum=2)
    base = rows_for(np.arange(n0), rng)
    next_id = n0
    chunks = []
    for _ in range(commits):
        updates = per // 2
        updated = rng.choice(next_id, size=updates, replace=False)
        new = np.arange(next_id, next_id + (per - updates))
        ids = np.concatenate([updated, new])
        rng.shuffle(ids)
        chunks.append(rows_for(ids, rng))
        next_id += per - updates
    return UpsertData(base, chunks)


def w2_max_id(scale: float) -> int:
    """The largest id w2_data(scale) generates."""
    n0 = scaled(W2_BASE_ROWS, scale)
    per = scaled(W2_COMMIT_ROWS, scale, minimum=2)
    return n0 + COMMITS * (per - per // 2) - 1


def final_rows(data: UpsertData) -> pa.Table:
    """The latest version of every key, ordered by the primary key (dt, id)."""
    everything = pa.concat_tables([data.base, *data.commits]).combine_chunks()
    ids = everything["id"].to_numpy()
    unique_ids, first_from_end = np.unique(ids[::-1], return_index=True)
    last = len(ids) - 1 - first_from_end  # row of each id's latest version, ordered by id
    order = np.lexsort((unique_ids, unique_ids % len(DTS)))
    return everything.take(pa.array(last[order]))


def w4_ranges(max_id: int, runs: int) -> list[int]:
    """Lower bounds x of the W4 queries `id BETWEEN x AND x + W4_RANGE`."""
    rng = np.random.default_rng(SEED + 4)
    high = max(1, max_id - W4_RANGE)
    return [int(x) for x in rng.integers(0, high, runs)]


def digest(table: pa.Table) -> list[int]:
    """An order-independent fingerprint of (id, k2) pairs: row count and two wrapping sums."""
    ids = table["id"].to_numpy().astype(np.uint64)
    k2 = table["k2"].fill_null(0).to_numpy().astype(np.uint64)
    with np.errstate(over="ignore"):
        mixed = ids * np.uint64(1_000_003) + k2 * np.uint64(7_919)
        mixed ^= mixed >> np.uint64(29)
        return [table.num_rows, int(ids.sum(dtype=np.uint64)), int(mixed.sum(dtype=np.uint64))]
