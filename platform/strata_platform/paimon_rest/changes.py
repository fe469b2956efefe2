"""Paimon's SchemaChange JSON (``{"action": "addColumn", ...}``, as AlterTableRequest carries it)
as Strata's schema changes. Nested columns (``fieldNames`` longer than one) are refused: Strata
evolves top-level columns only."""

from __future__ import annotations

from typing import Any

from strata.schema.evolution import (
    AddColumn,
    DropColumn,
    Move,
    MoveType,
    RenameColumn,
    SchemaChange,
    SchemaChangeError,
    UpdateColumnPosition,
)
from strata.schema.types import DataType


class UnsupportedChange(SchemaChangeError):
    """A well-formed change this catalog cannot make (the spec's 501, not a 400)."""


class ColumnNotFound(SchemaChangeError):
    def __init__(self, column: str):
        super().__init__(f"column {column} does not exist")
        self.column = column


class ColumnExists(SchemaChangeError):
    def __init__(self, column: str):
        super().__init__(f"column {column} already exists")
        self.column = column


def _column(change: dict[str, Any]) -> str:
    names = change.get("fieldNames")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise SchemaChangeError(f"{change.get('action')}: 'fieldNames' must be a non-empty list of names")
    if len(names) > 1:
        raise UnsupportedChange(f"{change.get('action')} {'.'.join(names)}: nested columns cannot be changed "
                                "(only top-level columns)")
    return names[0]


def _move(raw: Any) -> Move | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("fieldName"), str):
        raise SchemaChangeError(f"malformed move {raw!r}")
    try:
        kind = MoveType(str(raw.get("type")))
    except ValueError:
        raise SchemaChangeError(f"move type must be FIRST, AFTER, BEFORE or LAST, got {raw.get('type')!r}") from None
    reference = raw.get("referenceFieldName")
    if kind in (MoveType.AFTER, MoveType.BEFORE) and not isinstance(reference, str):
        raise SchemaChangeError(f"move {kind.value} needs 'referenceFieldName'")
    return Move(raw["fieldName"], kind, reference if kind in (MoveType.AFTER, MoveType.BEFORE) else None)


def _string(change: dict[str, Any], key: str) -> str:
    value = change.get(key)
    if not isinstance(value, str):
        raise SchemaChangeError(f"{change.get('action')}: {key!r} must be a string")
    return value


def parse(change: Any) -> SchemaChange:
    """One change; SchemaChangeError (a 400) when it is malformed or not supported."""
    if not isinstance(change, dict):
        raise SchemaChangeError(f"a schema change must be an object, got {change!r}")
    action = change.get("action")
    if action == "setOption":
        return SchemaChange.set_option(_string(change, "key"), _string(change, "value"))
    if action == "removeOption":
        return SchemaChange.remove_option(_string(change, "key"))
    if action == "updateComment":
        comment = change.get("comment")
        return SchemaChange.update_comment(comment if isinstance(comment, str) else None)
    if action == "addColumn":
        name = _column(change)
        move = _move(change.get("move"))
        data_type = DataType.parse(change.get("dataType"))
        comment = change.get("comment")
        added = SchemaChange.add_column(name, data_type, comment if isinstance(comment, str) else None)
        return type(added)(added.name, added.data_type, added.comment, move)
    if action == "renameColumn":
        return SchemaChange.rename_column(_column(change), _string(change, "newName"))
    if action == "dropColumn":
        return SchemaChange.drop_column(_column(change))
    if action == "updateColumnType":
        return SchemaChange.update_column_type(_column(change), DataType.parse(change.get("newDataType")),
                                               bool(change.get("keepNullability", False)))
    if action == "updateColumnNullability":
        return SchemaChange.update_column_nullability(_column(change), bool(change.get("newNullability")))
    if action == "updateColumnComment":
        comment = change.get("newComment")
        return SchemaChange.update_column_comment(_column(change), comment if isinstance(comment, str) else None)
    if action == "updateColumnPosition":
        move = _move(change.get("move"))
        if move is None:
            raise SchemaChangeError("updateColumnPosition needs 'move'")
        return SchemaChange.update_column_position(move)
    raise UnsupportedChange(f"schema change {action!r} is not supported by this catalog")


def check_columns(columns: list[str], changes: list[SchemaChange]) -> None:
    """The columns `changes` name, applied in order to `columns`: ColumnNotFound for one that is
    not there, ColumnExists for a new name that is (the clients' 404 and 409 COLUMN)."""
    names = list(columns)
    for change in changes:
        for name in _existing_columns(change):
            if name not in names:
                raise ColumnNotFound(name)
        if isinstance(change, AddColumn | RenameColumn):
            new = change.name if isinstance(change, AddColumn) else change.new_name
            if new in names:
                raise ColumnExists(new)
            names.append(new)
        if isinstance(change, RenameColumn | DropColumn):
            names.remove(change.name)


def _existing_columns(change: SchemaChange) -> list[str]:
    """The columns a change refers to that must exist before it."""
    move: Move | None = getattr(change, "move", None)
    if isinstance(change, UpdateColumnPosition):
        named = [change.move.field_name]
    else:  # an added column's own name is new, every other change's column must exist
        name = None if isinstance(change, AddColumn) else getattr(change, "name", None)
        named = [name] if name else []
    if move is not None and move.reference is not None:
        named.append(move.reference)
    return named
