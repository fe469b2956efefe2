"""Hostile names at the entry points that are processes and services: the ``strata`` CLI, a Spark
write, the Iceberg REST catalog over HTTP, and Trino through the shared REST catalog.

The warehouse is ``<tmp>/a/wh`` with sentinel directories beside it (``<tmp>/victim.db``,
``<tmp>/a/victim.db``, ``<tmp>/etc.db``), each holding a file; after every attempt the tree
outside the warehouse is exactly as it was. The catalogs themselves, with generated names, are
``engine/tests/test_names.py``.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pyarrow as pa
import pytest

import strata
from strata_platform.services.base import Service

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.trino, pytest.mark.minio]

# Each would name something outside the warehouse, or could once decoded or folded.
HOSTILE = ["../../x", "../victim", "..", ".", "/abs", "a\\b", "%2e%2e%2fvictim", "\uff0e\uff0e\uff0fvictim",
           "..\u2215victim", "a\u200bb", "x" * 300, "sys"]
SCHEMA = pa.schema([("id", pa.int64())])
TOKEN = "hostile-" + uuid.uuid4().hex


def _tree(root: Path, skip: Path) -> dict[str, tuple[object, ...]]:
    seen: dict[str, tuple[object, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if here / d != skip]
        for name in dirnames + filenames:
            path = here / name
            stat = path.stat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
            seen[str(path.relative_to(root))] = (stat.st_mtime_ns, stat.st_size if digest else 0, digest)
    return seen


@dataclass
class Sandbox:
    root: Path
    warehouse: Path
    before: dict[str, tuple[object, ...]]

    def assert_untouched(self, what: str) -> None:
        assert _tree(self.root, self.warehouse) == self.before, f"{what} changed something outside the warehouse"


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Sandbox:
    root = tmp_path_factory.mktemp("hostile")
    warehouse = root / "a" / "wh"
    warehouse.mkdir(parents=True)
    for sentinel in (root / "victim.db" / "t" / "schema", root / "a" / "victim.db", root / "etc.db"):
        sentinel.mkdir(parents=True)
        (sentinel / "keep.txt").write_text("must survive")
    catalog = strata.load_catalog(str(warehouse))
    catalog.create_database("db")
    catalog.create_table("db.t", SCHEMA)
    return Sandbox(root, warehouse, _tree(root, warehouse))


# -- the CLI ------------------------------------------------------------------------------------------------
def _strata(warehouse: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [str(Path(sys.executable).with_name("strata")), "--warehouse", str(warehouse), *args]
    return subprocess.run(command, check=False, capture_output=True, text=True, timeout=120, cwd=warehouse.parent)


def test_cli_refuses_hostile_names(sandbox: Sandbox, capsys: pytest.CaptureFixture[str]) -> None:
    from strata.cli import main

    calls: list[tuple[str, ...]] = [("create-database", name) for name in HOSTILE]
    calls += [("list-tables", "../../victim"), ("create-table", "../../victim.t", "--schema", "id BIGINT"),
              ("read", "../victim.t"), ("create-table", "db.t$snapshots", "--schema", "id BIGINT")]
    answers = {}
    for args in calls:  # every name through the CLI's own entry point...
        assert main(["--warehouse", str(sandbox.warehouse), *args]) == 2, args
        out, err = capsys.readouterr()
        assert out == "" and err.startswith("strata: error: ") and "name" in err, (args, err)
        answers[args] = err.strip()
    assert answers[("create-database", "sys")] == (
        "strata: error: database name 'sys' is reserved for Paimon's system database")
    assert answers[("create-database", "\uff0e\uff0e\uff0fvictim")].endswith("(its NFKC form is '../victim')")
    assert answers[("create-table", "db.t$snapshots", "--schema", "id BIGINT")].startswith(
        "strata: error: table name 't$snapshots' must not contain '$'")
    # ... and three as the installed command, in processes of their own
    names = ["../../x", "%2e%2e%2fvictim", "\uff0e\uff0e\uff0fvictim"]
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(lambda name: _strata(sandbox.warehouse, "create-database", name), names))
    for name, result in zip(names, results, strict=True):
        assert (result.returncode, result.stdout) == (2, ""), (name, result.stderr)
        assert result.stderr.strip() == answers[("create-database", name)]
    assert results[0].stderr == "strata: error: database name '../../x' must not contain a path separator '/'\n"
    assert results[1].stderr == ("strata: error: database name '%2e%2e%2fvictim' must not contain a percent-escape "
                                 "('%2e'): a layer that decodes it would see another name\n")
    sandbox.assert_untouched("the CLI")
    assert [p.name for p in sandbox.warehouse.iterdir() if p.name.endswith(".db")] == ["db.db"]


# -- a Spark write ------------------------------------------------------------------------------------------
def test_spark_write_with_a_hostile_table_option(session: SparkSession, sandbox: Sandbox) -> None:
    frame = session.createDataFrame([(1,), (2,)], "id long")
    for target, rule in (("../../victim.t", r"database name '' is blank"),
                         ("\uff0e\uff0e\uff0fvictim.t", r"its NFKC form is '\.\./victim'"),
                         ("db.../t", r"table name '\.\./t' must not contain a path separator")):
        with pytest.raises(Exception, match=r"is not a valid 'database\.table' name: .*" + rule) as caught:
            frame.write.format("strata").option("warehouse", str(sandbox.warehouse)).option("table", target) \
                .mode("append").save()
        assert "InvalidNameError" in str(caught.value)
    # the path form names the table the same way
    with pytest.raises(Exception, match=r"database name 'sys' is reserved"):
        frame.write.format("strata").mode("append").save(f"{sandbox.warehouse}#sys.t")
    sandbox.assert_untouched("a Spark write")
    assert strata.load_catalog(str(sandbox.warehouse)).get_table("db.t").latest_snapshot() is None


# -- the Iceberg REST catalog over HTTP ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def rest(sandbox: Sandbox) -> Iterator[tuple[str, int]]:
    """The REST catalog's HTTP server over the sandbox warehouse, with a bearer token."""
    from strata_platform.iceberg_rest import IcebergRestCatalog, start

    server = start(IcebergRestCatalog(strata.load_catalog(str(sandbox.warehouse))), port=0, token=TOKEN)
    yield "127.0.0.1", server.server_port
    server.shutdown()
    server.server_close()


def _get(rest: tuple[str, int], path: str, token: str | None = TOKEN) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection(*rest, timeout=30)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        resp = conn.getresponse()
        body = resp.read()
        return resp.status, json.loads(body) if body else {}
    finally:
        conn.close()


def _error(rest: tuple[str, int], path: str, token: str | None = TOKEN) -> tuple[int, str, str]:
    status, body = _get(rest, path, token)
    return status, body["error"]["type"], body["error"]["message"]


def test_rest_answers_400_for_hostile_names(rest: tuple[str, int], sandbox: Sandbox) -> None:
    for name in HOSTILE:
        segment = quote(name, safe="")
        paths = [f"/v1/namespaces/{segment}", f"/v1/namespaces/{segment}/tables", f"/v1/namespaces/{segment}/tables/t"]
        if name != "sys":  # a table may be called sys; only the database name is reserved
            paths.append(f"/v1/namespaces/db/tables/{segment}")
        for path in paths:
            status, kind, message = _error(rest, path)
            assert (status, kind) == (400, "BadRequestException"), (name, path, message)
    assert _error(rest, f"/v1/namespaces/{quote('%2e%2e%2fvictim', safe='')}") == (
        400, "BadRequestException", "database name '%2e%2e%2fvictim' must not contain a percent-escape ('%2e'): "
                                    "a layer that decodes it would see another name")
    sys_answer = _error(rest, "/v1/namespaces/sys/tables/t")
    assert sys_answer[2] == "database name 'sys' is reserved for Paimon's system database"
    sandbox.assert_untouched("the REST catalog")


def test_rest_not_found_and_not_authorized(rest: tuple[str, int]) -> None:
    assert _error(rest, "/v1/namespaces/nosuchschema/tables/t")[:2] == (404, "NoSuchTableException")
    assert _error(rest, "/v1/namespaces/db/tables/nosuchtable")[:2] == (404, "NoSuchTableException")
    assert _error(rest, "/v1/namespaces/nosuchschema")[:2] == (404, "NoSuchNamespaceException")
    assert _error(rest, "/v1/namespaces/nosuchschema/tables")[:2] == (404, "NoSuchNamespaceException")
    for path in ("/v1/namespaces/db", f"/v1/namespaces/{quote('../../victim', safe='')}"):
        assert _error(rest, path, token=None)[:2] == (401, "NotAuthorizedException")  # before the name is looked at
        assert _error(rest, path, token="wrong")[:2] == (401, "NotAuthorizedException")


# -- Trino, through the shared REST catalog -----------------------------------------------------------------
def test_trino_answers_missing_schema_and_table_as_user_errors(trino: Service, iceberg_rest: Service) -> None:
    """Trino asks the REST catalog for a view, then the table, then the namespace: a missing
    schema is SCHEMA_NOT_FOUND and a missing table TABLE_NOT_FOUND, never an internal error."""
    from trino.exceptions import TrinoUserError

    catalog = iceberg_rest.catalog()
    schema = f"hostile_{uuid.uuid4().hex[:8]}"
    catalog.create_database(schema)
    try:
        for table, error, message in (
                ("strata.nosuchschema.t", "SCHEMA_NOT_FOUND", "Schema 'nosuchschema' does not exist"),
                (f"strata.{schema}.nosuchtable", "TABLE_NOT_FOUND", f"'strata.{schema}.nosuchtable' does not exist")):
            with pytest.raises(TrinoUserError) as caught:
                trino.query(f"SELECT * FROM {table}")
            assert (caught.value.error_type, caught.value.error_name) == ("USER_ERROR", error), (table, caught.value)
            assert message in caught.value.message
    finally:
        catalog.drop_database(schema, cascade=True)
