"""Strata's Paimon REST server (and the HTTP layer it shares with the Iceberg REST catalog) as a
client meets it over real HTTP on loopback, without Java: a local warehouse, the JDBC catalog on
SQLite, the server in this process. Where a fault is needed (a catalog error after a commit, a
commit to main during a fast-forward) a hook of the catalog stands in for it.

Database locations never overlap (dropping one database deletes nothing of another); a durable
commit answers success whatever its Iceberg mirror does; the token is checked before a byte of
the body is read, and a malformed Content-Length is a 400; malformed tag names and fast-forward
conflicts are client errors, not 500s.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import prometheus_client
import pyarrow as pa
import pytest

from strata.catalog import FileSystemCatalog, Identifier
from strata.catalog.jdbc import JdbcCatalog
from strata.format import binary_row
from strata.fs.file_io import LocalFileIO
from strata.manifest.manifest_store import DECODED_MANIFESTS
from strata.snapshot.snapshot import Snapshot
from strata.snapshot.snapshot_manager import NothingPublishedError, SnapshotManager
from strata.table.table import Table
from strata_platform import iceberg_rest
from strata_platform.http_service import JsonServer
from strata_platform.paimon_rest import PaimonRestCatalog, start, statistics

pytestmark = pytest.mark.sqlite

TOKEN = "test-token"
API = "/v1/strata"
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
ANSWER_GUARD_SECONDS = 60  # only a hang guard: a fixed server answers at once


def rows(ids: list[int]) -> pa.Table:
    return pa.table({"id": ids, "v": [f"v{i}" for i in ids]}, schema=SCHEMA)


class HookedCatalog(JdbcCatalog):
    """The JDBC catalog with hooks in place of faults: `fail_get_after_snapshot` makes the first
    `get_table` that sees that snapshot raise, `during_commit_lock` runs as a fast-forward takes
    the table's commit lock."""

    fail_get_after_snapshot: int | None = None
    during_commit_lock: Callable[[], None] | None = None
    before_publish: Callable[[], None] | None = None
    publish_fault: Callable[[SnapshotManager, Snapshot], bool] | None = None
    mode: str | None = None  # the publish mode the catalog reports, in place of its store's own

    while_resolving_lock: Callable[[], None] | None = None  # runs after a commit chose the name to lock

    def publish_mode(self, table: Table) -> str:
        return self.mode or super().publish_mode(table)

    def _lock_name(self, table: Table) -> str:
        name = super()._lock_name(table)
        hook, self.while_resolving_lock = self.while_resolving_lock, None
        if hook is not None:
            hook()
        return name

    def get_table(self, name: str | Identifier) -> Table:
        table = super().get_table(name)
        if self.fail_get_after_snapshot is not None and table.snapshot_manager.exists(self.fail_get_after_snapshot):
            self.fail_get_after_snapshot = None
            raise OSError("the catalog database is briefly unreachable")
        return table

    def snapshot_publisher(self, table: Table) -> Any:
        hook, self.before_publish = self.before_publish, None
        if hook is not None:
            hook()
        fault, self.publish_fault = self.publish_fault, None
        return fault or super().snapshot_publisher(table)

    def schema_change_lock(self, table: Table) -> contextlib.AbstractContextManager[object]:
        hook, self.during_commit_lock = self.during_commit_lock, None
        if hook is None:
            return super().schema_change_lock(table)
        return _running_on_enter(hook)


@contextlib.contextmanager
def _running_on_enter(hook: Callable[[], None]) -> Iterator[None]:
    hook()
    yield


@pytest.fixture
def catalog(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[HookedCatalog]:
    """The JDBC catalog; a test parametrized indirectly adds catalog options (the JDBC lock)."""
    options = {"metastore": "jdbc", **getattr(request, "param", {})}
    cat = HookedCatalog(str(tmp_path / "warehouse"), options)
    yield cat
    cat.close()


def _serve(server: JsonServer[Any]) -> Iterator[JsonServer[Any]]:
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def server(catalog: HookedCatalog) -> Iterator[JsonServer[Any]]:
    yield from _serve(start(PaimonRestCatalog(catalog, prefix="strata"), port=0, token=TOKEN))


@pytest.fixture
def iceberg_server(catalog: HookedCatalog) -> Iterator[JsonServer[Any]]:
    yield from _serve(iceberg_rest.start(iceberg_rest.IcebergRestCatalog(catalog), port=0, token=TOKEN))


def call(server: JsonServer[Any], method: str, path: str, body: Any = None,
         token: str | None = TOKEN) -> tuple[int, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=ANSWER_GUARD_SECONDS)
    try:
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
        connection.request(method, path, None if body is None else json.dumps(body).encode(), headers)
        answer = connection.getresponse()
        raw = answer.read()
        return answer.status, json.loads(raw) if raw else None
    finally:
        connection.close()


@contextlib.contextmanager
def raw_connection(server: JsonServer[Any]) -> Iterator[socket.socket]:
    with socket.create_connection(("127.0.0.1", server.server_port), timeout=ANSWER_GUARD_SECONDS) as sock:
        yield sock


def send_head(sock: socket.socket, method: str, path: str, headers: dict[str, str]) -> None:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())


def read_answer(sock: socket.socket) -> tuple[int, dict[str, Any]]:
    answer = http.client.HTTPResponse(sock)
    answer.begin()
    return answer.status, json.loads(answer.read())


# -- database locations (defect: a database that deletes another) --------------------------------------

def test_a_database_at_another_databases_directory_is_refused(server: JsonServer[Any],
                                                              catalog: HookedCatalog) -> None:
    assert call(server, "POST", f"{API}/databases", {"name": "victim"}) == (200, {})
    catalog.create_table("victim.t", SCHEMA).write(rows([1, 2, 3]))
    warehouse = catalog.warehouse
    for location in (f"{warehouse}/victim.db", f"{warehouse}/victim.db/t", f"{warehouse}/victim.db/sub"):
        status, answer = call(server, "POST", f"{API}/databases", {"name": "evil", "options": {"location": location}})
        assert status == 400, answer
        assert "database 'evil'" in answer["message"] and "database 'victim'" in answer["message"]
    status, answer = call(server, "POST", f"{API}/databases", {"name": "evil", "options": {"location": "/elsewhere"}})
    assert status == 400 and "under the warehouse" in answer["message"]
    assert call(server, "GET", f"{API}/databases") == (200, {"databases": ["victim"], "nextPageToken": None})

    own = f"{warehouse}/places/own"
    assert call(server, "POST", f"{API}/databases", {"name": "own", "options": {"location": own}}) == (200, {})
    catalog.create_table("own.t", SCHEMA).write(rows([9]))
    assert call(server, "DELETE", f"{API}/databases/own") == (200, {})  # the REST drop always cascades
    assert not Path(own).exists()
    assert catalog.get_table("victim.t").to_arrow().num_rows == 3
    assert call(server, "DELETE", f"{API}/databases/victim") == (200, {})
    assert not Path(warehouse, "victim.db").exists()


def test_a_database_has_audit_fields_not_options(server: JsonServer[Any]) -> None:
    """createdAt/updatedAt/owner come back as the response's audit fields (Java wrote owner=null and
    zeros before): kept beside the database's options, never shown as options nor set by a client."""
    before = int(time.time() * 1000)
    assert call(server, "POST", f"{API}/databases", {"name": "audited", "options": {"team": "data"}}) == (200, {})
    status, got = call(server, "GET", f"{API}/databases/audited")
    assert status == 200 and got["options"] == {"team": "data"}
    assert got["owner"] == got["createdBy"] == got["updatedBy"] == "strata"
    assert before <= got["createdAt"] == got["updatedAt"] <= int(time.time() * 1000)
    while int(time.time() * 1000) <= got["updatedAt"]:  # so that the update's millisecond is a later one
        time.sleep(0.001)
    assert call(server, "POST", f"{API}/databases/audited", {"updates": {"team": "bi"}, "removals": []})[0] == 200
    status, altered = call(server, "GET", f"{API}/databases/audited")
    assert altered["options"] == {"team": "bi"} and altered["createdAt"] == got["createdAt"]
    assert altered["updatedAt"] > got["updatedAt"]
    for body in ({"updates": {"strata.rest.created-at": "0"}, "removals": []},
                 {"updates": {}, "removals": ["strata.rest.updated-at"]}):
        status, answer = call(server, "POST", f"{API}/databases/audited", body)
        assert status == 400 and "audit fields" in answer["message"], answer


def test_a_rename_to_a_name_whose_lock_id_would_not_fit_is_refused(server: JsonServer[Any],
                                                                   catalog: HookedCatalog) -> None:
    database = "d" * 120
    catalog.create_database(database)
    catalog.create_table(f"{database}.t", SCHEMA).write(rows([1]))
    status, answer = call(server, "POST", f"{API}/tables/rename", {
        "source": {"database": database, "object": "t"}, "destination": {"database": database, "object": "t" * 200}})
    assert status == 400 and "lock id" in answer["message"]
    assert catalog.list_tables(database) == ["t"]
    assert catalog.get_table(f"{database}.t").to_arrow().num_rows == 1


# -- a durable commit answers success (defect: a 500 after the snapshot landed) ------------------------

def _snapshot_to_commit(table: Table) -> dict[str, Any]:
    """The body a client sends for table's next snapshot, manifests written: Strata writes it,
    then it is taken back out of the snapshot directory, as if only the client had it."""
    table.write(rows([10, 20]))
    manager = table.snapshot_manager
    latest = manager.latest()
    assert latest is not None
    table.file_io.delete(manager.path(latest.id))
    table.file_io.write_bytes(f"{manager.dir}/LATEST", str(latest.id - 1).encode())
    return {"snapshot": json.loads(latest.to_json())}


def test_a_commit_answers_success_when_the_catalog_fails_after_it(server: JsonServer[Any], catalog: HookedCatalog,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    catalog.create_database("db")
    table = catalog.create_table("db.t", SCHEMA)
    table.write(rows([1]))
    body = _snapshot_to_commit(table)
    labels = {"table": "db.t", "type": "iceberg-sync"}
    failures_before = prometheus_client.REGISTRY.get_sample_value("strata_commit_callback_failures_total", labels)
    catalog.fail_get_after_snapshot = 2
    with caplog.at_level(logging.WARNING, logger="strata.paimon_rest"):
        assert call(server, "POST", f"{API}/databases/db/tables/t/commit", body) == (200, {"success": True})
    assert catalog.fail_get_after_snapshot is None  # the fault did happen, after the publish
    assert sorted(catalog.get_table("db.t").to_arrow().column("id").to_pylist()) == [1, 10, 20]
    failures = prometheus_client.REGISTRY.get_sample_value("strata_commit_callback_failures_total", labels)
    assert (failures or 0) - (failures_before or 0) == 1
    assert any("Iceberg mirror after it failed" in r.getMessage() and "unreachable" in r.getMessage()
               for r in caplog.records)


# -- tags and branches ---------------------------------------------------------------------------------

@pytest.fixture
def tagged(catalog: HookedCatalog) -> Table:
    catalog.create_database("db")
    table = catalog.create_table("db.t", SCHEMA, primary_keys=["id"], options={"bucket": "1"})
    table.write(rows([1, 2]))
    table.create_tag("t1")
    return table


@pytest.mark.parametrize("version", [" t1", "a%2Fb", "%2e%2e"])
def test_a_snapshot_by_a_malformed_tag_name_is_a_bad_request(server: JsonServer[Any], tagged: Table,
                                                             version: str) -> None:
    status, answer = call(server, "GET", f"{API}/databases/db/tables/t/snapshots/{quote(version, safe='')}")
    assert status == 400, answer
    assert "tag name" in answer["message"]


@pytest.mark.parametrize("version", ["nope", "\u00b2", "99"])
def test_a_snapshot_by_an_unknown_tag_or_id_is_not_found(server: JsonServer[Any], tagged: Table, version: str) -> None:
    status, answer = call(server, "GET", f"{API}/databases/db/tables/t/snapshots/{quote(version, safe='')}")
    assert (status, answer["resourceType"], answer["resourceName"]) == (404, "SNAPSHOT", version)
    status, answer = call(server, "GET", f"{API}/databases/db/tables/t/snapshots/t1")
    assert status == 200 and answer["snapshot"]["id"] == 1


def test_a_fast_forward_racing_a_commit_to_main_is_a_conflict(server: JsonServer[Any], catalog: HookedCatalog,
                                                              tagged: Table) -> None:
    tagged.create_branch("b1", from_tag="t1").write(rows([7]))
    tagged.create_branch("empty")
    status, answer = call(server, "POST", f"{API}/databases/db/tables/t/branches/empty/forward", {})
    assert status == 400 and "does not have snapshot" in answer["message"]
    catalog.during_commit_lock = lambda: catalog.get_table("db.t").write(rows([11]))
    status, answer = call(server, "POST", f"{API}/databases/db/tables/t/branches/b1/forward", {})
    assert (status, answer["resourceType"], answer["resourceName"]) == (409, "BRANCH", "b1")
    assert "conflicts with a commit to main" in answer["message"]
    assert sorted(catalog.get_table("db.t").to_arrow().column("id").to_pylist()) == [1, 2, 11]
    assert call(server, "POST", f"{API}/databases/db/tables/t/branches/b1/forward", {}) == (200, {})
    assert sorted(catalog.get_table("db.t").to_arrow().column("id").to_pylist()) == [1, 2, 7]


# -- the token before the body (defect: bodies read before authorization) ------------------------------

def test_a_request_without_the_token_is_refused_before_its_body_is_sent(server: JsonServer[Any],
                                                                        catalog: HookedCatalog) -> None:
    """The server answers 401 on the headers alone and closes the connection: it never waits for
    (or reads) the body of a client that may not send one."""
    with raw_connection(server) as sock:
        send_head(sock, "POST", f"{API}/databases", {"Content-Length": "1000", "Content-Type": "application/json"})
        status, answer = read_answer(sock)
        assert status == 401 and "Bearer" in answer["message"]
        assert sock.recv(1) == b""  # closed: the unsent body is never taken for a next request
    assert catalog.list_databases() == []


def test_an_answer_that_leaves_the_body_unread_tells_the_client_the_connection_ends(server: JsonServer[Any]) -> None:
    """A client that keeps connections alive (Java's) reuses one unless told it ends: without the
    header it sent its next request into a closed socket (NoHttpResponseException)."""
    with raw_connection(server) as sock:
        send_head(sock, "POST", f"{API}/databases", {"Content-Length": "1000", "Content-Type": "application/json"})
        answer = http.client.HTTPResponse(sock)
        answer.begin()
        assert answer.status == 401 and answer.getheader("Connection") == "close"


@pytest.mark.parametrize("token", [None, "wrong"])
def test_an_oversized_body_without_the_token_is_unauthorized(server: JsonServer[Any], token: str | None) -> None:
    """What is wrong with a request is said only to a client that may know it: 401, not 'too large'."""
    with raw_connection(server) as sock:
        headers = {"Content-Length": str(17 << 20), **({"Authorization": f"Bearer {token}"} if token else {})}
        send_head(sock, "POST", f"{API}/databases", headers)
        sock.shutdown(socket.SHUT_WR)
        assert read_answer(sock)[0] == 401


@pytest.mark.parametrize("length", ["abc", "-5", "1e3", "0x10", " ", "5, 6"])
def test_a_malformed_content_length_is_a_bad_request_after_the_token(server: JsonServer[Any], length: str) -> None:
    for token, expected in ((None, 401), (TOKEN, 400)):
        with raw_connection(server) as sock:
            headers = {"Content-Length": length, **({"Authorization": f"Bearer {token}"} if token else {})}
            send_head(sock, "POST", f"{API}/databases", headers)
            status, answer = read_answer(sock)
            assert status == expected, (token, answer)
            if expected == 400:
                assert "Content-Length" in answer["message"]
            assert sock.recv(1) == b""
    assert call(server, "GET", "/health")[0] == 200


def test_the_iceberg_catalog_bounds_a_body_and_reads_none_before_the_token(iceberg_server: JsonServer[Any]) -> None:
    """The Iceberg REST catalog is read-only (writes answer 406): it used to read and discard a
    body of any size, before the token was checked."""
    path = "/v1/namespaces/db/tables/t"
    with raw_connection(iceberg_server) as sock:
        send_head(sock, "POST", path, {"Content-Length": str(1 << 40)})
        assert read_answer(sock)[0] == 401
        assert sock.recv(1) == b""
    with raw_connection(iceberg_server) as sock:
        send_head(sock, "POST", path, {"Content-Length": str(1 << 30), "Authorization": f"Bearer {TOKEN}"})
        sock.shutdown(socket.SHUT_WR)
        status, answer = read_answer(sock)
        assert status == 400 and "larger than" in answer["error"]["message"]
    status, answer = call(iceberg_server, "POST", path, {"requirements": []})
    assert status == 406 and answer["error"]["type"] == "UnsupportedOperationException"


# -- rollback (defect: 501, fatal for Java's table.rollbackTo) -------------------------------------------

def _ids(catalog: HookedCatalog) -> list[int]:
    return sorted(catalog.get_table("db.t").to_arrow().column("id").to_pylist())


def test_rollback_to_a_snapshot_and_to_a_tag(server: JsonServer[Any], catalog: HookedCatalog, tagged: Table) -> None:
    tagged.write(rows([3]))
    tagged.write(rows([4]))
    path = f"{API}/databases/db/tables/t/rollback"
    # a commit that holds the table's commit lock first lands, and the rollback then removes it
    catalog.during_commit_lock = lambda: catalog.get_table("db.t").write(rows([5]))
    assert call(server, "POST", path, {"instant": {"type": "snapshot", "snapshotId": 2}}) == (200, {})
    assert catalog.during_commit_lock is None  # the rollback took the table's commit lock
    assert _ids(catalog) == [1, 2, 3]
    assert [s.id for s in catalog.get_table("db.t").snapshots()] == [1, 2]
    assert call(server, "POST", path, {"instant": {"type": "tag", "tagName": "t1"}}) == (200, {})
    assert _ids(catalog) == [1, 2]
    status, answer = call(server, "POST", path, {"instant": {"type": "snapshot", "snapshotId": 9}})
    assert (status, answer["resourceType"], answer["resourceName"]) == (404, "SNAPSHOT", "9")
    status, answer = call(server, "POST", path, {"instant": {"type": "tag", "tagName": "nope"}})
    assert (status, answer["resourceType"], answer["resourceName"]) == (404, "TAG", "nope")
    status, answer = call(server, "POST", path, {"instant": {"type": "time", "millis": 1}})
    assert status == 400 and "instant type" in answer["message"]


def test_a_rollback_from_a_snapshot_that_is_no_longer_the_latest_is_a_conflict(
        server: JsonServer[Any], catalog: HookedCatalog, tagged: Table) -> None:
    tagged.write(rows([3]))
    body = {"instant": {"type": "snapshot", "snapshotId": 1}, "fromSnapshot": 1}
    status, answer = call(server, "POST", f"{API}/databases/db/tables/t/rollback", body)
    assert (status, answer["resourceType"]) == (409, "SNAPSHOT")
    assert "latest snapshot is 2" in answer["message"]
    assert _ids(catalog) == [1, 2, 3]


def test_a_rollback_racing_a_commit_loses_neither(server: JsonServer[Any], catalog: HookedCatalog,
                                                   tagged: Table) -> None:
    """The rollback lands while the commit is about to publish snapshot 3 on snapshot 2: the
    commit answers success false (its parent is gone), so it never lands on top of the deleted
    snapshots, and the client's retry on the rolled-back table lands."""
    body = _snapshot_to_commit(tagged)  # snapshot 2: ids 10, 20, taken back out
    tagged.write(rows([30]))  # snapshot 2 is now this one; the client's is rebuilt as snapshot 3
    body["snapshot"]["id"] = 3
    rollback = {"instant": {"type": "tag", "tagName": "t1"}}
    catalog.before_publish = lambda: call(server, "POST", f"{API}/databases/db/tables/t/rollback", rollback)
    assert call(server, "POST", f"{API}/databases/db/tables/t/commit", body) == (200, {"success": False})
    assert catalog.before_publish is None  # the rollback did run inside the commit
    assert [s.id for s in catalog.get_table("db.t").snapshots()] == [1]
    catalog.get_table("db.t").write(rows([10, 20]))  # the client's retry
    assert _ids(catalog) == [1, 2, 10, 20]


# -- tags (spec 1.4) and unsupported routes -----------------------------------------------------------

def test_tags_are_created_listed_read_and_deleted(server: JsonServer[Any], catalog: HookedCatalog,
                                                  tagged: Table) -> None:
    tagged.write(rows([3]))
    tags = f"{API}/databases/db/tables/t/tags"
    assert call(server, "POST", tags, {"tagName": "t2", "timeRetained": "1 d"}) == (200, {})
    assert call(server, "POST", tags, {"tagName": "t0", "snapshotId": 1}) == (200, {})
    assert call(server, "GET", tags) == (200, {"tags": ["t0", "t1", "t2"], "nextPageToken": None})
    assert call(server, "GET", f"{tags}?tagNamePrefix=t2")[1]["tags"] == ["t2"]
    status, answer = call(server, "GET", f"{tags}/t2")
    assert status == 200 and answer["tagName"] == "t2" and answer["snapshot"]["id"] == 2
    assert answer["tagTimeRetained"] == "86400000 ms" and answer["tagCreateTime"] > 0
    status, answer = call(server, "POST", tags, {"tagName": "t2"})
    assert (status, answer["resourceType"], answer["resourceName"]) == (409, "TAG", "t2")
    status, answer = call(server, "POST", tags, {"tagName": "t9", "snapshotId": 9})
    assert (status, answer["resourceType"]) == (404, "SNAPSHOT")
    status, answer = call(server, "POST", tags, {"tagName": "bad name/"})
    assert status == 400 and "tag name" in answer["message"]
    assert call(server, "DELETE", f"{tags}/t2") == (200, {})
    status, answer = call(server, "DELETE", f"{tags}/t2")
    assert (status, answer["resourceType"], answer["resourceName"]) == (404, "TAG", "t2")
    assert [t.name for t in catalog.get_table("db.t").list_tags()] == ["t0", "t1"]


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/databases/db/tables/t/partitions"),  # create partitions
    ("POST", "/databases/db/tables/t/partitions/mark"),
    ("GET", "/databases/db/tables/t/snapshots"),  # list snapshots
    ("POST", "/databases/db/views"),
    ("PUT", "/databases/db"),
])
def test_a_route_not_served_is_not_implemented(server: JsonServer[Any], tagged: Table, method: str,
                                               path: str) -> None:
    status, answer = call(server, method, f"{API}{path}", {} if method != "GET" else None)
    assert status == 501, answer
    assert answer["code"] == 501 and "not supported" in answer["message"]
    assert set(answer) == {"message", "resourceType", "resourceName", "code"}


# -- commit answers say what happened (success false only when surely not published) -------------------

COMMIT = f"{API}/databases/db/tables/t/commit"


def test_a_commit_whose_base_snapshot_was_replaced_is_refused(server: JsonServer[Any], catalog: HookedCatalog,
                                                              tagged: Table) -> None:
    """The client built snapshot 3 on snapshot 2; snapshot 2 was then rolled back and written
    anew by another commit (same id, new uuid). Publishing the client's snapshot on the new
    snapshot 2 would drop that commit's rows."""
    tagged.write(rows([3]))
    base = tagged.snapshot_manager.latest()
    assert base is not None and base.uuid is not None
    body = {**_snapshot_to_commit(tagged), "baseSnapshotUuid": base.uuid}
    tagged.rollback_to("t1")
    catalog.get_table("db.t").write(rows([4]))
    assert call(server, "POST", COMMIT, body) == (200, {"success": False})
    assert _ids(catalog) == [1, 2, 4]
    body["snapshot"]["id"] = 3
    assert call(server, "POST", COMMIT, {**body, "baseSnapshotUuid": 7})[0] == 400


def _lost_reply(write_first: Callable[[SnapshotManager, Snapshot], None] | None) -> Any:
    def publish(manager: SnapshotManager, snapshot: Snapshot) -> bool:
        if write_first is not None:
            write_first(manager, snapshot)
        raise OSError("connection reset after the PUT was sent")
    return publish


def _someone_elses(manager: SnapshotManager, snapshot: Snapshot) -> None:
    other = Snapshot.from_json(snapshot.to_json())
    other.commit_user = "another-writer"
    manager.file_io.write_bytes(manager.path(snapshot.id), other.to_json().encode())


def _nothing_published(manager: SnapshotManager, snapshot: Snapshot) -> bool:
    raise NothingPublishedError("the lock database is unavailable")


@pytest.mark.parametrize(("mode", "fault", "expected"), [
    # a lost reply after the snapshot landed: read back, it is ours
    (None, _lost_reply(lambda m, s: m.file_io.write_bytes(m.path(s.id), s.to_json().encode())), True),
    # nothing written before the failure: surely not published
    (None, _nothing_published, False),
    ("lock", _nothing_published, False),
    # another commit holds N on a store that never overwrites: surely not ours
    (None, _lost_reply(_someone_elses), False),
    # N absent: a delayed PUT may still land; under the lock a delayed PUT may overwrite another's N
    (None, _lost_reply(None), None),
    ("lock", _lost_reply(None), None),
    ("lock", _lost_reply(_someone_elses), None),
])
def test_a_commit_answers_what_happened(server: JsonServer[Any], catalog: HookedCatalog, tagged: Table,
                                        mode: str | None, fault: Any, expected: bool | None) -> None:
    body = _snapshot_to_commit(tagged)
    catalog.mode, catalog.publish_fault = mode, fault
    status, answer = call(server, "POST", COMMIT, body)
    if expected is None:  # unknown: an error, so that the client keeps its files
        assert status == 500, answer
        assert "outcome unknown" in answer["message"]
    else:
        assert (status, answer) == (200, {"success": expected})
    landed = catalog.get_table("db.t").snapshot_manager.snapshot(2) if expected else None
    assert landed is None or landed.commit_user == body["snapshot"]["commitUser"]


def test_commits_without_a_lock_or_conditional_put_are_refused(server: JsonServer[Any], catalog: HookedCatalog,
                                                               tagged: Table) -> None:
    body = _snapshot_to_commit(tagged)
    catalog.mode = "unsafe"
    status, answer = call(server, "POST", COMMIT, body)
    assert status == 501 and "neither a conditional PUT nor a catalog lock" in answer["message"]
    assert [s.id for s in catalog.get_table("db.t").snapshots()] == [1]


# -- alter table: the spec's codes (defect: all 400) ----------------------------------------------------

def _add(name: str) -> dict[str, Any]:
    return {"action": "addColumn", "fieldNames": [name], "dataType": "STRING"}


@pytest.mark.parametrize(("changes", "status", "resource"), [
    ([{"action": "dropColumn", "fieldNames": ["nope"]}], 404, ("COLUMN", "nope")),
    ([{"action": "renameColumn", "fieldNames": ["nope"], "newName": "x"}], 404, ("COLUMN", "nope")),
    ([_add("w"), {"action": "updateColumnPosition",
                  "move": {"fieldName": "w", "type": "AFTER", "referenceFieldName": "nope"}}], 404, ("COLUMN", "nope")),
    ([_add("v")], 409, ("COLUMN", "v")),
    ([{"action": "renameColumn", "fieldNames": ["id"], "newName": "v"}], 409, ("COLUMN", "v")),
    ([_add("w"), _add("w")], 409, ("COLUMN", "w")),
    ([{"action": "dropColumn", "fieldNames": ["v", "inner"]}], 501, (None, None)),
    ([{"action": "createMaterializedColumn", "fieldNames": ["x"]}], 501, (None, None)),
    ([{"action": "dropColumn"}], 400, (None, None)),
])
def test_alter_table_answers_the_specs_codes(server: JsonServer[Any], catalog: HookedCatalog, tagged: Table,
                                             changes: list[dict[str, Any]], status: int,
                                             resource: tuple[str | None, str | None]) -> None:
    got, answer = call(server, "POST", f"{API}/databases/db/tables/t", {"changes": changes})
    assert (got, answer["resourceType"], answer["resourceName"]) == (status, *resource), answer
    assert catalog.get_table("db.t").schema.field_names == ["id", "v"]


def test_alter_table_applies_changes_in_order(server: JsonServer[Any], catalog: HookedCatalog, tagged: Table) -> None:
    changes = [_add("w"), {"action": "renameColumn", "fieldNames": ["w"], "newName": "x"}, _add("w")]
    assert call(server, "POST", f"{API}/databases/db/tables/t", {"changes": changes}) == (200, {})
    assert catalog.get_table("db.t").schema.field_names == ["id", "v", "x", "w"]


def test_the_http_layer_imports_no_service_above_it() -> None:
    """The services' shared configuration lies below them all: the HTTP layer of the catalogs
    reaches neither the roles (``serve``) nor a service, so no import cycle runs through it."""
    import grimp

    graph = grimp.build_graph("strata_platform", include_external_packages=False)
    for above in ("strata_platform.serve", "strata_platform.metaservice", "strata_platform.paimon_rest.server"):
        assert graph.find_shortest_chain(importer="strata_platform.http_service", imported=above) is None, above


@pytest.mark.parametrize("name", ["team a+b", "lake/é%", "strata"])
def test_a_warehouse_name_encoded_twice_as_java_sends_it_matches(catalog: HookedCatalog, name: str) -> None:
    server = start(PaimonRestCatalog(catalog, prefix=name), port=0, token=TOKEN)
    try:
        for encoded in (quote(name, safe=""), quote(quote(name, safe=""), safe="")):
            status, answer = call(server, "GET", f"/v1/config?warehouse={encoded}")
            assert (status, answer["defaults"]["prefix"]) == (200, name), encoded
        status, answer = call(server, "GET", "/v1/config?warehouse=other")
        assert (status, answer["resourceType"]) == (404, "WAREHOUSE")
    finally:
        server.shutdown()
        server.server_close()


def test_a_branch_is_renamed(server: JsonServer[Any], catalog: HookedCatalog, tagged: Table) -> None:
    tagged.create_branch("b1", from_tag="t1").write(rows([7]))
    tagged.create_branch("other")
    branches = f"{API}/databases/db/tables/t/branches"
    assert call(server, "POST", f"{branches}/b1/rename", {"toBranch": "b2"}) == (200, {})
    assert call(server, "GET", branches) == (200, {"branches": ["b2", "other"]})
    moved = catalog.get_table("db.t").on_branch("b2")
    assert sorted(moved.to_arrow().column("id").to_pylist()) == [1, 2, 7]
    assert [t.name for t in moved.list_tags()] == ["t1"]
    moved.write(rows([8]))  # the renamed branch takes commits
    assert sorted(catalog.get_table("db.t$branch_b2").to_arrow().column("id").to_pylist()) == [1, 2, 7, 8]
    status, answer = call(server, "POST", f"{branches}/b1/rename", {"toBranch": "b3"})
    assert (status, answer["resourceType"], answer["resourceName"]) == (404, "BRANCH", "b1")
    status, answer = call(server, "POST", f"{branches}/b2/rename", {"toBranch": "other"})
    assert (status, answer["resourceType"], answer["resourceName"]) == (409, "BRANCH", "other")
    status, answer = call(server, "POST", f"{branches}/b2/rename", {"toBranch": "bad/name"})
    assert status == 400 and "branch name" in answer["message"].lower()


# -- rename by metadata (defect: the directory was copied, without a lock) ------------------------------

RENAME = f"{API}/tables/rename"
LOCKED = {"lock.enabled": "true", "lock-check-max-sleep": "50 ms"}


def _files(root: str) -> set[str]:
    return {str(p.relative_to(root)) for p in Path(root).rglob("*") if p.is_file() and p.name != "catalog.sqlite"}


def _rename(server: JsonServer[Any], source: str, target: str, target_db: str = "db") -> tuple[int, Any]:
    return call(server, "POST", RENAME, {"source": {"database": "db", "object": source},
                                         "destination": {"database": target_db, "object": target}})


@pytest.mark.parametrize(("catalog", "mode", "hook"), [
    ({}, None, "before_publish"),
    (LOCKED, "lock", "before_publish"),
    (LOCKED, "lock", "while_resolving_lock"),  # the commit chose the old name's lock, then the rename ran
], indirect=["catalog"])
def test_a_rename_racing_a_commit_loses_no_commit_and_copies_no_file(
        server: JsonServer[Any], catalog: HookedCatalog, tagged: Table, mode: str | None, hook: str) -> None:
    body = _snapshot_to_commit(tagged)  # snapshot 2, ids 10 and 20: the commit sent to db.t
    before = _files(catalog.warehouse)
    catalog.mode = mode
    setattr(catalog, hook, lambda: _rename(server, "t", "t2"))
    assert call(server, "POST", COMMIT, body) == (200, {"success": True})
    assert getattr(catalog, hook) is None  # the rename did run inside the commit
    assert catalog.list_tables("db") == ["t2"]
    moved = catalog.get_table("db.t2")
    assert moved.path == tagged.path and sorted(moved.to_arrow().column("id").to_pylist()) == [1, 2, 10, 20]
    assert _files(catalog.warehouse) - before == {"db.db/t/snapshot/snapshot-2"}  # nothing copied
    assert not before - _files(catalog.warehouse)
    status, answer = call(server, "GET", f"{API}/databases/db/tables/t2")
    assert status == 200 and answer["path"] == tagged.path
    moved.write(rows([30]))  # later commits under the new name, in the same files
    assert call(server, "GET", f"{API}/databases/db/tables/t2/snapshot")[1]["snapshot"]["snapshot"]["id"] == 3


def test_a_table_created_under_a_renamed_tables_old_name_gets_a_directory_of_its_own(
        server: JsonServer[Any], catalog: HookedCatalog, tagged: Table) -> None:
    assert _rename(server, "t", "t2") == (200, {})
    assert call(server, "POST", f"{API}/databases/db/tables",
                {"identifier": {"database": "db", "object": "t"},
                 "schema": {"fields": [f.to_json() for f in tagged.schema.fields]}}) == (200, {})
    fresh = catalog.get_table("db.t")
    assert fresh.path != tagged.path and fresh.to_arrow().num_rows == 0
    fresh.write(rows([5]))
    assert call(server, "DELETE", f"{API}/databases/db/tables/t2") == (200, {})
    assert not Path(tagged.path).exists()
    assert _ids(catalog) == [5]
    assert _rename(server, "t", "t2") == (200, {})  # back and forth: rows only
    assert _rename(server, "t2", "t") == (200, {})
    assert catalog.get_table("db.t").path == fresh.path and _ids(catalog) == [5]


def test_a_rename_that_would_copy_files_is_not_implemented(server: JsonServer[Any], catalog: HookedCatalog,
                                                           tagged: Table, tmp_path: Path) -> None:
    catalog.create_database("other")
    status, answer = _rename(server, "t", "t2", target_db="other")
    assert status == 501 and "another database would need every file copied" in answer["message"]
    assert catalog.list_tables("db") == ["t"] and _ids(catalog) == [1, 2]
    files = FileSystemCatalog(str(tmp_path / "fs"))
    files.create_database("db")
    files.create_table("db.t", SCHEMA).write(rows([1]))
    for fs_server in _serve(start(PaimonRestCatalog(files), port=0, token=TOKEN)):
        status, answer = _rename(fs_server, "t", "t2")
    assert status == 501 and "renaming would copy every file" in answer["message"]
    assert files.list_tables("db") == ["t"]


# -- snapshot and partition answers from the commits' statistics (defect: manifests read on every call) --

class CountingFileIO(LocalFileIO):
    """Local storage that counts the reads of manifest lists and manifests, and of schemas."""

    manifest_reads = 0
    schema_reads = 0

    def read_bytes(self, path: str) -> bytes:
        self.manifest_reads += "/manifest/" in path
        self.schema_reads += "/schema/" in path
        return super().read_bytes(path)

    def list_status(self, path: str) -> Any:
        self.schema_reads += path.rstrip("/").endswith("/schema")
        return super().list_status(path)

    def open_input_file(self, path: str) -> pa.NativeFile:
        self.manifest_reads += "/manifest/" in path
        return super().open_input_file(path)


def _partition_deltas(table: Table, snapshot: Snapshot) -> list[dict[str, Any]]:
    """What a Paimon client sends with its commit: the files its delta adds, per partition."""
    store = table.manifest_store
    deltas: dict[str, dict[str, Any]] = {}
    for meta in store.read_manifest_list(snapshot.delta_manifest_list):
        for entry in store.read_manifest(meta.file_name):
            (value,) = binary_row.deserialize(entry.partition, [pa.string()])
            delta = deltas.setdefault(value, {"spec": {"p": value}, "recordCount": 0, "fileSizeInBytes": 0,
                                              "fileCount": 0, "lastFileCreationTime": 0})
            sign = 1 if entry.kind.name == "ADD" else -1
            delta["recordCount"] += sign * entry.file.row_count
            delta["fileSizeInBytes"] += sign * entry.file.file_size
            delta["fileCount"] += sign
            delta["lastFileCreationTime"] = max(delta["lastFileCreationTime"], entry.file.creation_time or 0)
    return list(deltas.values())


def test_snapshot_and_partitions_are_answered_without_reading_manifests(tmp_path: Path) -> None:
    file_io = CountingFileIO()
    catalog = JdbcCatalog(str(tmp_path / "warehouse"), {"metastore": "jdbc"}, file_io=file_io)
    catalog.create_database("db")
    schema = pa.schema([*SCHEMA, pa.field("p", pa.string())])
    table = catalog.create_table("db.t", schema, partition_keys=["p"])
    table.write(pa.table({"id": [1, 2, 3], "v": ["x"] * 3, "p": ["a", "a", "b"]}, schema=schema))
    for server in _serve(start(PaimonRestCatalog(catalog), port=0, token=TOKEN)):
        base = call(server, "GET", f"{API}/databases/db/tables/t/snapshot")[1]["snapshot"]  # computed once
        table.write(pa.table({"id": [4], "v": ["y"], "p": ["b"]}, schema=schema))
        latest = table.snapshot_manager.latest()
        assert latest is not None
        body = {**_snapshot_to_commit_as_is(table, latest), "statistics": _partition_deltas(table, latest)}
        assert call(server, "POST", COMMIT, body) == (200, {"success": True})
        DECODED_MANIFESTS.clear()
        file_io.manifest_reads = file_io.schema_reads = 0
        status, snapshot = call(server, "GET", f"{API}/databases/db/tables/t/snapshot")
        assert file_io.schema_reads == 0  # nor the table's schema: its snapshot files alone
        status_p, partitions = call(server, "GET", f"{API}/databases/db/tables/t/partitions")
        assert file_io.manifest_reads == 0
        assert (status, status_p) == (200, 200)
        truth = statistics.computed(catalog.get_table("db.t"), latest)  # read from the manifests
        assert file_io.manifest_reads > 0
        answer = snapshot["snapshot"]
        assert answer["snapshot"]["id"] == 2 and answer["recordCount"] == 4
        assert answer["fileCount"] == truth.total("fileCount") == base["fileCount"] + 1
        assert answer["fileSizeInBytes"] == truth.total("fileSizeInBytes") > base["fileSizeInBytes"] > 0
        assert partitions["partitions"] == [truth.partitions[k].to_json() for k in sorted(truth.partitions)]
        assert [(p["spec"], p["recordCount"], p["fileCount"]) for p in partitions["partitions"]] == [
            ({"p": "a"}, 2, 1), ({"p": "b"}, 2, 2)]
        # a snapshot the server did not see committed (rolled back and written again) is read afresh
        table.rollback_to(1)
        table.write(pa.table({"id": [5, 6], "v": ["z"] * 2, "p": ["a", "a"]}, schema=schema))
        answer = call(server, "GET", f"{API}/databases/db/tables/t/snapshot")[1]["snapshot"]
        assert answer["recordCount"] == 5 and answer["fileCount"] == base["fileCount"] + 1
        partitions = call(server, "GET", f"{API}/databases/db/tables/t/partitions")[1]["partitions"]
        assert [(p["spec"], p["recordCount"]) for p in partitions] == [({"p": "a"}, 4), ({"p": "b"}, 1)]
    catalog.close()


def _snapshot_to_commit_as_is(table: Table, latest: Snapshot) -> dict[str, Any]:
    """Take the latest snapshot back out of the table, as if only a client had it."""
    manager = table.snapshot_manager
    table.file_io.delete(manager.path(latest.id))
    table.file_io.write_bytes(f"{manager.dir}/LATEST", str(latest.id - 1).encode())
    return {"snapshot": json.loads(latest.to_json())}


# -- audit fields (defect: absent, so Java wrote owner=null and zeros into the table's options) ---------

def test_a_table_answers_who_created_and_changed_it_and_when(server: JsonServer[Any], catalog: HookedCatalog,
                                                             tagged: Table) -> None:
    status, created = call(server, "GET", f"{API}/databases/db/tables/t")
    assert status == 200
    assert created["owner"] == created["createdBy"] == created["updatedBy"] == "strata"
    assert created["createdAt"] == created["updatedAt"] == tagged.schema_manager.schema(0).time_millis > 0
    assert call(server, "POST", f"{API}/databases/db/tables/t", {"changes": [_add("w")]}) == (200, {})
    status, altered = call(server, "GET", f"{API}/databases/db/tables/t")
    assert (altered["id"], altered["createdAt"]) == (created["id"], created["createdAt"])
    assert altered["updatedAt"] == catalog.get_table("db.t").schema.time_millis >= created["createdAt"]
    assert altered["schemaId"] == 1
