"""Random table definitions: columns of every type Strata supports (nested ones anywhere in the
column order, also before the key and filter columns), keys, bucket modes, merge engines and
the options that change how files are written and read.

A definition is plain JSON (`TableSpec.to_json`), so a failing seed's table can be printed and
rebuilt. Only combinations Strata accepts at creation are generated (see
``strata.schema.definition.validate_schema``); the runner checks that a refused one is refused
with an error that names the problem.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from strata.schema.types import DataField, DataType

# atomic types a column may take; keys and partitions use the comparable, hashable subset
ATOMIC = ("BOOLEAN", "TINYINT", "SMALLINT", "INT", "BIGINT", "FLOAT", "DOUBLE", "DECIMAL(9, 2)",
          "DECIMAL(20, 4)", "STRING", "VARCHAR(20)", "BYTES", "DATE", "TIMESTAMP(3)", "TIMESTAMP(6)",
          "TIMESTAMP(6) WITH LOCAL TIME ZONE", "TIME(3)")
KEY_TYPES = ("INT", "BIGINT", "STRING", "DATE", "DECIMAL(9, 2)", "SMALLINT")
PARTITION_TYPES = ("INT", "STRING", "DATE")
NOT_IN_ICEBERG = ("TIME(3)",)  # the mirror refuses TIME (strata.iceberg.types)
MERGE_ENGINES = ("deduplicate", "partial-update", "aggregation", "first-row")
CHANGELOG_PRODUCERS = ("none", "input", "lookup", "full-compaction")
WIDENINGS = {"TINYINT": "SMALLINT", "SMALLINT": "INT", "INT": "BIGINT", "FLOAT": "DOUBLE"}


@dataclass(frozen=True)
class ColumnSpec:
    name: str
    type: str  # Paimon's SQL form for atomic types, JSON (as a string) for nested ones

    def data_type(self) -> DataType:
        import json

        text = self.type
        return DataType.parse(json.loads(text) if text.startswith("{") else text)


@dataclass(frozen=True)
class TableSpec:
    """What `create_table` is given: columns in order, keys and options."""

    columns: tuple[ColumnSpec, ...]
    primary_keys: tuple[str, ...] = ()
    partition_keys: tuple[str, ...] = ()
    options: dict[str, str] = field(default_factory=dict)

    @property
    def merge_engine(self) -> str:
        return self.options.get("merge-engine", "deduplicate")

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, c.data_type().to_arrow(), c.data_type().nullable)
                          for c in self.columns])

    def to_json(self) -> dict[str, Any]:
        return {"columns": [[c.name, c.type] for c in self.columns], "primary_keys": list(self.primary_keys),
                "partition_keys": list(self.partition_keys), "options": dict(self.options)}

    @staticmethod
    def from_json(obj: dict[str, Any]) -> TableSpec:
        return TableSpec(tuple(ColumnSpec(n, t) for n, t in obj["columns"]), tuple(obj["primary_keys"]),
                         tuple(obj["partition_keys"]), dict(obj["options"]))


def random_spec(rng: random.Random) -> TableSpec:
    """A table a user could create: primary-key (with a merge engine) or append."""
    primary = rng.random() < 0.65
    iceberg = rng.random() < 0.25
    partition_keys = ("p",) if rng.random() < 0.5 else ()
    key_count = rng.choice((1, 1, 2)) if primary else 0
    keys = tuple(f"k{i}" for i in range(key_count))
    columns = _columns(rng, keys, partition_keys, iceberg, primary)
    options = _options(rng, primary, iceberg, columns, keys, partition_keys)
    return TableSpec(columns, tuple(partition_keys) + keys if primary else (), partition_keys, options)


def with_mirror(spec: TableSpec, rng: random.Random) -> TableSpec:
    """Half of the tables without the Iceberg mirror get it, when their columns allow it, with a
    random mirror layout and Iceberg format. `rng` is a stream of its own, so that a seed's columns,
    keys and other options stay what `random_spec` made them."""
    iceberg = "metadata.iceberg.storage" in spec.options
    exportable = not any(t in c.type for c in spec.columns for t in NOT_IN_ICEBERG)
    if not iceberg and (not exportable or rng.random() < 0.5):
        return spec
    options = {**spec.options, "metadata.iceberg.storage": rng.choice(("table-location", "hadoop-catalog")),
               "metadata.iceberg.format-version": rng.choice(("2", "3"))}
    if options.get("deletion-vectors.enabled") == "true" and rng.random() < 0.5:
        options["deletion-vectors.bitmap64"] = "true"
    return TableSpec(spec.columns, spec.primary_keys, spec.partition_keys, options)


def _columns(rng: random.Random, keys: tuple[str, ...], partition_keys: tuple[str, ...], iceberg: bool,
             primary: bool) -> tuple[ColumnSpec, ...]:
    """Keys and partitions NOT NULL, values of random types; the order is shuffled so that nested
    columns often come before the key and filter columns."""
    atomic = [t for t in ATOMIC if not (iceberg and t in NOT_IN_ICEBERG)]
    cols = [ColumnSpec(k, f"{rng.choice(KEY_TYPES)} NOT NULL") for k in keys]
    cols += [ColumnSpec(p, f"{rng.choice(PARTITION_TYPES)} NOT NULL") for p in partition_keys]
    if not primary:
        cols.append(ColumnSpec("id", "BIGINT NOT NULL"))  # lets the model tell rows apart in messages
    next_id = [1000]
    for i in range(rng.randint(2, 6)):
        nested = rng.random() < 0.35
        dtype = _nested_type(rng, atomic, next_id) if nested else _atomic(rng, atomic)
        nullable = rng.random() < 0.75
        cols.append(ColumnSpec(f"v{i}", _type_text(dtype.with_nullable(nullable))))
    if primary:
        cols.append(ColumnSpec("n", "INT"))  # a summable value for the aggregation engine
    rng.shuffle(cols)
    return tuple(cols)


def _atomic(rng: random.Random, atomic: list[str]) -> DataType:
    return DataType.parse(rng.choice(atomic))


def _nested_type(rng: random.Random, atomic: list[str], next_id: list[int], depth: int = 0) -> DataType:
    kind = rng.choice(("ARRAY", "MAP", "ROW", "MULTISET"))
    inner = (lambda: _nested_type(rng, atomic, next_id, depth + 1)) if depth == 0 and rng.random() < 0.3 \
        else (lambda: _atomic(rng, atomic).with_nullable(rng.random() < 0.7))
    if kind == "ARRAY":
        return DataType.array(inner())
    if kind == "MULTISET":
        return DataType.multiset(DataType.parse(rng.choice(("STRING", "INT"))).not_null())
    if kind == "MAP":
        return DataType.map(DataType.parse(rng.choice(("STRING", "INT", "BIGINT"))).not_null(), inner())
    fields = []
    for j in range(rng.randint(1, 3)):
        next_id[0] += 1
        fields.append(DataField(-1, f"f{j}", inner()))
    return DataType("ROW", True, fields=tuple(fields))


def _type_text(dtype: DataType) -> str:
    import json

    return json.dumps(dtype.to_json()) if dtype.is_nested else str(dtype)


def _options(rng: random.Random, primary: bool, iceberg: bool, columns: tuple[ColumnSpec, ...],
             keys: tuple[str, ...], partition_keys: tuple[str, ...]) -> dict[str, str]:
    """Small files and pages (so reads cross many of them), then the table's modes."""
    options = {"target-file-size": rng.choice(("4 kb", "16 kb", "128 mb")),
               "page-size": rng.choice(("1 kb", "64 kb")),
               "num-sorted-run.compaction-trigger": str(rng.choice((2, 3, 5))),
               "snapshot.num-retained.min": str(rng.choice((1, 3, 10))),
               "snapshot.num-retained.max": str(rng.choice((3, 10, 1000)))}
    if int(options["snapshot.num-retained.max"]) < int(options["snapshot.num-retained.min"]):
        options["snapshot.num-retained.max"] = options["snapshot.num-retained.min"]
    if iceberg:
        options["metadata.iceberg.storage"] = "table-location"
    if primary:
        options.update(_primary_options(rng, keys))
    else:
        options.update(_append_options(rng, columns, partition_keys))
    return options


def _primary_options(rng: random.Random, keys: tuple[str, ...]) -> dict[str, str]:
    engine = rng.choice(MERGE_ENGINES)
    options = {"merge-engine": engine, "bucket": str(rng.choice((1, 2, 3, -1)))}
    if engine in ("partial-update", "aggregation", "first-row"):
        options["ignore-delete"] = "true"  # deletes are dropped (refused otherwise)
    if engine == "aggregation":
        options["fields.n.aggregate-function"] = "sum"
    dv = engine != "first-row" and rng.random() < 0.4
    producers = ("none", "input", "lookup") if dv else CHANGELOG_PRODUCERS
    options["changelog-producer"] = rng.choice(producers)
    if dv:
        options["deletion-vectors.enabled"] = "true"
    # a small buffer fills within a write: it flushes level-0 files, or spills sorted runs to disk.
    # Drawn from a generator of its own, seeded by the main one's state without advancing it, so
    # the recorded seeds replay the operations they did before these options existed.
    buffer_rng = random.Random(repr(rng.getstate()[1]))
    options["write-buffer-size"] = buffer_rng.choice(("2 kb", "256 mb"))
    options["write-buffer-spillable"] = buffer_rng.choice(("true", "false"))
    return options


def _append_options(rng: random.Random, columns: tuple[ColumnSpec, ...],
                    partition_keys: tuple[str, ...]) -> dict[str, str]:
    options: dict[str, str] = {}
    if rng.random() < 0.5:
        options["deletion-vectors.enabled"] = "true"
    if rng.random() < 0.3:
        candidates = [c.name for c in columns if c.name not in partition_keys and not c.data_type().is_nested
                      and c.data_type().root not in ("FLOAT", "DOUBLE", "BOOLEAN")]
        options.update({"bucket": str(rng.choice((1, 2))), "bucket-key": rng.choice(candidates)})
    else:
        options["bucket"] = "-1"
    return options


def reserved_columns(spec: TableSpec) -> set[str]:
    """Columns that options or keys name: schema evolution leaves them alone."""
    names = set(spec.primary_keys) | set(spec.partition_keys) | {"id", "n"}
    if "bucket-key" in spec.options:
        names.add(spec.options["bucket-key"])
    return names
