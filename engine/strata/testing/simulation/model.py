"""The in-memory model a simulated table is checked against: plain Python rows, no Strata code.

Rows are dicts keyed by field id, so renames cost nothing and an added column reads as null in
older rows, as it does in Paimon. A primary-key table is a dict key -> row that each merge
engine updates in its own way; an append table is a list (a multiset). Every snapshot the table
publishes is recorded with the columns it was written under and a copy of its rows, so time
travel, tags and rollback are checked against what the table held at that snapshot.
"""

from __future__ import annotations

import copy
import datetime as dt
import decimal
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from strata.schema.types import DataType

Row = dict[int, Any]


@dataclass(frozen=True)
class Column:
    field_id: int
    name: str
    type: DataType


@dataclass
class Version:
    """What one snapshot holds: its schema's columns and its rows (None: not checked, see
    invariants.sync_snapshots)."""

    columns: tuple[Column, ...]
    rows: list[Row] | None


@dataclass
class TableModel:
    columns: list[Column]
    primary_keys: tuple[str, ...]
    partition_keys: tuple[str, ...]
    merge_engine: str
    sum_column: str | None = None  # the aggregation engine's summed column
    # primary-key tables with deletion vectors or first-row read no level-0 file: an APPEND snapshot shows
    # what the snapshot before it showed, and the writer's COMPACT snapshot shows the batch
    level0_hidden: bool = False
    keyed: dict[tuple[Any, ...], Row] = field(default_factory=dict)
    appended: list[Row] = field(default_factory=list)
    history: dict[int, Version] = field(default_factory=dict)
    tags: dict[str, tuple[int, Version]] = field(default_factory=dict)
    identifiers: dict[int, int] = field(default_factory=dict)  # snapshot id -> the writer's identifier
    # snapshot id -> the rows its commit wrote (as written, with their row kinds), where the model knows
    # them: what read_incremental's answer for that snapshot follows from
    added: dict[int, tuple[list[Row], list[str] | None]] = field(default_factory=dict)

    # -- columns ----------------------------------------------------------------------------
    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(f"model has no column {name!r}: {[c.name for c in self.columns]}")

    def ids(self, names: Iterable[str]) -> list[int]:
        return [self.column(n).field_id for n in names]

    @property
    def is_primary(self) -> bool:
        return bool(self.primary_keys)

    # -- rows -------------------------------------------------------------------------------
    def rows(self) -> list[Row]:
        return list(self.keyed.values()) if self.is_primary else list(self.appended)

    def key_of(self, row: Row) -> tuple[Any, ...]:
        return tuple(canonical(row.get(i)) for i in self.ids(self.primary_keys))

    def upsert(self, batch: Sequence[Row], kinds: Sequence[str] | None = None) -> None:
        """Rows written in one commit, in order (their sequence numbers follow the order); a
        -U/-D row retracts its key."""
        if not self.is_primary:
            self.appended.extend(copy.deepcopy(list(batch)))
            return
        merge = _MERGES[self.merge_engine]
        for i, row in enumerate(batch):
            key = self.key_of(row)
            if kinds is not None and kinds[i] in ("-U", "-D"):
                self.delete_keys([key])
            else:
                self.keyed[key] = merge(self, self.keyed.get(key), copy.deepcopy(row))

    def delete_keys(self, keys: Iterable[tuple[Any, ...]]) -> None:
        """-D records: deduplicate removes the key; the other engines are set to ignore deletes."""
        if self.merge_engine != "deduplicate":
            return
        for key in keys:
            self.keyed.pop(key, None)

    def delete_matching(self, matches: Callable[[Row], bool]) -> int:
        """delete_where: rows the predicate selects go (append tables and deduplicate keys)."""
        if not self.is_primary:
            before = len(self.appended)
            self.appended = [r for r in self.appended if not matches(r)]
            return before - len(self.appended)
        doomed = [k for k, r in self.keyed.items() if matches(r)]
        self.delete_keys(doomed)
        return len(doomed)

    def overwrite(self, in_scope: Callable[[Row], bool], batch: Sequence[Row]) -> None:
        """Replace the rows in scope (a partition, or all) by the batch, merged among itself."""
        if self.is_primary:
            self.keyed = {k: r for k, r in self.keyed.items() if not in_scope(r)}
        else:
            self.appended = [r for r in self.appended if not in_scope(r)]
        self.upsert(batch)

    # -- snapshots and tags -----------------------------------------------------------------
    def checked_snapshots(self, retained: Iterable[int]) -> list[int]:
        """The retained snapshots whose rows the model knows."""
        return sorted(i for i in retained if i in self.history and self.history[i].rows is not None)

    def record(self, snapshot_id: int) -> None:
        self.history[snapshot_id] = Version(tuple(self.columns), copy.deepcopy(self.rows()))

    def restore(self, snapshot_id: int, version: Version) -> None:
        """Rollback: the rows of that snapshot (the schema stays the latest, as in Paimon); later
        snapshots and tags are gone."""
        assert version.rows is not None, "only checked snapshots are rollback targets"
        rows = copy.deepcopy(version.rows)
        if self.is_primary:
            self.keyed = {self.key_of(r): r for r in rows}
        else:
            self.appended = rows
        self.history = {s: v for s, v in self.history.items() if s < snapshot_id}
        self.history[snapshot_id] = version
        self.tags = {t: sv for t, sv in self.tags.items() if sv[0] <= snapshot_id}
        self.identifiers = {s: i for s, i in self.identifiers.items() if s <= snapshot_id}
        self.added = {s: a for s, a in self.added.items() if s <= snapshot_id}

    def branched(self, snapshot_id: int | None, tag: str | None = None) -> TableModel:
        """The model of a branch created at a snapshot (or a tag's, which comes along), or empty
        with the current columns (`snapshot_id` None)."""
        branch = copy.copy(self)
        branch.history, branch.tags, branch.identifiers, branch.added = {}, {}, {}, {}
        branch.keyed, branch.appended = {}, []
        if snapshot_id is None:
            branch.columns = list(self.columns)
            return branch
        version = self.tags[tag][1] if tag is not None else self.history[snapshot_id]
        branch.columns = list(version.columns)
        branch.restore(snapshot_id, version)
        if tag is not None:
            branch.tags[tag] = (snapshot_id, version)
        if snapshot_id in self.identifiers:
            branch.identifiers[snapshot_id] = self.identifiers[snapshot_id]
        return branch

    def fast_forwarded(self, branch: TableModel) -> None:
        """Main after fast-forward to `branch`: its snapshots from the branch's earliest on, its
        tags of those snapshots, its rows and columns are the branch's."""
        first = min(branch.history)
        self.columns = list(branch.columns)
        self.keyed, self.appended = copy.deepcopy(branch.keyed), copy.deepcopy(branch.appended)
        self.history = {**{s: v for s, v in self.history.items() if s < first}, **branch.history}
        self.tags = {**{t: sv for t, sv in self.tags.items() if sv[0] < first}, **branch.tags}
        self.identifiers = {**{s: i for s, i in self.identifiers.items() if s < first}, **branch.identifiers}
        self.added = {**{s: a for s, a in self.added.items() if s < first}, **branch.added}


def _deduplicate(model: TableModel, old: Row | None, new: Row) -> Row:
    return new


def _first_row(model: TableModel, old: Row | None, new: Row) -> Row:
    return new if old is None else old


def _partial_update(model: TableModel, old: Row | None, new: Row) -> Row:
    if old is None:
        return new
    merged = dict(old)
    merged.update({i: v for i, v in new.items() if v is not None})
    return merged


def _aggregate(model: TableModel, old: Row | None, new: Row) -> Row:
    """`sum` on the summed column, last non-null value (the default function) elsewhere."""
    merged = _partial_update(model, old, new)
    if old is not None and model.sum_column is not None:
        sid = model.column(model.sum_column).field_id
        a, b = old.get(sid), new.get(sid)
        merged[sid] = a if b is None else b if a is None else a + b
    return merged


_MERGES: dict[str, Callable[[TableModel, Row | None, Row], Row]] = {
    "deduplicate": _deduplicate, "first-row": _first_row, "partial-update": _partial_update,
    "aggregation": _aggregate}


def canonical(value: Any) -> Any:
    """A hashable, order-free form of a value as Arrow's ``to_pylist`` gives it: maps and
    multisets (lists of pairs) become sorted tuples, structs tuples of their fields, lists tuples."""
    if isinstance(value, dict):
        return ("row", tuple((k, canonical(v)) for k, v in value.items()))
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return ("map", tuple(sorted(((canonical(k), canonical(v)) for k, v in value), key=repr)))
        return tuple(canonical(v) for v in value)
    if isinstance(value, tuple):
        return ("map", tuple(sorted(((canonical(k), canonical(v)) for k, v in value), key=repr))) \
            if value and all(isinstance(v, tuple) for v in value) else value
    if isinstance(value, decimal.Decimal):
        return ("decimal", value.normalize() if value != 0 else decimal.Decimal(0))
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC)
    return value


def row_tuple(row: Row, field_ids: Sequence[int]) -> tuple[Any, ...]:
    return tuple(canonical(row.get(i)) for i in field_ids)


def sorted_rows(rows: Iterable[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted(rows, key=repr)
