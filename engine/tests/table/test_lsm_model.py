"""Model-based test of primary-key tables: random upserts, deletes, flushes, writer restarts and
commits, checked against a plain dict after every commit and by time travel to older snapshots.

The state machine keeps the operations as rules so that compaction (and later expiry) can be added
as further rules with the same invariants."""

from __future__ import annotations

import functools
import uuid

import hypothesis.strategies as st
import pyarrow as pa
from hypothesis import HealthCheck, settings
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
from strata.io import data_file_reader
from strata.table import read as table_read

KEYS = st.integers(min_value=0, max_value=24)
SUFFIXES = ["", "a", "ab"]
PARTITIONS = ["a", "b", "c"]
KINDS = {"+I": True, "+U": True, "-U": False, "-D": False}  # kind -> does it leave the key live


class PrimaryKeyTableMachine(RuleBasedStateMachine):
    """Model: (partition, key) -> value; `pending` holds the operations of the open writer."""

    def __init__(self, warehouse: str, options: dict[str, str]) -> None:
        super().__init__()
        self.dir = f"{warehouse}/lsm-{uuid.uuid4().hex[:12]}"  # one warehouse per example
        self.options = options
        self.table: strata.Table | None = None
        self.writer = None
        self.model: dict[tuple[str, int, str], str] = {}
        self.pending: list[tuple[str, tuple[str, int, str], str]] = []
        self.history: dict[int, dict[tuple[str, int, str], str]] = {}
        self.counter = 0
        self.restore_reader = None

    @initialize(partitioned=st.booleans(), compound=st.booleans(), buckets=st.integers(1, 3),
                buffer=st.sampled_from(["512 b", "4 kb", "256 mb"]), batch_rows=st.sampled_from([3, 64, None]),
                write_only=st.booleans(), trigger=st.sampled_from(["2", "5"]))
    def create(self, partitioned: bool, compound: bool, buckets: int, buffer: str, batch_rows: int | None,
               write_only: bool, trigger: str) -> None:
        catalog = strata.load_catalog(self.dir, **self.options)
        catalog.create_database("db")
        schema = pa.schema([("k", pa.int32()), ("s", pa.string()), ("p", pa.string()), ("v", pa.string())])
        self.partitioned = partitioned
        self.compound = compound  # a (k, s) key exercises tuple comparisons while merging
        keys = ["k", "s"] if compound else ["k"]
        self.table = catalog.create_table(
            "db.t", schema, partition_keys=["p"] if partitioned else None,
            primary_keys=keys + (["p"] if partitioned else []),
            options={"bucket": str(buckets), "write-buffer-size": buffer, "write-only": str(write_only).lower(),
                     "num-sorted-run.compaction-trigger": trigger})
        # write-only writers leave compaction to a dedicated job (the `compact` rule); the others
        # compact their own buckets as sorted runs pile up
        self.write_only = write_only
        self.writer = self.table.new_write()
        if batch_rows is not None:  # tiny read batches: merges cross many batch boundaries
            self.restore_reader = table_read.read_file
            table_read.read_file = functools.partial(data_file_reader.read_file, batch_rows=batch_rows)

    def teardown(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.restore_reader is not None:
            table_read.read_file = self.restore_reader
        file_io_for(self.dir, self.options).delete_dir(self.dir)

    # -- helpers ----------------------------------------------------------------------------
    def _key(self, k: int, p: str) -> tuple[str, int, str]:
        return (p if self.partitioned else "-", k, self._s(k))

    def _s(self, k: int) -> str:
        """The string key part: keys 0..24 share k // 3, so k ties and s decides."""
        return SUFFIXES[k % 3] if self.compound else ""

    def _write(self, keys: list[int], parts: list[str], kinds: list[str]) -> None:
        values = []
        for k, p, kind in zip(keys, parts, kinds, strict=True):
            self.counter += 1
            value = f"v{self.counter}"
            values.append(value)
            self.pending.append((kind, self._key(k, p), value))
        ks = [k // 3 if self.compound else k for k in keys]
        data = pa.table({"k": pa.array(ks, pa.int32()), "s": pa.array([self._s(k) for k in keys]),
                         "p": pa.array(parts, pa.string()), "v": pa.array(values, pa.string())})
        self.writer.write_arrow(data, row_kind=kinds)

    def _read_state(self, **kwargs) -> dict[tuple[str, int, str], str]:
        got = self.table.to_arrow(**kwargs)
        state = {}
        for r in got.to_pylist():
            k = r["k"] * 3 + SUFFIXES.index(r["s"]) if self.compound else r["k"]
            key = self._key(k, r["p"])
            assert key not in state, f"duplicate key {key} in read"
            state[key] = r["v"]
        return state

    # -- rules --------------------------------------------------------------------------------
    @rule(keys=st.lists(KEYS, min_size=1, max_size=12), part=st.sampled_from(PARTITIONS))
    def upsert(self, keys: list[int], part: str) -> None:
        self._write(keys, [part] * len(keys), ["+I"] * len(keys))

    @rule(low=KEYS, count=st.integers(1, 6), part=st.sampled_from(PARTITIONS))
    def upsert_range(self, low: int, count: int, part: str) -> None:
        """Consecutive keys: flushed alone, a file whose key range may not overlap the others'
        (a section of its own, read without a merge)."""
        keys = list(range(low, min(low + count, 25)))
        self._write(keys, [part] * len(keys), ["+I"] * len(keys))

    @rule(keys=st.lists(KEYS, min_size=1, max_size=6), part=st.sampled_from(PARTITIONS))
    def delete(self, keys: list[int], part: str) -> None:
        self._write(keys, [part] * len(keys), ["-D"] * len(keys))

    @rule(ops=st.lists(st.tuples(KEYS, st.sampled_from(PARTITIONS), st.sampled_from(sorted(KINDS))),
                       min_size=1, max_size=10))
    def changelog(self, ops: list[tuple[int, str, str]]) -> None:
        keys, parts, kinds = (list(x) for x in zip(*ops, strict=True))
        self._write(keys, parts, kinds)

    @rule()
    def flush(self) -> None:
        """Spill every buffer to a level-0 file now (what a full write buffer does)."""
        for bucket_writer in self.writer.writers.values():
            bucket_writer.flush()

    @rule()
    def commit(self) -> None:
        messages = self.writer.prepare_commit()
        result = self.table.new_commit().commit(messages)
        for kind, key, value in self.pending:
            if KINDS[kind]:
                self.model[key] = value
            else:
                self.model.pop(key, None)
        self.pending = []
        for sid in result.snapshot_ids:
            self.history[sid] = dict(self.model)
        assert self._read_state() == self.model

    @rule()
    def restart_writer(self) -> None:
        """A writer that dies before committing loses its rows; a new one continues the sequence."""
        self.writer.close()
        self.pending = []
        self.writer = self.table.new_write()

    @precondition(lambda self: len(self.history) > 1)
    @rule(data=st.data())
    def time_travel(self, data: st.DataObject) -> None:
        # snapshot ids depend on when background compactions finish: draw an index, not an id
        ids = sorted(self.history)
        sid = ids[data.draw(st.integers(0, 1000)) % len(ids)]
        assert self._read_state(snapshot_id=sid) == self.history[sid]

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def point_lookup(self, data: st.DataObject) -> None:
        part, k, suffix = data.draw(st.sampled_from(sorted(self.model)))
        predicate = strata.col("k") == (k // 3 if self.compound else k)
        if self.compound:
            predicate = predicate & (strata.col("s") == suffix)
        if self.partitioned:
            predicate = predicate & (strata.col("p") == part)
        got = self.table.to_arrow(filter=predicate).column("v").to_pylist()
        assert got == [self.model[(part, k, suffix)]]

    @precondition(lambda self: self.table is not None and self.write_only)
    @rule(full=st.booleans())
    def compact(self, full: bool) -> None:
        """A dedicated compaction job: a COMPACT snapshot that changes no row."""
        result = self.table.compact(full=full)
        for sid in result.snapshot_ids:
            assert self.table.snapshot_manager.snapshot(sid).commit_kind == "COMPACT"
            self.history[sid] = dict(self.model)
        assert self._read_state() == self.model

    @invariant()
    def snapshots_are_continuous(self) -> None:
        if self.table is not None:
            ids = [s.id for s in self.table.snapshots()]
            assert ids == list(range(1, len(ids) + 1))
            assert sorted(self.history) == ids


# fewer examples on MinIO, where every step costs several round trips
EXAMPLES = {"local": 30, "minio": 8}


def test_primary_key_table_matches_model(storage: str, warehouse: str, warehouse_options: dict[str, str]) -> None:
    run_state_machine_as_test(
        lambda: PrimaryKeyTableMachine(warehouse, warehouse_options),
        settings=settings(max_examples=EXAMPLES[storage], stateful_step_count=20, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
