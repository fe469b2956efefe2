"""Iceberg table statistics (strata.iceberg.statistics): theta sketches of Apache DataSketches per
column, written as a Puffin statistics file that is parsed here byte by byte as the Puffin spec
says, listed in the table metadata as Trino reads it, carried forward, refreshed by compaction and
by ``strata iceberg stats``, and read by pyiceberg."""

from __future__ import annotations

import json
import struct
import subprocess
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import strata
from strata.cli import main as cli
from strata.fs import FileIO
from strata.iceberg import latest_metadata_location
from strata.iceberg.statistics import sketch_batches
from strata.table.table import Table

datasketches = pytest.importorskip("datasketches")

ICEBERG = {"metadata.iceberg.storage": "table-location"}
N = 60_000
SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False), ("qty", pa.int32()), ("price", pa.float64()),
    ("name", pa.string()), ("day", pa.date32()), ("ts", pa.timestamp("ms")), ("flag", pa.bool_()),
    ("amount", pa.decimal128(10, 2)), ("blob", pa.binary())])


def sample(start: int, n: int) -> pa.Table:
    """Columns of very different distinct counts, with nulls (built vectorized: tests stay quick)."""
    i = np.arange(start, start + n, dtype=np.int64)
    names = pc.binary_join_element_wise("customer-", pa.array(i % 30_000).cast(pa.string()), "")
    return pa.table({
        "id": i, "qty": pa.array(i % 5000, pa.int32(), mask=i % 10 == 0), "price": (i % 20_011) / 4,
        "name": pc.if_else(pa.array(i % 7 == 0), pa.scalar(None, pa.string()), names),
        "day": pa.array((i % 365 + 20_454).astype(np.int32)).view(pa.date32()),
        "ts": pa.array(i + 1_761_955_200_000).cast(pa.timestamp("ms")), "flag": i % 3 == 0,
        "amount": pa.array(i % 777, pa.int16()).cast(pa.decimal128(10, 2)),
        "blob": pa.FixedSizeBinaryArray.from_buffers(pa.binary(2), n, [None, pa.py_buffer(
            np.stack([i % 256, i % 13], axis=1).astype(np.uint8).tobytes())]).cast(pa.binary())},
        schema=SCHEMA)


def exact(data: pa.Table, column: str) -> int:
    return int(pc.count_distinct(data.column(column), mode="only_valid").as_py())


def test_sketches_are_within_two_percent_of_the_exact_counts() -> None:
    data = sample(0, N)
    sketches = sketch_batches(data.to_batches(max_chunksize=25_000), SCHEMA.names)
    for name in SCHEMA.names:
        truth = exact(data, name)
        estimate = sketches[name].get_estimate()
        assert abs(estimate - truth) <= 0.02 * truth, (name, estimate, truth)
        if truth <= 4096:  # below the sketch's nominal entries it counts exactly
            assert round(estimate) == truth, name


def test_values_are_hashed_as_their_iceberg_serialization() -> None:
    """Timestamps go in as Iceberg's microseconds whatever the Arrow unit, doubles as their 64-bit
    pattern, strings as their UTF-8 bytes: the same sketch as the Java library's byte-array update."""
    millis = pa.array([0, 1, 1_700_000_000_123], pa.timestamp("ms"))
    micros = millis.cast(pa.timestamp("us"))
    doubles = pa.array([0.5, -2.25, 1e300])
    batch = pa.record_batch([millis, micros, doubles, pa.array(["a", "é", "z"])], names=["ms", "us", "d", "s"])
    sketches = sketch_batches([batch], ["ms", "us", "d", "s"])
    assert sketches["ms"].compact().serialize() == sketches["us"].compact().serialize()
    expected = datasketches.update_theta_sketch(12)
    for bits in doubles.to_numpy().view("int64").tolist():
        expected.update(bits)
    assert sketches["d"].compact().serialize() == expected.compact().serialize()
    by_text = datasketches.update_theta_sketch(12)
    for text in ["a", "é", "z"]:
        by_text.update(text)
    assert sketches["s"].compact().serialize() == by_text.compact().serialize()


def _metadata(table: Table) -> dict[str, Any]:
    location = latest_metadata_location(table)
    assert location is not None
    return dict(json.loads(table.file_io.read_bytes(location)))


def _parse_puffin(data: bytes) -> dict[str, Any]:
    """The footer of a Puffin file per the spec: magic at the start, and at the end
    ``magic | payload | payload size (4 bytes LE) | flags (4 bytes) | magic``."""
    assert data[:4] == b"PFA1" and data[-4:] == b"PFA1"
    (size,) = struct.unpack_from("<i", data, len(data) - 12)
    assert data[-8:-4] == bytes(4), "no flags: the footer is not compressed"
    start = len(data) - 12 - size
    assert data[start - 4:start] == b"PFA1"
    return {"footer": json.loads(data[start:start + size]), "footer_size": size + 16}


def test_stats_command_writes_a_puffin_file_trino_and_the_spec_agree_on(
        catalog: strata.Catalog, warehouse: str, warehouse_io: FileIO) -> None:
    table = catalog.create_table("db.t", SCHEMA, options={**ICEBERG, "metadata.iceberg.statistics": "manual"})
    data = sample(0, N)
    table.write(data)
    assert _metadata(table)["statistics"] == []
    assert cli(["--warehouse", warehouse, "iceberg", "stats", "db.t"]) == 0
    metadata = _metadata(table)
    snapshot = metadata["current-snapshot-id"]
    [entry] = metadata["statistics"]
    assert entry["snapshot-id"] == snapshot
    raw = warehouse_io.read_bytes(entry["statistics-path"])
    assert entry["file-size-in-bytes"] == len(raw)
    parsed = _parse_puffin(raw)
    assert entry["file-footer-size-in-bytes"] == parsed["footer_size"]
    blobs = parsed["footer"]["blobs"]
    ids = {f.name: f.id for f in table.schema.fields}
    assert [b["fields"] for b in blobs] == [[ids[n]] for n in SCHEMA.names]
    for blob, listed in zip(blobs, entry["blob-metadata"], strict=True):
        assert blob["type"] == listed["type"] == "apache-datasketches-theta-v1"
        assert blob["snapshot-id"] == listed["snapshot-id"] == snapshot
        assert blob["sequence-number"] == listed["sequence-number"] == metadata["last-sequence-number"]
        assert listed["fields"] == blob["fields"] and listed["properties"] == blob["properties"]
        assert "compression-codec" not in blob
        sketch = datasketches.compact_theta_sketch.deserialize(raw[blob["offset"]:blob["offset"] + blob["length"]])
        assert int(blob["properties"]["ndv"]) == round(sketch.get_estimate())
        name = SCHEMA.names[[b["fields"][0] for b in blobs].index(blob["fields"][0])]
        truth = exact(data, name)
        assert abs(sketch.get_estimate() - truth) <= 0.05 * truth, name

    # carried into the next metadata versions, until its snapshot expires
    table.write(sample(N, 10))
    assert _metadata(table)["statistics"] == [entry]
    table = table.set_options(**{"snapshot.num-retained.min": "1", "snapshot.num-retained.max": "1"})
    table.write(sample(N + 10, 10))
    assert _metadata(table)["statistics"] == []
    assert not warehouse_io.exists(entry["statistics-path"]), "the statistics file of an expired snapshot is deleted"


def test_compaction_refreshes_stale_statistics_only(catalog: strata.Catalog) -> None:
    table = catalog.create_table("db.pk", SCHEMA, primary_keys=["id"], options={**ICEBERG, "bucket": "1"})
    table.write(sample(0, 5000))
    assert _metadata(table)["statistics"] == [], "level 0 is not in the Iceberg view: no rows yet"
    table.write(sample(2500, 5000))  # 2500 updates, 2500 new keys
    table.compact(full=True)
    metadata = _metadata(table)
    [entry] = metadata["statistics"]
    assert entry["snapshot-id"] == metadata["current-snapshot-id"]
    ndv = {b["fields"][0]: int(b["properties"]["ndv"]) for b in entry["blob-metadata"]}
    assert ndv[table.schema.field("id").id] == 7500
    table.write(sample(7500, 100))  # 1% more: still fresh
    table.compact(full=True)
    metadata = _metadata(table)
    assert metadata["statistics"] == [entry] and entry["snapshot-id"] < metadata["current-snapshot-id"]


def test_a_tables_first_rows_get_statistics(catalog: strata.Catalog) -> None:
    """A table loaded once and never compacted (a dimension table) still gets statistics, as Trino's
    CREATE TABLE AS collects them; the commits after it compute nothing."""
    table = catalog.create_table("db.loaded", SCHEMA, options=ICEBERG)
    table.write(sample(0, 0))  # no rows: nothing to count
    assert _metadata(table)["statistics"] == []
    table.write(sample(0, 3000))
    metadata = _metadata(table)
    [first] = metadata["statistics"]
    assert first["snapshot-id"] == metadata["current-snapshot-id"]
    ndv = {b["fields"][0]: int(b["properties"]["ndv"]) for b in first["blob-metadata"]}
    assert abs(ndv[table.schema.field("id").id] - 3000) <= 60  # a sketch: within 2%
    table.write(sample(3000, 3000))  # doubled, but no compaction: kept
    assert _metadata(table)["statistics"] == [first]


def test_manual_statistics_are_not_refreshed_by_compaction(catalog: strata.Catalog) -> None:
    table = catalog.create_table("db.manual", SCHEMA, options={**ICEBERG, "metadata.iceberg.statistics": "manual"})
    table.write(sample(0, 100))
    table.write(sample(100, 100))
    table.compact(full=True)
    assert _metadata(table)["statistics"] == []


@pytest.mark.pyiceberg
def test_pyiceberg_reads_a_table_with_statistics(catalog: strata.Catalog, warehouse: str,
                                                 warehouse_options: dict[str, str]) -> None:
    from pyiceberg_oracle import PYICEBERG_VERSION, STAMP, VENV, s3_properties
    from pypaimon_oracle import venv_with

    table = catalog.create_table("db.read", SCHEMA, options={**ICEBERG, "metadata.iceberg.statistics": "manual"})
    data = sample(0, 2000)
    table.write(data)
    assert cli(["--warehouse", warehouse, "iceberg", "stats", "db.read"]) == 0
    location = latest_metadata_location(table)
    python = venv_with(VENV, [f"pyiceberg[pyarrow,snappy]=={PYICEBERG_VERSION}"], STAMP)
    script = ("import json, sys; from pyiceberg.table import StaticTable; "
              "t = StaticTable.from_metadata(sys.argv[1], properties=json.loads(sys.argv[2])); "
              "print(json.dumps([t.scan().to_arrow().num_rows, [[s.snapshot_id, s.statistics_path, "
              "len(s.blob_metadata), s.blob_metadata[0].properties] for s in t.metadata.statistics]]))")
    out = subprocess.run([str(python), "-c", script, str(location), json.dumps(s3_properties(warehouse_options))],
                         check=True, capture_output=True, text=True, timeout=120).stdout
    num_rows, [[snapshot_id, path, blobs, properties]] = json.loads(out.strip().splitlines()[-1])
    assert num_rows == data.num_rows
    assert snapshot_id == _metadata(table)["current-snapshot-id"] and path.endswith(".stats")
    assert blobs == len(SCHEMA.names) and properties == {"ndv": str(exact(data, "id"))}


def test_repeating_columns_are_fed_their_distinct_values_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A slice's repeated values are dropped before they become Python objects (the sketch is the
    same: a value fed twice changes nothing); a column of mostly distinct values is fed whole."""
    from strata.iceberg import statistics

    fed: list[int] = []
    values = statistics._values

    def counting(array: pa.Array) -> Any:
        fed.append(len(array))
        return values(array)

    i = np.arange(200_000)
    data = pa.table({"id": i, "day": pa.array((i % 100 + 20_000).astype(np.int32)).view(pa.date32())})
    expected = {name: datasketches.update_theta_sketch(12) for name in data.column_names}
    for name, sketch in expected.items():
        for value in values(data.column(name).combine_chunks()):
            sketch.update(value)
    monkeypatch.setattr(statistics, "_values", counting)
    sketches = sketch_batches(data.to_batches(max_chunksize=100_000), data.column_names)
    for name in data.column_names:
        assert sketches[name].compact().serialize() == expected[name].compact().serialize(), name
    slices = [statistics.SLICE_ROWS, 100_000 - statistics.SLICE_ROWS] * 2
    assert fed[0::2] == slices  # "id": every value of every slice (its first slice was all distinct)
    assert fed[1::2] == [100] * 4  # "day": each slice's 100 distinct days


def test_a_tpch_sf1_fact_table_gets_statistics_with_its_first_rows() -> None:
    """lineitem at TPC-H SF 1 (6,001,215 rows x 16 columns) is within the automatic bound: without
    NDV on it and on orders Trino planned SF 1's Q18 with partitioned joins of every row (2.6-2.8x
    the time on Trino's own tables, whose CREATE TABLE AS collected them)."""
    from strata.iceberg.statistics import AUTO_MAX_VALUES

    assert AUTO_MAX_VALUES >= 6_001_215 * 16
