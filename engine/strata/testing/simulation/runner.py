"""Run one seed: create its table, apply its operations one by one, check the model and the
invariants after each; shrink a failing run to the shortest sub-list of operations that still
fails the same way; replay a sub-list.

Everything a run does follows from (seed, steps, the indices of the operations kept), so a failure
is reported as those three and `make simulate SEED=.. STEPS=.. ONLY=..` replays it.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from strata.testing.simulation.branching import check_branches
from strata.testing.simulation.changes import check_consumers, check_files_present
from strata.testing.simulation.invariants import (
    check_references,
    check_system_tables,
    check_tags_listed,
    sync_snapshots,
)
from strata.testing.simulation.model import Column, TableModel
from strata.testing.simulation.operations import TABLE, Context, Op, apply, random_ops
from strata.testing.simulation.oracles import check_iceberg, check_pyiceberg, check_pypaimon
from strata.testing.simulation.readers import check_latest
from strata.testing.simulation.schemas import TableSpec, random_spec, with_mirror

# operations after which every retained snapshot and tag is read back (they delete files)
MAINTENANCE = ("rollback", "expire_snapshots", "remove_orphans", "delete_tag", "overwrite", "fast_forward",
               "delete_branch", "expire_partitions", "concurrent_writes")


@dataclass(frozen=True)
class Scenario:
    """A seed's table and operations; `only` keeps a sub-list (indices into the generated ops)."""

    seed: int
    steps: int
    only: tuple[int, ...] | None = None
    # the slower tier: the Iceberg metadata checked after every step that changes the table, and
    # pyiceberg and pypaimon read it after each rollback and at the end
    oracles: bool = False
    faults: str = ""  # a named fault mix (faults.PRESETS) in place of the seed's random one

    def spec(self) -> TableSpec:
        return self._generated()[0]

    def ops(self) -> list[tuple[int, Op]]:
        ops = self._generated()[1]
        indices = range(len(ops)) if self.only is None else self.only
        return [(i, ops[i]) for i in indices]

    def _generated(self) -> tuple[TableSpec, list[Op]]:
        rng = random.Random(self.seed)
        spec = with_mirror(random_spec(rng), random.Random(f"mirror:{self.seed}"))
        return spec, random_ops(rng, spec, self.steps)

    def world(self, warehouse: str) -> Any:
        """The concurrency world of this seed (its own random streams, so that the table and the
        operations stay what they are without it): faults for half the seeds, snapshots published
        under the JDBC lock (check-then-put storage) for half, by conditional PUT for the others."""
        from strata.testing.simulation.concurrency import World
        from strata.testing.simulation.faults import PRESETS, FaultConfig

        rng = random.Random(f"faults:{self.seed}")
        faults = FaultConfig.random(rng) if rng.random() < 0.5 else FaultConfig()
        if self.faults:
            if self.faults not in PRESETS:
                raise ValueError(f"unknown fault mix {self.faults!r}; known: {sorted(PRESETS)}")
            faults = PRESETS[self.faults]
        return World(self.seed, warehouse, faults, use_jdbc_lock=self.publish_mode() == "jdbc-lock",
                     lapse_before_put=False)

    def publish_mode(self) -> str:
        from strata.testing.simulation.faults import PRESETS_UNDER_LOCK

        if self.faults in PRESETS_UNDER_LOCK:
            return "jdbc-lock"
        return "jdbc-lock" if random.Random(f"publish:{self.seed}").random() < 0.5 else "conditional-put"

    def keeping(self, indices: Sequence[int]) -> Scenario:
        return Scenario(self.seed, self.steps, tuple(indices), self.oracles, self.faults)

    def command(self) -> str:
        only = "" if self.only is None else f" ONLY={','.join(map(str, self.only))}"
        oracles = " ORACLES=1" if self.oracles else ""
        if self.faults:
            only = f" --only {','.join(map(str, self.only))}" if self.only is not None else ""
            return (f"python -m strata.testing.simulation --seed {self.seed} --steps {self.steps}{only}"
                    f"{' --oracles' if self.oracles else ''} --faults {self.faults}")
        return f"make simulate SEED={self.seed} STEPS={self.steps}{only}{oracles}"


@dataclass(frozen=True)
class Failure:
    index: int  # the operation's index in the generated list (-1: creating the table)
    op: str
    error: str  # the exception's class name
    message: str
    trace: str = ""

    @property
    def signature(self) -> tuple[str, str]:
        """What a shrunk run must reproduce: the same kind of error on the same kind of step."""
        return self.op, self.error


@dataclass
class RunResult:
    scenario: Scenario
    failure: Failure | None = None
    counters: Counter[str] = field(default_factory=Counter)
    steps_run: int = 0
    seconds: float = 0.0


def run(scenario: Scenario, keep_dir: bool = False) -> RunResult:
    """Run a scenario in a fresh local warehouse, stopping at the first failure."""
    started = time.monotonic()
    warehouse = tempfile.mkdtemp(prefix="strata-sim-")
    result = RunResult(scenario)
    try:
        _run_in(scenario, warehouse, result)
    finally:
        result.seconds = time.monotonic() - started
        if not keep_dir:
            shutil.rmtree(warehouse, ignore_errors=True)
    return result


def _run_in(scenario: Scenario, warehouse: str, result: RunResult) -> None:
    spec = scenario.spec()
    try:
        ctx = _create(spec, warehouse, scenario.world(warehouse))
    except Exception as exc:  # a generated table must be accepted
        result.failure = _failure(-1, "create_table", exc)
        return
    ctx.counters = result.counters
    try:
        _run_ops(scenario, ctx, result)
    finally:
        if ctx.world is not None:
            result.counters.update({k if ":" in k else f"fault:{k}": v for k, v in ctx.world.counters.items()})


def _run_ops(scenario: Scenario, ctx: Context, result: RunResult) -> None:
    result.counters.update({f"table:{'primary' if ctx.spec.primary_keys else 'append'}": 1,
                            f"publish:{scenario.publish_mode()}": 1})
    ops = scenario.ops()
    for n, (index, op) in enumerate(ops):
        try:
            before = _latest(ctx)
            label = apply(op, ctx)
            result.counters[f"op:{op['op']}:{label}"] += 1
            _check(ctx, op, last=n == len(ops) - 1, counters=result.counters)
            moved = _latest(ctx) != before or (op["op"] == "rollback" and label.startswith("to_"))
            _check_mirror(ctx, scenario, op, moved, n == len(ops) - 1, result.counters)
        except Exception as exc:
            result.failure = _failure(index, op["op"], exc)
            return
        finally:
            result.steps_run += 1


def _create(spec: TableSpec, warehouse: str, world: Any) -> Context:
    import strata

    catalog = strata.load_catalog(warehouse) if world is None else world.catalog(None)
    catalog.create_database("sim", ignore_if_exists=True)
    table = catalog.create_table(TABLE, spec.arrow_schema(), partition_keys=list(spec.partition_keys),
                                 primary_keys=list(spec.primary_keys), options=spec.options)
    model = TableModel([Column(f.id, f.name, f.type) for f in table.schema.fields], spec.primary_keys,
                       spec.partition_keys, spec.merge_engine,
                       sum_column="n" if spec.merge_engine == "aggregation" else None,
                       level0_hidden=_level0_hidden(spec))
    return Context(catalog, table, spec, model, world=world)


def _level0_hidden(spec: TableSpec) -> bool:
    """Batch reads skip level 0 in primary-key tables with deletion vectors or first-row."""
    return bool(spec.primary_keys) and (spec.options.get("deletion-vectors.enabled") == "true"
                                        or spec.merge_engine == "first-row")


def _check(ctx: Context, op: Op, last: bool, counters: Counter[str]) -> None:
    """The readers and invariants after a step (their randomness follows the op's seed)."""
    rng = random.Random(op["seed"] ^ 0x5BD1E995)
    sync_snapshots(ctx.table, ctx.model, ctx.intermediate_unchecked)
    ctx.intermediate_unchecked = False
    counters[f"read:{check_latest(ctx.table, ctx.model, rng)}"] += 1
    every = last or op["op"] in MAINTENANCE
    counters["read:time_travel"] += check_references(ctx.table, ctx.model, rng, every)
    check_tags_listed(ctx.table, ctx.model)
    check_system_tables(ctx.table, ctx.model)
    check_consumers(ctx)
    check_branches(ctx, rng, every, counters)
    if every:
        counters["files:present"] += check_files_present(ctx.table)


def _latest(ctx: Context) -> tuple[int, int] | None:
    snapshot = ctx.table.latest_snapshot()
    return None if snapshot is None else (snapshot.id, snapshot.time_millis)


def _check_mirror(ctx: Context, scenario: Scenario, op: Op, moved: bool, last: bool,
                  counters: Counter[str]) -> None:
    """The Iceberg metadata against the model: after each rollback and at the end, and with the
    oracles after every step that moved the latest snapshot (then pyiceberg and pypaimon too,
    after each rollback and at the end). A step that moved it without faults leaves it current."""
    rollback_or_end = last or op["op"] == "rollback"
    if not (rollback_or_end or (scenario.oracles and moved)):
        return
    current = moved and op["op"] != "concurrent_writes"
    counters[f"iceberg:{check_iceberg(ctx.table, ctx.model, current)}"] += 1
    if scenario.oracles and rollback_or_end:
        counters[f"oracle:pyiceberg:{check_pyiceberg(ctx.table, ctx.model)}"] += 1
        counters[f"oracle:pypaimon:{check_pypaimon(ctx.table, ctx.model, ctx.catalog.warehouse, TABLE)}"] += 1


def _failure(index: int, op: str, exc: BaseException) -> Failure:
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:])
    return Failure(index, op, type(exc).__name__, str(exc)[:2000], trace)


# -- shrinking ----------------------------------------------------------------------------------------
def shrink(result: RunResult, max_runs: int = 150, max_seconds: float = 600.0) -> RunResult:
    """The shortest sub-list of operations found that still fails with the same signature:
    drop what follows the failure, then chunks of halving size, then single operations, re-running
    from scratch each time (as hypothesis does)."""
    assert result.failure is not None
    target = result.failure.signature
    best = result
    indices = [i for i, _ in result.scenario.ops() if i <= result.failure.index]
    deadline = time.monotonic() + max_seconds
    runs = 0
    chunk = max(1, len(indices) // 2)
    while chunk >= 1 and runs < max_runs and time.monotonic() < deadline:
        start, shrank = 0, False
        while start < len(indices) and runs < max_runs and time.monotonic() < deadline:
            candidate = indices[:start] + indices[start + chunk:]
            attempt = run(result.scenario.keeping(candidate))
            runs += 1
            if attempt.failure is not None and attempt.failure.signature == target:
                best, indices, shrank = attempt, [i for i in candidate if i <= attempt.failure.index], True
            else:
                start += chunk
        if not shrank:
            chunk //= 2
    if best.scenario.only != tuple(indices):
        best = run(result.scenario.keeping(indices))
    return best


def describe(result: RunResult) -> str:
    """A failure as a reader meets it: the seed, the command that replays it, the operations."""
    failure = result.failure
    if failure is None:
        return f"seed {result.scenario.seed}: {result.steps_run} steps passed"
    ops = "\n".join(f"  [{i}] {op}" for i, op in result.scenario.ops() if i <= failure.index)
    return (f"seed {result.scenario.seed} failed at operation {failure.index} ({failure.op}): "
            f"{failure.error}: {failure.message}\n  replay: {result.scenario.command()}\n"
            f"  table: {result.scenario.spec().to_json()}\n  operations:\n{ops}\n{failure.trace}")


def to_json(result: RunResult) -> dict[str, Any]:
    failure = result.failure
    return {"seed": result.scenario.seed, "steps": result.scenario.steps, "oracles": result.scenario.oracles,
            "faults": result.scenario.faults,
            "only": list(result.scenario.only) if result.scenario.only is not None else None,
            "steps_run": result.steps_run, "seconds": round(result.seconds, 2),
            "failure": None if failure is None else {"index": failure.index, "op": failure.op,
                                                     "error": failure.error, "message": failure.message},
            "replay": result.scenario.command()}
