"""Model-based test of append tables with deletion vectors: random appends, deletes by predicate,
compactions (small-file, full, sort), and races (two deletes planned on one snapshot; a delete
landing between a compaction's planning and its commit), checked after every step against a list
of rows. A race either commits or fails with CommitConflictError; the table never loses a delete
nor brings a deleted row back."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable

import pyarrow as pa
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

import strata
from strata.errors import CommitConflictError
from strata.expressions import Predicate
from strata.fs import file_io_for
from strata.operation.append_compact import compaction_index_changes, plan_append_compaction, run_append_compaction
from strata.operation.delete import prepare_delete
from strata.table.table import Table

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("k", pa.int32()),
                    pa.field("p", pa.string())])
Row = tuple[int, int | None, str]
KS = st.integers(0, 9)

# (predicate, the same test on a model row)
Condition = tuple[Predicate, Callable[[Row], bool]]


@st.composite
def conditions(draw: st.DrawFn) -> Condition:
    kind = draw(st.sampled_from(["k_eq", "k_between", "ids", "p_and_k", "k_null"]))
    if kind == "k_eq":
        k = draw(KS)
        return strata.col("k") == k, lambda r: r[1] == k
    if kind == "k_between":
        low, high = sorted(draw(st.tuples(KS, KS)))
        return strata.col("k").between(low, high), lambda r: r[1] is not None and low <= r[1] <= high
    if kind == "ids":
        ids = draw(st.sets(st.integers(0, 120), min_size=1, max_size=6))
        return strata.col("id").isin(sorted(ids)), lambda r: r[0] in ids
    if kind == "k_null":
        return strata.col("k").is_null(), lambda r: r[1] is None
    p, k = draw(st.sampled_from(["x", "y"])), draw(KS)
    return (strata.col("p") == p) & (strata.col("k") < k), lambda r: r[2] == p and r[1] is not None and r[1] < k


class AppendDeletionVectorMachine(RuleBasedStateMachine):
    table: Table

    def __init__(self, warehouse: str, options: dict[str, str]) -> None:
        super().__init__()
        self.dir = f"{warehouse}/adv-{uuid.uuid4().hex[:12]}"
        self.options = options

    @initialize(bucketed=st.booleans(), partitioned=st.booleans(), bitmap64=st.booleans(),
                index_target=st.sampled_from(["64 b", "2 mb"]), min_files=st.integers(2, 4))
    def create(self, bucketed: bool, partitioned: bool, bitmap64: bool, index_target: str, min_files: int) -> None:
        catalog = strata.load_catalog(self.dir, **self.options)
        catalog.create_database("db")
        options = {"bucket": "2" if bucketed else "-1", "deletion-vectors.enabled": "true",
                   "deletion-vectors.bitmap64": str(bitmap64).lower(), "compaction.min.file-num": str(min_files),
                   "deletion-vectors.index-file.target-size": index_target}
        if bucketed:
            options["bucket-key"] = "id"
        self.table = catalog.create_table("db.t", SCHEMA, partition_keys=["p"] if partitioned else None,
                                          options=options)
        self.bucketed = bucketed
        self.rows: list[Row] = []
        self.next_id = 0

    def teardown(self) -> None:
        file_io_for(self.dir, self.options).delete_dir(self.dir)

    # -- rules ------------------------------------------------------------------------------------
    @rule(values=st.lists(st.tuples(KS | st.none(), st.sampled_from(["x", "y"])), min_size=1, max_size=25))
    def append(self, values: list[tuple[int | None, str]]) -> None:
        rows = [(self.next_id + i, k, p) for i, (k, p) in enumerate(values)]
        self.next_id += len(rows)
        self.table.write(pa.table({"id": [r[0] for r in rows], "k": [r[1] for r in rows],
                                   "p": [r[2] for r in rows]}, schema=SCHEMA))
        self.rows.extend(rows)

    @rule(condition=conditions())
    def delete_where(self, condition: Condition) -> None:
        predicate, test = condition
        result = self.table.delete_where(predicate)
        doomed = [r for r in self.rows if test(r)]
        assert result.deleted_rows == len(doomed)
        self.rows = [r for r in self.rows if not test(r)]

    @rule(full=st.booleans())
    def compact(self, full: bool) -> None:
        self.table.compact(full=full)

    @rule()
    def sort_compact(self) -> None:
        if not self.bucketed:
            self.table.compact(sort_by=["k"])

    @rule(first=conditions(), second=conditions())
    def racing_deletes(self, first: Condition, second: Condition) -> None:
        """Two deletes planned on the same snapshot: the second commits only if it touches other files."""
        a, b = prepare_delete(self.table, first[0]), prepare_delete(self.table, second[0])
        if a.messages:
            self.table.new_commit().commit(a.messages)
        self.rows = [r for r in self.rows if not first[1](r)]
        if b.messages:
            try:
                self.table.new_commit().commit(b.messages)
            except CommitConflictError:
                return
        self.rows = [r for r in self.rows if not second[1](r)]

    @rule(condition=conditions(), full=st.booleans())
    def delete_during_compaction(self, condition: Condition, full: bool) -> None:
        tasks = plan_append_compaction(self.table, full)
        messages = [run_append_compaction(self.table, task) for task in tasks]
        self.delete_where(condition)
        messages += compaction_index_changes(self.table, tasks)
        if messages:
            with contextlib.suppress(CommitConflictError):  # the delete touched a file it rewrites
                self.table.new_commit().commit(messages)

    # -- checks -----------------------------------------------------------------------------------
    @invariant()
    def table_equals_model(self) -> None:
        if not hasattr(self, "table"):
            return
        data = self.table.to_arrow()
        got = sorted(zip(*(data.column(c).to_pylist() for c in ("id", "k", "p")), strict=True))
        assert got == sorted(self.rows)
        for split in self.table.scan():
            counts = {f.file_name: f.row_count for f in split.files}
            for name, vector in (split.deletion_files or {}).items():
                assert name in counts and 0 < (vector.cardinality or 0) <= counts[name]


EXAMPLES = {"local": 30, "minio": 5}


def test_append_table_with_deletion_vectors_matches_model(storage: str, warehouse: str,
                                                           warehouse_options: dict[str, str]) -> None:
    run_state_machine_as_test(lambda: AppendDeletionVectorMachine(warehouse, warehouse_options),
                              settings=settings(max_examples=EXAMPLES[storage], stateful_step_count=20, deadline=None))
