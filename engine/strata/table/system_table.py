"""SystemTable: ``db.t$name`` as a read-only Table, what ``catalog.get_table("db.t$files")`` returns.

Its rows come from ``strata.table.system_tables``, which reads the data table's FileStore.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

import pyarrow as pa

from strata.errors import StrataError
from strata.expressions import Predicate
from strata.schema.table_schema import TableSchema, schema_from_arrow
from strata.schema.types import DataType
from strata.store import Identifier
from strata.table.system_tables import check_name, read_system_table, system_table_schema
from strata.table.table import Table

SYSTEM_TABLE_SPLITTER = "$"


class ReadOnlyTableError(StrataError, TypeError):
    """A write or schema change aimed at a system table."""


class SystemTable(Table):
    """``db.t$name``: a read-only view of a table's metadata; read it with to_arrow / to_pandas."""

    def __init__(self, table: Table, name: str):
        key = check_name(table.store, name)
        self.data_table = table
        self.system_name = key
        arrow_schema = system_table_schema(table, key)
        ident = Identifier(table.identifier.database, f"{table.identifier.table}{SYSTEM_TABLE_SPLITTER}{key}")
        super().__init__(table.file_io, table.path, ident, _as_table_schema(table, key, arrow_schema),
                         catalog=table.catalog)
        self.arrow_schema = arrow_schema

    def __repr__(self) -> str:
        return f"SystemTable({self.identifier})"

    def to_arrow(self, columns: Sequence[str] | None = None, filter: Predicate | None = None,
                 snapshot_id: int | None = None, timestamp_millis: int | None = None,
                 tag: str | None = None, read_optimized: bool = False) -> pa.Table:
        return read_system_table(self.data_table, self.system_name, columns, filter, snapshot_id,
                                 timestamp_millis, tag)

    read = to_arrow

    def to_pandas(self, columns: Sequence[str] | None = None, filter: Predicate | None = None,
                  snapshot_id: int | None = None) -> Any:
        return self.to_arrow(columns, filter, snapshot_id).to_pandas()

    def to_batches(self, columns: Sequence[str] | None = None, filter: Predicate | None = None,
                   snapshot_id: int | None = None) -> Iterator[pa.RecordBatch]:
        return iter(self.to_arrow(columns, filter, snapshot_id).to_batches())

    def _read_only(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise ReadOnlyTableError(f"system table {self.identifier} is read-only")

    # everything that writes, changes the data table, or plans its data splits is refused
    write = delete = delete_where = new_write = new_commit = compact = alter = _read_only
    scan = new_scan = new_read = read_incremental = system_table = _read_only
    add_column = drop_column = rename_column = update_column_type = set_options = remove_options = _read_only
    create_tag = delete_tag = expire_tags = rollback_to = expire_snapshots = expire_partitions = _read_only
    remove_orphan_files = reset_consumer = clear_consumers = _read_only


def _as_table_schema(table: Table, key: str, arrow_schema: pa.Schema) -> TableSchema:
    """A TableSchema describing the system table's columns (for callers that look columns up,
    e.g. the CLI's --columns / --where); columns without a Paimon atomic type are left out."""
    if key == "ro":
        return TableSchema(table.schema.id, list(table.schema.fields))
    atomic = []
    for f in arrow_schema:
        try:
            DataType.from_arrow(f.type)
        except ValueError:
            continue
        atomic.append(f)
    return schema_from_arrow(pa.schema(atomic))
