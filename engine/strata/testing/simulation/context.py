"""What the operations of one run share (the run's context), and the random batches they write,
apart from the operations so that the concurrent jobs (strata.testing.simulation.jobs), which the
operations call, can use them without importing the operations back."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from strata.errors import StrataError
from strata.testing.simulation.model import Row, TableModel
from strata.testing.simulation.readers import random_rows
from strata.testing.simulation.schemas import TableSpec
from strata.testing.simulation.values import atomic_value


@dataclass
class Branch:
    """A branch of the simulated table: the table on it, its model, its writer's identifiers."""

    name: str
    table: Any
    model: TableModel
    identifier: int = 0

    @property
    def user(self) -> str:
        return f"sim-branch-{self.name}"


@dataclass
class Context:
    """What the operations of one run share: the catalog, the table, the model, counters."""

    catalog: Any
    table: Any
    spec: TableSpec
    model: TableModel
    counters: Counter[str] = field(default_factory=Counter)
    identifier: int = 0
    next_row_id: int = 0
    names_made: int = 0
    last_write: tuple[int, pa.Table, list[str] | None, list[Row]] | None = None
    world: Any = None  # a concurrency.World when the run has concurrent committers and faults
    intermediate_unchecked: bool = False  # the last operation's snapshots but its last are not checked
    shared_identifiers: dict[str, int] = field(default_factory=dict)  # shared-user job -> last identifier
    branches: dict[str, Branch] = field(default_factory=dict)  # the table's branches (main is the table)
    consumers: dict[str, int] = field(default_factory=dict)  # consumer id -> its next snapshot

    def fresh_name(self, prefix: str) -> str:
        self.names_made += 1
        return f"{prefix}{self.names_made}"


class OperationFailed(AssertionError):
    """An operation whose outcome contradicts the model (the message says how)."""


def expect_refusal(action: Callable[[], object], what: str, word: str) -> None:
    """`action` must fail with a Strata error whose message names the problem (`word`)."""
    try:
        action()
    except (StrataError, ValueError) as exc:
        if word not in str(exc).lower():
            raise OperationFailed(f"{what} failed with an unclear error: {exc!r}") from exc
        return
    raise OperationFailed(f"{what} was accepted; it should be refused")


def batch_rows(ctx: Context, rng: random.Random, count: int, partition: Any = None) -> list[Row]:
    """Random rows of the current schema; keys from a small range so that writes upsert."""
    model = ctx.model
    rows = random_rows(rng, model, count)
    key_ids = set(model.ids(model.primary_keys))
    part_ids = set(model.ids(model.partition_keys))
    for row in rows:
        for c in model.columns:
            if c.field_id in key_ids - part_ids:
                row[c.field_id] = atomic_value(rng, c.type, rng.randrange(25))
            elif c.field_id in part_ids:
                row[c.field_id] = partition if partition is not None else atomic_value(rng, c.type, rng.randrange(3))
            elif c.name == "id" and not model.is_primary:
                row[c.field_id] = ctx.next_row_id
                ctx.next_row_id += 1
    return rows


def arrow_of(ctx: Context, rows: list[Row]) -> pa.Table:
    schema = pa.schema([f.to_arrow() for f in ctx.table.schema.fields])
    by_name = [{c.name: r.get(c.field_id) for c in ctx.model.columns} for r in rows]
    return pa.Table.from_pylist(by_name, schema=schema)
