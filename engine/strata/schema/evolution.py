"""Schema evolution: the changes ALTER TABLE can make, and how they turn schema-N into schema-N+1.

As Paimon's ``SchemaManager.commitChanges``: the changes apply in order to a copy of the latest
schema, the result is validated like a new table, and ``schema/schema-<N+1>`` is created
atomically; if a concurrent change took that id, everything is re-applied to the newer schema.

Data files are never rewritten. Each file records the id of the schema it was written with, and
readers map its columns to the current schema **by field id** (``io/data_file_reader.py``), so:

* an added column gets a new field id (``highestFieldId + 1``) and reads as null in older files;
* a renamed column keeps its id, so older files' values come back under the new name;
* a dropped column's id disappears (re-adding the name later gives a *new* id: old values stay gone);
* a widened column is cast on read (only conversions that keep every value are accepted).

Refused, with errors naming the column or option: dropping, renaming or changing the type of a
partition key or primary key column; making a primary-key column nullable, or any column NOT NULL;
changing the type of a bucket-key column; adding a NOT NULL column; dropping every column;
narrowing or otherwise lossy type changes; changing ``path``; and, once the table has snapshots,
changing the bucket count to or from -1, resetting ``bucket``, turning ``ignore-delete`` from true
to false, and changing Paimon's immutable options (``bucket-key``, ``merge-engine``, ...).
Renaming a column also renames it in the options that name it (``bucket-key``, ``sequence.field``,
``fields.<col>.*``, ...), as Paimon does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import TYPE_CHECKING, TypeAlias

import pyarrow as pa

from strata import options as opts
from strata.errors import OptionError, StrataError
from strata.schema.table_schema import KEY_PREFIX, SEQUENCE_NUMBER, VALUE_KIND, TableSchema
from strata.schema.types import DataField, DataType, assign_field_ids, highest_nested_id

if TYPE_CHECKING:
    from strata.schema.schema_manager import SchemaManager

MAX_COMMIT_ATTEMPTS = 100

# Options Paimon marks @Immutable (CoreOptions.IMMUTABLE_OPTIONS): fixed once the table has data.
IMMUTABLE_OPTIONS = frozenset({
    "type", "bucket-key", "bucket-function.type", "data-file.path-directory", "merge-engine",
    "sequence.snapshot-ordering", "aggregation.remove-record-on-delete",
    "partial-update.remove-record-on-delete", "partial-update.remove-record-on-sequence-group",
    "rowkind.field", "primary-key", "primary-key.nullable", "partition", "dynamic-bucket.initial-buckets",
    "force-lookup", "row-tracking.enabled", "data-evolution.enabled", "index-file-in-data-file-dir",
    "blob-field", "pk-clustering-override",
})
# Options that are part of the schema itself: they only mean something at CREATE TABLE.
_SCHEMA_OPTIONS = ("primary-key", "partition")
_RESERVED_NAMES = frozenset({SEQUENCE_NUMBER, VALUE_KIND, "rowkind", "_ROW_KIND"})
_INTEGER_RANK = {"TINYINT": 0, "SMALLINT": 1, "INT": 2, "BIGINT": 3}


class SchemaChangeError(StrataError, ValueError):
    """A schema change Strata (or Paimon) refuses; the message names the column or option."""


# -- the changes ----------------------------------------------------------------------------------


class MoveType(Enum):
    FIRST = "FIRST"
    AFTER = "AFTER"
    BEFORE = "BEFORE"
    LAST = "LAST"


@dataclass(frozen=True)
class Move:
    """Where a column goes: first, last, or after/before another column."""

    field_name: str
    type: MoveType
    reference: str | None = None

    @staticmethod
    def first(field_name: str) -> Move:
        return Move(field_name, MoveType.FIRST)

    @staticmethod
    def last(field_name: str) -> Move:
        return Move(field_name, MoveType.LAST)

    @staticmethod
    def after(field_name: str, reference: str) -> Move:
        return Move(field_name, MoveType.AFTER, reference)

    @staticmethod
    def before(field_name: str, reference: str) -> Move:
        return Move(field_name, MoveType.BEFORE, reference)


TypeLike: TypeAlias = "DataType | str | pa.DataType"


def as_data_type(value: TypeLike) -> DataType:
    """A DataType from a DataType, Paimon's type string (``"DECIMAL(12, 2)"``) or an Arrow type."""
    if isinstance(value, DataType):
        return value
    if isinstance(value, str):
        return DataType.parse(value)
    if isinstance(value, pa.DataType):
        return DataType.from_arrow(value)
    raise SchemaChangeError(f"not a data type: {value!r} (give a DataType, a type string or an Arrow type)")


class SchemaChange:
    """Base of the changes; the static methods build them (Paimon's ``SchemaChange`` API)."""

    @staticmethod
    def set_option(key: str, value: str) -> SetOption:
        return SetOption(key, str(value))

    @staticmethod
    def remove_option(key: str) -> RemoveOption:
        return RemoveOption(key)

    @staticmethod
    def update_comment(comment: str | None) -> UpdateComment:
        return UpdateComment(comment)

    @staticmethod
    def add_column(name: str, data_type: TypeLike, comment: str | None = None, first: bool = False,
                   after: str | None = None, before: str | None = None) -> AddColumn:
        """A nullable column, last unless `first`, `after=<column>` or `before=<column>`."""
        if sum((bool(first), after is not None, before is not None)) > 1:
            raise SchemaChangeError(f"column {name!r}: give at most one of first, after, before")
        move = (Move.first(name) if first else Move.after(name, after) if after is not None
                else Move.before(name, before) if before is not None else None)
        return AddColumn(name, as_data_type(data_type), comment, move)

    @staticmethod
    def drop_column(name: str) -> DropColumn:
        return DropColumn(name)

    @staticmethod
    def rename_column(name: str, new_name: str) -> RenameColumn:
        return RenameColumn(name, new_name)

    @staticmethod
    def update_column_type(name: str, new_type: TypeLike, keep_nullability: bool = False) -> UpdateColumnType:
        """Widen a column's type; `keep_nullability` keeps the column's NULL/NOT NULL as it is."""
        return UpdateColumnType(name, as_data_type(new_type), keep_nullability)

    @staticmethod
    def update_column_nullability(name: str, nullable: bool) -> UpdateColumnNullability:
        return UpdateColumnNullability(name, nullable)

    @staticmethod
    def update_column_comment(name: str, comment: str | None) -> UpdateColumnComment:
        return UpdateColumnComment(name, comment)

    @staticmethod
    def update_column_position(move: Move) -> UpdateColumnPosition:
        return UpdateColumnPosition(move)


@dataclass(frozen=True)
class SetOption(SchemaChange):
    key: str
    value: str


@dataclass(frozen=True)
class RemoveOption(SchemaChange):
    key: str


@dataclass(frozen=True)
class UpdateComment(SchemaChange):
    comment: str | None


@dataclass(frozen=True)
class AddColumn(SchemaChange):
    name: str
    data_type: DataType
    comment: str | None = None
    move: Move | None = None


@dataclass(frozen=True)
class DropColumn(SchemaChange):
    name: str


@dataclass(frozen=True)
class RenameColumn(SchemaChange):
    name: str
    new_name: str


@dataclass(frozen=True)
class UpdateColumnType(SchemaChange):
    name: str
    new_type: DataType
    keep_nullability: bool = False


@dataclass(frozen=True)
class UpdateColumnNullability(SchemaChange):
    name: str
    nullable: bool


@dataclass(frozen=True)
class UpdateColumnComment(SchemaChange):
    name: str
    comment: str | None


@dataclass(frozen=True)
class UpdateColumnPosition(SchemaChange):
    move: Move


# -- type widening ---------------------------------------------------------------------------------


def widening_problem(source: DataType, target: DataType) -> str | None:
    """None if every `source` value converts to `target` unchanged, else why not. Nullability is
    checked separately."""
    s, t = source.with_nullable(True), target.with_nullable(True)
    if s == t:
        return None
    if s.is_nested or t.is_nested:
        # old files would need their elements / keys / values converted: not done by Strata's reads
        return "ARRAY / MAP / MULTISET columns can only change their own nullability"
    if s.root in _INTEGER_RANK and t.root in _INTEGER_RANK:
        return None if _INTEGER_RANK[t.root] >= _INTEGER_RANK[s.root] else "narrowing integer type"
    if s.root == "FLOAT" and t.root == "DOUBLE":
        return None
    if s.root == "DECIMAL" and t.root == "DECIMAL":
        assert s.precision is not None and s.scale is not None
        assert t.precision is not None and t.scale is not None
        if t.scale < s.scale:
            return "the scale would shrink"
        if t.precision - t.scale < s.precision - s.scale:
            return "fewer integer digits"
        return None
    if s.root in ("VARCHAR", "CHAR") and t.root == "VARCHAR":
        assert s.length is not None and t.length is not None
        return None if t.length >= s.length else "shorter length"
    if s.root in ("VARBINARY", "BINARY") and t.root == "VARBINARY":
        assert s.length is not None and t.length is not None
        return None if t.length >= s.length else "shorter length"
    if s.root == t.root and s.root in ("TIMESTAMP", "TIMESTAMP_LTZ", "TIME"):
        assert s.precision is not None and t.precision is not None
        return None if t.precision >= s.precision else "lower precision"
    return "not a widening conversion"


_WIDENING_HELP = ("allowed: TINYINT -> SMALLINT -> INT -> BIGINT, FLOAT -> DOUBLE, DECIMAL with more "
                  "integer digits and no smaller scale, VARCHAR/CHAR -> longer VARCHAR or STRING, "
                  "BINARY/VARBINARY -> longer VARBINARY or BYTES, TIMESTAMP/TIME -> higher precision")


# -- applying changes -------------------------------------------------------------------------------


def apply_changes(schema: TableSchema, changes: Iterable[SchemaChange], where: str,
                  has_snapshots: bool | Callable[[], bool] = True) -> TableSchema:
    """The schema that `changes` (applied in order) make of `schema`, validated, with id + 1.

    `has_snapshots` (a bool, or a function asked once when needed): whether the table holds data,
    which makes some option changes unsafe (as in Paimon)."""
    state = _State(schema, where, has_snapshots)
    for change in changes:
        state.apply(change)
    return state.result()


def commit_changes(manager: SchemaManager, changes: Sequence[SchemaChange], where: str,
                   has_snapshots: bool | Callable[[], bool] = True) -> TableSchema:
    """Apply `changes` to the latest schema and publish it as the next schema file, atomically;
    re-applied to the newer schema if a concurrent change took the id first."""
    changes = [changes] if isinstance(changes, SchemaChange) else list(changes)
    if not changes:
        raise SchemaChangeError(f"no schema changes given for table {where}")
    for change in changes:
        if not isinstance(change, SchemaChange):
            raise SchemaChangeError(f"not a schema change: {change!r} (build them with SchemaChange.*)")
    for _ in range(MAX_COMMIT_ATTEMPTS):
        latest = manager.latest()
        if latest is None:
            from strata.errors import TableNotFoundError

            raise TableNotFoundError(f"table {where} does not exist")
        new_schema = apply_changes(latest, changes, where, has_snapshots)
        if manager.commit(new_schema):
            return new_schema
    raise SchemaChangeError(f"table {where}: gave up publishing a schema change after "
                            f"{MAX_COMMIT_ATTEMPTS} attempts (concurrent schema changes kept winning)")


class _State:
    def __init__(self, schema: TableSchema, where: str, has_snapshots: bool | Callable[[], bool]):
        self.old = schema
        self.where = where
        self.fields: list[DataField] = list(schema.fields)
        self.highest = max(schema.highest_field_id,
                           max((max(f.id, highest_nested_id(f.type)) for f in schema.fields), default=-1))
        self.options = dict(schema.options)
        self.comment = schema.comment
        self._has_snapshots = has_snapshots

    # -- helpers ------------------------------------------------------------------------------
    @property
    def has_snapshots(self) -> bool:
        if callable(self._has_snapshots):
            self._has_snapshots = bool(self._has_snapshots())
        return bool(self._has_snapshots)

    def _error(self, message: str) -> SchemaChangeError:
        return SchemaChangeError(f"table {self.where}: {message}")

    def _index(self, name: str) -> int:
        for i, f in enumerate(self.fields):
            if f.name == name:
                return i
        raise self._error(f"column {name!r} does not exist; columns are {[f.name for f in self.fields]}")

    def _check_new_name(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise self._error(f"invalid column name {name!r}")
        if any(f.name == name for f in self.fields):
            raise self._error(f"column {name!r} already exists")
        if name in _RESERVED_NAMES or name.startswith(KEY_PREFIX):
            raise self._error(f"column name {name!r} is reserved for Paimon's system columns")

    def _not_key(self, name: str, action: str, primary: bool = True) -> None:
        if name in self.old.partition_keys:
            raise self._error(f"cannot {action} partition key column {name!r}")
        if primary and name in self.old.primary_keys:
            raise self._error(f"cannot {action} primary key column {name!r}")

    # -- dispatch --------------------------------------------------------------------------------
    def apply(self, change: SchemaChange) -> None:
        handler = getattr(self, f"_{type(change).__name__}", None)
        if handler is None:
            raise self._error(f"unsupported schema change {change!r}")
        handler(change)

    def _SetOption(self, change: SetOption) -> None:
        key, value = change.key, str(change.value)
        self._check_option_key(key)
        opts.validate({key: value}, f"table {self.where}")
        old = self.options.get(key)
        if self.has_snapshots and old != value:
            self._check_option_change(key, old, value)
        self.options[key] = value

    def _RemoveOption(self, change: RemoveOption) -> None:
        key = change.key
        self._check_option_key(key)
        if key not in self.options:
            return
        if self.has_snapshots:
            if key == "bucket":
                raise self._error("cannot reset option 'bucket' of a table with data")
            self._check_option_change(key, self.options[key], opts.OPTIONS[key].default
                                      if key in opts.OPTIONS else None)
        del self.options[key]

    def _check_option_key(self, key: str) -> None:
        if key == "path":
            raise self._error("changing option 'path' is not supported")
        if key in _SCHEMA_OPTIONS:
            raise self._error(f"option {key!r} cannot be changed: partition keys and primary keys are "
                              "fixed when the table is created")

    def _check_option_change(self, key: str, old: str | None, new: str | None) -> None:
        if key in IMMUTABLE_OPTIONS:
            raise self._error(f"option {key!r} cannot be changed once the table has data")
        if key == "bucket":
            old_bucket = int(old) if old is not None else int(str(opts.OPTIONS["bucket"].default))
            new_bucket = int(new) if new is not None else old_bucket
            if old_bucket == -1 and new_bucket != -1:
                raise self._error("cannot change option 'bucket' when it is -1 (bucket-unaware or dynamic "
                                  "bucket mode) once the table has data")
            if new_bucket == -1 and old_bucket != -1:
                raise self._error("cannot change option 'bucket' to -1 once the table has data")
        if key == "ignore-delete":
            was = (old or "false").lower() == "true"
            now = (new or "false").lower() == "true"
            if was and not now:
                raise self._error("cannot change option 'ignore-delete' from true to false "
                                  "(deletes ignored so far would not come back)")
        if key == "deletion-vectors.enabled" and (old or "false").lower() != (new or "false").lower():
            raise self._error("cannot change option 'deletion-vectors.enabled' once the table has data")

    def _UpdateComment(self, change: UpdateComment) -> None:
        self.comment = change.comment

    def _AddColumn(self, change: AddColumn) -> None:
        self._check_new_name(change.name)
        dtype = as_data_type(change.data_type)
        if not dtype.nullable:
            raise self._error(f"column {change.name!r} cannot be added as NOT NULL (rows already written "
                              "have no value for it)")
        try:
            dtype.to_arrow()
        except ValueError as exc:
            raise self._error(f"column {change.name!r}: {exc}") from None
        self.highest += 1
        field_id = self.highest
        dtype, self.highest = assign_field_ids(dtype, self.highest)  # the fields of a ROW column
        field = DataField(field_id, change.name, dtype, change.comment)
        move = change.move
        if move is None or move.type == MoveType.LAST:
            self.fields.append(field)
        elif move.type == MoveType.FIRST:
            self.fields.insert(0, field)
        else:
            assert move.reference is not None
            ref = self._index(move.reference)
            self.fields.insert(ref + 1 if move.type == MoveType.AFTER else ref, field)

    def _DropColumn(self, change: DropColumn) -> None:
        name = change.name
        self._not_key(name, "drop")
        index = self._index(name)
        for key, value in self.options.items():
            if name in _option_columns(key, value):
                raise self._error(f"cannot drop column {name!r}: option {key!r} = {value!r} uses it")
        self.options = {k: v for k, v in self.options.items() if _field_option_column(k) != name}
        del self.fields[index]
        if not self.fields:
            raise self._error("cannot drop all columns")

    def _RenameColumn(self, change: RenameColumn) -> None:
        name, new_name = change.name, change.new_name
        self._not_key(name, "rename")
        index = self._index(name)
        if new_name == name:
            return
        self._check_new_name(new_name)
        self.fields[index] = replace(self.fields[index], name=new_name)
        self.options = _rename_in_options(self.options, name, new_name)

    def _UpdateColumnType(self, change: UpdateColumnType) -> None:
        name = change.name
        self._not_key(name, "change the type of")
        index = self._index(name)
        field = self.fields[index]
        target = as_data_type(change.new_type)
        if change.keep_nullability:
            target = target.with_nullable(field.type.nullable)
        elif field.type.nullable and not target.nullable:
            raise self._error(f"cannot make column {name!r} NOT NULL (rows already written may hold nulls)")
        if self._is_bucket_key(name) and field.type.with_nullable(True) != target.with_nullable(True):
            raise self._error(f"cannot change the type of bucket-key column {name!r} (rows would hash to "
                              "other buckets)")
        problem = widening_problem(field.type, target)
        if problem is not None:
            raise self._error(f"cannot change the type of column {name!r} from {field.type} to "
                              f"{target}: {problem} ({_WIDENING_HELP})")
        try:
            target.to_arrow()
        except ValueError as exc:
            raise self._error(f"column {name!r}: {exc}") from None
        self.fields[index] = replace(field, type=target)

    def _UpdateColumnNullability(self, change: UpdateColumnNullability) -> None:
        name = change.name
        index = self._index(name)
        field = self.fields[index]
        if change.nullable == field.type.nullable:
            return
        if change.nullable and name in self.old.primary_keys:
            raise self._error(f"cannot make primary key column {name!r} nullable")
        if not change.nullable:
            raise self._error(f"cannot make column {name!r} NOT NULL (rows already written may hold nulls)")
        self.fields[index] = replace(field, type=field.type.with_nullable(True))

    def _UpdateColumnComment(self, change: UpdateColumnComment) -> None:
        index = self._index(change.name)
        self.fields[index] = replace(self.fields[index], description=change.comment)

    def _UpdateColumnPosition(self, change: UpdateColumnPosition) -> None:
        move = change.move
        index = self._index(move.field_name)
        if move.type in (MoveType.FIRST, MoveType.LAST):
            field = self.fields.pop(index)
            if move.type == MoveType.FIRST:
                self.fields.insert(0, field)
            else:
                self.fields.append(field)
            return
        assert move.reference is not None
        if move.reference == move.field_name:
            raise self._error(f"cannot move column {move.field_name!r} relative to itself")
        self._index(move.reference)
        field = self.fields.pop(index)
        ref = self._index(move.reference)
        self.fields.insert(ref + 1 if move.type == MoveType.AFTER else ref, field)

    def _is_bucket_key(self, name: str) -> bool:
        return opts.CoreOptions(self.options).bucket > 0 and name in _bucket_keys(self.options, self.old)

    # -- result ----------------------------------------------------------------------------------------
    def result(self) -> TableSchema:
        new = TableSchema(self.old.id + 1, list(self.fields), list(self.old.partition_keys),
                          list(self.old.primary_keys), dict(self.options), self.comment, self.highest)
        from strata.schema.definition import validate_schema

        # options Strata does not know (set by another engine) stay as they are; the rest is
        # checked as for a new table
        known = {k: v for k, v in new.options.items() if _known_option(k)}
        probe = replace(new, options=known)
        try:
            validate_schema(probe, self.where)
        except (OptionError, ValueError) as exc:
            if isinstance(exc, SchemaChangeError):
                raise
            raise SchemaChangeError(f"the schema change is invalid: {exc}") from None
        return new


# -- options that name columns ----------------------------------------------------------------------


def _known_option(key: str) -> bool:
    try:
        opts.validate({key: ""}, "probe")
    except OptionError as exc:
        return not str(exc).startswith("unknown option")
    return True


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()] if value else []


def _bucket_keys(options: dict[str, str], schema: TableSchema) -> list[str]:
    explicit = _split(options.get("bucket-key"))
    if explicit:
        return explicit
    return schema.trimmed_primary_keys


def _field_option_parts(key: str) -> tuple[list[str], str] | None:
    """``fields.<a>[,<b>...].<suffix>`` -> ([a, b], suffix)."""
    if not key.startswith("fields.") or key.count(".") < 2:
        return None
    middle, _, suffix = key[len("fields."):].rpartition(".")
    if not middle or middle == "default-aggregate-function":
        return None
    return _split(middle), suffix


def _field_option_column(key: str) -> str | None:
    """The one column a per-field option (``fields.<col>.aggregate-function``...) belongs to."""
    parts = _field_option_parts(key)
    if parts is None or len(parts[0]) != 1 or parts[1] == "sequence-group":
        return None
    return parts[0][0]


_LIST_OPTIONS = ("bucket-key", "sequence.field", "rowkind.field", "partial-update.remove-record-on-sequence-group")


def _option_columns(key: str, value: str) -> set[str]:
    """Columns an option needs to stay meaningful (dropping them is refused)."""
    if key in _LIST_OPTIONS:
        return set(_split(value))
    parts = _field_option_parts(key)
    if parts is None:
        return set()
    names, suffix = parts
    if suffix in ("sequence-group", "nested-key"):
        return set(names) | set(_split(value))
    return set(names) if len(names) > 1 else set()


def _rename_in_options(options: dict[str, str], old: str, new: str) -> dict[str, str]:
    def rename(names: Iterable[str]) -> str:
        return ",".join(new if n == old else n for n in names)

    out: dict[str, str] = {}
    for key, value in options.items():
        if key in _LIST_OPTIONS and old in _split(value):
            out[key] = rename(_split(value))
            continue
        parts = _field_option_parts(key)
        if parts is not None:
            names, suffix = parts
            if old in names or (suffix in ("sequence-group", "nested-key") and old in _split(value)):
                new_key = f"fields.{rename(names)}.{suffix}"
                out[new_key] = rename(_split(value)) if suffix in ("sequence-group", "nested-key") else value
                continue
        out[key] = value
    return out


def check_rewritable(schema: TableSchema, file_schema_id: int, file_name: str, where: str) -> None:
    """Refuse to rewrite (compact) a file written under a newer schema than the writer's: its
    newer columns would be lost. The writer must reload the table."""
    if file_schema_id > schema.id:
        raise SchemaChangeError(
            f"table {where}: file {file_name} was written under schema {file_schema_id}, newer than this "
            f"writer's schema {schema.id}; the schema changed since the table was loaded: reload it "
            "(catalog.get_table) and retry")
