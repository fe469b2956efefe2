"""Model-based test of merge-on-write (deletion-vector) primary-key tables: random upserts,
deletes, commits, full compactions, write-only commits finished by the dedicated compaction job,
writer restarts and crashes, for each merge engine and changelog producer Paimon allows with
deletion vectors, checked after every step against a dict. Level 0 must stay invisible, each key
must be live in exactly one file, and the lookup changelog replayed must give the new state."""

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

SCHEMA = pa.schema([pa.field("k", pa.int32(), nullable=False), pa.field("v", pa.int64()), pa.field("w", pa.string())])
KEYS = st.integers(min_value=0, max_value=40)
VALUES = st.integers(-5, 5)
ENGINES = {
    "deduplicate": {},
    "partial-update": {"merge-engine": "partial-update"},
    "aggregation": {"merge-engine": "aggregation", "fields.v.aggregate-function": "sum",
                    "fields.w.aggregate-function": "last_non_null_value"},
}
Row = tuple[int | None, str | None]


class DeletionVectorMachine(RuleBasedStateMachine):
    table: Table
    writer: TableWrite

    def __init__(self, warehouse: str, options: dict[str, str]) -> None:
        super().__init__()
        self.dir = f"{warehouse}/dv-{uuid.uuid4().hex[:12]}"
        self.options = options

    @initialize(engine=st.sampled_from(sorted(ENGINES)), producer=st.sampled_from(["none", "input", "lookup"]),
                buckets=st.integers(1, 3), trigger=st.integers(2, 4), bitmap64=st.booleans(),
                spillable=st.booleans())
    def create(self, engine: str, producer: str, buckets: int, trigger: int, bitmap64: bool, spillable: bool) -> None:
        catalog = strata.load_catalog(self.dir, **self.options)
        catalog.create_database("db")
        options = {"bucket": str(buckets), "changelog-producer": producer, "deletion-vectors.enabled": "true",
                   "deletion-vectors.bitmap64": str(bitmap64).lower(),
                   "num-sorted-run.compaction-trigger": str(trigger), "write-buffer-size": "4 kb",
                   "write-buffer-spillable": str(spillable).lower(), **ENGINES[engine]}
        self.table = catalog.create_table("db.t", SCHEMA, primary_keys=["k"], options=options)
        self.engine, self.producer = engine, producer
        self.committed: dict[int, Row] = {}
        self.pending: list[tuple[str, dict[int, Row]]] = []
        self.identifier = 0
        self.commit = self.table.new_commit("machine")
        self.writer = self.table.new_write()

    def teardown(self) -> None:
        self.writer.close()
        file_io_for(self.dir, self.options).delete_dir(self.dir)

    # -- the model ------------------------------------------------------------------------------
    def _apply(self, state: dict[int, Row], kind: str, rows: dict[int, Row]) -> None:
        for key, (v, w) in rows.items():
            if kind == "-D":
                state.pop(key, None)
            elif self.engine == "deduplicate" or key not in state:
                state[key] = (v, w) if self.engine != "aggregation" or v is not None else (None, w)
            elif self.engine == "partial-update":
                old_v, old_w = state[key]
                state[key] = (v if v is not None else old_v, w if w is not None else old_w)
            else:  # sum, last_non_null_value
                old_v, old_w = state[key]
                total = None if old_v is None and v is None else (old_v or 0) + (v or 0)
                state[key] = (total, w if w is not None else old_w)

    # -- rules ------------------------------------------------------------------------------------
    @rule(rows=st.dictionaries(KEYS, st.tuples(VALUES | st.none(), st.sampled_from(["a", "b", None])),
                               min_size=1, max_size=30))
    def upsert(self, rows: dict[int, Row]) -> None:
        self.writer.write_arrow(self._batch(rows))
        self.pending.append(("+I", rows))

    @precondition(lambda self: self.engine == "deduplicate" and self.producer != "input")
    @rule(keys=st.sets(KEYS, min_size=1, max_size=8))
    def delete(self, keys: set[int]) -> None:
        rows: dict[int, Row] = {k: (None, None) for k in sorted(keys)}
        self.writer.delete(self._batch(rows))
        self.pending.append(("-D", rows))

    @rule()
    def commit_now(self) -> None:
        before = dict(self.committed)
        start = self.table.snapshot_manager.latest_id() or 0
        self.commit.commit(self.writer.prepare_commit(), identifier=self.identifier)
        self.identifier += 1
        for kind, rows in self.pending:
            self._apply(self.committed, kind, rows)
        self.pending = []
        end = self.table.snapshot_manager.latest_id() or 0
        if self.producer == "lookup" and end > start:
            self._replay(before, start, end)

    @rule()
    def full_compaction(self) -> None:
        self.commit_now()
        self.writer.compact(full=True)
        self.commit.commit(self.writer.prepare_commit(), identifier=self.identifier)
        self.identifier += 1
        splits = self.table.scan()
        top = self.table.core.num_levels - 1
        assert all(f.level == top for s in splits for f in s.files)
        assert not any(s.deletion_files for s in splits), "a full compaction clears every deletion vector"
        assert self._read(read_optimized=True) == self.committed, "$ro reads the top level: all of it now"

    @rule(rows=st.dictionaries(KEYS, st.tuples(VALUES, st.sampled_from(["x", "y"])), min_size=1, max_size=20))
    def write_only_then_compaction_job(self, rows: dict[int, Row]) -> None:
        """A write-only writer's level-0 files stay invisible until the dedicated job compacts."""
        self.commit_now()
        self.writer.close()
        writer = TableWrite(self.table, compaction=False)
        with writer:
            writer.write_arrow(self._batch(rows))
            self.table.new_commit("write-only").commit(writer.prepare_commit())
        assert self._read() == self.committed, "level-0 rows of a write-only commit must not be visible"
        self.table.compact()
        self._apply(self.committed, "+I", rows)
        self.writer = self.table.new_write()

    @rule()
    def restart_writer(self) -> None:
        self.commit_now()
        self.writer.close()
        self.writer = self.table.new_write()

    @rule()
    def crash(self) -> None:
        """The writer dies before committing: its rows are lost, the table stays as committed."""
        self.writer.close()
        self.pending = []
        self.writer = self.table.new_write()

    # -- checks -----------------------------------------------------------------------------------
    def _replay(self, before: dict[int, Row], start: int, end: int) -> None:
        state = dict(before)
        changes = self.table.read_incremental(start, end)
        for kind, key, v, w in zip(*(changes.column(c).to_pylist() for c in ("_ROW_KIND", "k", "v", "w")),
                                   strict=True):
            if kind in ("+I", "+U"):
                state[key] = (v, w)
            else:
                assert state.get(key, "absent") == (v, w), (kind, key, v, w)
                if kind == "-D":
                    state.pop(key)
        assert state == self.committed

    def _read(self, **kwargs: object) -> dict[int, Row]:
        out = self.table.to_arrow(**kwargs)  # type: ignore[arg-type]
        keys = out.column("k").to_pylist()
        assert len(keys) == len(set(keys)), "a key is live in more than one file"
        return dict(zip(keys, zip(out.column("v").to_pylist(), out.column("w").to_pylist(), strict=True), strict=True))

    @invariant()
    def table_equals_model(self) -> None:
        if not hasattr(self, "table"):
            return
        assert self._read() == self.committed
        assert all(f.level > 0 for s in self.table.scan() for f in s.files)

    @staticmethod
    def _batch(rows: dict[int, Row]) -> pa.Table:
        return pa.table({"k": list(rows), "v": [r[0] for r in rows.values()], "w": [r[1] for r in rows.values()]},
                        schema=SCHEMA)


EXAMPLES = {"local": 25, "minio": 5}


def test_deletion_vector_table_matches_model(storage: str, warehouse: str, warehouse_options: dict[str, str]) -> None:
    run_state_machine_as_test(lambda: DeletionVectorMachine(warehouse, warehouse_options),
                              settings=settings(max_examples=EXAMPLES[storage], stateful_step_count=25, deadline=None,
                                                derandomize=True, database=None))
