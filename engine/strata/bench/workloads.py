"""The benchmark workloads. Each has a Strata part and a raw-pyarrow reference part; the runner
executes every part in its own process so that its peak RSS is its own.

W1  append table (bucket -1, partitioned by dt): COMMITS commits of new rows.
    reference: pyarrow.parquet.write_table of the same chunks (zstd level 1), one file each.
W2  primary-key table (dt, id), one bucket per partition (~250k rows each, the sizing Paimon
    recommends), write-only (no compaction): a base, then COMMITS timed
    upsert commits.
    reference: pyarrow.parquet.write_table of the same upsert chunks.
W3  full merged read of the W2 table (base + COMMITS unmerged level-0 runs).
    reference: pyarrow.parquet.read_table of the final rows as COMMITS plain Parquet files.
W4  `id BETWEEN x AND x + 1000` on the W2 table, median latency over 7 values of x (after one untimed query).
    reference: pyarrow.dataset over those plain files with the same filter.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

import strata
from strata.bench import data as gen
from strata.table.table import Table

COMPRESSION = "zstd"
COMPRESSION_LEVEL = 1
READ_RUNS = 5
W4_RUNS = 7
PK_BUCKETS = 1


class Timer:
    """Wall-clock and CPU seconds (CPU of every thread of the process) of a block.

    CPU time is reported next to wall time because it does not change when other processes
    compete for the machine's cores."""

    wall: float = 0.0
    cpu: float = 0.0

    def __enter__(self) -> Timer:
        gc.collect()
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu


def _fresh(path: str) -> str:
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def _write_reference(chunks: list[pa.Table], directory: str) -> dict[str, Any]:
    """Write each chunk to its own Parquet file, like a plain pyarrow job would."""
    _fresh(directory)
    with Timer() as timer:
        for i, chunk in enumerate(chunks):
            pq.write_table(chunk, f"{directory}/part-{i:02d}.parquet", compression=COMPRESSION,
                           compression_level=COMPRESSION_LEVEL)
    return {"rows": sum(c.num_rows for c in chunks), "seconds": timer.wall, "cpu_seconds": timer.cpu}


def _warm_up(work_dir: str) -> None:
    """Import and initialise everything once (codecs, thread pools, modules) outside the timings."""
    rng_rows = gen.rows_for(np.arange(64), np.random.default_rng(0))
    path = _fresh(f"{work_dir}/warmup-{os.getpid()}")
    pq.write_table(rng_rows, f"{path}/x.parquet", compression=COMPRESSION, compression_level=COMPRESSION_LEVEL)
    pq.read_table(f"{path}/x.parquet")
    ds.dataset(path, format="parquet").to_table(filter=ds.field("id") > 3)
    catalog = strata.load_catalog(f"{path}/wh")
    catalog.create_database("w")
    append = catalog.create_table("w.a", gen.SCHEMA, partition_keys=["dt"], options={"bucket": "-1"})
    append.write(rng_rows)
    append.to_arrow()
    pk = catalog.create_table("w.p", gen.SCHEMA, partition_keys=["dt"], primary_keys=["dt", "id"],
                              options={"bucket": "2"})
    pk.write(rng_rows)
    pk.write(rng_rows)
    pk.to_arrow(filter=strata.col("id").between(1, 9))
    # dynamic buckets: the hash index's compiled kernels load on their first call; the second
    # and third writes grow the index and restore it from its files
    dynamic = catalog.create_table("w.d", gen.SCHEMA, partition_keys=["dt"], primary_keys=["dt", "id"])
    for ids in (np.arange(64), np.arange(4_000), np.arange(4_000, 8_000)):
        dynamic.write(gen.rows_for(ids, np.random.default_rng(0)))
    shutil.rmtree(path, ignore_errors=True)


# -- W1 ------------------------------------------------------------------------------------------


def w1_strata(work_dir: str, scale: float) -> dict[str, Any]:
    chunks = gen.w1_chunks(scale)
    _warm_up(work_dir)
    catalog = strata.load_catalog(_fresh(f"{work_dir}/w1"))
    catalog.create_database("bench")
    table = catalog.create_table("bench.w1", gen.SCHEMA, partition_keys=["dt"],
                                 options={"bucket": "-1", "file.compression": COMPRESSION,
                                          "file.compression.zstd-level": str(COMPRESSION_LEVEL)})
    with Timer() as timer:
        for chunk in chunks:
            table.write(chunk)
    rows = sum(c.num_rows for c in chunks)
    snapshot = table.latest_snapshot()
    assert snapshot is not None and snapshot.total_record_count == rows, "W1 lost rows"
    return {"rows": rows, "seconds": timer.wall, "cpu_seconds": timer.cpu, "commits": len(chunks)}


def w1_reference(work_dir: str, scale: float) -> dict[str, Any]:
    chunks = gen.w1_chunks(scale)
    _warm_up(work_dir)
    return _write_reference(chunks, f"{work_dir}/w1-ref")


# -- W2 ------------------------------------------------------------------------------------------

_W2_READY = "w2-ready.json"


def _pk_table(catalog: strata.Catalog) -> Table:
    """The W2 table. write-only: no compaction in the writers, so that W3 and W4 read what the
    brief specifies, the base plus COMMITS unmerged level-0 runs per bucket."""
    catalog.create_database("bench", ignore_if_exists=True)
    return catalog.create_table("bench.w2", gen.SCHEMA, partition_keys=["dt"], primary_keys=["dt", "id"],
                                options={"bucket": str(PK_BUCKETS), "file.compression": COMPRESSION,
                                         "file.compression.zstd-level": str(COMPRESSION_LEVEL),
                                         "write-only": "true"})


def _w2_build(work_dir: str, scale: float, upserts: gen.UpsertData) -> tuple[Table, Timer, Timer]:
    """Create the W2 table, write the base, then the upsert commits; returns the timings of both."""
    ready = f"{work_dir}/{_W2_READY}"
    if os.path.exists(ready):
        os.remove(ready)
    table = _pk_table(strata.load_catalog(_fresh(f"{work_dir}/w2")))
    with Timer() as base:
        table.write(upserts.base)
    with Timer() as upsert:
        for chunk in upserts.commits:
            table.write(chunk)
    with open(ready, "w") as f:
        json.dump({"scale": scale}, f)
    return table, base, upsert


def w2_table(work_dir: str, scale: float) -> tuple[Table, bool]:
    """The W2 table of this run (built by W2), or build it now; True if built here."""
    ready = f"{work_dir}/{_W2_READY}"
    if os.path.exists(ready):
        with open(ready) as f:
            if json.load(f).get("scale") == scale:
                return strata.load_catalog(f"{work_dir}/w2").get_table("bench.w2"), False
    table, _, _ = _w2_build(work_dir, scale, gen.w2_data(scale))
    return table, True


def w2_strata(work_dir: str, scale: float) -> dict[str, Any]:
    upserts = gen.w2_data(scale)
    _warm_up(work_dir)
    table, base, upsert = _w2_build(work_dir, scale, upserts)
    rows = sum(c.num_rows for c in upserts.commits)
    plan = table.new_scan().plan()
    files = sum(len(s.files) for s in plan.splits)
    return {"rows": rows, "seconds": upsert.wall, "cpu_seconds": upsert.cpu, "commits": len(upserts.commits),
            "base_rows": upserts.base.num_rows, "base_seconds": base.wall, "files": files}


def w2_reference(work_dir: str, scale: float) -> dict[str, Any]:
    upserts = gen.w2_data(scale)
    _warm_up(work_dir)
    return _write_reference(upserts.commits, f"{work_dir}/w2-ref")


# -- W3 / W4 reference files ------------------------------------------------------------------


def _final_files(work_dir: str, scale: float, commits: int = gen.COMMITS) -> tuple[str, gen.UpsertData]:
    """The final rows of the W2 table (after `commits` upserts) as COMMITS plain Parquet files,
    in primary-key order."""
    directory = f"{work_dir}/final-ref" if commits == gen.COMMITS else f"{work_dir}/final-ref-{commits}"
    upserts = gen.w2_data(scale, commits)
    marker = f"{directory}/ready.json"
    if os.path.exists(marker):
        with open(marker) as f:
            if json.load(f).get("scale") == scale:
                return directory, upserts
    final = gen.final_rows(upserts)
    _fresh(directory)
    per = -(-final.num_rows // gen.COMMITS)
    for i in range(gen.COMMITS):
        pq.write_table(final.slice(i * per, per), f"{directory}/part-{i:02d}.parquet",
                       compression=COMPRESSION, compression_level=COMPRESSION_LEVEL)
    with open(marker, "w") as f:
        json.dump({"scale": scale}, f)
    return directory, upserts


def _parquet_files(directory: str) -> list[str]:
    return sorted(f"{directory}/{n}" for n in os.listdir(directory) if n.endswith(".parquet"))


# -- W3 ------------------------------------------------------------------------------------------


def _median_time(fn: Callable[[], pa.Table], runs: int) -> tuple[dict[str, Any], pa.Table]:
    """Median wall and CPU time of `runs` calls after one untimed call: in a fresh process the
    first read of a large table pays for the allocator's growth (page faults), two to three
    times the steady cost for either part. Each run reads into the memory the last one freed."""
    result: pa.Table | None = fn()
    walls, cpus = [], []
    for _ in range(runs):
        # the previous result goes first: holding it would make every run grow the heap by one
        # more result, which on this kind of machine costs as much as the read itself
        result = None
        with Timer() as timer:
            result = fn()
        walls.append(timer.wall)
        cpus.append(timer.cpu)
    assert result is not None
    return {"rows": result.num_rows, "seconds": statistics.median(walls), "runs_seconds": walls,
            "cpu_seconds": statistics.median(cpus)}, result


def w3_strata(work_dir: str, scale: float) -> dict[str, Any]:
    table, built = w2_table(work_dir, scale)
    _warm_up(work_dir)
    timing, result = _median_time(table.to_arrow, READ_RUNS)
    files = sum(len(s.files) for s in table.new_scan().plan().splits)
    return {**timing, "files": files, "digest": gen.digest(result), "built_table": built}


def w3_reference(work_dir: str, scale: float) -> dict[str, Any]:
    directory, _ = _final_files(work_dir, scale)
    _warm_up(work_dir)
    files = _parquet_files(directory)
    timing, result = _median_time(lambda: pq.read_table(files), READ_RUNS)
    return {**timing, "digest": gen.digest(result)}


# -- W4 ------------------------------------------------------------------------------------------


def _latencies(query: Callable[[int], pa.Table], xs: list[int]) -> dict[str, Any]:
    """Wall and CPU latency of `query` for each x, after one untimed query (of the first x): as in
    _median_time, a fresh process's first read pays for the allocator's growth, and a reader's
    first look at a file (its footer; Strata keeps footers and page indexes of immutable files).
    That first query is reported beside, as `first_ms`."""
    with Timer() as first:
        query(xs[0])
    walls, cpus, counts = [], [], []
    for x in xs:
        with Timer() as timer:
            result = query(x)
        walls.append(timer.wall * 1000)
        cpus.append(timer.cpu * 1000)
        counts.append(result.num_rows)
    return {"latency_ms": statistics.median(walls), "runs_ms": walls, "cpu_ms": statistics.median(cpus),
            "xs": xs, "rows_per_query": counts, "first_ms": first.wall * 1000}


def w4_strata(work_dir: str, scale: float) -> dict[str, Any]:
    table, built = w2_table(work_dir, scale)
    _warm_up(work_dir)
    xs = gen.w4_ranges(gen.w2_max_id(scale), W4_RUNS)

    def query(x: int) -> pa.Table:
        return table.to_arrow(filter=strata.col("id").between(x, x + gen.W4_RANGE))

    return {**_latencies(query, xs), "built_table": built}


def w4_reference(work_dir: str, scale: float) -> dict[str, Any]:
    directory, upserts = _final_files(work_dir, scale)
    _warm_up(work_dir)
    assert upserts.max_id == gen.w2_max_id(scale)
    xs = gen.w4_ranges(gen.w2_max_id(scale), W4_RUNS)
    files = _parquet_files(directory)

    def query(x: int) -> pa.Table:
        dataset = ds.dataset(files, format="parquet")
        return dataset.to_table(filter=(ds.field("id") >= x) & (ds.field("id") <= x + gen.W4_RANGE))

    return _latencies(query, xs)


PARTS: dict[tuple[str, str], Callable[[str, float], dict[str, Any]]] = {
    ("W1", "strata"): w1_strata, ("W1", "reference"): w1_reference,
    ("W2", "strata"): w2_strata, ("W2", "reference"): w2_reference,
    ("W3", "strata"): w3_strata, ("W3", "reference"): w3_reference,
    ("W4", "strata"): w4_strata, ("W4", "reference"): w4_reference,
}
