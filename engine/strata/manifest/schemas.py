"""Avro writer schemas of Paimon's manifest files, as Java's AvroSchemaConverter derives them.

Rules taken from ``AvroSchemaConverter.convertToSchema``:
- the top record is ``org.apache.paimon.avro.generated.record``; a nested ROW is named
  ``<parent record name>_<field name>`` (so ``record__FILE``, ``record__FILE__KEY_STATS``), and
  an ARRAY's element row takes the array field's name (``record__DELETIONS_VECTORS_RANGES``);
- a nullable type is the union ``["null", T]`` and its field gets ``"default": null``;
- TINYINT/SMALLINT/INT are ``int``, BIGINT ``long``, STRING ``string``, BYTES ``bytes``;
- TIMESTAMP(3) is ``long`` with logicalType ``timestamp-millis``.
Nullability follows the Java row types (e.g. ``_CREATION_TIME`` is a nullable TIMESTAMP(3) and
``_NULL_COUNTS`` a nullable ARRAY<BIGINT?>). Nested records are written, as Java's
``Schema.toString`` does, with short names that inherit the top record's namespace.
"""

from __future__ import annotations

from typing import Any

NAMESPACE = "org.apache.paimon.avro.generated"
TOP = "record"

Schema = dict[str, Any]


def _req(name: str, avro_type: Any) -> Schema:
    return {"name": name, "type": avro_type}


def _opt(name: str, avro_type: Any) -> Schema:
    return {"name": name, "type": ["null", avro_type], "default": None}


def _array(items: Any) -> Schema:
    return {"type": "array", "items": items}


def _record(name: str, fields: list[Schema]) -> Schema:
    return {"type": "record", "name": name, "fields": fields}


def _top(fields: list[Schema]) -> Schema:
    return {"type": "record", "name": TOP, "namespace": NAMESPACE, "fields": fields}


def _simple_stats(record_name: str) -> Schema:
    return _record(record_name, [
        _req("_MIN_VALUES", "bytes"),
        _req("_MAX_VALUES", "bytes"),
        _opt("_NULL_COUNTS", _array(["null", "long"])),
    ])


def _data_file_meta(name: str) -> Schema:
    return _record(name, [
        _req("_FILE_NAME", "string"),
        _req("_FILE_SIZE", "long"),
        _req("_ROW_COUNT", "long"),
        _req("_MIN_KEY", "bytes"),
        _req("_MAX_KEY", "bytes"),
        _req("_KEY_STATS", _simple_stats(f"{name}__KEY_STATS")),
        _req("_VALUE_STATS", _simple_stats(f"{name}__VALUE_STATS")),
        _req("_MIN_SEQUENCE_NUMBER", "long"),
        _req("_MAX_SEQUENCE_NUMBER", "long"),
        _req("_SCHEMA_ID", "long"),
        _req("_LEVEL", "int"),
        _req("_EXTRA_FILES", _array("string")),
        _opt("_CREATION_TIME", {"type": "long", "logicalType": "timestamp-millis"}),
        _opt("_DELETE_ROW_COUNT", "long"),
        _opt("_EMBEDDED_FILE_INDEX", "bytes"),
        _opt("_FILE_SOURCE", "int"),
        _opt("_VALUE_STATS_COLS", _array("string")),
        _opt("_EXTERNAL_PATH", "string"),
        _opt("_FIRST_ROW_ID", "long"),
        _opt("_WRITE_COLS", _array("string")),
        _opt("_WRITE_COLS_SEQUENCES", _array("long")),
    ])


MANIFEST_ENTRY_SCHEMA: Schema = _top([
    _req("_VERSION", "int"),
    _req("_KIND", "int"),
    _req("_PARTITION", "bytes"),
    _req("_BUCKET", "int"),
    _req("_TOTAL_BUCKETS", "int"),
    _req("_FILE", _data_file_meta(f"{TOP}__FILE")),
])

MANIFEST_FILE_META_SCHEMA: Schema = _top([
    _req("_VERSION", "int"),
    _req("_FILE_NAME", "string"),
    _req("_FILE_SIZE", "long"),
    _req("_NUM_ADDED_FILES", "long"),
    _req("_NUM_DELETED_FILES", "long"),
    _req("_PARTITION_STATS", _simple_stats(f"{TOP}__PARTITION_STATS")),
    _req("_SCHEMA_ID", "long"),
    _opt("_MIN_BUCKET", "int"),
    _opt("_MAX_BUCKET", "int"),
    _opt("_MIN_LEVEL", "int"),
    _opt("_MAX_LEVEL", "int"),
    _opt("_MIN_ROW_ID", "long"),
    _opt("_MAX_ROW_ID", "long"),
])

_DELETION_VECTOR_META = _record(f"{TOP}__DELETIONS_VECTORS_RANGES", [
    _req("f0", "string"),
    _req("f1", "int"),
    _req("f2", "int"),
    _opt("_CARDINALITY", "long"),
])

_GLOBAL_INDEX_META = _record(f"{TOP}__GLOBAL_INDEX", [
    _req("_ROW_RANGE_START", "long"),
    _req("_ROW_RANGE_END", "long"),
    _req("_INDEX_FIELD_ID", "int"),
    _opt("_EXTRA_FIELD_IDS", _array("int")),
    _opt("_INDEX_META", "bytes"),
    _opt("_SOURCE_META", "bytes"),
])

INDEX_MANIFEST_ENTRY_SCHEMA: Schema = _top([
    _req("_VERSION", "int"),
    _req("_KIND", "int"),
    _req("_PARTITION", "bytes"),
    _req("_BUCKET", "int"),
    _req("_INDEX_TYPE", "string"),
    _req("_FILE_NAME", "string"),
    _req("_FILE_SIZE", "long"),
    _req("_ROW_COUNT", "long"),
    # DeletionVectorMeta.SCHEMA is a nullable row, so the array items are nullable too.
    _opt("_DELETIONS_VECTORS_RANGES", _array(["null", _DELETION_VECTOR_META])),
    _opt("_EXTERNAL_PATH", "string"),
    _opt("_GLOBAL_INDEX", _GLOBAL_INDEX_META),
])
