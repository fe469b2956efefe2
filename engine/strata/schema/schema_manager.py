"""Reading and writing the append-only ``schema/schema-N`` files of a table."""

from __future__ import annotations

import re

from strata.errors import CorruptMetadataError, TableAlreadyExistsError
from strata.fs import FileIO
from strata.fs.file_io import publish_new
from strata.schema.table_schema import TableSchema

_SCHEMA_FILE = re.compile(r"^schema-(\d+)$")


class SchemaManager:
    def __init__(self, file_io: FileIO, table_path: str):
        self.file_io = file_io
        self.dir = f"{table_path.rstrip('/')}/schema"
        self._cache: dict[int, TableSchema] = {}

    def path(self, schema_id: int) -> str:
        return f"{self.dir}/schema-{schema_id}"

    def list_ids(self) -> list[int]:
        ids = []
        for status in self.file_io.list_status(self.dir):
            m = _SCHEMA_FILE.match(status.path.rsplit("/", 1)[-1])
            if m:
                ids.append(int(m.group(1)))
        return sorted(ids)

    def latest(self) -> TableSchema | None:
        ids = self.list_ids()
        return self.schema(ids[-1]) if ids else None

    def schema(self, schema_id: int) -> TableSchema:
        cached = self._cache.get(schema_id)
        if cached is None:
            path = self.path(schema_id)
            try:
                data = self.file_io.read_bytes(path)
            except FileNotFoundError:
                raise CorruptMetadataError(f"schema file {path} is missing") from None
            cached = TableSchema.from_json(data, where=path)
            self._cache[schema_id] = cached
        return cached

    def create(self, schema: TableSchema, where: str) -> None:
        """Write schema-0 of a new table; fails if the table already has one. A write whose reply
        was lost is read back (CommitStateUnknownError if that fails too)."""
        if not publish_new(self.file_io, self.path(schema.id), schema.to_json().encode(),
                           f"schema {schema.id} of table {where}"):
            raise TableAlreadyExistsError(f"table {where} already exists")

    def commit(self, schema: TableSchema) -> bool:
        """Publish the next schema version atomically; False if a concurrent change won. A write
        whose reply was lost is read back (CommitStateUnknownError if that fails too)."""
        ok = publish_new(self.file_io, self.path(schema.id), schema.to_json().encode(),
                         f"schema {schema.id} of {self.dir}")
        if ok:
            self._cache[schema.id] = schema
        return ok
