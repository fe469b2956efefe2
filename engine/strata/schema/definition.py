"""A new table's definition: its schema-0 from Arrow or a TableSchema, and the checks every
catalog runs before creating it (and schema evolution before publishing a version)."""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from strata import options as opts
from strata.errors import OptionError, SchemaMismatchError
from strata.mergetree.merge_function import validate_merge_options
from strata.schema.table_schema import TableSchema, schema_from_arrow


def build_schema(schema: pa.Schema | TableSchema, partition_keys: list[str] | None,
                 primary_keys: list[str] | None, options: Mapping[str, str] | None,
                 comment: str | None) -> TableSchema:
    if isinstance(schema, TableSchema):
        return schema
    opt = dict(options or {})
    pks = primary_keys if primary_keys is not None else _split(opt.pop("primary-key", None))
    parts = partition_keys if partition_keys is not None else _split(opt.pop("partition", None))
    return schema_from_arrow(schema, parts, pks, opt, comment)


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()] if value else []


def validate_schema(schema: TableSchema, where: str) -> None:
    """Reject what Strata (or Paimon) cannot store, naming the column or option."""
    opts.validate(schema.options, f"table {where}")
    names = schema.field_names
    if len(set(names)) != len(names):
        raise SchemaMismatchError(f"duplicate column names in table {where}: {names}")
    for key in schema.partition_keys + schema.primary_keys:
        if key not in names:
            raise SchemaMismatchError(f"key column {key!r} of table {where} is not a column: {names}")
    if schema.primary_keys and not set(schema.partition_keys) <= set(schema.primary_keys):
        raise SchemaMismatchError(
            f"primary key {schema.primary_keys} of table {where} must contain the partition keys "
            f"{schema.partition_keys}: a key that moves between partitions needs Paimon's cross-partition "
            "upsert mode (bucket=-1 with a global key index), which Strata does not support; add the "
            "partition keys to the primary key, or drop the partitioning")
    core = opts.CoreOptions(schema.options)
    bucket = core.bucket
    if schema.primary_keys and bucket == -2:
        raise SchemaMismatchError(
            f"primary-key table {where}: postpone bucket mode (bucket=-2) is not supported for writing (its "
            "rows stay invisible until Paimon's postpone compaction assigns buckets); leave option 'bucket' "
            "unset for dynamic buckets, or set a fixed bucket count N > 0")
    if schema.primary_keys and bucket == -1 and str(core.get("log.system")) == "kafka":
        raise SchemaMismatchError(
            f"primary-key table {where}: log.system=kafka needs a fixed bucket count (a Kafka partition per "
            "bucket), not dynamic buckets; set option 'bucket' to N > 0")
    if not schema.primary_keys and bucket > 0 and not core.bucket_key():
        raise SchemaMismatchError(f"append table {where} with bucket={bucket} needs option 'bucket-key'")
    if not schema.primary_keys and bucket == -2:
        raise SchemaMismatchError(f"postpone bucket is not supported (table {where})")
    validate_merge_options(schema, f"table {where}")
    _check_supported(schema, core, where)
    for key in schema.bucket_keys() if bucket > 0 else []:
        if key not in names:
            raise SchemaMismatchError(f"bucket-key column {key!r} of table {where} is not a column")
        if key in schema.partition_keys:
            raise SchemaMismatchError(f"bucket-key {key!r} of table {where} cannot be a partition key")
        if schema.primary_keys and key not in schema.primary_keys:
            raise SchemaMismatchError(f"bucket-key {key!r} of table {where} must be part of the primary key")
    _check_nested_keys(schema, core, where)


def _check_nested_keys(schema: TableSchema, core: opts.CoreOptions, where: str) -> None:
    """Keys are hashed, compared and written into BinaryRows: Paimon refuses collection types there."""
    roles = [("primary key", schema.primary_keys), ("partition key", schema.partition_keys)]
    if schema.primary_keys:
        roles.append(("sequence.field", core.sequence_fields()))
    if core.bucket > 0:
        roles.append(("bucket-key", schema.bucket_keys()))
    for role, keys in roles:
        for key in keys:
            dtype = schema.field(key).type
            if dtype.is_nested:
                raise SchemaMismatchError(f"{role} column {key!r} of table {where} has type {dtype}: "
                                          f"{dtype.root} columns cannot be used as a {role}")


def _check_deletion_vectors(schema: TableSchema, core: opts.CoreOptions, where: str) -> None:
    """Paimon's SchemaValidation.validateForDeletionVectors."""
    producer = core.get("changelog-producer")
    if producer not in ("none", "input", "lookup"):
        raise OptionError(f"table {where}: deletion-vectors.enabled=true works with changelog-producer none, "
                          f"input or lookup, not {producer!r}")
    if schema.primary_keys and core.merge_engine == "first-row":
        raise OptionError(f"table {where}: the first-row merge engine never deletes old rows, so it does not "
                          "take deletion-vectors.enabled=true")


def _check_supported(schema: TableSchema, core: opts.CoreOptions, where: str) -> None:
    """Refuse features Strata would silently get wrong (rather than write an unreadable table)."""
    from strata.mergetree.merge_function import merge_function_for

    if schema.primary_keys:
        try:
            merge_function_for(schema.options)
        except NotImplementedError as exc:
            raise OptionError(f"table {where}: {exc}") from None
    if core.get("deletion-vectors.enabled"):
        _check_deletion_vectors(schema, core, where)
    if not core.get("partition.legacy-name"):
        raise OptionError(f"table {where}: partition.legacy-name=false is not supported yet")
    if str(core.get("metadata.iceberg.storage")) != "disabled":  # no table may drop out of its mirror
        from strata.iceberg.types import check_exportable

        check_exportable(schema, where)
    rowkind = core.get_str("rowkind.field")
    if rowkind and (rowkind not in schema.field_names or not schema.field(rowkind).type.is_string):
        raise SchemaMismatchError(f"rowkind.field {rowkind!r} of table {where} must name a STRING column")

