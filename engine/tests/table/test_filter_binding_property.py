"""Property test of filter binding (issue 27): for every column type, every operator and literals of
every Python type, Strata returns the rows DuckDB returns for the same condition in SQL, or raises
FilterError; never another exception. Run on a primary-key table of several sorted runs (write-only:
nothing compacts them) and on an append table of several files, so that file and row-group pruning
take part (files of several row groups); and on an append and a deletion-vector table whose ROW,
ARRAY, MAP, MULTISET and nested columns come first (several Parquet columns each: the filtered
column's statistics are not at its top-level position).

The SQL spells the literal the way SQL coerces it to the column: a float or Decimal compares with
a FLOAT/DOUBLE column as a DOUBLE and with integer and DECIMAL columns as the exact decimal it
prints as; a naive datetime is a TIMESTAMP and an aware one a TIMESTAMPTZ (session zone UTC).
Data holds no NaN (Arrow and SQL order NaN differently; Strata follows Arrow)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import random
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import strata
from strata import col
from strata.errors import FilterError
from strata.expressions import ColumnStats, Predicate
from strata.expressions.literals import bind
from strata.io import data_file_writer
from strata.schema.table_schema import TableSchema, schema_from_arrow
from strata.schema.types import DataType

duckdb = pytest.importorskip("duckdb")

UTC = dt.UTC
ZONES = [UTC, dt.timezone(dt.timedelta(hours=2)), dt.timezone(dt.timedelta(hours=-5, minutes=-30))]
# column -> (Arrow type, values the rows take)
COLUMNS: dict[str, tuple[pa.DataType, list[Any]]] = {
    "i8": (pa.int8(), [-128, 127, 0, 1, -1, 100]),
    "i16": (pa.int16(), [-32768, 32767, 0, 7, -300]),
    "i32": (pa.int32(), [-(2**31), 2**31 - 1, 0, 42, -7]),
    "i64": (pa.int64(), [-(2**63), 2**63 - 1, 0, 10**12, -5]),
    "f32": (pa.float32(), [0.5, -1.25, 0.0, 1e10, 3.0]),
    "f64": (pa.float64(), [0.1, -2.5, 0.0, 1e300, 1 / 3]),
    "d10": (pa.decimal128(10, 2), [Decimal("-99999999.99"), Decimal("99999999.99"), Decimal("0.00"),
                                   Decimal("0.01"), Decimal("-1.00"), Decimal("100.50")]),
    "d38": (pa.decimal128(38, 10), [Decimal("-1"), Decimal("0"), Decimal("5.0000000001"),
                                    Decimal("9999999999999999999999999999.9999999999")]),
    "flag": (pa.bool_(), [True, False]),
    "name": (pa.string(), ["", "a", "ab", "abc", "b", "ä", "2020-01-01"]),
    "raw": (pa.binary(), [b"", b"\x00", b"a", b"\xff"]),
    "day": (pa.date32(), [dt.date(1900, 1, 1), dt.date(2020, 1, 1), dt.date(2020, 2, 29), dt.date(9999, 12, 31)]),
    "tod": (pa.time32("ms"), [dt.time(0), dt.time(12, 0, 0, 500_000), dt.time(23, 59, 59, 999_000)]),
    "ts3": (pa.timestamp("ms"), [dt.datetime(2020, 1, 1), dt.datetime(2020, 1, 1, 10, 0, 0, 123_000),
                                 dt.datetime(1969, 12, 31, 23, 59, 59, 999_000)]),
    "ts6": (pa.timestamp("us"), [dt.datetime(2020, 1, 1, 0, 0, 0, 1), dt.datetime(2020, 1, 1),
                                 dt.datetime(2000, 6, 15, 12, 30)]),
    "ts9": (pa.timestamp("ns"), [dt.datetime(2020, 1, 1, 0, 0, 0, 1), dt.datetime(2020, 1, 1),
                                 dt.datetime(1970, 1, 1)]),
    "lts": (pa.timestamp("us", tz="UTC"), [dt.datetime(2020, 1, 1, tzinfo=UTC),
                                           dt.datetime(2020, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
                                           dt.datetime(2019, 12, 31, 22, tzinfo=UTC)]),
}
ROW_COUNT = 40
COMPARISONS = {"eq": "=", "ne": "<>", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def rows() -> pa.Table:
    pick = random.Random(27)
    data: dict[str, list[Any]] = {"id": list(range(ROW_COUNT))}
    for name, (_, values) in COLUMNS.items():
        data[name] = [None if pick.random() < 0.15 else pick.choice(values) for _ in range(ROW_COUNT)]
    return pa.table(data, schema=pa.schema([pa.field("id", pa.int64(), nullable=False),
                                            *(pa.field(n, t) for n, (t, _) in COLUMNS.items())]))


ROWS = rows()
GROUP_ROWS = 3  # rows per row group: several per file, so that row-group statistics prune

# nested columns, each several Parquet columns, put before the others; their values differ from
# every column's (a leaf read as another column's would prune rows it holds)
NESTED = pa.schema([
    ("s", pa.struct([("a", pa.int64()), ("b", pa.string())])),
    ("tags", pa.list_(pa.struct([("x", pa.int32()), ("y", pa.float64())]))),
    ("m", pa.map_(pa.string(), pa.int64())),
    ("bag", pa.map_(pa.string(), pa.int32())),  # a MULTISET<STRING> (see nested_schema)
    ("deep", pa.struct([("r", pa.struct([("p", pa.int16()), ("q", pa.list_(pa.date32()))])),
                        ("n", pa.map_(pa.int32(), pa.binary()))])),
])


def nested_rows() -> pa.Table:
    ids = range(ROW_COUNT)
    nested = pa.table({
        "s": [None if i % 7 == 3 else {"a": 10**15 + i, "b": f"zz{i}"} for i in ids],
        "tags": [[{"x": 10**6 + i, "y": 1e200}] if i % 4 else [] for i in ids],
        "m": [[(f"~{i}", -(10**15) - i)] for i in ids],
        "bag": [None if i % 5 == 1 else [(f"~{i}", 2)] for i in ids],
        "deep": [{"r": {"p": 9000 + i, "q": [dt.date(1066, 1, 1)]}, "n": [(10**6 + i, b"\xfe")]} for i in ids],
    }, schema=NESTED)
    for name in ROWS.column_names:
        nested = nested.append_column(ROWS.schema.field(name), ROWS.column(name))
    return nested


def nested_schema(primary_keys: list[str] | None, options: dict[str, str]) -> TableSchema:
    schema = schema_from_arrow(nested_rows().schema, primary_keys=primary_keys, options=options)
    return dataclasses.replace(schema, fields=[
        dataclasses.replace(f, type=DataType.multiset(DataType.parse("STRING"))) if f.name == "bag" else f
        for f in schema.fields])


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> list[strata.Table]:
    catalog = strata.load_catalog(str(tmp_path_factory.mktemp("wh")))
    catalog.create_database("db")
    pk = catalog.create_table("db.pk", ROWS.schema, primary_keys=["id"],
                              options={"bucket": "1", "write-only": "true"})
    append = catalog.create_table("db.log", ROWS.schema, options={"bucket": "-1"})
    nested_append = catalog.create_table("db.nested_log", nested_schema(None, {"bucket": "-1"}))
    nested_dv = catalog.create_table("db.nested_dv", nested_schema(["id"], {
        "bucket": "1", "deletion-vectors.enabled": "true", "write-only": "true"}))
    nested = nested_rows()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(data_file_writer, "ROW_GROUP_ROWS", GROUP_ROWS)
        patch.setattr(data_file_writer, "ROW_GROUP_BYTES", 0)  # groups of GROUP_ROWS rows exactly
        for start in range(0, ROW_COUNT, 10):  # four files each: sorted runs of the PK table
            part = ROWS.slice(start, 10)
            pk.write(part)
            append.write(part)
            nested_append.write(nested.slice(start, 10))
            nested_dv.write(nested.slice(start, 10))
        pk.write(ROWS.slice(0, 5))  # the same rows again: a fifth run the merge must reconcile
        nested_dv.write(nested.slice(0, 5))
        nested_dv.compact(full=True)  # one file above level 0, read without merging: every filter prunes
    assert len(pk.scan()[0].files) == 5
    assert nested_dv.to_arrow().sort_by("id").to_pylist() == nested.to_pylist()
    return [pk, append, nested_append, nested_dv]


@pytest.fixture(scope="module")
def duck() -> Any:
    connection = duckdb.connect()
    connection.execute("SET TimeZone = 'UTC'")
    # DuckDB compares TIMESTAMP_NS with neither TIMESTAMPTZ nor DATE: the same values (all whole
    # microseconds) as TIMESTAMP
    connection.register("t", ROWS.set_column(ROWS.schema.get_field_index("ts9"), "ts9",
                                             ROWS.column("ts9").cast(pa.timestamp("us"))))
    return connection


# -- literals of every Python type, near the column's values --------------------------------------


def near(value: Any) -> list[Any]:
    """The value, as other Python types and moved a little (off the column's grid)."""
    options: list[Any] = [value]
    if isinstance(value, bool):
        return [value, int(value)]
    if isinstance(value, int | float | Decimal):
        exact = Decimal(value) if not isinstance(value, float) else Decimal(repr(value))
        options += [int(exact), float(exact), exact, str(value), exact * 10, exact + Decimal("1e-12"),
                    exact + Decimal("0.005"), exact - Decimal("0.005"), exact + Decimal("0.5"),
                    exact - Decimal("0.5"), float(exact) + 0.5, float(exact) - 0.5]
    elif isinstance(value, dt.datetime):
        naive = value.replace(tzinfo=None)
        options += [naive, naive.date(), naive.isoformat(), naive + dt.timedelta(microseconds=500),
                    naive - dt.timedelta(microseconds=1),
                    naive.replace(tzinfo=ZONES[1]), value.astimezone(ZONES[2]) if value.tzinfo else naive,
                    naive.isoformat(sep=" ", timespec="milliseconds")]
    elif isinstance(value, dt.date):
        options += [value.isoformat(), dt.datetime.combine(value, dt.time(12)),
                    dt.datetime.combine(value, dt.time(0), tzinfo=ZONES[1]), dt.datetime.combine(value, dt.time(0))]
    elif isinstance(value, dt.time):
        options += [value.isoformat(), dt.time(value.hour, value.minute, value.second)]
    elif isinstance(value, str):
        options += [value + "a", value[:-1], value.encode()]
    elif isinstance(value, bytes):
        options += [value + b"\x00", value.decode("latin-1")]
    return options


def literals(column: str) -> st.SearchStrategy[Any]:
    """Mostly literals near the column's values; any Python value one time in ten."""
    nearby = st.sampled_from(COLUMNS[column][1]).flatmap(lambda value: st.sampled_from(near(value)))
    return st.one_of(*[nearby] * 9, st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70) | st.sampled_from([1000, -1000, 2**31, 2**63, -(2**63) - 1]),
        st.floats(width=64),
        st.decimals(allow_nan=False, allow_infinity=False, places=3, min_value=-10**6, max_value=10**6),
        st.text(max_size=3),
        st.binary(max_size=2),
        st.dates(),
        st.datetimes(),
        st.datetimes(timezones=st.sampled_from(ZONES)),
        st.times(),
    ))


# -- conditions: built for Strata and spelled in SQL at once --------------------------------------


class NoOracle(Exception):
    """A condition SQL would not evaluate exactly: it is not tried."""


def sql_literal(value: Any, column: str) -> str:
    arrow_type = COLUMNS[column][0]
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float | Decimal):
        exact = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
        if pa.types.is_floating(arrow_type) or not exact.is_finite() or abs(exact) > 10**40:
            return f"CAST('{float(value)!r}' AS DOUBLE)"  # far beyond any value: the sign is what counts
        # a literal SQL cannot compare exactly (as a DECIMAL of 38 digits) would be compared as a
        # DOUBLE, rounding it and the column's values: no oracle
        if not _fits_decimal(exact, arrow_type):
            raise NoOracle(value)
        return format(exact, "f")
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, bytes):
        return "'" + "".join(f"\\x{b:02x}" for b in value) + "'::BLOB"
    if isinstance(value, dt.datetime):
        kind = "TIMESTAMPTZ" if value.tzinfo is not None else "TIMESTAMP"
        return f"{kind} '{value.isoformat(sep=' ')}'"
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, dt.time):
        return f"TIME '{value.isoformat()}'"
    raise AssertionError(value)


def _fits_decimal(exact: Decimal, arrow_type: pa.DataType) -> bool:
    """Whether SQL compares the column with the literal as a DECIMAL of at most 38 digits."""
    scale = max(0, -exact.as_tuple().exponent)  # type: ignore[operator]
    whole = max(0, exact.adjusted() + 1)
    column_scale = arrow_type.scale if pa.types.is_decimal(arrow_type) else 0
    column_whole = arrow_type.precision - column_scale if pa.types.is_decimal(arrow_type) else 19
    return max(whole, column_whole) + max(scale, column_scale) <= 38


@st.composite
def leaves(draw: st.DrawFn) -> tuple[Predicate, str]:
    try:
        return spelled_leaf(draw)
    except NoOracle:
        assume(False)
        raise


def spelled_leaf(draw: st.DrawFn) -> tuple[Predicate, str]:
    column = draw(st.sampled_from(sorted(COLUMNS)))
    op = draw(st.sampled_from([*COMPARISONS, *COMPARISONS, "in", "between", "is_null", "is_not_null"]
                              + (["starts_with"] * 4 if column == "name" else [])))
    target, quoted = col(column), f'"{column}"'
    if op == "is_null":
        return target.is_null(), f"{quoted} IS NULL"
    if op == "is_not_null":
        return target.is_not_null(), f"{quoted} IS NOT NULL"
    if op == "starts_with":
        prefix = draw(st.sampled_from(["", "a", "ab", "2020", "b", None, 1]))
        return target.startswith(prefix), f"starts_with({quoted}, {sql_literal(prefix, column)})"
    if op == "in":
        values = draw(st.lists(literals(column), min_size=1, max_size=3))
        return target.isin(values), f"{quoted} IN ({', '.join(sql_literal(v, column) for v in values)})"
    if op == "between":
        low, high = draw(literals(column)), draw(literals(column))
        return target.between(low, high), \
            f"({quoted} >= {sql_literal(low, column)} AND {quoted} <= {sql_literal(high, column)})"
    value = draw(literals(column))
    predicate = getattr(target, f"__{op}__")(value)
    return predicate, f"{quoted} {COMPARISONS[op]} {sql_literal(value, column)}"


@st.composite
def conditions(draw: st.DrawFn) -> tuple[Predicate, str]:
    left = draw(leaves())
    shape = draw(st.sampled_from(["leaf", "leaf", "leaf", "and", "or", "not"]))
    if shape == "leaf":
        return left
    if shape == "not":
        return ~left[0], f"NOT ({left[1]})"
    right = draw(leaves())
    if shape == "and":
        return left[0] & right[0], f"({left[1]}) AND ({right[1]})"
    return left[0] | right[0], f"({left[1]}) OR ({right[1]})"


def duckdb_ids(duck: Any, where: str) -> list[int] | None:
    """The ids SQL selects, or None when SQL cannot evaluate the condition either."""
    try:
        return sorted(r[0] for r in duck.execute(f"SELECT id FROM t WHERE {where}").fetchall())
    except duckdb.Error:
        return None


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(condition=conditions())
def test_strata_selects_what_sql_selects_or_raises_filter_error(tables, duck, condition) -> None:
    predicate, where = condition
    expected = duckdb_ids(duck, where)
    for table in tables:
        try:
            got = sorted(table.to_arrow(["id"], filter=predicate).column("id").to_pylist())
        except FilterError:
            continue
        assert expected is not None, f"Strata evaluated {where!r}, which SQL refuses"
        assert got == expected, f"{table.identifier}: {where}"


# -- every column, operator and nearby literal, on the rows and their statistics ------------------


def test_every_nearby_literal_binds_like_sql_on_rows_and_statistics(duck) -> None:
    """Without the tables (cheap enough to try them all): each comparison, IN and NOT IN of each
    column with each literal near its values selects the rows SQL selects, and never prunes a
    group of ten rows (as a file's or row group's statistics describe it) holding a selected row."""
    schema = schema_from_arrow(ROWS.schema)
    groups = [(set(range(start, start + 10)), group_stats(ROWS.slice(start, 10))) for start in range(0, ROW_COUNT, 10)]
    checked = 0
    for column, (_, values) in COLUMNS.items():
        for literal in [lit for value in values for lit in near(value)]:
            bound = []
            for predicate, where in sweep_conditions(column, literal):
                try:
                    bound.append((bind(predicate, schema), where))
                except FilterError:
                    continue
            if not bound:
                continue
            # one query for all of a literal's conditions: the ids each selects
            selects = ", ".join(f"coalesce({where}, false)" for _, where in bound)
            rows = duck.execute(f"SELECT id, {selects} FROM t").fetchall()
            for i, (predicate, where) in enumerate(bound):
                expected = sorted(r[0] for r in rows if r[i + 1])
                got = sorted(ROWS.filter(pc.fill_null(predicate.mask(ROWS), False)).column("id").to_pylist())
                assert got == expected, where
                for ids, stats in groups:
                    assert predicate.may_match(stats.get) or not ids & set(expected), f"pruned {where}"
                checked += 1
    assert checked > 1000


def sweep_conditions(column: str, literal: Any) -> list[tuple[Predicate, str]]:
    try:
        spelled = sql_literal(literal, column)
    except NoOracle:
        return []
    target, quoted = col(column), f'"{column}"'
    out: list[tuple[Predicate, str]] = [
        (getattr(target, f"__{op}__")(literal), f"{quoted} {sql} {spelled}") for op, sql in COMPARISONS.items()]
    out.append((target.isin([literal, None]), f"{quoted} IN ({spelled}, NULL)"))
    out.append((~target.isin([literal]), f"{quoted} NOT IN ({spelled})"))
    return out


def group_stats(rows: pa.Table) -> dict[str, ColumnStats]:
    stats = {}
    for name in rows.column_names:
        bounds = pc.min_max(rows.column(name))
        stats[name] = ColumnStats(bounds["min"].as_py(), bounds["max"].as_py(), rows.column(name).null_count,
                                  rows.num_rows)
    return stats
