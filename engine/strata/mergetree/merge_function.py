"""Merge functions: how the records of one key, in merge order, collapse into one.

Each works on a whole sorted table at once (vectorized): rows are sorted by key then sequence
number, and the result has one row per key, still in key order, in the same layout. With
``sequence.field`` the records of a key are first reordered by those fields (ties keep arrival
order, see sequence.py). Deletes (-U/-D) that survive a merge are kept in the result so that a
merge of some runs can still cancel older runs; readers drop them at the end.

Engines: deduplicate (here), first-row (here), partial-update (partial_update.py), aggregation
(aggregate.py). ``merge_function_for`` picks one from the table options, and
``validate_merge_options`` checks those options when a table is created.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from strata.errors import OptionError
from strata.mergetree.merge_base import (  # noqa: F401 - the engines' shared names, importable from here too
    DELETE,
    INSERT,
    UPDATE_AFTER,
    UPDATE_BEFORE,
    MergeError,
    MergeFunction,
    drop_retractions,
    live_rows_mask,
    retraction_mask,
)
from strata.mergetree.sequence import KeyGroups, SequenceOrder
from strata.mergetree.sorting import group_ends, group_starts
from strata.schema.table_schema import VALUE_KIND

if TYPE_CHECKING:
    from strata.schema.table_schema import TableSchema


class DeduplicateMerge(MergeFunction):
    """The latest record wins (a latest -D deletes the key)."""

    def __init__(self, ignore_delete: bool = False, sequence: SequenceOrder | None = None):
        self.ignore_delete = ignore_delete
        self.sequence = sequence

    def merge(self, table: pa.Table, key_names: Sequence[str]) -> pa.Table:
        if self.ignore_delete:
            table = drop_retractions(table)
        if self.sequence is None:
            ends = _group_end_mask(table, key_names)
            return table if ends.all() else table.filter(pa.array(ends))
        groups = KeyGroups.of_table(table, key_names)
        winners = self.sequence.winners(table, groups)
        if len(winners) == table.num_rows:
            return table
        return table.take(pa.array(winners, type=pa.int64()))


class FirstRowMerge(MergeFunction):
    """The first record wins; later inserts of the same key are ignored. Retractions are refused
    unless ``ignore-delete`` (Paimon's FirstRowMergeFunction)."""

    def __init__(self, ignore_delete: bool = False):
        self.ignore_delete = ignore_delete

    def check_kinds(self, kinds: np.ndarray, columns: Sequence[str]) -> None:
        if not self.ignore_delete and retraction_mask(kinds).any():
            raise MergeError("the first-row merge engine cannot accept -D/-U (DELETE/UPDATE_BEFORE) records; "
                             "set table option 'ignore-delete'='true' to ignore them")

    def merge(self, table: pa.Table, key_names: Sequence[str]) -> pa.Table:
        self.check_kinds(table.column(VALUE_KIND).to_numpy(), ())
        table = drop_retractions(table)
        starts = group_starts(_group_end_mask(table, key_names))
        return table if starts.all() else table.filter(pa.array(starts))


def _group_end_mask(table: pa.Table, key_names: Sequence[str]) -> np.ndarray:
    return group_ends(table, key_names)


def _bool_option(options: Mapping[str, str], key: str) -> bool:
    return str(options.get(key, "false")).lower() == "true"


def sequence_order(options: Mapping[str, str]) -> SequenceOrder | None:
    from strata.options import CoreOptions

    core = CoreOptions(options)
    fields = core.sequence_fields()
    if not fields:
        return None
    return SequenceOrder(fields, descending=core.get("sequence.field.sort-order") == "descending")


def merge_function_for(options: Mapping[str, str], schema: TableSchema | None = None) -> MergeFunction:
    """The merge function of a primary-key table. ``schema`` gives the primary keys (fields that
    are never aggregated); without it, the key columns of the merged data are used."""
    from strata.options import CoreOptions

    core = CoreOptions(options)
    engine = core.merge_engine
    ignore_delete = _bool_option(options, "ignore-delete")
    sequence = sequence_order(options)
    primary_keys = list(schema.primary_keys) if schema is not None else []
    if engine == "deduplicate":
        return DeduplicateMerge(ignore_delete, sequence)
    if engine == "first-row":
        if sequence is not None:
            raise OptionError("the first-row merge engine does not support 'sequence.field'")
        return FirstRowMerge(ignore_delete)
    if engine == "aggregation":
        from strata.mergetree.aggregate import AggregateMerge

        return AggregateMerge(options, primary_keys, sequence)
    if engine == "partial-update":
        from strata.mergetree.partial_update import PartialUpdateMerge

        field_names = schema.field_names if schema is not None else None
        return PartialUpdateMerge(options, primary_keys, sequence, field_names)
    raise NotImplementedError(f"merge-engine {engine!r} is not supported yet")


def validate_merge_options(schema: TableSchema, where: str | None = None) -> None:
    """Check the merge-related options of a primary-key table against its columns; raises
    OptionError naming the field or option at fault."""
    from strata.mergetree.aggregate import validate_aggregation
    from strata.mergetree.partial_update import PartialUpdateConfig
    from strata.options import CoreOptions

    if not schema.primary_keys:
        return
    where = where or "table"
    options = schema.options
    core = CoreOptions(options)
    names = set(schema.field_names)
    for key in options:
        if key.startswith("fields."):
            parts = key.split(".")
            if len(parts) < 3:
                continue
            for field in parts[1].split(","):
                if field != "default-aggregate-function" and field not in names:
                    raise OptionError(f"{where}: option {key!r} names field {field!r}, which is not a column")
            if parts[-1] in ("ignore-retract", "distinct") and options[key].lower() not in ("true", "false"):
                raise OptionError(f"{where}: option {key!r} must be true or false, got {options[key]!r}")
    sequence_fields = core.sequence_fields()
    for field in sequence_fields:
        if field not in names:
            raise OptionError(f"{where}: sequence.field {field!r} is not a column")
        if sequence_fields.count(field) > 1:
            raise OptionError(f"{where}: sequence.field {field!r} is listed twice")
        if options.get(f"fields.{field}.aggregate-function") is not None:
            raise OptionError(f"{where}: sequence field {field!r} cannot have an aggregate function")
    engine = core.merge_engine
    if engine == "first-row" and sequence_fields:
        raise OptionError(f"{where}: the first-row merge engine does not support 'sequence.field'")
    types = {f.name: (f.type.root, f.type.length) for f in schema.fields}
    if engine == "aggregation":
        validate_aggregation(types, schema.primary_keys, options, sequence_fields, where)
    elif engine == "partial-update":
        PartialUpdateConfig.parse(options, schema.primary_keys, types, where)
