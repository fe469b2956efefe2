"""Model-based tests of the partial-update, aggregation and first-row merge engines: random batches
of upserts, partial rows and retractions, flushes, commits, triggered and full compactions and
writer restarts (clean, or dropping uncommitted work), for each changelog producer the engine
allows, checked after every step against the plain-Python models of merge_models.py.

Invariants: the merged table equals the model after every step; each commit's changelog
(``lookup``), the changelogs between full compactions (``full-compaction``) and the input records
(``input``, folded by the model) replayed onto a mirror give the model again."""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from merge_models import (
    INSERTS,
    RETRACTIONS,
    EngineModel,
    State,
    aggregation,
    first_row,
    partial_update,
    partial_update_sequence_group,
)

import strata
from strata.fs import file_io_for
from strata.mergetree.merge_function import MergeError
from strata.table.table import Table
from strata.table.write import TableWrite

KEYS = st.integers(min_value=0, max_value=15)
View = dict[int, tuple]


def view_of(model: EngineModel, states: dict[int, State | None]) -> View:
    out = {}
    for key, state in states.items():
        row = model.view(state) if state is not None else None
        if row is not None:
            out[key] = row
    return out


class MergeEngineMachine(RuleBasedStateMachine):
    """`current` is the model with the open writer's records, `committed` without them."""

    table: Table
    writer: TableWrite

    def __init__(self, warehouse: str, options: dict[str, str], variants: list[EngineModel]) -> None:
        super().__init__()
        self.dir = f"{warehouse}/engines-{uuid.uuid4().hex[:12]}"  # one warehouse per example
        self.options = options
        self.variants = variants

    @initialize(data=st.data(), buckets=st.integers(1, 2), trigger=st.integers(2, 4),
                buffer=st.sampled_from(["1 kb", "64 kb"]), spillable=st.booleans())
    def create(self, data: st.DataObject, buckets: int, trigger: int, buffer: str, spillable: bool) -> None:
        self.model = data.draw(st.sampled_from(self.variants), label="engine")
        self.producer = data.draw(st.sampled_from(self.model.producers), label="changelog-producer")
        self.catalog = strata.load_catalog(self.dir, **self.options)
        self.catalog.create_database("db")
        options = {**self.model.options, "bucket": str(buckets), "changelog-producer": self.producer,
                   "num-sorted-run.compaction-trigger": str(trigger), "write-buffer-size": buffer,
                   "write-buffer-spillable": str(spillable).lower()}
        self.table = self.catalog.create_table("db.t", self.model.schema, primary_keys=["k"], options=options)
        self.writer = self.table.new_write()
        self.current: dict[int, State | None] = {}
        self.committed: dict[int, State | None] = {}
        self.tainted: set[int] = set()  # deleted keys that only a full compaction frees for new writes
        self.mirror: dict[int, State | None] = {}  # the input changelog folded by the model
        self.full_view: View = {}  # the top level after the last full compaction
        self.full_snapshot = 0

    def teardown(self) -> None:
        if hasattr(self, "writer"):
            self.writer.close()
        file_io_for(self.dir, self.options).delete_dir(self.dir)

    # -- writing ------------------------------------------------------------------------------------
    @rule(data=st.data(), size=st.integers(1, 16), flush=st.booleans())
    def write_batch(self, data: st.DataObject, size: int, flush: bool) -> None:
        self._write(data, size)
        if flush:  # spill every buffer to a level-0 run now (what a full write buffer does)
            for bucket_writer in self.writer.writers.values():
                bucket_writer.flush()

    @rule(data=st.data(), size=st.integers(1, 16))
    def write_and_commit(self, data: st.DataObject, size: int) -> None:
        self._write(data, size)
        self.commit()

    def _write(self, data: st.DataObject, size: int) -> None:
        kinds = list(INSERTS) + (list(RETRACTIONS) if self.model.retraction is not None else [])
        ops: list[tuple[str, int, dict[str, Any]]] = []
        for _ in range(size):
            kind, key = data.draw(st.sampled_from(kinds)), data.draw(KEYS)
            if not self._may_write(kind, key):
                continue
            strategy = self.model.retraction if kind in RETRACTIONS else self.model.insert
            assert strategy is not None
            row = data.draw(strategy)
            ops.append((kind, key, row))
            self.current[key] = self.model.fold(self.current.get(key), kind, row)
            if kind == "-D" and self.model.delete_taints:
                self.tainted.add(key)
        if not ops:
            return
        columns = {"k": [key for _, key, _ in ops]}
        columns |= {n: [row[n] for _, _, row in ops] for n in self.model.value_names}
        self.writer.write_arrow(pa.table(columns, schema=self.model.schema), row_kind=[kind for kind, _, _ in ops])

    def _may_write(self, kind: str, key: int) -> bool:
        if key in self.tainted:
            return kind == "-D"
        if kind in RETRACTIONS and self.model.retract_needs_row:
            state = self.current.get(key)
            return state is not None and self.model.view(state) is not None
        return True

    @precondition(lambda self: hasattr(self, "model") and self.model.retraction is None)
    @rule(keys=st.sets(KEYS, min_size=1, max_size=4), kind=st.sampled_from(RETRACTIONS))
    def refused_retraction(self, keys: set[int], kind: str) -> None:
        """An engine without delete options refuses retractions at write time, naming the option."""
        rows = pa.table({"k": sorted(keys), **{n: [None] * len(keys) for n in self.model.value_names}},
                        schema=self.model.schema)
        with pytest.raises(MergeError, match=self.model.refused_message):
            self.writer.write_arrow(rows, row_kind=kind)

    # -- committing and compacting -----------------------------------------------------------------
    @rule()
    def commit(self) -> None:
        before = view_of(self.model, self.committed)
        start = self._latest()
        self.table.new_commit("machine").commit(self.writer.prepare_commit())
        self.committed = dict(self.current)
        end = self._latest()
        if end == start:
            return
        if self.producer == "lookup":
            self._replay(before, start, end)
        elif self.producer == "input":
            self._fold_input_changelog(start, end)

    @rule()
    def triggered_compaction(self) -> None:
        self.writer.compact(full=False)
        self.commit()

    @rule()
    def full_compaction(self) -> None:
        self.commit()
        self.writer.compact(full=True)
        self.commit()
        top = self.table.core.num_levels - 1
        assert all(f.level == top for split in self.table.scan() for f in split.files)
        assert self._read(read_optimized=True) == view_of(self.model, self.committed)
        end = self._latest()
        if self.producer in ("lookup", "full-compaction"):
            # the changelogs since the last full merge turn its top level into this one
            self._replay(self.full_view, self.full_snapshot, end)
        self.full_view, self.full_snapshot = view_of(self.model, self.committed), end
        self.tainted.clear()

    @rule(crash=st.booleans())
    def restart_writer(self, crash: bool) -> None:
        """Continue with a new table object and writer from the catalog, after a commit or after
        a crash (the old writer's uncommitted records are lost)."""
        if crash:
            self.current = dict(self.committed)
        else:
            self.commit()
        self.writer.close()
        self.table = self.catalog.get_table("db.t")
        self.writer = self.table.new_write()

    # -- checks -------------------------------------------------------------------------------------
    def _latest(self) -> int:
        return self.table.snapshot_manager.latest_id() or 0

    def _read(self, **kwargs: Any) -> View:
        out = self.table.to_arrow(**kwargs)
        keys = out.column("k").to_pylist()
        rows = list(zip(*(out.column(n).to_pylist() for n in self.model.value_names), strict=True))
        assert len(set(keys)) == len(keys), f"duplicate keys in {keys}"
        return dict(zip(keys, rows, strict=True))

    def _changes(self, start: int, end: int) -> list[tuple[str, int, dict[str, Any]]]:
        changes = self.table.read_incremental(start, end)
        kinds, keys = changes.column("_ROW_KIND").to_pylist(), changes.column("k").to_pylist()
        values = {n: changes.column(n).to_pylist() for n in self.model.value_names}
        return [(kind, key, {n: values[n][i] for n in values}) for i, (kind, key) in enumerate(zip(kinds, keys,
                                                                                                     strict=True))]

    def _replay(self, before: View, start: int, end: int) -> None:
        """A complete changelog: -U/-D carry the old row, +I/+U the new one."""
        state = dict(before)
        for kind, key, row in self._changes(start, end):
            value = self.model.row_view(row)
            if kind in INSERTS:
                assert kind == "+U" or key not in state, (kind, key, value, state.get(key))
                state[key] = value
            else:
                assert state.get(key, "absent") == value, (kind, key, value, state.get(key, "absent"))
                if kind == "-D":
                    del state[key]
        assert state == view_of(self.model, self.committed)
        if self.model.name.startswith("first-row"):  # a first-row changelog holds inserts only
            assert {kind for kind, _, _ in self._changes(start, end)} <= {"+I"}

    def _fold_input_changelog(self, start: int, end: int) -> None:
        """The input producer keeps every record written: folding them gives the model again."""
        for kind, key, row in self._changes(start, end):
            self.mirror[key] = self.model.fold(self.mirror.get(key), kind, row)
        assert view_of(self.model, self.mirror) == view_of(self.model, self.committed)

    @invariant()
    def merged_table_equals_model(self) -> None:
        if hasattr(self, "table"):
            assert self._read() == view_of(self.model, self.committed)


# fewer examples on MinIO, where every step costs several round trips
EXAMPLES = {"local": 30, "minio": 5}


def run_machine(variants: list[EngineModel], storage: str, warehouse: str, options: dict[str, str]) -> None:
    run_state_machine_as_test(
        lambda: MergeEngineMachine(warehouse, options, variants),  # type: ignore[arg-type]  # any factory works
        settings=settings(max_examples=EXAMPLES[storage], stateful_step_count=25, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))


def test_partial_update_matches_model(storage: str, warehouse: str, warehouse_options: dict[str, str]) -> None:
    variants = [partial_update("refused"), partial_update("ignore-delete"), partial_update("remove-record-on-delete")]
    run_machine(variants, storage, warehouse, warehouse_options)


def test_partial_update_sequence_group_matches_model(storage: str, warehouse: str,
                                                     warehouse_options: dict[str, str]) -> None:
    run_machine([partial_update_sequence_group()], storage, warehouse, warehouse_options)


def test_aggregation_matches_model(storage: str, warehouse: str, warehouse_options: dict[str, str]) -> None:
    run_machine([aggregation(ignore_delete=False), aggregation(ignore_delete=True)], storage, warehouse,
                warehouse_options)


def test_first_row_matches_model(storage: str, warehouse: str, warehouse_options: dict[str, str]) -> None:
    run_machine([first_row(ignore_delete=False), first_row(ignore_delete=True)], storage, warehouse,
                warehouse_options)


# -- Paimon semantics the models were narrowed around, as minimal examples --------------------------


def test_a_retraction_only_key_merges_to_delete_as_in_paimon(catalog: strata.Catalog) -> None:
    # Paimon's PartialUpdateMergeFunction: a key that met no insert merges to DELETE (meetInsert),
    # which a full compaction drops, group sequence included; an older group sequence written
    # after that then wins, where an uncompacted table still holds the retraction's. Strata agrees.
    model = partial_update_sequence_group()

    def row(g: int, a: int | None) -> pa.Table:
        return pa.table({"k": [1], "g": [g], "a": [a], "s": [None], "c": [None]}, schema=model.schema)

    def after(compact: bool) -> list[dict]:
        table = catalog.create_table(f"db.t{int(compact)}", model.schema, primary_keys=["k"],
                                     options={**model.options, "bucket": "1"})
        table.write(row(5, None), row_kind="-D")
        assert table.to_arrow().num_rows == 0  # merged to -D: invisible
        if compact:
            table.compact(full=True)
        table.write(row(1, 7))  # older than the retraction's group sequence 5
        return table.to_arrow().to_pylist()

    assert after(compact=False) == [{"k": 1, "g": 5, "a": None, "s": None, "c": None}]
    assert after(compact=True) == [{"k": 1, "g": 1, "a": 7, "s": None, "c": None}]
