"""`import strata` stays cheap: pandas, Spark, Kafka and boto3 load only on the paths that use them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

OPTIONAL = ("pandas", "pyspark", "confluent_kafka", "boto3", "botocore", "sqlalchemy", "polars", "numba")


def loaded_after(code: str) -> set[str]:
    """The OPTIONAL modules a fresh interpreter has loaded after running `code`."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {OPTIONAL!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_import_strata_loads_no_optional_dependency() -> None:
    assert loaded_after("import strata") == set()


def test_the_engine_itself_loads_no_optional_dependency() -> None:
    # the whole engine (catalog, table, read, write, commit) behind the lazy package attributes
    assert loaded_after("import strata\nstrata.load_catalog\nstrata.Table\nimport strata.table.write") == set()


def test_lazy_package_attributes_resolve_and_unknown_names_fail() -> None:
    import strata
    from strata.catalog import load_catalog

    assert strata.load_catalog is load_catalog
    assert "Table" in dir(strata)
    with pytest.raises(AttributeError, match="no_such_name"):
        strata.no_such_name  # noqa: B018


_FIRST_READS = """
import strata
catalog = strata.load_catalog({warehouse!r})
assert catalog.get_table("db.pk").to_arrow().num_rows == 900
assert catalog.get_table("db.log").to_arrow().num_rows == 1000
"""


def test_a_first_read_loads_neither_pandas_nor_polars(tmp_path: pytest.TempPathFactory) -> None:
    """pyarrow's to_numpy and pa.array import pandas on first use (0.35 s), and polars costs
    0.2 s: a short job's first merged and appended reads of small tables need neither. (A filter
    still loads pandas: pyarrow converts its literals.)"""
    import pyarrow as pa

    import strata

    catalog = strata.load_catalog(str(tmp_path))
    catalog.create_database("db")
    schema = pa.schema([("k", pa.int64()), ("v", pa.int64())])
    pk = catalog.create_table("db.pk", schema, primary_keys=["k"], options={"bucket": "2"})
    log = catalog.create_table("db.log", schema)
    for start in range(0, 1000, 250):  # overlapping upserts: the read merges sorted runs
        rows = pa.table({"k": pa.array(range(start, start + 300), pa.int64()),
                         "v": pa.array(range(start, start + 300), pa.int64())})
        pk.write(rows.filter(pa.compute.less(rows["k"], 900)))
        log.write(rows.slice(0, 250))
    code = _FIRST_READS.format(warehouse=str(tmp_path))
    assert loaded_after(code) & {"pandas", "polars"} == set()
