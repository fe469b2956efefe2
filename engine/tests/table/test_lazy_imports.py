"""`import strata` stays cheap: pandas, Spark, Kafka and boto3 load only on the paths that use them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

OPTIONAL = ("pandas", "pyspark", "confluent_kafka", "boto3", "botocore", "sqlalchemy")


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
