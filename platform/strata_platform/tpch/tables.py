"""The eight TPC-H tables: columns and their types, keys, and how Strata stores each one.

Types follow the TPC-H specification (identifiers BIGINT, money and quantities DECIMAL(15,2),
dates DATE, text VARCHAR); Trino's ``tpch`` connector generates doubles for money, so every
source column is cast to these types on the way out (``source_select``) and both sides hold the
same values. ``orders`` and ``lineitem`` are primary-key tables with deletion vectors (the refresh
functions delete from them by key), bucketed by their size (lineitem by its order key, so that an
order's lines are side by side); the dimension tables are append tables, as a user loading them
once would have them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pyarrow as pa

MONEY = "decimal(15,2)"
ARROW_TYPES = {"bigint": pa.int64(), "integer": pa.int32(), MONEY: pa.decimal128(15, 2),
               "date": pa.date32(), "varchar": pa.string()}
# rows per bucket of the primary-key tables: about 100 MB of Parquet per bucket of lineitem
ROWS_PER_BUCKET = 3_000_000


@dataclass(frozen=True)
class TpchTable:
    name: str
    columns: tuple[tuple[str, str], ...]  # (name, SQL type)
    primary_key: tuple[str, ...] = ()
    rows_at_sf1: int = 0  # for bucket counts and progress
    # the bucket key of a primary-key table when not the whole key: lineitem's rows of one order in
    # one bucket (sorted together), as Trino's own files hold an order's lines side by side
    bucket_key: tuple[str, ...] = ()

    @property
    def column_names(self) -> list[str]:
        return [name for name, _ in self.columns]

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([pa.field(name, ARROW_TYPES[kind], nullable=name not in self.primary_key)
                          for name, kind in self.columns])

    def buckets(self, scale_factor: float) -> int:
        return max(1, math.ceil(self.rows_at_sf1 * scale_factor / ROWS_PER_BUCKET))

    def strata_options(self, scale_factor: float) -> dict[str, str]:
        """Options of the Strata table: Iceberg metadata for Trino; vectors and buckets for PK tables."""
        options = {"metadata.iceberg.storage": "rest-catalog"}
        if self.primary_key:
            # an explicit bucket count: a PK table without one would become a dynamic-bucket table
            options |= {"bucket": str(self.buckets(scale_factor)), "deletion-vectors.enabled": "true"}
        if self.bucket_key:
            options["bucket-key"] = ",".join(self.bucket_key)
        return options

    def source_select(self, source: str) -> str:
        """SELECT of this table's rows from ``source`` (e.g. ``tpch.tiny``), cast to the spec's types.
        Trino's tpch catalog names columns without the spec's prefix (``regionkey``, not ``n_regionkey``)."""
        casts = ", ".join(f"CAST({name.split('_', 1)[1]} AS {kind}) AS {name}" for name, kind in self.columns)
        return f"SELECT {casts} FROM {source}.{self.name}"


def _cols(spec: str) -> tuple[tuple[str, str], ...]:
    """'a bigint, b money' -> (("a", "bigint"), ("b", "decimal(15,2)"))."""
    pairs = (item.split() for item in spec.split(","))
    return tuple((name, MONEY if kind == "money" else kind) for name, kind in pairs)


TABLES: dict[str, TpchTable] = {t.name: t for t in (
    TpchTable("nation", _cols("n_nationkey bigint, n_name varchar, n_regionkey bigint, n_comment varchar"),
              rows_at_sf1=25),
    TpchTable("region", _cols("r_regionkey bigint, r_name varchar, r_comment varchar"), rows_at_sf1=5),
    TpchTable("part", _cols("p_partkey bigint, p_name varchar, p_mfgr varchar, p_brand varchar, "
                            "p_type varchar, p_size integer, p_container varchar, p_retailprice money, "
                            "p_comment varchar"), rows_at_sf1=200_000),
    TpchTable("supplier", _cols("s_suppkey bigint, s_name varchar, s_address varchar, s_nationkey bigint, "
                                "s_phone varchar, s_acctbal money, s_comment varchar"), rows_at_sf1=10_000),
    TpchTable("partsupp", _cols("ps_partkey bigint, ps_suppkey bigint, ps_availqty integer, "
                                "ps_supplycost money, ps_comment varchar"), rows_at_sf1=800_000),
    TpchTable("customer", _cols("c_custkey bigint, c_name varchar, c_address varchar, c_nationkey bigint, "
                                "c_phone varchar, c_acctbal money, c_mktsegment varchar, c_comment varchar"),
              rows_at_sf1=150_000),
    TpchTable("orders", _cols("o_orderkey bigint, o_custkey bigint, o_orderstatus varchar, o_totalprice money, "
                              "o_orderdate date, o_orderpriority varchar, o_clerk varchar, "
                              "o_shippriority integer, o_comment varchar"),
              primary_key=("o_orderkey",), rows_at_sf1=1_500_000),
    TpchTable("lineitem", _cols("l_orderkey bigint, l_partkey bigint, l_suppkey bigint, l_linenumber integer, "
                                "l_quantity money, l_extendedprice money, l_discount money, l_tax money, "
                                "l_returnflag varchar, l_linestatus varchar, l_shipdate date, "
                                "l_commitdate date, l_receiptdate date, l_shipinstruct varchar, "
                                "l_shipmode varchar, l_comment varchar"),
              primary_key=("l_orderkey", "l_linenumber"), rows_at_sf1=6_001_215, bucket_key=("l_orderkey",)),
)}


def tpch_schema(scale_factor: float) -> str:
    """The schema of Trino's tpch catalog that generates `scale_factor` ("tiny" is 0.01)."""
    if scale_factor == 0.01:
        return "tiny"
    return f"sf{scale_factor:g}"


def database_name(scale_factor: float) -> str:
    """tpch_sf0_01, tpch_sf1: one database (and native schema) per scale factor."""
    return "tpch_sf" + f"{scale_factor:g}".replace(".", "_")
