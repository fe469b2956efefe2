"""Apache Paimon's own Iceberg compatibility (Java, 1.3.1) as a judge of the Iceberg metadata Strata
publishes (``metadata.iceberg.storage=table-location``, engine/strata/iceberg/sync.py).

Each shape is declared once and written twice into one warehouse: by Strata (database ``s``) and
by Java Paimon (database ``j``), both with Iceberg compatibility on. pyiceberg (its own venv, one
subprocess for all tables) then reads both tables' latest ``v<N>.metadata.json`` and the two must
agree: the rows, the schema (field ids, names, types, required), the partition spec (source ids,
transforms, field ids), the current snapshot id (= the latest Paimon snapshot id), the snapshot
history and the data files an Iceberg reader sees (count, record counts, partitions, null counts
and bounds). Paimon's Java library reading Strata's tables and Strata reading Java's tables must
agree with those rows too (Iceberg shows a primary-key table's top level: Paimon's ``$ro``).

What Paimon 1.3.1 does (IcebergCommitCallback, IcebergOptions, IcebergDataField, IcebergMetadata
of release-1.3.1; there is no PrimaryKeyIcebergCommitCallback in 1.3.1), and where Strata differs
on purpose, is asserted below with the reason in a comment: Paimon exports deletion vectors only as
format-version 3 deletion vectors of a ``deletion-vectors.bitmap64`` table (at format 2 it shows the
top level without them: stale rows), Strata at format 2 as position-delete Parquet files and at
format 3 as deletion vectors too (32-bit vectors widened). At format 3 both exports of one table
give the same rows (read by the spec: vectors by offset) and the same delete entries (content 1,
PUFFIN, referenced data file, offset and size, cardinality, the same positions), but Paimon's
entries point into its deletion-vector index files, which are not Puffin files (pyiceberg 0.12
refuses them; Strata writes real Puffin files, which it reads), and Paimon writes no row lineage
(next-row-id, first-row-id, added-rows, first_row_id: required by the v3 spec), spells the format
"puffin" and gives the entries no path bounds;
Paimon's first snapshot of a primary-key table shows raw level-0 files; Paimon refuses
TIMESTAMP(3), Strata collections and TIMESTAMP(7..9); Paimon's own data files have no BINARY
bounds; Paimon writes plain paths, no refs, parent ids, logs or identifier fields, "overwrite" for
a compaction, and keeps a file's first sequence number when only its level changes.

Both name metadata ``<table>/metadata/v<N>.metadata.json`` for Paimon snapshot N and keep
``version-hint.text`` = N (manifest lists: Paimon ``snap-<k>-<uuid>.avro``, k counting per writer;
Strata ``snap-<N>-<uuid>.avro``), so each continues the other's Iceberg history (test at the
end); Paimon finds its base as ``v<N-1>.metadata.json`` (never reading the hint), Strata through
the hint.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyarrow import ipc

import strata
from strata.iceberg import latest_metadata_location
from strata.schema.types import DataType
from strata_platform.services import paimon_java
from strata_platform.services.base import REPO_ROOT, Service
from strata_platform.services.paimon_java import canonical, judge_rows
from strata_platform.services.testing import provide

sys.path.insert(0, str(REPO_ROOT / "engine" / "tests"))  # the pyiceberg oracle's venv helpers
from iceberg_spec_reader import SpecView, read_snapshot
from pyiceberg_oracle import PYICEBERG_VERSION, STAMP, VENV
from pypaimon_oracle import venv_with

pytestmark = [pytest.mark.paimon_java, pytest.mark.pyiceberg]

UTC = dt.UTC
ICEBERG = {"metadata.iceberg.storage": "table-location"}


@pytest.fixture(scope="module")
def judge_service() -> Iterator[Service]:
    yield from provide("paimon_java")


# -- data: every type both sides export to Iceberg -------------------------------------------------------

TYPES: list[tuple[str, pa.DataType]] = [
    ("c_bool", pa.bool_()), ("c_tinyint", pa.int8()), ("c_smallint", pa.int16()), ("c_int", pa.int32()),
    ("c_bigint", pa.int64()), ("c_float", pa.float32()), ("c_double", pa.float64()),
    ("c_dec10", pa.decimal128(10, 2)), ("c_dec38", pa.decimal128(38, 10)), ("c_string", pa.string()),
    ("c_bytes", pa.binary()), ("c_date", pa.date32()), ("c_ts6", pa.timestamp("us")),
    ("c_ltz", pa.timestamp("us", tz="UTC")),
]


def sample(t: pa.DataType, n: int) -> list[Any]:
    """n values of t with edge values: integer and decimal extremes, strings past Paimon's 16
    character stats truncation, multi-byte text, empty bytes, dates and instants around the epoch."""
    if pa.types.is_boolean(t):
        return [i % 3 == 1 for i in range(n)]
    if pa.types.is_integer(t):
        lo, hi = -(2 ** (t.bit_width - 1)), 2 ** (t.bit_width - 1) - 1
        return [[lo, hi][i] if i < 2 else (i * 37) % 101 - 50 for i in range(n)]
    if pa.types.is_floating(t):
        return [i * 1.5 - 7.25 if i % 5 else -0.1 * i for i in range(n)]
    if pa.types.is_decimal(t):
        big = "9" * (t.precision - t.scale) + "." + "9" * t.scale
        return [Decimal(["-" + big, big][i]) if i < 2 else Decimal(37 * i - 400).scaleb(-t.scale) for i in range(n)]
    if pa.types.is_string(t):
        words = ["", "a", "héllo wörld", "日本語日本語日本語日本語日本語日本語", "z" * 40]
        return [words[i] if i < len(words) else f"s{i:04d}" for i in range(n)]
    if pa.types.is_binary(t):
        return [[b"", b"\x00", b"\xff" * 20][i] if i < 3 else i.to_bytes(4, "big") for i in range(n)]
    if pa.types.is_date(t):
        return [dt.date(1969, 12, 30) + dt.timedelta(days=400 * i - 3000) for i in range(n)]
    if pa.types.is_timestamp(t):
        step = dt.timedelta(microseconds=7, hours=5)
        return [dt.datetime(1969, 12, 31, 23, 59, 58, tzinfo=UTC if t.tz else None) + step * i for i in range(n)]
    raise AssertionError(t)


def typed(n: int, offset: int = 0, shift: int = 0) -> pa.Table:
    """Rows offset..offset+n: a non-null `id`, then one column per type, row i null in column
    i mod len(TYPES); `shift` picks other values for the same ids (an update)."""
    columns: dict[str, pa.Array] = {"id": pa.array(range(offset, offset + n), pa.int64())}
    for j, (name, t) in enumerate(TYPES):
        values = sample(t, n + offset + shift)[offset + shift:]
        columns[name] = pa.array([None if (i + offset) % len(TYPES) == j else v for i, v in enumerate(values)], t)
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), *[(name, t) for name, t in TYPES]])
    return pa.table(columns, schema=schema)


def with_parts(data: pa.Table, null: bool = True) -> pa.Table:
    """Adds a string partition column `dt` (characters a path must escape, and with `null` a null)
    and an INT partition column `p`."""
    ids = data.column("id").to_pylist()
    parts = ["a", "b/c", "x=y", "sp ace", None if null else "n", "%#"]
    data = data.append_column("dt", pa.array([parts[i % len(parts)] for i in ids], pa.string()))
    return data.append_column(pa.field("p", pa.int32(), nullable=False), pa.array([i % 2 for i in ids], pa.int32()))


# -- shapes: declared once, written by Strata and by Java -------------------------------------------------

@dataclass
class Rows:
    data: pa.Table
    kind: str | list[str] = "+I"


@dataclass
class Compact:
    full: bool = True


@dataclass
class Shape:
    schema: pa.Schema
    steps: list[Rows | Compact]
    primary_keys: list[str] = field(default_factory=list)
    partition_keys: list[str] = field(default_factory=list)
    options: dict[str, str] = field(default_factory=dict)
    # what an Iceberg reader sees: "latest" (every row, merged) or "ro" (the top level only)
    view: str = "latest"


def _kinds(step: Rows) -> list[str]:
    return [step.kind] * step.data.num_rows if isinstance(step.kind, str) else step.kind


def append_plain() -> Shape:
    data = typed(30)
    return Shape(data.schema, [Rows(data.slice(0, 12)), Rows(data.slice(12)), Rows(data.slice(0, 3))],
                 options=dict(ICEBERG))


def append_part() -> Shape:
    data = with_parts(typed(36))
    return Shape(data.schema, [Rows(data.slice(0, 20)), Rows(data.slice(20))], partition_keys=["dt", "p"],
                 options=dict(ICEBERG))


def pk_compacted() -> Shape:
    """Deduplicate, partitioned: insert, update (-U/+U), delete, a full compaction, then an upsert
    that stays in level 0, which an Iceberg reader must not see yet (both show the top level)."""
    base = with_parts(typed(40), null=False)
    update = with_parts(typed(10, offset=10, shift=3), null=False)
    return Shape(base.schema, [
        Rows(base),
        Rows(pa.concat_tables([base.slice(10, 10), update]), ["-U"] * 10 + ["+U"] * 10),
        Rows(base.slice(0, 5), "-D"),
        Compact(full=True),
        Rows(with_parts(typed(10, offset=35, shift=1), null=False)),
    ], ["id", "dt", "p"], ["dt", "p"], {**ICEBERG, "bucket": "2"}, view="ro")


def dv_pk() -> Shape:
    """Deletion vectors (64-bit bitmaps, the Iceberg-compatible kind): after a full compaction,
    deletes and upserts leave deletion vectors on top-level files."""
    base = typed(40)
    return Shape(base.schema, [
        Rows(base), Compact(full=True), Rows(base.slice(0, 5), "-D"), Rows(typed(10, offset=30, shift=7)),
    ], ["id"], [], {**ICEBERG, "bucket": "2", "deletion-vectors.enabled": "true",
                    "deletion-vectors.bitmap64": "true",
                    # keep the vectors: a one-shot write purges files past the ratio (default 0.2)
                    "compaction.delete-ratio-threshold": "1.0"})


SHAPES = {fn.__name__: fn for fn in (append_plain, append_part, pk_compacted, dv_pk)}
DV_DELETED = list(range(5))  # the ids dv_pk deletes after its full compaction


def write_with_strata(catalog: strata.Catalog, name: str, shape: Shape) -> strata.Table:
    table = catalog.create_table(name, shape.schema, partition_keys=shape.partition_keys or None,
                                 primary_keys=shape.primary_keys or None, options=shape.options)
    for step in shape.steps:
        if isinstance(step, Rows):
            table.write(step.data, row_kind=_kinds(step))
        else:
            table.compact(full=step.full)
    return catalog.get_table(name)


def java_spec(name: str, shape: Shape) -> dict[str, Any]:
    commits: list[dict[str, Any]] = []
    for step in shape.steps:
        if isinstance(step, Rows):
            commits.append({"rows": [{**row, "_kind": kind}
                                     for row, kind in zip(judge_rows(step.data), _kinds(step), strict=True)]})
        else:
            commits.append({"compact": True, "full": step.full})
    return {"table": name, "primary_keys": shape.primary_keys, "partition_keys": shape.partition_keys,
            "options": shape.options, "commits": commits,
            "fields": [{"name": f.name, "type": str(DataType.from_arrow(f.type, f.nullable))} for f in shape.schema]}


# -- pyiceberg: every table of a test in one subprocess ------------------------------------------------

_READ = """
import json, sys, traceback
import pyarrow.ipc as ipc
from pyiceberg.table import StaticTable

def hexed(pairs):
    return {str(k): v.hex() for k, v in (pairs or [])}

answers = []
for request in json.loads(sys.argv[1]):
    out = {}
    try:
        table = StaticTable.from_metadata(request["metadata"])
        meta = table.metadata
        schema = table.schema()
        out["format_version"] = meta.format_version
        out["schema"] = [[f.field_id, f.name, str(f.field_type), f.required] for f in schema.fields]
        out["identifier_field_ids"] = sorted(schema.identifier_field_ids)
        out["spec"] = [[f.source_id, f.field_id, str(f.transform), f.name] for f in table.spec().fields]
        out["last_partition_id"] = meta.last_partition_id
        out["current"] = table.current_snapshot().snapshot_id if table.current_snapshot() else None
        out["snapshots"] = [s.snapshot_id for s in table.snapshots()]
        out["sequence_numbers"] = [s.sequence_number for s in table.snapshots()]
        files = []
        io = table.io
        for manifest in table.current_snapshot().manifests(io):
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
                f = entry.data_file
                files.append({"content": int(f.content), "file_format": str(f.file_format.value),
                              "record_count": f.record_count, "partition": list(f.partition),
                              "null_value_counts": sorted((f.null_value_counts or {}).items()),
                              "lower_bounds": hexed((f.lower_bounds or {}).items()),
                              "upper_bounds": hexed((f.upper_bounds or {}).items()),
                              "sequence_number": entry.sequence_number, "path": f.file_path})
        out["files"] = files
        tasks = list(table.scan().plan_files())
        out["tasks"] = len(tasks)
        out["task_deletes"] = sum(len(t.delete_files) for t in tasks)
        rows = table.scan(snapshot_id=request.get("snapshot_id")).to_arrow()
        with ipc.new_file(request["out"], rows.schema) as writer:
            writer.write_table(rows)
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["trace"] = traceback.format_exc()[-1500:]
    answers.append(out)
print(json.dumps(answers, default=str))
"""


@dataclass
class IcebergView:
    facts: dict[str, Any]
    rows: pa.Table | None

    @property
    def error(self) -> str | None:
        return self.facts.get("error")


def read_iceberg_many(locations: list[str | tuple[str, int]]) -> list[IcebergView]:
    """pyiceberg's view of each metadata file (rows of its current snapshot, or of the snapshot
    given with it as (location, snapshot id))."""
    python = venv_with(VENV, [f"pyiceberg[pyarrow,snappy]=={PYICEBERG_VERSION}"], STAMP)
    with tempfile.TemporaryDirectory(prefix="iceberg-judge-") as tmp:
        requests = [{"metadata": loc, "out": f"{tmp}/{i}.arrow"} if isinstance(loc, str) else
                    {"metadata": loc[0], "snapshot_id": loc[1], "out": f"{tmp}/{i}.arrow"}
                    for i, loc in enumerate(locations)]
        proc = subprocess.run([str(python), "-c", textwrap.dedent(_READ), json.dumps(requests)],
                              check=False, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"pyiceberg failed:\n{proc.stderr[-4000:]}"
        answers = json.loads(proc.stdout.strip().splitlines()[-1])
        out = []
        for request, facts in zip(requests, answers, strict=True):
            rows = None
            if "error" not in facts:
                with ipc.open_file(request["out"]) as reader:
                    rows = reader.read_all()
            out.append(IcebergView(facts, rows))
    return out


def java_metadata_location(warehouse: str, name: str) -> str:
    """Paimon's newest metadata file, found as an Iceberg Hadoop-table reader finds it."""
    db, table = name.split(".")
    metadata = Path(warehouse) / f"{db}.db" / table / "metadata"
    return str(metadata / f"v{(metadata / 'version-hint.text').read_text().strip()}.metadata.json")


def metadata_json(location: str) -> dict[str, Any]:
    return dict(json.loads(Path(location.removeprefix("file://")).read_text()))


def iceberg_rows(view: IcebergView) -> list[str]:
    assert view.rows is not None, view.facts.get("trace")
    return canonical(judge_rows(view.rows))


def file_facts(view: IcebergView, content: int = 0, without_bounds: tuple[int, ...] = (),
               sequence_numbers: bool = False) -> list[str]:
    """The data (or delete) files as facts an Iceberg planner uses, without paths and sizes (each
    writer names and encodes its own Parquet files), without the bounds of the `without_bounds`
    field ids and, unless asked, without sequence numbers."""
    out = []
    for f in view.facts["files"]:
        if f["content"] != content:
            continue
        f = {k: v for k, v in f.items() if k != "path" and (sequence_numbers or k != "sequence_number")}
        for key in ("lower_bounds", "upper_bounds"):
            f[key] = {k: v for k, v in f[key].items() if int(k) not in without_bounds}
        out.append(json.dumps(f, sort_keys=True))
    return sorted(out)


# -- both writers, one warehouse ------------------------------------------------------------------------

@dataclass
class Written:
    warehouse: str
    catalog: strata.Catalog
    shapes: dict[str, Shape]
    java_errors: dict[str, str]
    java_reads: dict[tuple[str, str], dict[str, Any]]  # (table, "latest" | "ro") -> Paimon's read
    iceberg: dict[str, IcebergView]  # "s.<shape>" / "j.<shape>" -> pyiceberg's view
    locations: dict[str, str]


@pytest.fixture(scope="module")
def written(judge_service: Service, tmp_path_factory: pytest.TempPathFactory) -> Written:
    warehouse = str(tmp_path_factory.mktemp("iceberg-judge") / "warehouse")
    catalog = strata.load_catalog(warehouse)
    catalog.create_database("s")
    shapes = {name: make() for name, make in SHAPES.items()}
    for name, shape in shapes.items():
        write_with_strata(catalog, f"s.{name}", shape)
    results = paimon_java.write(warehouse, [java_spec(f"j.{name}", shape) for name, shape in shapes.items()],
                                keep_going=True)
    java_errors = {r["table"]: r["error"] for r in results if "error" in r}
    assert not java_errors, java_errors
    jobs = [(f"{db}.{name}", kind) for name, shape in shapes.items() for db in ("s", "j")
            for kind in ("latest", *(("ro",) if shape.primary_keys else ()))]
    reads = paimon_java.read_many(warehouse, [{"table": t + ("$ro" if kind == "ro" else "")} for t, kind in jobs])
    locations: dict[str, str] = {}
    for name in shapes:
        location = latest_metadata_location(catalog.get_table(f"s.{name}"))
        assert location is not None, f"Strata published no Iceberg metadata for s.{name}"
        locations[f"s.{name}"] = location
        locations[f"j.{name}"] = java_metadata_location(warehouse, f"j.{name}")
    views = read_iceberg_many(list(locations.values()))
    return Written(warehouse, catalog, shapes, java_errors, dict(zip(jobs, reads, strict=True)),
                   dict(zip(locations, views, strict=True)), locations)


def expected_view(written: Written, name: str) -> list[str]:
    """The rows an Iceberg reader should see in the Strata table, as Paimon's Java library reads
    them: the whole table, or for a primary-key table without deletion vectors its top level
    (Paimon's $ro), which both writers export."""
    java = written.java_reads[f"s.{name}", written.shapes[name].view]
    assert "error" not in java, java["error"]
    return canonical(java["rows"])


NAMES = sorted(SHAPES)
AGREEING = [n for n in NAMES if n != "dv_pk"]  # dv_pk: see test_deletion_vectors_*


@pytest.mark.parametrize("name", AGREEING)
def test_iceberg_rows_agree(written: Written, name: str) -> None:
    strata_view, java_view = written.iceberg[f"s.{name}"], written.iceberg[f"j.{name}"]
    assert strata_view.error is None, strata_view.facts.get("trace")
    assert java_view.error is None, java_view.facts.get("trace")
    expected = expected_view(written, name)
    assert expected, name
    assert iceberg_rows(strata_view) == expected, f"s.{name}: pyiceberg's rows differ from Paimon's read"
    assert iceberg_rows(java_view) == expected, f"j.{name}: Paimon's own Iceberg rows differ from its read"
    # Strata reading Java's table (its Paimon data, Iceberg compatibility on) sees the same rows as
    # Paimon reading it, and as an Iceberg reader
    java_table = written.catalog.get_table(f"j.{name}")
    ro = written.shapes[name].view == "ro"
    assert canonical(judge_rows(java_table.to_arrow(read_optimized=ro))) == expected, f"j.{name}"
    java_latest = canonical(written.java_reads[f"j.{name}", "latest"]["rows"])
    assert canonical(judge_rows(java_table.to_arrow())) == java_latest
    if ro:  # the level-0 upsert is there for a merged read only
        assert canonical(written.java_reads[f"j.{name}", "ro"]["rows"]) == expected != java_latest


@pytest.mark.parametrize("name", NAMES)
def test_iceberg_schema_and_spec_agree(written: Written, name: str) -> None:
    strata_facts, java_facts = written.iceberg[f"s.{name}"].facts, written.iceberg[f"j.{name}"].facts
    for key in ("format_version", "schema", "spec", "last_partition_id"):
        assert strata_facts[key] == java_facts[key], f"{name}: {key}"
    assert strata_facts["format_version"] == 2
    shape = written.shapes[name]
    types = {f[1]: f[2] for f in strata_facts["schema"]}
    assert types["c_tinyint"] == types["c_smallint"] == "int"  # both widen, as Iceberg has no 8/16-bit ints
    assert types["c_ltz"] == "timestamptz" and types["c_ts6"] == "timestamp" and types["c_dec38"] == "decimal(38, 10)"
    assert [f[1] for f in strata_facts["schema"]] == shape.schema.names
    assert [f[0] for f in strata_facts["spec"]] == [shape.schema.names.index(k) for k in shape.partition_keys]
    assert [(f[1], f[2]) for f in strata_facts["spec"]] == [(1000 + i, "identity")
                                                           for i in range(len(shape.partition_keys))]
    # Strata marks the primary key as Iceberg identifier fields; Paimon 1.3.1 writes none (IcebergSchema
    # has no identifier-field-ids). Readers need neither; writers (upserts) would use Strata's.
    keys = sorted(shape.schema.names.index(k) for k in shape.primary_keys)
    assert strata_facts["identifier_field_ids"] == keys
    assert java_facts["identifier_field_ids"] == []


@pytest.mark.parametrize("name", NAMES)
def test_iceberg_snapshots_are_paimon_snapshots(written: Written, name: str) -> None:
    """Iceberg snapshot id and sequence number = Paimon snapshot id, and every Paimon snapshot is
    an Iceberg snapshot (Paimon's commit callback runs once per snapshot, so a commit that also
    compacts, as deletion-vector writes do, adds two)."""
    for db in ("s", "j"):
        table = written.catalog.get_table(f"{db}.{name}")
        latest = table.latest_snapshot()
        assert latest is not None
        facts = written.iceberg[f"{db}.{name}"].facts
        assert facts["current"] == latest.id, f"{db}.{name}"
        assert facts["snapshots"] == facts["sequence_numbers"] == list(range(1, latest.id + 1)), f"{db}.{name}"
    assert written.catalog.get_table(f"s.{name}").latest_snapshot().id == \
        written.catalog.get_table(f"j.{name}").latest_snapshot().id


BYTES_ID = 1 + [name for name, _ in TYPES].index("c_bytes")


@pytest.mark.parametrize("name", AGREEING)
def test_iceberg_data_files_agree(written: Written, name: str) -> None:
    """Same files visible with the same record counts, partition values, null counts and bounds
    (both take them from the Paimon file's value stats, Paimon's truncate(16) string bounds too)."""
    strata_view, java_view = written.iceberg[f"s.{name}"], written.iceberg[f"j.{name}"]
    # Paimon's own Parquet stats have no min/max for BINARY columns (ParquetSimpleStatsExtractor), so
    # its Iceberg files have no bounds for c_bytes; Strata's data files carry them (checked true below).
    assert file_facts(strata_view, without_bounds=(BYTES_ID,)) == file_facts(java_view)
    assert file_facts(java_view) == file_facts(java_view, without_bounds=(BYTES_ID,))
    assert file_facts(strata_view)
    assert strata_view.facts["tasks"] == java_view.facts["tasks"] == len(file_facts(strata_view))
    assert file_facts(strata_view, 1) == file_facts(java_view, 1) == []
    _assert_binary_bounds_hold(strata_view)

    strata_seq = Counter(f["sequence_number"] for f in strata_view.facts["files"])
    java_seq = Counter(f["sequence_number"] for f in java_view.facts["files"])
    if not written.shapes[name].primary_keys:  # append-only: each file keeps the snapshot that added it
        assert strata_seq == java_seq
        assert file_facts(strata_view, without_bounds=(BYTES_ID,), sequence_numbers=True) == \
            file_facts(java_view, sequence_numbers=True)
    else:
        # After the compaction Strata rewrites the manifests: every file ADDED at the compaction's
        # sequence number. Paimon keeps a file whose level only changed (a bucket's single level-0
        # file moved to the top) with the sequence number of the snapshot that first exported it: 1.
        # Readers only compare sequence numbers to apply delete files, and there are none here.
        compact_id = _compact_id(written.catalog.get_table(f"s.{name}"))
        assert set(strata_seq) == {compact_id}
        assert set(java_seq) <= {1, compact_id} and compact_id in java_seq


def _compact_id(table: strata.Table) -> int:
    return max(s.id for s in table.snapshot_manager.snapshots() if s.commit_kind == "COMPACT")


def _assert_binary_bounds_hold(view: IcebergView) -> None:
    """Strata's c_bytes bounds enclose the values of the file (truncated to 16 bytes: a lower bound
    is a prefix, an upper bound one byte above a prefix)."""
    for f in view.facts["files"]:
        if f["content"] != 0 or str(BYTES_ID) not in f["lower_bounds"]:
            continue
        values = [v for v in pq.read_table(f["path"].removeprefix("file://"), columns=["c_bytes"])
                  .column(0).to_pylist() if v is not None]
        assert bytes.fromhex(f["lower_bounds"][str(BYTES_ID)]) <= min(values), f
        assert bytes.fromhex(f["upper_bounds"][str(BYTES_ID)]) >= max(values), f


def test_metadata_json_differences(written: Written) -> None:
    """Where the two metadata files legitimately differ, each side's choice pinned down."""
    strata_meta = metadata_json(written.locations["s.pk_compacted"])
    java_meta = metadata_json(written.locations["j.pk_compacted"])
    latest = written.catalog.get_table("s.pk_compacted").latest_snapshot()
    assert latest is not None
    # Table location and metadata paths: Strata writes file:// URIs, Paimon the warehouse path as given
    # (no scheme); pyiceberg's local FileIO reads both. Data file paths are spelled alike (the table
    # path as given): Paimon matches them as strings when its compaction removes files from a base
    # metadata, so a file:// spelling left Strata's entries live after a Java compaction (see the
    # continuation test).
    assert strata_meta["location"].startswith("file:///") and java_meta["location"].startswith("/")
    for db in ("s", "j"):
        table_dir = f"{written.warehouse}/{db}.db/pk_compacted/"
        assert all(f["path"].startswith(table_dir) for f in written.iceberg[f"{db}.pk_compacted"].facts["files"])
    # Refs: Strata a "main" branch at the current snapshot; Paimon only tags (none here): readers use
    # current-snapshot-id either way.
    assert strata_meta["refs"] == {"main": {"snapshot-id": latest.id, "type": "branch"}}
    assert java_meta["refs"] == {}
    # Lineage: Strata links parent-snapshot-id and keeps snapshot-log / metadata-log; Paimon none.
    assert all("parent-snapshot-id" not in s for s in java_meta["snapshots"])
    assert [s.get("parent-snapshot-id") for s in strata_meta["snapshots"]] == [None, *range(1, latest.id)]
    assert "snapshot-log" not in java_meta and "metadata-log" not in java_meta
    # Timestamps: Strata the Paimon snapshot's commit time; Paimon the wall clock when its callback ran.
    assert strata_meta["snapshots"][-1]["timestamp-ms"] == latest.time_millis
    # Operations: a compaction is "replace" in Strata (rows unchanged), "overwrite" in Paimon (any
    # snapshot that removes a file); Paimon's summary has nothing but the operation.
    compact_id = next(s.id for s in written.catalog.get_table("s.pk_compacted").snapshot_manager.snapshots()
                      if s.commit_kind == "COMPACT")
    assert strata_meta["snapshots"][compact_id - 1]["summary"]["operation"] == "replace"
    assert java_meta["snapshots"][compact_id - 1]["summary"] == {"operation": "overwrite"}
    assert java_meta["properties"] == {}
    assert strata_meta["properties"]["paimon.snapshot-id"] == str(latest.id)
    # Schema fields: Paimon writes "doc": null, Strata leaves it out
    assert all(f["doc"] is None for f in java_meta["schemas"][0]["fields"])
    assert all("doc" not in f for f in strata_meta["schemas"][0]["fields"])
    # Both keep only the newest metadata file (previous-versions-max 0, delete-after-commit on)
    for db in ("s", "j"):
        folder = Path(written.warehouse) / f"{db}.db" / "pk_compacted" / "metadata"
        assert sorted(p.name for p in folder.glob("v*.metadata.json")) == [f"v{latest.id}.metadata.json"]
        assert (folder / "version-hint.text").read_text().strip() == str(latest.id)


def test_first_snapshots_of_a_primary_key_table(written: Written) -> None:
    """Paimon builds the metadata of a table's first snapshot afresh (createMetadataWithoutBase)
    from the raw-convertible splits, and a bucket holding one level-0 file without deletes is raw
    convertible: Iceberg snapshot 1 of Paimon's primary-key table shows the first commit's rows,
    although later snapshots add only top-level files (shouldAddFileToIceberg), so those level-0
    files stay visible, stale (snapshot 3: updates and deletes not applied), until the compaction
    removes them. Strata shows the top level from the first snapshot on: nothing before the first
    compaction. Both agree from the compaction on (test_iceberg_rows_agree)."""
    s_loc, j_loc = written.locations["s.pk_compacted"], written.locations["j.pk_compacted"]
    s1, j1, s3, j3 = read_iceberg_many([(s_loc, 1), (j_loc, 1), (s_loc, 3), (j_loc, 3)])
    first = canonical(judge_rows(written.catalog.get_table("j.pk_compacted").to_arrow(snapshot_id=1)))
    assert first and iceberg_rows(j1) == iceberg_rows(j3) == first
    assert iceberg_rows(s1) == iceberg_rows(s3) == []
    assert _compact_id(written.catalog.get_table("s.pk_compacted")) == 4


# -- deletion vectors -----------------------------------------------------------------------------------

def test_deletion_vectors_strata_exports_merged_rows(written: Written) -> None:
    """Strata: every file above level 0 plus one position-delete Parquet file per deletion-vector
    index file (format 2), so an Iceberg reader sees exactly the merged table."""
    view = written.iceberg["s.dv_pk"]
    assert view.error is None, view.facts.get("trace")
    expected = expected_view(written, "dv_pk")
    assert iceberg_rows(view) == expected
    assert canonical(judge_rows(written.catalog.get_table("j.dv_pk").to_arrow())) == expected
    deletes = [f for f in view.facts["files"] if f["content"] == 1]
    assert deletes and all(f["file_format"] == "PARQUET" for f in deletes)
    assert view.facts["task_deletes"] > 0


def test_deletion_vectors_paimon_v2_ignores_them(written: Written) -> None:
    """Paimon 1.3.1 exports deletion vectors only when format-version is 3 and bitmap64 is on
    (IcebergCommitCallback.needAddDvToIceberg); at format 2 it shows a deletion-vector table's top
    level (numLevels - 1) without its deletion vectors, so rows deleted or updated after the full
    compaction are still there for an Iceberg reader: Paimon's export is stale, Strata's is merged."""
    view = written.iceberg["j.dv_pk"]
    assert view.error is None, view.facts.get("trace")
    expected = expected_view(written, "dv_pk")
    got = iceberg_rows(view)
    assert got != expected
    ids = {json.loads(row)["id"] for row in got}
    assert set(DV_DELETED) <= ids, "rows deleted after the compaction should resurface in Paimon's export"
    assert [f for f in view.facts["files"] if f["content"] == 1] == []
    # the top-level files only, the same rows Strata's $ro... is not: Strata's export has more files
    assert len(file_facts(view)) < len(file_facts(written.iceberg["s.dv_pk"]))


def _dv_entries(view: SpecView) -> list[dict[str, Any]]:
    """A format-3 export's delete entries as kinds: what each is and what it marks."""
    return [{"content": d["content"], "format": d["file_format"].upper(),
             "references_live_file": d["referenced_data_file"] in {f["file_path"] for f in view.data_files},
             "blob": (d["content_offset"], d["content_size_in_bytes"]) != (None, None),
             "cardinality": d["record_count"], "positions": d["vector"].tolist()} for d in view.deletes]


def test_deletion_vectors_format_v3_both(judge_service: Service, tmp_path: Path) -> None:
    """metadata.iceberg.format-version=3 on the same deletion-vector table written by each side:
    both export its vectors as Iceberg deletion vectors (content 1, PUFFIN, referenced_data_file,
    content_offset / content_size_in_bytes, record_count = cardinality, one per data file), and the
    spec reader (iceberg_spec_reader: blobs read by offset, length, magic, CRC and cardinality
    checked) gets the same rows from both exports, now and at an older snapshot.

    Where they differ (each pinned below): Paimon points Iceberg at its own deletion-vector index
    files, whose blobs are valid deletion-vector-v1 frames but which are not Puffin files (a version
    byte first, no footer), so pyiceberg 0.12, which parses the whole Puffin file, refuses them;
    Strata writes real Puffin files (one per index file, in the metadata directory), which pyiceberg
    reads. Paimon writes no row lineage (no next-row-id, first-row-id, added-rows or first_row_id,
    which the v3 spec requires and Iceberg's Java TableMetadataParser reads as required), spells the
    format "puffin" and gives the entries no path bounds; Strata writes the lineage, "PUFFIN" (as
    Iceberg's Java writer does) and the path bounds (pyiceberg pairs deletes with data files by them)."""
    warehouse = str(tmp_path / "warehouse")
    catalog = strata.load_catalog(warehouse)
    catalog.create_database("s")
    shape = dv_pk()
    shape.options["metadata.iceberg.format-version"] = "3"
    strata_table = write_with_strata(catalog, "s.dv_v3", shape)
    result = paimon_java.write(warehouse, [java_spec("j.dv_v3", shape)])
    assert "error" not in result[0], result
    java_table = catalog.get_table("j.dv_v3")
    s_loc = latest_metadata_location(strata_table)
    j_loc = java_metadata_location(warehouse, "j.dv_v3")
    assert s_loc is not None
    s_meta, j_meta = metadata_json(s_loc), metadata_json(j_loc)
    assert s_meta["format-version"] == j_meta["format-version"] == 3

    expected = canonical(judge_rows(strata_table.to_arrow()))
    assert canonical(paimon_java.read(warehouse, "j.dv_v3")["rows"]) == expected
    assert canonical(judge_rows(java_table.to_arrow())) == expected
    s_view, j_view = read_snapshot(s_loc), read_snapshot(j_loc)
    assert canonical(judge_rows(s_view.rows)) == canonical(judge_rows(j_view.rows)) == expected
    assert set(DV_DELETED).isdisjoint(json.loads(r)["id"] for r in expected)
    s_kinds, j_kinds = _dv_entries(s_view), _dv_entries(j_view)
    assert s_kinds, "the deletes and upserts after the full compaction leave vectors"
    key = json.dumps
    assert sorted(map(key, s_kinds)) == sorted(map(key, j_kinds))
    assert all(k["content"] == 1 and k["format"] == "PUFFIN" and k["blob"] and k["references_live_file"]
               for k in s_kinds)

    # an older snapshot: the one before the upsert (the deletes applied, their vectors only)
    older = strata_table.latest_snapshot().id - 2
    assert older == java_table.latest_snapshot().id - 2
    s_old, j_old = read_snapshot(s_loc, older), read_snapshot(j_loc, older)
    assert canonical(judge_rows(s_old.rows)) == canonical(judge_rows(j_old.rows)) == \
        canonical(judge_rows(strata_table.to_arrow(snapshot_id=older)))

    # the differences
    s_deletes, j_deletes = s_view.deletes, j_view.deletes
    assert all(d["file_path"].startswith(f"{s_meta['location']}/metadata/") and d["file_path"].endswith(".puffin")
               for d in s_deletes)
    assert all("/index/index-" in d["file_path"] for d in j_deletes)
    assert {d["file_format"] for d in s_deletes} == {"PUFFIN"} and {d["file_format"] for d in j_deletes} == {"puffin"}
    assert all(d["lower_bounds"] for d in s_deletes) and not any(d["lower_bounds"] for d in j_deletes)
    assert "next-row-id" in s_meta and "next-row-id" not in j_meta
    assert all("first-row-id" in s and "added-rows" in s for s in s_meta["snapshots"])
    assert not any("first-row-id" in s for s in j_meta["snapshots"])
    assert all(m.get("first_row_id") is not None for m in s_view.manifests if m["content"] == 0)
    assert "first_row_id" not in j_view.manifests[0]
    s_py, j_py = read_iceberg_many([s_loc, j_loc])
    assert s_py.error is None, s_py.facts.get("trace")
    assert iceberg_rows(s_py) == expected
    assert s_py.facts["format_version"] == 3
    assert {f["file_format"] for f in s_py.facts["files"]} == {"PARQUET", "PUFFIN"}
    assert j_py.error is not None and "Incorrect magic bytes, expected b'PFA1'" in j_py.error, j_py.facts


def test_deletion_vectors_format_v3_append_table(judge_service: Service, tmp_path: Path) -> None:
    """An append table whose rows delete_where marked (Paimon's Java write has no such delete):
    Strata writes it; a copy of the table without the Iceberg metadata gets one more commit from
    Paimon (which then exports it afresh: every file, each vector pointing into the index file)
    and the original the same commit from Strata. The two format-3 exports give the same rows and
    the same delete entries."""
    warehouse = str(tmp_path / "warehouse")
    catalog = strata.load_catalog(warehouse)
    for db in ("s", "j"):
        catalog.create_database(db)
    data = typed(60)
    table = catalog.create_table("s.ev", data.schema, options={
        **ICEBERG, "metadata.iceberg.format-version": "3", "deletion-vectors.enabled": "true",
        "deletion-vectors.bitmap64": "true"})
    table.write(data.slice(0, 30))
    table.write(data.slice(30))
    table.delete_where(strata.col("id").isin([0, 7, 31, 32, 59]))
    shutil.copytree(Path(warehouse) / "s.db" / "ev", Path(warehouse) / "j.db" / "ev")
    shutil.rmtree(Path(warehouse) / "j.db" / "ev" / "metadata")
    more = typed(4, offset=100)
    result = paimon_java.write(warehouse, [{"table": "j.ev", "commits": [{"rows": judge_rows(more)}]}])
    assert "error" not in result[0], result
    table.write(more)
    table = catalog.get_table("s.ev")
    s_loc, j_loc = latest_metadata_location(table), java_metadata_location(warehouse, "j.ev")
    assert s_loc is not None
    assert metadata_json(s_loc)["format-version"] == metadata_json(j_loc)["format-version"] == 3
    expected = canonical(judge_rows(table.to_arrow()))
    assert canonical(judge_rows(catalog.get_table("j.ev").to_arrow())) == expected
    assert len(expected) == 59
    s_view, j_view = read_snapshot(s_loc), read_snapshot(j_loc)
    assert canonical(judge_rows(s_view.rows)) == canonical(judge_rows(j_view.rows)) == expected
    s_kinds = _dv_entries(s_view)
    assert len(s_kinds) == 2, "one vector for each of the two files with deleted rows"
    assert sorted(map(json.dumps, s_kinds)) == sorted(map(json.dumps, _dv_entries(j_view)))
    assert all("/index/index-" in d["file_path"] for d in j_view.deletes), "Paimon's own export"
    assert all(d["file_path"].endswith(".puffin") for d in s_view.deletes)
    [s_py] = read_iceberg_many([s_loc])
    assert iceberg_rows(s_py) == expected


def test_deletion_vectors_format_v3_each_continues_the_other(judge_service: Service, tmp_path: Path) -> None:
    """Strata committing on Paimon's format-3 table publishes format 3 too, its own Puffin vectors in
    place of Paimon's entries (a full rewrite: deletes that point into Paimon's index files are not
    carried forward), and pyiceberg reads it; Paimon's next commit continues that history (same
    format version, same uuid), and its export still reads right by offset."""
    warehouse = str(tmp_path / "warehouse")
    shape = dv_pk()
    shape.options["metadata.iceberg.format-version"] = "3"
    result = paimon_java.write(warehouse, [java_spec("j.dv_v3", shape)])
    assert "error" not in result[0], result
    uuid = metadata_json(java_metadata_location(warehouse, "j.dv_v3"))["table-uuid"]
    catalog = strata.load_catalog(warehouse)
    table = catalog.get_table("j.dv_v3")
    table.write(typed(3, offset=100))
    table.write(typed(2, offset=30, shift=11))  # upserts: new vectors on the compacted files
    table = catalog.get_table("j.dv_v3")
    latest = table.latest_snapshot()
    assert latest is not None
    location = latest_metadata_location(table)
    assert location is not None
    meta = metadata_json(location)
    assert meta["format-version"] == 3 and meta["table-uuid"] == uuid
    [view] = read_iceberg_many([location])
    assert view.error is None, view.facts.get("trace")
    assert view.facts["snapshots"] == list(range(1, latest.id + 1))
    expected = canonical(judge_rows(table.to_arrow()))
    assert iceberg_rows(view) == expected
    assert canonical(judge_rows(read_snapshot(location).rows)) == expected
    assert all(d["file_path"].endswith(".puffin") for d in read_snapshot(location).deletes)

    result = paimon_java.write(warehouse, [{"table": "j.dv_v3", "commits": [
        {"rows": [{**row, "_kind": "-D"} for row in judge_rows(typed(2, offset=10))]}]}])
    assert "error" not in result[0], result
    location = java_metadata_location(warehouse, "j.dv_v3")
    meta = metadata_json(location)
    assert meta["format-version"] == 3 and meta["table-uuid"] == uuid
    latest = catalog.get_table("j.dv_v3").latest_snapshot()
    assert latest is not None
    assert [s["snapshot-id"] for s in meta["snapshots"]] == list(range(1, latest.id + 1))
    view_after = read_snapshot(location)
    assert canonical(judge_rows(view_after.rows)) == canonical(judge_rows(catalog.get_table("j.dv_v3").to_arrow()))


# -- types only one side exports ------------------------------------------------------------------------

def test_types_only_one_side_exports(judge_service: Service, tmp_path: Path) -> None:
    """TIMESTAMP(3): Paimon refuses it (IcebergDataField: precision 4 to 9 only; its Parquet holds
    MILLIS, Iceberg wants MICROS) and, the snapshot already committed, fails the commit call; Strata
    exports it as Iceberg timestamp over the MILLIS column (pyiceberg and Trino 476 read it; a
    TIMESTAMP_LTZ(3) column of a mirrored table is stored in MICROS, see test_trino_iceberg_mirror.py).
    ARRAY: both export list<int> with the same element id (Paimon's SpecialFields), and their Parquet
    files carry it. TIMESTAMP(9): Paimon exports timestamp_ns (a format-3 type, in a format-2 file,
    over INT96 that pyiceberg cannot read); Strata refuses the table at create_table, naming the column."""
    warehouse = str(tmp_path / "warehouse")
    catalog = strata.load_catalog(warehouse)
    catalog.create_database("s")
    tables = {
        "ts3": (pa.schema([("id", pa.int64()), ("t", pa.timestamp("ms"))]), "TIMESTAMP(3)"),
        "arr": (pa.schema([("id", pa.int64()), ("t", pa.list_(pa.int32()))]), "ARRAY<INT>"),
        "ts9": (pa.schema([("id", pa.int64()), ("t", pa.timestamp("ns"))]), "TIMESTAMP(9)"),
    }
    values = {"ts3": [dt.datetime(2024, 1, 1, 0, 0, 0, 1000)], "arr": [[1, None, 3]],
              "ts9": [dt.datetime(2024, 1, 1, 0, 0, 0, 1)]}
    specs = []
    for name, (schema, sql) in tables.items():
        data = pa.table({"id": [1], "t": pa.array(values[name], schema.field("t").type)}, schema=schema)
        if name == "ts9":
            with pytest.raises(ValueError, match=r"column 't' of type TIMESTAMP\(9\)"):
                catalog.create_table(f"s.{name}", schema, options=dict(ICEBERG))
        else:
            catalog.create_table(f"s.{name}", schema, options=dict(ICEBERG)).write(data)
        specs.append({"table": f"j.{name}", "options": ICEBERG, "commits": [{"rows": judge_rows(data)}],
                      "fields": [{"name": "id", "type": "BIGINT"}, {"name": "t", "type": sql}]})
    results = {r["table"]: r for r in paimon_java.write(warehouse, specs, keep_going=True)}
    assert "precision from 4 to 9" in results["j.ts3"]["error"]
    assert catalog.get_table("j.ts3").latest_snapshot() is not None  # committed before the callback threw
    assert not (Path(warehouse) / "j.db" / "ts3" / "metadata").exists()
    assert "error" not in results["j.arr"] and "error" not in results["j.ts9"]

    strata_arr, strata_ts3 = (latest_metadata_location(catalog.get_table(f"s.{n}")) for n in ("arr", "ts3"))
    assert strata_arr is not None and strata_ts3 is not None
    java_arr, java_ts9 = (java_metadata_location(warehouse, f"j.{n}") for n in ("arr", "ts9"))
    assert metadata_json(java_ts9)["format-version"] == 2
    assert metadata_json(java_ts9)["schemas"][0]["fields"][1]["type"] == "timestamp_ns"
    # the same Iceberg list type, field ids included, and the same ids in both sides' Parquet files
    def fields(location: str) -> list[dict[str, Any]]:  # Paimon writes "doc": null, Strata no doc
        return [{k: v for k, v in f.items() if v is not None} for f in metadata_json(location)["schemas"][-1]["fields"]]

    assert fields(strata_arr) == fields(java_arr)
    element_ids = {str(pq.ParquetFile(f).schema).count("field_id=536871936 element")
                   for side in ("s", "j") for f in (Path(warehouse) / f"{side}.db" / "arr").rglob("data-*.parquet")}
    assert element_ids == {1}
    ts3, arr, strata_arr_view, ts9 = read_iceberg_many([strata_ts3, java_arr, strata_arr, java_ts9])
    assert ts3.facts["schema"][1][2] == "timestamp"
    assert iceberg_rows(ts3) == canonical(judge_rows(catalog.get_table("s.ts3").to_arrow()))
    assert arr.facts["schema"][1][2] == strata_arr_view.facts["schema"][1][2] == "list<int>"
    assert iceberg_rows(arr) == iceberg_rows(strata_arr_view) == canonical([{"id": 1, "t": [1, None, 3]}])
    # Paimon's timestamp_ns column cannot be read by pyiceberg: Paimon's Parquet file stores TIMESTAMP(9)
    # as INT96, which pyiceberg takes for a microsecond timestamp and will not promote to timestamp_ns
    assert ts9.facts["schema"][1][2] == "timestamp_ns"
    assert ts9.error is not None and "Cannot promote timestamp to timestamp_ns" in ts9.error, ts9.facts


# -- each continues the other's Iceberg history ---------------------------------------------------------

def _expected(table: strata.Table, shape: Shape) -> list[str]:
    return canonical(judge_rows(table.to_arrow(read_optimized=shape.view == "ro")))


def test_writers_continue_each_others_iceberg_history(judge_service: Service, tmp_path: Path) -> None:
    """Java writes each shape with Iceberg compatibility; Strata commits on top (its sync reads the
    v<N>.metadata.json that version-hint.text names: Paimon's); then Java commits again (Paimon
    reads v<N-1>.metadata.json: Strata's). Each time pyiceberg sees the new snapshot, the whole
    history and the same table uuid, and (but for deletion vectors, see above) the table's rows."""
    warehouse = str(tmp_path / "warehouse")
    catalog = strata.load_catalog(warehouse)
    shapes = {name: SHAPES[name]() for name in ("append_part", "pk_compacted", "dv_pk")}
    results = paimon_java.write(warehouse, [java_spec(f"j.{name}", shape) for name, shape in shapes.items()])
    assert not [r for r in results if "error" in r], results
    uuids = {name: metadata_json(java_metadata_location(warehouse, f"j.{name}"))["table-uuid"] for name in shapes}

    after_java = {name: catalog.get_table(f"j.{name}").latest_snapshot().id for name in shapes}
    for name, shape in shapes.items():
        table = catalog.get_table(f"j.{name}")
        more = typed(6, offset=100)
        more = with_parts(more, null=not shape.primary_keys) if "dt" in shape.schema.names else more
        table.write(more)
        if shape.primary_keys:
            table.compact(full=True)
    locations = [latest_metadata_location(catalog.get_table(f"j.{name}")) for name in shapes]
    assert None not in locations
    views = read_iceberg_many([str(loc) for loc in locations])
    for (name, shape), view in zip(shapes.items(), views, strict=True):
        table = catalog.get_table(f"j.{name}")
        latest = table.latest_snapshot()
        assert latest is not None and latest.id > after_java[name]
        assert view.error is None, view.facts.get("trace")
        assert view.facts["current"] == latest.id
        assert view.facts["snapshots"] == list(range(1, latest.id + 1)), name
        assert metadata_json(str(locations[list(shapes).index(name)]))["table-uuid"] == uuids[name]
        assert iceberg_rows(view) == _expected(table, shape), f"{name} after Strata's commit"

    after_strata = {name: catalog.get_table(f"j.{name}").latest_snapshot().id for name in shapes}
    results = paimon_java.write(warehouse, [
        {"table": f"j.{name}", "commits": [
            {"rows": judge_rows(with_parts(typed(4, offset=200), null=False) if "dt" in shape.schema.names
                                else typed(4, offset=200))},
            *([{"compact": True, "full": True}] if shape.primary_keys else [])]}
        for name, shape in shapes.items()])
    assert not [r for r in results if "error" in r], results
    locations = [java_metadata_location(warehouse, f"j.{name}") for name in shapes]
    views = read_iceberg_many(locations)
    for (name, shape), view, location in zip(shapes.items(), views, locations, strict=True):
        table = catalog.get_table(f"j.{name}")
        latest = table.latest_snapshot()
        assert latest is not None and latest.id > after_strata[name]
        assert view.error is None, view.facts.get("trace")
        assert view.facts["current"] == latest.id
        assert view.facts["snapshots"] == list(range(1, latest.id + 1)), name
        assert metadata_json(location)["table-uuid"] == uuids[name]
        if name != "dv_pk":  # Paimon's format-2 export ignores deletion vectors (see above)
            assert iceberg_rows(view) == _expected(table, shape), f"{name} after Java's commit"
