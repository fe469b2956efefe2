"""Commit cost of the `lookup` changelog producer, an extension of ``strata.bench`` (see
strata.bench.spec).

LOOKUP_COMMIT   a primary-key table with ``changelog-producer=lookup`` and one bucket holds a base
                of 1,000,000 rows (fully compacted); then LOOKUP_COMMITS commits of 10,000 upserts
                each (half updates of existing keys, half new keys) go through one writer. The
                value is the wall time of the last commit (write + prepare_commit + commit), which
                must not grow with the table: the commit compacts only the new level-0 data
                and looks the previous values up, instead of rewriting the bucket.
                reference: pyarrow.parquet.write_table of the same 10,000 rows.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import strata
from strata.bench.spec import PartResult, Target, Workload
from strata.bench.workloads import Timer, _fresh, _warm_up

LOOKUP_COMMITS = 20
COMMIT_ROWS = 10_000
BASE_ROWS = 1_000_000
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.int64()),
                    pa.field("name", pa.string())])


def _rows(ids: np.ndarray, rng: np.random.Generator) -> pa.Table:
    values = rng.integers(0, 1_000_000, len(ids))
    return pa.table({"id": ids, "v": values, "name": pa.array(np.char.add("n", values.astype(str)))},
                    schema=SCHEMA)


def _commits(base_rows: int, seed: int = 7) -> list[pa.Table]:
    rng = np.random.default_rng(seed)
    chunks, next_id = [], base_rows
    for _ in range(LOOKUP_COMMITS):
        updates = rng.choice(base_rows, COMMIT_ROWS // 2, replace=False)
        inserts = np.arange(next_id, next_id + COMMIT_ROWS - len(updates))
        next_id += len(inserts)
        chunks.append(_rows(np.concatenate([updates, inserts]), rng))
    return chunks


def commit_times(work_dir: str, scale: float) -> dict[str, Any]:
    """Build the base, then time each upsert commit (wall and CPU)."""
    base_rows = max(int(BASE_ROWS * scale), COMMIT_ROWS)
    catalog = strata.load_catalog(_fresh(f"{work_dir}/lookup-commit"))
    catalog.create_database("bench")
    table = catalog.create_table("bench.lookup", SCHEMA, primary_keys=["id"],
                                 options={"bucket": "1", "changelog-producer": "lookup"})
    table.write(_rows(np.arange(base_rows), np.random.default_rng(1)))
    table.compact(full=True)
    chunks = _commits(base_rows)
    _warm_up(work_dir)
    walls, cpus, changelog_rows = [], [], 0
    writer, commit = table.new_write("bench-lookup"), table.new_commit("bench-lookup")
    for i, chunk in enumerate(chunks):
        with Timer() as timer:
            writer.write_arrow(chunk)
            messages = writer.prepare_commit()
            commit.commit(messages, identifier=i)
        walls.append(timer.wall)
        cpus.append(timer.cpu)
        changelog_rows += sum(f.row_count for m in messages for f in [*m.changelog_files,
                                                                       *m.compact_changelog_files])
    writer.close()
    return {"base_rows": base_rows, "commits": len(chunks), "last_commit_seconds": walls[-1],
            "last_commit_cpu_seconds": cpus[-1], "commit_seconds_median": statistics.median(walls),
            "commit_seconds": [round(w, 4) for w in walls], "changelog_rows": changelog_rows}


def lookup_commit_reference(work_dir: str, scale: float) -> PartResult:
    chunk = _commits(max(int(BASE_ROWS * scale), COMMIT_ROWS))[-1]
    directory = _fresh(f"{work_dir}/lookup-commit-ref")
    started = time.perf_counter()
    pq.write_table(chunk, f"{directory}/last.parquet")
    return {"last_commit_seconds": time.perf_counter() - started}


def _summary(parts: Mapping[str, PartResult]) -> dict[str, Any]:
    strata_part, reference = parts["strata"], parts["reference"]
    return {"value": strata_part["last_commit_seconds"], "reference": reference["last_commit_seconds"],
            "last_commit_seconds": strata_part["last_commit_seconds"],
            "last_commit_cpu_seconds": strata_part["last_commit_cpu_seconds"],
            "commit_seconds_median": strata_part["commit_seconds_median"]}


WORKLOADS = {
    "LOOKUP_COMMIT": Workload(
        f"PK table, changelog-producer=lookup, 1 bucket of 1M rows: the {LOOKUP_COMMITS}th commit of "
        f"{COMMIT_ROWS} upserts", Target("<=", 1.0), "last_commit_seconds", "seconds, last commit",
        {"strata": commit_times, "reference": lookup_commit_reference}, _summary,
        extra_lines=(("CPU seconds, last commit", "last_commit_cpu_seconds"),
                     ("median commit seconds", "commit_seconds_median"))),
}
