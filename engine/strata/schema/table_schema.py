"""TableSchema: the content of ``schema/schema-N`` (Paimon's TableSchema JSON, version 3)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from strata.errors import CorruptMetadataError, SchemaMismatchError
from strata.schema.types import DataField, DataType, assign_field_ids, highest_nested_id

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
            self.highest_field_id = max((max(f.id, highest_nested_id(f.type)) for f in self.fields), default=-1)
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

    def file_arrow_schema(self, physical: bool = False) -> pa.Schema:
        """Schema of data files: system columns first for primary-key tables, with field ids.
        `physical`: as the Parquet writer stores it (nested field ids; see `_file_type`)."""
        micros = self.options.get("metadata.iceberg.storage", "disabled") != "disabled"
        value = [_file_field(f.name, f.type, f.id, micros, physical) for f in self.fields]
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


# Paimon's ids of the fields inside collections (SpecialFields): from the column's id and the depth
NESTED_ID_BASE = 2147483647 // 4
NESTED_DEPTH_LIMIT = 1 << 10


def _file_field(name: str, dtype: DataType, field_id: int, micros: bool, physical: bool) -> pa.Field:
    arrow = _file_type(dtype, field_id, 0, micros) if physical else dtype.to_arrow()
    return _with_id(pa.field(name, arrow, nullable=dtype.nullable), field_id)


def _file_type(dtype: DataType, field_id: int, depth: int, micros: bool) -> pa.DataType:
    """A column's Arrow type in data files: element, key and value fields carry Paimon's nested
    field ids (readers that resolve Parquet columns by id need them: Iceberg's); with `micros`
    (tables mirrored to Iceberg), TIMESTAMP WITH LOCAL TIME ZONE of precision <= 3 is stored in
    microseconds, the only unit Iceberg allows (Trino refuses a MILLIS timestamptz column)."""
    def child(name: str, t: DataType, child_id: int) -> pa.Field:
        return _with_id(pa.field(name, _file_type(t, field_id, depth + 1, micros), nullable=t.nullable), child_id)

    value_id = NESTED_ID_BASE + field_id * NESTED_DEPTH_LIMIT + depth + 1
    if dtype.root == "ROW":  # a ROW's fields carry their own ids, and number what they hold afresh
        return pa.struct([_with_id(pa.field(f.name, _file_type(f.type, f.id, 0, micros), nullable=f.type.nullable),
                                   f.id) for f in dtype.fields or ()])
    if dtype.root == "ARRAY" and dtype.element is not None:
        return pa.list_(child("element", dtype.element, value_id))
    if dtype.root in ("MAP", "MULTISET"):
        key = dtype.key if dtype.root == "MAP" else dtype.element
        value = dtype.value if dtype.root == "MAP" else DataType("INT", nullable=False)
        assert key is not None and value is not None
        key_id = NESTED_ID_BASE - field_id * NESTED_DEPTH_LIMIT - depth - 1
        return pa.map_(child("key", key.not_null(), key_id), child("value", value, value_id))
    if micros and dtype.root == "TIMESTAMP_LTZ" and (dtype.precision or 0) <= 3:
        return pa.timestamp("us", tz="UTC")
    return dtype.to_arrow()


def schema_from_arrow(arrow_schema: pa.Schema, partition_keys: list[str] | None = None,
                      primary_keys: list[str] | None = None, options: dict[str, str] | None = None,
                      comment: str | None = None) -> TableSchema:
    """A schema-0 from an Arrow schema; primary-key columns become NOT NULL."""
    pks = list(primary_keys or [])
    fields = []
    highest = -1
    for f in arrow_schema:  # ids in Paimon's order: a column, then the fields of its ROWs
        highest += 1
        dtype = DataType.from_arrow(f.type, nullable=f.nullable and f.name not in pks)
        dtype, nested = assign_field_ids(dtype, highest)
        fields.append(DataField(highest, f.name, dtype))
        highest = nested
    return TableSchema(0, fields, list(partition_keys or []), pks, dict(options or {}), comment)
