"""The ``partial-update`` merge engine, vectorized (Paimon's PartialUpdateMergeFunction).

Without sequence groups, each field takes the latest non-null value of the key's records.
Retractions (-U/-D) are refused unless ``ignore-delete`` (they are dropped) or
``partial-update.remove-record-on-delete`` (a -D replaces the row by the -D record's own values,
and the key merges to a -D if that record is the last; -U records are skipped).

Sequence groups (``fields.<g1>[,<g2>...].sequence-group = 'a,b'``) give the columns a, b their own
order: a record whose group sequence (g1, g2, compared in order, nulls smallest) is at least the
largest seen so far overwrites the group's sequence fields and columns, nulls included; a record
whose group sequence is all null leaves the group alone; an older one is ignored. Columns of a
group may have an aggregate function (``fields.<f>.aggregate-function``): every record with a
non-null group sequence is then aggregated, older records on the left of the accumulator, newer
ones on the right (Paimon's ``agg`` / ``aggReversed``), i.e. in group-sequence order. Columns
outside groups keep the latest non-null value.

With sequence groups a retraction is applied group by group: when its group sequence is at least
the largest seen, the group's sequence fields take its values and the group's columns become null
(aggregated columns are retracted: ``sum`` subtracts, ``last_value`` becomes null). A -D whose
group is listed in ``partial-update.remove-record-on-sequence-group`` (and whose sequence is the
largest) replaces the whole row by the -D record's values and, if last, deletes the key.

As in Paimon, when the first record of a key is a retraction the row starts from that record's
values. The merged record carries the last record's sequence number; its kind is -D after a
row removal or when the key had no insert (-U when it had no insert and no -D at all, so that a
later merge does not take it for a row removal).

Merging in steps gives the same visible rows as merging at once, except where Paimon's own
result depends on run boundaries: a row re-seeded by a -D (remove-record-on-delete, or a removing
sequence group) or by a leading retraction, a key that met only retractions (it merges to -D, as
Java's ``meetInsert`` decides, and a full compaction drops that -D with its group sequences), and
order-sensitive aggregates (last_non_null_value, first_value, listagg...) over group sequences
that arrive out of order in different runs.

Not exactly Paimon: with several groups in remove-record-on-sequence-group, a removal does not
lower the stored sequence of the other groups; first_non_null_value over out-of-order group
sequences keeps the first non-null value in sequence order (Java may keep an older null); other
retractable aggregates than sum and last_value are not retracted inside a group (an error tells
to set ignore-retract).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from strata.errors import OptionError
from strata.mergetree.aggregate import (
    LAST_NON_NULL,
    RETRACTABLE,
    FieldAgg,
    build_table,
    check_function,
    field_agg,
    fold,
    function_name,
    retraction_error,
)
from strata.mergetree.merge_base import (
    DELETE,
    INSERT,
    UPDATE_BEFORE,
    MergeError,
    MergeFunction,
    drop_retractions,
    retraction_mask,
)
from strata.mergetree.sequence import KeyGroups, SequenceOrder, as_array, take_or_null, tuple_rank, validity
from strata.schema.table_schema import KEY_PREFIX, SEQUENCE_NUMBER, VALUE_KIND

SEQUENCE_GROUP = "sequence-group"
_SEQUENCE_TYPES = frozenset({"DECIMAL", "TINYINT", "SMALLINT", "INT", "BIGINT", "FLOAT", "DOUBLE", "DATE",
                             "TIME", "TIMESTAMP", "TIMESTAMP_LTZ"})
# aggregate functions whose retraction inside a sequence group Strata computes exactly
_GROUP_RETRACTABLE = frozenset({"sum", "last_value"})

DELETE_REFUSED = (
    "the partial-update merge engine cannot accept -D/-U (DELETE/UPDATE_BEFORE) records by default; set one of "
    "these table options: 'ignore-delete'='true' (drop them), 'partial-update.remove-record-on-delete'='true' "
    "(a -D removes the whole row), or sequence groups ('fields.<seq>.sequence-group'='<columns>') to retract "
    "columns, with 'partial-update.remove-record-on-sequence-group'='<seq>' to remove the whole row")


@dataclass
class SequenceGroup:
    option: str
    sequence_fields: list[str]
    columns: list[str]


@dataclass
class PartialUpdateConfig:
    groups: list[SequenceGroup] = field(default_factory=list)
    group_of: dict[str, int] = field(default_factory=dict)
    aggregates: dict[str, FieldAgg] = field(default_factory=dict)
    remove_groups: set[int] = field(default_factory=set)
    ignore_delete: bool = False
    remove_on_delete: bool = False

    @staticmethod
    def parse(options: Mapping[str, str], primary_keys: Sequence[str],
              types: Mapping[str, tuple[str, int | None]] | None = None, where: str = "table") -> PartialUpdateConfig:
        """Read (and check) the partial-update options. ``types`` (name -> (type root, length)),
        when given, enables the checks against the columns."""
        cfg = PartialUpdateConfig(ignore_delete=_true(options, "ignore-delete"),
                                  remove_on_delete=_true(options, "partial-update.remove-record-on-delete"))
        pks = set(primary_keys)

        def column(name: str, option: str) -> str:
            if types is not None and name not in types:
                raise OptionError(f"{where}: option {option!r} names field {name!r}, which is not a column")
            if name in pks:
                raise OptionError(f"{where}: option {option!r}: primary-key field {name!r} cannot be in a "
                                  "sequence group")
            if name in cfg.group_of:
                raise OptionError(f"{where}: option {option!r}: field {name!r} already belongs to the sequence group "
                                  f"{cfg.groups[cfg.group_of[name]].option!r}")
            return name

        for key in sorted(options):
            if not (key.startswith("fields") and key.endswith(SEQUENCE_GROUP)):
                continue
            inner = key[len("fields") + 1: len(key) - len(SEQUENCE_GROUP) - 1]
            index = len(cfg.groups)
            sequence_fields = [column(f, key) for f in inner.split(",")]
            for f in sequence_fields:
                cfg.group_of[f] = index
                root = types[f][0] if types is not None else None
                if root is not None and root not in _SEQUENCE_TYPES:
                    raise OptionError(f"{where}: option {key!r}: sequence field {f!r} has type {root}; a sequence "
                                      f"group needs one of {', '.join(sorted(_SEQUENCE_TYPES))}")
            columns = [column(f, key) for f in options[key].split(",")]
            for f in columns:
                cfg.group_of[f] = index
            cfg.groups.append(SequenceGroup(key, sequence_fields, columns))
        protected = {f for g in cfg.groups for f in g.columns}
        all_sequence_fields = {f for g in cfg.groups for f in g.sequence_fields}
        names = list(types) if types is not None else sorted(protected | {
            k.split(".")[1] for k in options if k.startswith("fields.") and k.endswith(".aggregate-function")})
        for name in names:
            if name in pks or name in all_sequence_fields:
                continue
            function = function_name(options, name)
            if function is None:
                continue
            if function != LAST_NON_NULL and name not in protected:
                raise OptionError(f"{where}: field {name!r} has aggregate function {function!r} but is in no "
                                  "sequence group; partial-update aggregates only columns of a sequence group "
                                  "('fields.<seq>.sequence-group')")
            if types is not None:
                check_function(name, function, types[name][0], types[name][1], where)
            if name in protected:
                cfg.aggregates[name] = field_agg(options, name, function)
        removing = options.get("partial-update.remove-record-on-sequence-group")
        if cfg.remove_on_delete and cfg.ignore_delete:
            raise OptionError(f"{where}: 'ignore-delete' and 'partial-update.remove-record-on-delete' conflict; "
                              "set only one")
        if removing and cfg.ignore_delete:
            raise OptionError(f"{where}: 'ignore-delete' and 'partial-update.remove-record-on-sequence-group' "
                              "conflict; set only one")
        if cfg.remove_on_delete and cfg.groups:
            raise OptionError(f"{where}: 'partial-update.remove-record-on-delete' cannot be combined with sequence "
                              "groups; use 'partial-update.remove-record-on-sequence-group'")
        if removing:
            for name in removing.split(","):
                if name not in all_sequence_fields:
                    raise OptionError(f"{where}: 'partial-update.remove-record-on-sequence-group' names {name!r}, "
                                      "which is not a sequence field of a sequence group")
                cfg.remove_groups.add(cfg.group_of[name])
        return cfg


def _true(options: Mapping[str, str], key: str) -> bool:
    return str(options.get(key, "false")).lower() == "true"


@dataclass
class _GroupState:
    rank: np.ndarray  # dense rank of the group sequence (0 = all null)
    part: np.ndarray  # rows of the current segment with a non-null group sequence
    forward: np.ndarray  # ... whose sequence is >= the largest seen (they overwrite the group)
    last_forward: np.ndarray  # per key, the last forward row or -1


class PartialUpdateMerge(MergeFunction):
    """merge-engine=partial-update."""

    def __init__(self, options: Mapping[str, str], primary_keys: Sequence[str] = (),
                 sequence: SequenceOrder | None = None, field_names: Sequence[str] | None = None):
        self.config = PartialUpdateConfig.parse(options, primary_keys)
        self.primary_keys = set(primary_keys)
        self.sequence = sequence

    def required_columns(self, columns: Sequence[str]) -> list[str]:
        extra = super().required_columns(columns)
        present = set(columns)
        for index, group in enumerate(self.config.groups):
            if index in self.config.remove_groups or present & {*group.columns, *group.sequence_fields}:
                extra += [f for f in group.sequence_fields if f not in present and f not in extra]
        return extra

    def check_kinds(self, kinds: np.ndarray, columns: Sequence[str]) -> None:
        cfg = self.config
        if cfg.ignore_delete or not retraction_mask(kinds).any():
            return
        if not cfg.groups:
            if not cfg.remove_on_delete:
                raise MergeError(DELETE_REFUSED)
            return
        for name, spec in cfg.aggregates.items():
            if name in columns:
                _check_group_retract(spec)

    def merge(self, table: pa.Table, key_names: Sequence[str]) -> pa.Table:
        if self.config.ignore_delete:
            table = drop_retractions(table)
        if table.num_rows == 0:
            return table
        groups = KeyGroups.of_table(table, key_names)
        if self.sequence is not None:
            order = self.sequence.permutation(table, groups)
            if order is not None:
                table = table.take(order)
        kinds = table.column(VALUE_KIND).to_numpy()
        if self.config.groups:
            return _GroupMerge(self, table, key_names, groups, kinds).run()
        return self._merge_plain(table, key_names, groups, kinds)

    def _is_key(self, name: str, keys: set[str]) -> bool:
        return name in keys or name == SEQUENCE_NUMBER or name in self.primary_keys or KEY_PREFIX + name in keys

    def _merge_plain(self, table: pa.Table, key_names: Sequence[str], groups: KeyGroups,
                     kinds: np.ndarray) -> pa.Table:
        retract = retraction_mask(kinds)
        is_add = ~retract
        n = table.num_rows
        seed = np.full(groups.count, -1, dtype=np.int64)
        segment = is_add
        if retract.any():
            if not self.config.remove_on_delete:
                raise MergeError(DELETE_REFUSED)
            last_delete = groups.last_where(kinds == DELETE)
            seed = np.where(last_delete >= 0, last_delete, np.where(retract[groups.starts], groups.starts, -1))
            start = np.where(last_delete >= 0, last_delete, groups.starts)
            segment = is_add & (np.arange(n) >= start[groups.gid])
        keys = set(key_names)
        columns = []
        for name in table.column_names:
            column = table.column(name)
            if name == VALUE_KIND:
                columns.append(pa.array(_kinds(kinds, groups, last_is_removal=kinds[groups.ends] == DELETE),
                                        type=pa.int8()))
            elif self._is_key(name, keys):
                columns.append(take_or_null(column, groups.ends))
            else:
                idx = groups.last_where(segment & validity(as_array(column)))
                columns.append(take_or_null(column, np.where(idx >= 0, idx, seed)))
        return build_table(columns, table.schema)


def _kinds(kinds: np.ndarray, groups: KeyGroups, last_is_removal: np.ndarray) -> np.ndarray:
    has_insert = groups.any(~retraction_mask(kinds))
    has_delete = groups.any(kinds == DELETE)
    out = np.where(has_insert, INSERT, np.where(has_delete, DELETE, UPDATE_BEFORE))
    return np.where(last_is_removal, DELETE, out).astype(np.int8)


def _check_group_retract(spec: FieldAgg) -> None:
    if spec.ignore_retract:
        return
    if spec.function not in RETRACTABLE:
        raise retraction_error(spec)
    if spec.function not in _GROUP_RETRACTABLE:
        raise MergeError(f"retracting field {spec.field!r} (aggregate function {spec.function!r}) inside a "
                         "partial-update sequence group is not supported by Strata (only sum and last_value); "
                         f"set 'fields.{spec.field}.ignore-retract'='true' to ignore retractions")


class _GroupMerge:
    """One merge with sequence groups."""

    def __init__(self, owner: PartialUpdateMerge, table: pa.Table, key_names: Sequence[str],
                 groups: KeyGroups, kinds: np.ndarray):
        self.owner = owner
        self.cfg = owner.config
        self.table = table
        self.key_names = key_names
        self.groups = groups
        self.kinds = kinds
        self.n = table.num_rows
        self.retract = retraction_mask(kinds)
        self.ranks: dict[int, np.ndarray] = {}
        self.states: dict[int, _GroupState] = {}
        self._segment()

    def rank(self, index: int) -> np.ndarray:
        rank = self.ranks.get(index)
        if rank is None:
            group = self.cfg.groups[index]
            missing = [f for f in group.sequence_fields if f not in self.table.column_names]
            if missing:
                raise KeyError(f"sequence-group field(s) {missing} are needed to merge but were not read")
            rank = self.ranks[index] = tuple_rank([self.table.column(f) for f in group.sequence_fields])
        return rank

    def _segment(self) -> None:
        """Find each key's last row removal (a -D of a removing group with the largest sequence):
        merging restarts after it, from the -D record's values (the seed)."""
        g = self.groups
        is_delete = self.kinds == DELETE
        trigger = np.zeros(self.n, dtype=bool)
        if is_delete.any():
            for index in self.cfg.remove_groups:
                rank = self.rank(index)
                trigger |= is_delete & (rank > 0) & (rank == g.cummax(rank))
        last_removal = g.last_where(trigger) if trigger.any() else np.full(g.count, -1, dtype=np.int64)
        removed = last_removal >= 0
        self.last_is_removal = removed & (last_removal == g.ends)
        self.seed = np.where(removed, last_removal, np.where(self.retract[g.starts], g.starts, -1))
        start = np.where(removed, last_removal + 1, g.starts)
        self.in_segment = np.arange(self.n) >= start[g.gid]

    def state(self, index: int) -> _GroupState:
        state = self.states.get(index)
        if state is None:
            g = self.groups
            rank = self.rank(index)
            part = (rank > 0) & self.in_segment
            seed_rank = np.where(self.seed >= 0, rank[np.maximum(self.seed, 0)], 0)
            running = np.maximum(g.cummax(np.where(part, rank, 0)), seed_rank[g.gid])
            forward = part & (rank == running)
            state = self.states[index] = _GroupState(rank, part, forward, g.last_where(forward))
        return state

    def run(self) -> pa.Table:
        keys = set(self.key_names)
        columns = []
        for name in self.table.column_names:
            column = self.table.column(name)
            if name == VALUE_KIND:
                columns.append(pa.array(_kinds(self.kinds, self.groups, self.last_is_removal), type=pa.int8()))
            elif self.owner._is_key(name, keys):
                columns.append(take_or_null(column, self.groups.ends))
            elif name not in self.cfg.group_of:
                idx = self.groups.last_where(~self.retract & self.in_segment & validity(as_array(column)))
                columns.append(take_or_null(column, np.where(idx >= 0, idx, self.seed)))
            else:
                columns.append(self._group_column(name, column))
        return build_table(columns, self.table.schema)

    def _group_column(self, name: str, column: pa.ChunkedArray) -> pa.Array:
        index = self.cfg.group_of[name]
        state = self.state(index)
        last = state.last_forward
        if name in self.cfg.groups[index].sequence_fields:
            return take_or_null(column, np.where(last >= 0, last, self.seed))
        spec = self.cfg.aggregates.get(name)
        if spec is None:  # overwritten by the newest record of the group; null if it retracts
            idx = np.where(last >= 0, np.where(self.retract[np.maximum(last, 0)], -1, last), self.seed)
            return take_or_null(column, idx)
        return self._aggregate(spec, column, state)

    def _aggregate(self, spec: FieldAgg, column: pa.ChunkedArray, state: _GroupState) -> pa.Array:
        g = self.groups
        retracting = state.part & self.retract
        if spec.ignore_retract:
            retracting = np.zeros(self.n, dtype=bool)
        elif retracting.any():
            _check_group_retract(spec)
            if spec.function == "last_value":
                idx = g.last_where((state.forward & ~self.retract) | retracting)
                idx = np.where(idx >= 0, np.where(self.retract[np.maximum(idx, 0)], -1, idx), self.seed)
                return take_or_null(column, idx)
        inserts = state.part & ~self.retract
        seeds = self.seed[self.seed >= 0]
        rows = np.concatenate([seeds, np.flatnonzero(inserts | retracting)])
        position = rows.astype(np.int64) + 1
        position[: len(seeds)] = 0  # the seed is the initial accumulator
        if spec.function != "collect":  # collect's aggReversed appends too
            older = ~state.forward[rows] & ~retracting[rows]
            older[: len(seeds)] = False
            position = np.where(older, -position, position)
        reorder = len(seeds) > 0 or bool((position < 0).any())  # else rows are in (key, arrival) order
        if reorder:
            order = np.lexsort((position, g.gid[rows]))
            rows, position = rows[order], position[order]
        column = as_array(column)
        every_row = not reorder and len(rows) == self.n
        values = column if every_row else column.take(pa.array(rows, type=pa.int64()))
        retract = retracting[rows]
        if len(seeds):
            retract = retract & (position != 0)
        return fold(spec, values, g.gid[rows], retract, g.count)
