"""Model-based test of the LSM: random upserts, deletes, commits, triggered and full compactions
and writer restarts, for each changelog producer, checked after every commit against a dict.
The merged table must equal the model, and the commit's changelog replayed onto the previous
state must give the new state."""

from __future__ import annotations

import uuid

import pyarrow as pa
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import strata
from strata.fs import file_io_for
from strata.table.table import Table
from strata.table.write import TableWrite

SCHEMA = pa.schema([pa.field("k", pa.int32(), nullable=False), pa.field("v", pa.int64())])
KEYS = st.integers(min_value=0, max_value=40)


class LsmMachine(RuleBasedStateMachine):
    table: Table
    writer: TableWrite

    def __init__(self, warehouse: str, options: dict[str, str]) -> None:
        super().__init__()
        self.dir = f"{warehouse}/lsm-{uuid.uuid4().hex[:12]}"  # one warehouse per example
        self.options = options

    @initialize(producer=st.sampled_from(["none", "input", "lookup", "full-compaction"]),
                buckets=st.integers(1, 3), trigger=st.integers(2, 4), spillable=st.booleans())
    def create(self, producer: str, buckets: int, trigger: int, spillable: bool) -> None:
        catalog = strata.load_catalog(self.dir, **self.options)
        catalog.create_database("db")
        options = {"bucket": str(buckets), "changelog-producer": producer,
                   "num-sorted-run.compaction-trigger": str(trigger), "write-buffer-size": "4 kb",
                   "write-buffer-spillable": str(spillable).lower()}
        self.table = catalog.create_table("db.t", SCHEMA, primary_keys=["k"], options=options)
        self.producer = producer
        self.model: dict[int, int | None] = {}
        self.pending: dict[int, int | None] = {}
        self.deleted: set[int] = set()
        self.committed: dict[int, int | None] = {}
        self.identifier = 0
        self.full_state: dict[int, int | None] = {}  # the top level after the last full compaction
        self.full_snapshot = 0
        self.commit = self.table.new_commit("machine")
        self.writer = self.table.new_write()

    def teardown(self) -> None:
        self.writer.close()
        file_io_for(self.dir, self.options).delete_dir(self.dir)

    @rule(rows=st.dictionaries(KEYS, st.integers(-5, 5) | st.none(), min_size=1, max_size=30))
    def upsert(self, rows: dict[int, int | None]) -> None:
        self.writer.write_arrow(pa.table({"k": list(rows), "v": list(rows.values())}, schema=SCHEMA))
        self.pending.update(rows)
        self.deleted -= set(rows)

    @precondition(lambda self: self.producer != "input")  # input needs a true changelog as input
    @rule(keys=st.sets(KEYS, min_size=1, max_size=8))
    def delete(self, keys: set[int]) -> None:
        self.writer.delete(pa.table({"k": sorted(keys), "v": [None] * len(keys)}, schema=SCHEMA))
        for key in keys:
            self.pending.pop(key, None)
        self.deleted |= keys

    @rule()
    def commit_now(self) -> None:
        before = dict(self.committed)
        start = self.table.snapshot_manager.latest_id() or 0
        self.commit.commit(self.writer.prepare_commit(), identifier=self.identifier)
        self.identifier += 1
        for key in self.deleted:
            self.committed.pop(key, None)
        self.committed.update(self.pending)
        self.pending, self.deleted = {}, set()
        end = self.table.snapshot_manager.latest_id() or 0
        if self.producer in ("lookup", "full-compaction") and end > start:
            self._check_changelog(before, start, end)

    def _check_changelog(self, before: dict[int, int | None], start: int, end: int) -> None:
        if self.producer == "full-compaction":
            return  # its changelog only appears at full merges; checked in full_compaction
        self._replay(before, start, end)

    def _replay(self, before: dict[int, int | None], start: int, end: int) -> None:
        state = dict(before)
        changes = self.table.read_incremental(start, end)
        for kind, key, value in zip(changes.column("_ROW_KIND").to_pylist(), changes.column("k").to_pylist(),
                                    changes.column("v").to_pylist(), strict=True):
            if kind in ("+I", "+U"):
                state[key] = value
            else:
                assert state.get(key, "absent") == value, (kind, key, value)
                if kind == "-D":
                    state.pop(key)
        assert state == self.committed

    @rule()
    def full_compaction(self) -> None:
        self.commit_now()
        self.writer.compact(full=True)
        self.commit.commit(self.writer.prepare_commit(), identifier=self.identifier)
        self.identifier += 1
        top = self.table.core.num_levels - 1
        assert all(f.level == top for s in self.table.scan() for f in s.files)
        ro = self.table.to_arrow(read_optimized=True)
        assert dict(zip(ro.column("k").to_pylist(), ro.column("v").to_pylist(), strict=True)) == self.committed
        end = self.table.snapshot_manager.latest_id() or 0
        if self.producer in ("lookup", "full-compaction"):
            # the changelogs since the last full merge turn its top level into this one
            self._replay(self.full_state, self.full_snapshot, end)
        self.full_state, self.full_snapshot = dict(self.committed), end

    @rule()
    def restart_writer(self) -> None:
        self.commit_now()
        self.writer.close()
        self.writer = self.table.new_write()

    @invariant()
    def merged_table_equals_model(self) -> None:
        if not hasattr(self, "table"):
            return
        out = self.table.to_arrow()
        got = dict(zip(out.column("k").to_pylist(), out.column("v").to_pylist(), strict=True))
        assert got == self.committed


# fewer examples on MinIO, where every step costs several round trips
EXAMPLES = {"local": 25, "minio": 6}


def test_lsm_matches_model(storage: str, warehouse: str, warehouse_options: dict[str, str]) -> None:
    run_state_machine_as_test(lambda: LsmMachine(warehouse, warehouse_options),
                              settings=settings(max_examples=EXAMPLES[storage], stateful_step_count=25, deadline=None))
