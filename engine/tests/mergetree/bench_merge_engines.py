"""Speed of the merge engines: 10 sorted runs of 100k rows (overlapping keys), merged at once and
streamed through merge_runs. Not a test; run it from the repository root with
`.venv/bin/python engine/tests/mergetree/bench_merge_engines.py`."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from strata.mergetree.merge_function import merge_function_for
from strata.mergetree.merge_reader import merge_runs
from strata.mergetree.sorting import sort_by_key

KEYS = ["_KEY_id"]
RUNS, ROWS, KEY_SPACE = 10, 100_000, 500_000

ENGINES = {
    "deduplicate": {},
    "deduplicate + sequence.field": {"sequence.field": "ts"},
    "first-row": {"merge-engine": "first-row"},
    "partial-update": {"merge-engine": "partial-update"},
    "partial-update + sequence group + sum/max": {
        "merge-engine": "partial-update", "fields.g.sequence-group": "v,s,d",
        "fields.v.aggregate-function": "sum", "fields.d.aggregate-function": "max"},
    "aggregation sum/max/min/last_non_null/listagg": {
        "merge-engine": "aggregation", "fields.v.aggregate-function": "sum", "fields.d.aggregate-function": "max",
        "fields.s.aggregate-function": "listagg", "fields.ts.aggregate-function": "last_non_null_value",
        "fields.g.aggregate-function": "min"},
    "aggregation numeric sum/max/min": {
        "merge-engine": "aggregation", "fields.v.aggregate-function": "sum", "fields.d.aggregate-function": "max",
        "fields.ts.aggregate-function": "min", "fields.g.aggregate-function": "sum"},
}


def make_runs(rng: np.random.Generator) -> list[pa.Table]:
    runs = []
    for r in range(RUNS):
        ids = np.sort(rng.choice(KEY_SPACE, ROWS, replace=False)).astype(np.int64)
        runs.append(pa.table({
            "_KEY_id": ids, "_SEQUENCE_NUMBER": np.arange(r * ROWS, (r + 1) * ROWS, dtype=np.int64),
            "_VALUE_KIND": pa.array(np.zeros(ROWS, np.int8)), "id": ids,
            "v": pa.array(rng.integers(-1000, 1000, ROWS), mask=rng.random(ROWS) < 0.2),
            "s": pa.array([f"s{i % 97}" for i in range(ROWS)]), "ts": rng.integers(0, 1000, ROWS),
            "g": rng.integers(0, 100, ROWS), "d": rng.random(ROWS)}))
    return runs


def batches(table: pa.Table, size: int = 65536) -> Iterator[pa.Table]:
    for batch in table.to_batches(size):
        yield pa.Table.from_batches([batch])


def main() -> None:
    runs = make_runs(np.random.default_rng(0))
    for name, options in ENGINES.items():
        mf = merge_function_for(options)
        start = time.perf_counter()
        combined = pa.concat_tables(runs)
        ordered = combined.take(sort_by_key(combined, KEYS, "_SEQUENCE_NUMBER"))
        sorted_at = time.perf_counter()
        merged = mf.merge(ordered, KEYS)
        merged_at = time.perf_counter()
        streamed = sum(t.num_rows for t in merge_runs([batches(r) for r in runs], KEYS, mf))
        streamed_at = time.perf_counter()
        assert streamed == merged.num_rows
        print(f"{name:48s} at once: sort {sorted_at - start:5.2f}s + merge {merged_at - sorted_at:5.2f}s | "
              f"merge_runs {streamed_at - merged_at:5.2f}s | {merged.num_rows} keys")


if __name__ == "__main__":
    main()
