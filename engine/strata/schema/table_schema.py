"""TableSchema: the content of ``schema/schema-N`` (Paimon's TableSchema JSON, version 3)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from strata.errors import CorruptMetadataError, SchemaMismatchError
from strata.schema.types import DataField, DataType

SCHEMA_VERSION = 3
# Field ids of the system columns in primary-key data files (KeyValue / SpecialFields).
KEY_FIELD_ID_START = 2147483647 // 2
SEQUENCE_NUMBER_FIELD_ID = 2147483647 - 1
VALUE_KIND_FIELD_ID = 2147483647 - 2
KEY_PREFIX = "_KEY_"
SEQUENCE_NUMBER = "_SEQUENCE_NUMBER"
VALUE_KIND = "_VALUE_KIND"


@dataclass
class TableSchema:
    id: int
    fields: list[DataField]
    partition_keys: list[str] = field(default_factory=list)
    primary_keys: list[str] = field(default_factory=list)
    options: dict[str, str] = field(default_factory=dict)
    comment: str | None = None
    highest_field_id: int = -1
    time_millis: int = 0

    def __post_init__(self) -> None:
        if self.highest_field_id < 0:
            self.highest_field_id = max((f.id for f in self.fields), default=-1)
        if not self.time_millis:
            self.time_millis = int(time.time() * 1000)

    # -- derived views ---------------------------------------------------------------
    @property
    def field_names(self) -> list[str]:
        return [f.name for f in self.fields]

    def field(self, name: str) -> DataField:
        for f in self.fields:
            if f.name == name:
                return f
        raise SchemaMismatchError(f"no column {name!r}; columns are {self.field_names}")

    @property
    def trimmed_primary_keys(self) -> list[str]:
        """Primary key minus partition keys: the key stored in data files."""
        trimmed = [k for k in self.primary_keys if k not in self.partition_keys]
        return trimmed or list(self.primary_keys)

    def bucket_keys(self) -> list[str]:
        explicit = self.options.get("bucket-key")
        if explicit:
            return [k.strip() for k in explicit.split(",") if k.strip()]
        return self.trimmed_primary_keys

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([f.to_arrow() for f in self.fields])

    def partition_fields(self) -> list[DataField]:
        return [self.field(k) for k in self.partition_keys]

    def key_fields(self) -> list[DataField]:
        return [self.field(k) for k in self.trimmed_primary_keys]

    def file_arrow_schema(self) -> pa.Schema:
        """Schema of data files: system columns first for primary-key tables, with field ids."""
        value = [_with_id(f.to_arrow(), f.id) for f in self.fields]
        if not self.primary_keys:
            return pa.schema(value)
        keys = [_with_id(pa.field(KEY_PREFIX + f.name, f.type.to_arrow(), nullable=False),
                         KEY_FIELD_ID_START + f.id) for f in self.key_fields()]
        system = [_with_id(pa.field(SEQUENCE_NUMBER, pa.int64(), nullable=False), SEQUENCE_NUMBER_FIELD_ID),
                  _with_id(pa.field(VALUE_KIND, pa.int8(), nullable=False), VALUE_KIND_FIELD_ID)]
        return pa.schema(keys + system + value)

    # -- JSON ----------------------------------------------------------------------------
    def to_json(self) -> str:
        obj: dict[str, Any] = {
            "version": SCHEMA_VERSION,
            "id": self.id,
            "fields": [f.to_json() for f in self.fields],
            "highestFieldId": self.highest_field_id,
            "partitionKeys": self.partition_keys,
            "primaryKeys": self.primary_keys,
            "options": self.options,
        }
        if self.comment is not None:
            obj["comment"] = self.comment
        obj["timeMillis"] = self.time_millis
        return json.dumps(obj, indent=2)

    @staticmethod
    def from_json(text: str | bytes, where: str = "schema") -> TableSchema:
        try:
            obj = json.loads(text)
            options = {str(k): str(v) for k, v in obj.get("options", {}).items()}
            version = int(obj.get("version", 1))
            if version <= 1 and "bucket" not in options:
                options["bucket"] = "1"
            if version <= 2 and "file.format" not in options:
                options["file.format"] = "orc"
            return TableSchema(
                id=int(obj["id"]),
                fields=[DataField.from_json(f) for f in obj["fields"]],
                partition_keys=list(obj.get("partitionKeys", [])),
                primary_keys=list(obj.get("primaryKeys", [])),
                options=options,
                comment=obj.get("comment"),
                highest_field_id=int(obj.get("highestFieldId", -1)),
                time_millis=int(obj.get("timeMillis", 0)),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptMetadataError(f"cannot parse {where}: {exc}") from None


def _with_id(f: pa.Field, field_id: int) -> pa.Field:
    return f.with_metadata({b"PARQUET:field_id": str(field_id).encode()})


def schema_from_arrow(arrow_schema: pa.Schema, partition_keys: list[str] | None = None,
                      primary_keys: list[str] | None = None, options: dict[str, str] | None = None,
                      comment: str | None = None) -> TableSchema:
    """A schema-0 from an Arrow schema; primary-key columns become NOT NULL."""
    pks = list(primary_keys or [])
    fields = []
    for i, f in enumerate(arrow_schema):
        dtype = DataType.from_arrow(f.type, nullable=f.nullable and f.name not in pks)
        fields.append(DataField(i, f.name, dtype))
    return TableSchema(0, fields, list(partition_keys or []), pks, dict(options or {}), comment)
