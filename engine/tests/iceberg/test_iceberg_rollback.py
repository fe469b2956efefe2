"""A rollback of a table with the Iceberg mirror, as Iceberg readers meet it: after rolling back
(to a snapshot or to a tag) and writing on, pyiceberg reads the table's own rows, from the
metadata file Strata names current and through the Iceberg REST catalog, with and without a
statistics version of the rolled-back metadata. A published metadata file is never rewritten,
version numbers only grow (Iceberg's Hadoop readers probe past the hint), and no statistics of a
rolled-back snapshot stay listed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg_oracle import read_iceberg

import strata
from strata.cli import main as cli
from strata.iceberg import latest_metadata_location
from strata.iceberg.location import metadata_dir
from strata.iceberg.versions import metadata_file, read_hint
from strata.table.table import Table
from strata_platform.iceberg_rest import IcebergRestCatalog, start

pytestmark = pytest.mark.pyiceberg

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())])


def batch(*ids: int) -> pa.Table:
    return pa.table({"id": list(ids), "name": [f"n{i}" for i in ids]}, schema=SCHEMA)


def rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted(zip(table.column("id").to_pylist(), table.column("name").to_pylist(), strict=True))


class PublishedFiles:
    """Every metadata file seen so far, by name: a name must keep the bytes it was published with."""

    def __init__(self, table: Table):
        self.table, self.dir = table, metadata_dir(table)
        self.seen: dict[str, bytes] = {}

    def check(self) -> None:
        io = self.table.file_io
        for status in io.list_status(self.dir):
            name = status.path.rsplit("/", 1)[-1]
            if not name.endswith(".metadata.json"):
                continue
            data = io.read_bytes(f"{self.dir}/{name}")
            assert self.seen.setdefault(name, data) == data, f"published metadata file {name} was rewritten"


@pytest.fixture
def rest_uri(catalog: strata.Catalog) -> Iterator[str]:
    server = start(IcebergRestCatalog(catalog), port=0)
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def assert_iceberg_reads_the_table(table: Table, options: dict[str, str], rest_uri: str) -> None:
    """pyiceberg, from the current metadata file, from the file the hint names (as Iceberg's Hadoop
    tables read) and through the REST catalog, reads the table's rows, and every data file it
    plans exists."""
    expected = rows(table.to_arrow())
    directory = metadata_dir(table)
    hint = read_hint(table.file_io, directory)
    assert hint is not None
    assert not table.file_io.exists(metadata_file(directory, hint + 1)), \
        "a metadata version past the hint would be read by Iceberg's Hadoop tables"
    sources: list[dict[str, Any]] = [{"metadata": latest_metadata_location(table)},
                                     {"metadata": metadata_file(directory, hint)},
                                     {"metadata": None, "rest": rest_uri, "identifier": f"db.{table.identifier.table}"}]
    for source in sources:
        got, facts = read_iceberg(source.pop("metadata"), options, **source)
        assert rows(got) == expected, source
        assert facts["current"] == table.latest_snapshot().id
        for path in facts["layouts"]:
            assert table.file_io.exists(path), f"{source}: a listed data file does not exist: {path}"


def current_metadata(table: Table) -> dict[str, Any]:
    location = latest_metadata_location(table)
    assert location is not None
    return dict(json.loads(table.file_io.read_bytes(location)))


@pytest.mark.parametrize("target", ["snapshot", "tag"])
@pytest.mark.parametrize("statistics", [False, True], ids=["plain", "statistics"])
def test_rollback_then_writes_are_what_iceberg_readers_see(catalog: strata.Catalog, warehouse: str,
                                                           warehouse_options: dict[str, str], rest_uri: str,
                                                           target: str, statistics: bool) -> None:
    if statistics:
        pytest.importorskip("datasketches")
    table = catalog.create_table("db.t", SCHEMA, options={
        "metadata.iceberg.storage": "table-location",
        "metadata.iceberg.statistics": "compaction" if statistics else "manual"})
    published = PublishedFiles(table)
    for ids in ((1, 2), (3,), (4,)):
        table.write(batch(*ids))
        published.check()
    if target == "tag":
        table.create_tag("before", 2)
    if statistics:  # the head about to be rolled back gets a statistics version (v3.stats.metadata.json)
        assert cli(["--warehouse", warehouse, "iceberg", "stats", "db.t"]) == 0
        assert latest_metadata_location(table).endswith(".stats.metadata.json")  # type: ignore[union-attr]
    doomed_statistics = {e["statistics-path"] for e in current_metadata(table).get("statistics") or []
                         if e["snapshot-id"] > 2}
    assert bool(doomed_statistics) == statistics
    published.check()

    table.rollback_to("before" if target == "tag" else 2)
    published.check()
    assert rows(table.to_arrow()) == rows(batch(1, 2, 3))
    assert_iceberg_reads_the_table(table, warehouse_options, rest_uri)

    table.write(batch(10))
    published.check()
    table.write(batch(11, 12))
    published.check()
    assert rows(table.to_arrow()) == rows(batch(1, 2, 3, 10, 11, 12))
    assert_iceberg_reads_the_table(table, warehouse_options, rest_uri)

    metadata = current_metadata(table)
    listed = {e["statistics-path"] for e in metadata.get("statistics") or []}
    assert not listed & doomed_statistics, "statistics of rolled-back snapshots are still listed"
    live = {s.id: s.time_millis for s in table.snapshots()}
    for snapshot in metadata["snapshots"]:
        assert live.get(snapshot["snapshot-id"]) == snapshot["timestamp-ms"], \
            f"Iceberg snapshot {snapshot['snapshot-id']} is not the table's"


def test_deletion_vector_table_rolled_back_then_upserted(catalog: strata.Catalog, warehouse_options: dict[str, str],
                                                         rest_uri: str) -> None:
    """The issue's path on a primary-key table read through deletion vectors: a rollback, then two
    upserts, and only then a reader (nothing is read in between)."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())])
    table = catalog.create_table("db.dv", schema, primary_keys=["id"], options={
        "metadata.iceberg.storage": "table-location", "bucket": "1", "deletion-vectors.enabled": "true"})
    table.write(batch(*range(10)))
    table.write(batch(1, 2, 3).set_column(1, "name", pa.array(["a", "b", "c"])))
    table.write(batch(4, 5).set_column(1, "name", pa.array(["d", "e"])))
    table.rollback_to(2)
    table.write(batch(5, 6).set_column(1, "name", pa.array(["x", "y"])))
    table.write(batch(1, 11).set_column(1, "name", pa.array(["z", "w"])))
    assert table.to_arrow().num_rows == 11
    assert_iceberg_reads_the_table(table, warehouse_options, rest_uri)


def test_entries_stamped_after_their_commit_are_not_taken_for_rolled_back(catalog: strata.Catalog) -> None:
    """Paimon's Java mirror stamps an Iceberg snapshot with the time it wrote the metadata, just
    after the commit: Strata continuing that metadata keeps its history (it dropped it as rolled
    back when it asked for the commit time itself), and a rollback still drops what it removed."""
    table = catalog.create_table("db.java_stamped", SCHEMA, options={"metadata.iceberg.storage": "table-location"})
    table.write(batch(1))
    table.write(batch(2))
    location = latest_metadata_location(table)
    assert location is not None
    published = json.loads(table.file_io.read_bytes(location))
    for entry in published["snapshots"]:
        entry["timestamp-ms"] += 7  # as Java's callback stamps them: a few ms after each commit
    table.file_io.write_bytes(location, json.dumps(published).encode())
    table.write(batch(3))
    current = json.loads(table.file_io.read_bytes(latest_metadata_location(table) or ""))
    assert [s["snapshot-id"] for s in current["snapshots"]] == [1, 2, 3]
    table.rollback_to(2)
    table.write(batch(4))
    current = json.loads(table.file_io.read_bytes(latest_metadata_location(table) or ""))
    assert [s["snapshot-id"] for s in current["snapshots"]] == [1, 2, 3]
    assert current["snapshots"][-1]["timestamp-ms"] == table.latest_snapshot().time_millis


def test_rollback_across_a_schema_change_defines_the_snapshots_schema(catalog: strata.Catalog,
                                                                      warehouse_options: dict[str, str]) -> None:
    """The Iceberg history starts after a column was dropped (the mirror was turned on then), and a
    rollback goes to a snapshot written before: its metadata names the old schema while the
    table's current schema is the newest, and must define both (Iceberg readers resolve a
    snapshot's schema by its id)."""
    table = catalog.create_table("db.t", SCHEMA)
    table.write(batch(1, 2))
    table = table.drop_column("name").set_options(**{"metadata.iceberg.storage": "table-location"})
    table.write(pa.table({"id": pa.array([3], pa.int64())}))
    table.rollback_to(1)

    metadata = current_metadata(table)
    defined = {s["schema-id"] for s in metadata["schemas"]}
    assert [s["schema-id"] for s in metadata["snapshots"]] == [0] and metadata["current-schema-id"] == 2
    assert {0, 2} <= defined
    got, facts = read_iceberg(latest_metadata_location(table), warehouse_options)
    assert sorted(got.column("id").to_pylist()) == [1, 2] and facts["current"] == 1


@pytest.mark.local_storage_only(reason="fast-forward replaces main's snapshots under the table's commit lock: on "
                                       "local disk the publish lock; an object store needs the JDBC catalog's")
def test_fast_forward_to_a_branch_committed_before_main_is_what_iceberg_readers_see(
        catalog: strata.Catalog, warehouse_options: dict[str, str], rest_uri: str) -> None:
    """The branch's snapshot 2 was committed before main's snapshot 2, which the fast-forward
    replaces: the mirror, showing main's 2, must not take the branch's for it (its entry's time is
    after the branch's commit) and must show the branch's rows."""
    table = catalog.create_table("db.t", SCHEMA, options={"metadata.iceberg.storage": "table-location"})
    table.write(batch(1, 2))
    table.create_branch("fix", from_snapshot=1)
    table.on_branch("fix").write(batch(20))
    table.write(batch(3))  # main's snapshot 2, committed after the branch's
    assert current_metadata(table)["current-snapshot-id"] == 2
    table.fast_forward("fix")
    assert rows(table.to_arrow()) == rows(batch(1, 2, 20))
    assert_iceberg_reads_the_table(table, warehouse_options, rest_uri)
    table.write(batch(30))
    assert_iceberg_reads_the_table(table, warehouse_options, rest_uri)
