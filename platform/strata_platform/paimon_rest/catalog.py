"""The answers of Paimon's REST catalog API over a Strata catalog, without HTTP.

Requests and responses are the JSON objects of Paimon's OpenAPI spec (``rest-catalog-open-api.yaml``)
as the Java client (``RESTApi``) and pypaimon send and read them. Errors are `RestError`s in the
spec's ``ErrorResponse`` shape: the client maps 404 to its not-exists exceptions by
``resourceType`` (DATABASE, TABLE, SNAPSHOT, BRANCH, TAG, COLUMN), 409 to already-exists, 400 to
IllegalArgumentException.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote

from strata import metrics, names
from strata.catalog import Catalog, CatalogOperationNotSupportedError, Identifier
from strata.catalog.jdbc import JdbcCatalog
from strata.errors import (
    CommitConflictError,
    CommitStateUnknownError,
    CorruptMetadataError,
    DatabaseNotEmptyError,
    DatabaseNotFoundError,
    InvalidNameError,
    OptionError,
    SchemaMismatchError,
    SnapshotNotFoundError,
    StrataError,
    TableAlreadyExistsError,
    TableNotFoundError,
)
from strata.fs.file_io import FileIO, read_back
from strata.schema.evolution import SchemaChangeError
from strata.schema.table_schema import TableSchema
from strata.schema.types import DataField
from strata.snapshot.snapshot import Snapshot
from strata.snapshot.snapshot_manager import NothingPublishedError, SnapshotManager
from strata.table.table import Table
from strata_platform.paimon_rest import changes as schema_changes
from strata_platform.paimon_rest import statistics

log = logging.getLogger("strata.paimon_rest")

DATABASE, TABLE, SNAPSHOT, BRANCH, TAG, COLUMN = "DATABASE", "TABLE", "SNAPSHOT", "BRANCH", "TAG", "COLUMN"
ICEBERG_STORAGE = "metadata.iceberg.storage"
# A manifest list a committed snapshot names: a file of the table's manifest/ directory.
_FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class RestError(Exception):
    """An answer in the spec's ErrorResponse model."""

    def __init__(self, code: int, message: str, resource_type: str | None = None,
                 resource_name: str | None = None):
        super().__init__(message)
        self.code, self.message = code, message
        self.resource_type, self.resource_name = resource_type, resource_name

    def body(self) -> dict[str, Any]:
        message = self.message
        if self.code in (400, 501):
            # Paimon's Java client runs these messages through String.format a second time
            # (BadRequestException, NotImplementedException): a bare '%' would fail there
            message = message.replace("%", "%%")
        return {"message": message, "resourceType": self.resource_type,
                "resourceName": self.resource_name, "code": self.code}


def bad_request(message: str) -> RestError:
    return RestError(400, message)


def not_found(kind: str, name: str, message: str | None = None) -> RestError:
    return RestError(404, message or f"{kind.lower()} {name} does not exist", kind, name)


def already_exists(kind: str, name: str) -> RestError:
    return RestError(409, f"{kind.lower()} {name} already exists", kind, name)


@contextmanager
def client_errors(kind: str, name: str) -> Iterator[None]:
    """Strata's refusals as the answers clients map: invalid input 400, absent 404, taken 409."""
    try:
        yield
    except InvalidNameError as exc:
        raise bad_request(str(exc)) from None
    except DatabaseNotFoundError as exc:
        raise not_found(DATABASE, name.split(".", maxsplit=1)[0], str(exc)) from None
    except TableNotFoundError as exc:
        raise not_found(TABLE, name, str(exc)) from None
    except TableAlreadyExistsError:
        raise already_exists(kind, name) from None
    except DatabaseNotEmptyError as exc:
        raise RestError(409, str(exc), DATABASE, name) from None
    except (SchemaChangeError, SchemaMismatchError, OptionError, ValueError) as exc:
        raise bad_request(f"{type(exc).__name__}: {exc}") from None


def body_object(body: Any, what: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise bad_request(f"{what}: the request body must be a JSON object")
    return body


def string_map(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise bad_request(f"{what} must be an object of strings")
    return dict(value)


def string_list(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise bad_request(f"{what} must be a list of strings")
    return list(value)


class PaimonRestCatalog:
    """Paimon REST answers over `catalog` (a Strata catalog: JDBC on PostgreSQL in the stack).

    `prefix` is the warehouse name clients pass as ``warehouse`` (their request paths carry it);
    `defaults` are catalog options handed to clients in the config answer; `token_options`, when
    given, are the object-store options the data token endpoint vends (see the package docs)."""

    def __init__(self, catalog: Catalog, prefix: str = "strata", defaults: Mapping[str, str] | None = None,
                 token_options: Mapping[str, str] | None = None, token_seconds: int = 7200,
                 after_commit: Callable[[Table], None] | None = None, owner: str = "strata"):
        self.catalog = catalog
        self.owner = owner  # who the audit fields name: the server makes every change for its clients
        self.prefix = prefix
        self.defaults = dict(defaults or {})
        self.token_options = dict(token_options) if token_options else None
        self.token_seconds = token_seconds
        self.after_commit = after_commit or mirror_after_commit
        self.statistics = statistics.StatisticsStore()

    # -- config ---------------------------------------------------------------------------------------
    def config(self, warehouse: str | None) -> dict[str, Any]:
        served = (self.prefix, getattr(self.catalog, "warehouse", None))
        if warehouse and warehouse not in served and unquote(warehouse) in served:
            warehouse = unquote(warehouse)  # Java 1.3 encodes the query value twice
        if warehouse and warehouse not in served:
            raise not_found("WAREHOUSE", warehouse, f"warehouse {warehouse!r} is not served here "
                                                    f"(this catalog serves {self.prefix!r})")
        defaults = {**self.defaults, "prefix": self.prefix}
        if self.token_options is not None:
            defaults["data-token.enabled"] = "true"
        return {"defaults": defaults, "overrides": {"prefix": self.prefix}}

    # -- databases ------------------------------------------------------------------------------------
    def list_databases(self, pattern: str | None = None) -> dict[str, Any]:
        names = [n for n in self.catalog.list_databases() if matches(n, pattern)]
        return {"databases": names, "nextPageToken": None}

    def create_database(self, body: Any) -> None:
        request = body_object(body, "create database")
        name = request.get("name")
        if not isinstance(name, str):
            raise bad_request(f"create database: name must be a string, got {name!r}")
        with client_errors(DATABASE, name):
            names.check_database_name(name)
            properties = string_map(request.get("options"), "options")
            _refuse_audit_keys(properties)
            if isinstance(self.catalog, JdbcCatalog):
                now = str(_now_millis())
                self.catalog.create_database(name, properties={**properties, CREATED_AT: now, UPDATED_AT: now})
            elif properties:
                raise bad_request(f"create database {name}: this catalog keeps no database options")
            else:
                self.catalog.create_database(name)

    def database(self, name: str) -> str:
        with client_errors(DATABASE, name):
            names.check_database_name(name)
        if not self.catalog._database_exists(name):
            raise not_found(DATABASE, name)
        return name

    def get_database(self, name: str) -> dict[str, Any]:
        self.database(name)
        properties = getattr(self.catalog, "database_properties", None)
        options = dict(properties(name)) if callable(properties) else {}
        location = options.pop("location", None) or self._database_location(name)
        created, updated = (_millis(options.pop(key, None)) for key in (CREATED_AT, UPDATED_AT))
        return {"id": name, "name": name, "location": location, "options": options, "owner": self.owner,
                "createdAt": created, "createdBy": self.owner, "updatedAt": updated or created,
                "updatedBy": self.owner}

    def _database_location(self, name: str) -> str:
        path = getattr(self.catalog, "database_path", None)
        return str(path(name)) if callable(path) else ""

    def alter_database(self, name: str, body: Any) -> dict[str, Any]:
        self.database(name)
        request = body_object(body, "alter database")
        removals = string_list(request.get("removals"), "removals")
        updates = string_map(request.get("updates"), "updates")
        if "location" in updates or "location" in removals:
            raise bad_request("a database's location cannot be changed")
        _refuse_audit_keys({**updates, **dict.fromkeys(removals, "")})
        from strata_platform.paimon_rest.relocate import alter_database_properties

        with client_errors(DATABASE, name):
            missing = alter_database_properties(self.catalog, name, {**updates, UPDATED_AT: str(_now_millis())},
                                                removals)
        return {"removed": [k for k in removals if k not in missing], "updated": list(updates), "missing": missing}

    def drop_database(self, name: str) -> None:
        self.database(name)
        with client_errors(DATABASE, name):
            self.catalog.drop_database(name, cascade=True)  # the client checks emptiness unless cascading

    # -- tables ---------------------------------------------------------------------------------------
    def list_tables(self, database: str, pattern: str | None = None) -> dict[str, Any]:
        self.database(database)
        with client_errors(DATABASE, database):
            names = [n for n in self.catalog.list_tables(database) if matches(n, pattern)]
        return {"tables": names, "nextPageToken": None}

    def list_table_details(self, database: str, pattern: str | None = None) -> dict[str, Any]:
        names = self.list_tables(database, pattern)["tables"]
        details = []
        for name in names:
            try:
                details.append(self.get_table(database, name))
            except RestError as exc:
                if exc.code != 404:  # dropped meanwhile
                    raise
        return {"tableDetails": details, "nextPageToken": None}

    def table(self, database: str, name: str) -> Table:
        """The table (or a branch of it: ``t$branch_b1``); 400 for a malformed name, 404 if absent."""
        self.database(database)
        with client_errors(TABLE, f"{database}.{name}"):
            names.check_object_name(name)
            return self.catalog.get_table(Identifier(database, name))

    def _registered_path(self, database: str, name: str) -> str | None:
        """The directory of main table `name` of the JDBC catalog, from its rows alone; None for a
        branch, a system table or another catalog (loaded as a table instead)."""
        if not isinstance(self.catalog, JdbcCatalog) or "$" in name:
            return None
        self.database(database)
        ident = Identifier(database, name)
        with client_errors(TABLE, f"{database}.{name}"):
            names.check_object_name(name)
            if not self.catalog._registered(ident):
                raise TableNotFoundError(f"table {ident} does not exist")
            return self.catalog.table_path(ident)

    def get_table(self, database: str, name: str) -> dict[str, Any]:
        table = self.table(database, name)
        if not isinstance(table, Table):
            raise bad_request(f"{database}.{name} is a system table: clients load system tables themselves")
        return {**table_response(table, name), **self._audit(table)}

    def _audit(self, table: Table) -> dict[str, Any]:
        """Paimon's audit fields: created with schema 0, updated with the current schema."""
        return {"owner": self.owner, "createdAt": created_millis(table), "createdBy": self.owner,
                "updatedAt": table.schema.time_millis, "updatedBy": self.owner}

    def create_table(self, database: str, body: Any) -> None:
        request = body_object(body, "create table")
        identifier = body_object(request.get("identifier"), "create table: identifier")
        schema = body_object(request.get("schema"), "create table: schema")
        name = identifier.get("object") or identifier.get("table")
        if not isinstance(name, str):
            raise bad_request(f"create table: identifier object must be a string, got {name!r}")
        if identifier.get("database", database) != database:
            raise bad_request(f"create table: identifier database {identifier.get('database')!r} is not "
                              f"the database of the path {database!r}")
        self.database(database)
        full = f"{database}.{name}"
        with client_errors(TABLE, full):
            names.check_table_name(name)
            table_schema = schema_from_request(schema, full)
            self.catalog.create_table(Identifier(database, name), table_schema)

    def alter_table(self, database: str, name: str, body: Any) -> None:
        request = body_object(body, "alter table")
        table = self.table(database, name)
        raw = request.get("changes")
        if not isinstance(raw, list):
            raise bad_request("alter table: 'changes' must be a list of schema changes")
        full = f"{database}.{name}"
        try:
            changes = [schema_changes.parse(change) for change in raw]
            schema_changes.check_columns(table.schema.field_names, changes)
        except schema_changes.UnsupportedChange as exc:
            raise RestError(501, f"alter table {full}: {exc}") from None
        except schema_changes.ColumnNotFound as exc:
            raise not_found(COLUMN, exc.column, f"alter table {full}: {exc}") from None
        except schema_changes.ColumnExists as exc:
            raise RestError(409, f"alter table {full}: {exc}", COLUMN, exc.column) from None
        except ValueError as exc:  # a malformed change (SchemaChangeError is one)
            raise bad_request(f"alter table {full}: {type(exc).__name__}: {exc}") from None
        with client_errors(TABLE, full):
            self.catalog.alter_table(table.identifier if "$" not in name else Identifier(database, name), changes)

    def drop_table(self, database: str, name: str) -> None:
        self.table(database, name)
        with client_errors(TABLE, f"{database}.{name}"):
            names.check_table_name(name)  # a branch is dropped through its own endpoint
            self.catalog.drop_table(Identifier(database, name))

    def rename_table(self, body: Any) -> None:
        request = body_object(body, "rename table")
        source = identifier_of(request.get("source"), "source")
        target = identifier_of(request.get("destination"), "destination")
        self.table(source.database, source.table)
        self.database(target.database)
        with client_errors(TABLE, str(target)):
            names.check_table_name(source.table)
            names.check_table_name(target.table)
            if self.catalog.table_exists(target):
                raise TableAlreadyExistsError(f"table {target} already exists")
            try:
                self.catalog.rename_table(source, target)
            except CatalogOperationNotSupportedError as exc:
                raise RestError(501, str(exc)) from None

    def table_token(self, database: str, name: str) -> dict[str, Any]:
        self.table(database, name)
        if self.token_options is None:
            raise RestError(501, "this catalog does not vend data tokens: give the client its own s3.* options")
        return {"token": dict(self.token_options),
                "expiresAtMillis": _now_millis() + self.token_seconds * 1000}

    # -- snapshots ------------------------------------------------------------------------------------
    def latest_snapshot(self, database: str, name: str) -> dict[str, Any]:
        """The latest snapshot with its kept sums. Clients ask on every commit try, scan and poll:
        a main table whose sums are kept is answered from its snapshot files alone (its schema is
        not loaded, a round trip or two to the object store)."""
        path = self._registered_path(database, name)
        if path is not None:
            latest = SnapshotManager(self.catalog.file_io, path).latest()
            sums = None if latest is None else self.statistics.known(path, latest)
            if latest is not None and sums is not None:
                return {"snapshot": table_snapshot(latest, sums)}
        table = self.table(database, name)
        latest = table.snapshot_manager.latest()
        if latest is None:
            raise not_found(SNAPSHOT, f"{database}.{name}", f"table {database}.{name} has no snapshot yet")
        return {"snapshot": table_snapshot(latest, self.statistics.of(table, latest))}

    def snapshot(self, database: str, name: str, version: str) -> dict[str, Any]:
        table = self.table(database, name)
        found: Snapshot | None
        try:
            if version.isascii() and version.isdigit():
                found = table.snapshot_manager.snapshot(int(version))
            elif version.upper() == "LATEST":
                found = table.snapshot_manager.latest()
            else:
                with client_errors(TAG, version):  # a malformed tag name is a 400
                    found = table.tags.get(version) if table.tags.exists(version) else None
        except SnapshotNotFoundError:
            found = None
        if found is None:
            raise not_found(SNAPSHOT, version, f"table {database}.{name} has no snapshot {version}")
        return {"snapshot": json.loads(found.to_json())}

    def commit(self, database: str, name: str, body: Any) -> dict[str, Any]:
        """Publish a client's snapshot under Strata's protocol for the table (conditional PUT or
        the JDBC lock: ``Table.snapshot_publisher``). The answer is what happened, as the clients
        act on it: ``success: false`` only when surely not published (its id is taken, its parent
        moved or was replaced, nothing was written): the client cleans up and retries on the new
        latest snapshot; an error when the outcome is unknown: the client keeps its files."""
        request = body_object(body, "commit")
        table = self.table(database, name)
        if request.get("tableId") not in (None, table_id(table)):
            raise not_found(TABLE, f"{database}.{name}", f"table {database}.{name} is not the table the "
                            f"commit was written for (id {request.get('tableId')!r}): it was dropped or re-created")
        base_uuid = request.get("baseSnapshotUuid")
        if not isinstance(base_uuid, str | None):
            raise bad_request(f"commit: baseSnapshotUuid must be a string, got {base_uuid!r}")
        snapshot = self._client_snapshot(table, request.get("snapshot"))
        try:
            deltas = statistics.parse_deltas(request.get("statistics"))
        except statistics.MalformedStatistics as exc:
            raise bad_request(f"commit: {exc}") from None
        mode = commit_mode(table)
        if mode == "unsafe":
            raise RestError(501, f"commits to {database}.{name} are refused: its object store has neither a "
                                 "conditional PUT nor a catalog lock, so two commits could both win one snapshot "
                                 "id (enable the JDBC lock or s3.conditional-put)")
        published = publish(table, snapshot, base_uuid, mode)
        if published:
            self.statistics.committed(table, snapshot, deltas)
        if published and is_main(table):
            self._after_publish(table)
        log.info("commit %s.%s snapshot %d: %s", database, name, snapshot.id,
                 "published" if published else "not published, client retries")
        return {"success": published}

    @staticmethod
    def _client_snapshot(table: Table, raw: Any) -> Snapshot:
        """The snapshot a client sent, if it can be published: ids and the files it names checked
        first, so a malformed commit writes nothing."""
        if not isinstance(raw, dict):
            raise bad_request("commit: 'snapshot' must be a snapshot object")
        try:
            snapshot = Snapshot.from_json(json.dumps(raw), where="the commit's snapshot")
        except CorruptMetadataError as exc:
            raise bad_request(str(exc)) from None
        if not isinstance(snapshot.id, int) or isinstance(snapshot.id, bool) or snapshot.id < 1:
            raise bad_request(f"commit: snapshot id must be a positive integer, got {raw.get('id')!r}")
        if not isinstance(snapshot.schema_id, int) or snapshot.schema_id < 0:
            raise bad_request(f"commit: schemaId must be a non-negative integer, got {raw.get('schemaId')!r}")
        try:
            table.schema_manager.schema(snapshot.schema_id)
        except (FileNotFoundError, KeyError, CorruptMetadataError, ValueError):
            raise bad_request(f"commit: table {table.identifier} has no schema {snapshot.schema_id}") from None
        names = [snapshot.base_manifest_list, snapshot.delta_manifest_list, snapshot.changelog_manifest_list,
                 snapshot.index_manifest]
        for file_name in (n for n in names if n is not None):
            if not isinstance(file_name, str) or not _FILE_NAME.match(file_name):
                raise bad_request(f"commit: {file_name!r} is not a manifest file name")
            path = table.manifest_store.path(file_name)
            try:
                table.file_io.file_size(path)
            except FileNotFoundError:
                raise bad_request(f"commit: manifest file {file_name} does not exist in the table "
                                  f"{table.identifier}; write the manifests before committing") from None
        return snapshot

    # -- rollback -------------------------------------------------------------------------------------
    def rollback(self, database: str, name: str, body: Any) -> dict[str, Any]:
        """Roll the table back to a snapshot or a tag under its commit lock (a rollback beside a
        commit would leave that commit's snapshot on top of deleted ones). ``fromSnapshot``
        (pypaimon): only if the latest snapshot is that one, else 409."""
        request = body_object(body, "rollback")
        target = rollback_target(request.get("instant"))
        expected = request.get("fromSnapshot")
        if expected is not None and (not isinstance(expected, int) or isinstance(expected, bool)):
            raise bad_request(f"rollback: fromSnapshot must be a snapshot id, got {expected!r}")
        table = self.table(database, name)
        full = f"{database}.{name}"
        with commit_lock(table):
            latest = table.snapshot_manager.latest_id()
            if expected is not None and latest != expected:
                raise RestError(409, f"rollback of {full}: the latest snapshot is {latest}, not {expected}",
                                SNAPSHOT, str(expected))
            self._require_rollback_target(table, full, target)
            from strata.operation.rollback import rollback_to

            result = rollback_to(table.store, target)
        log.info("rollback %s to %s: snapshots %s deleted", full, target, result.deleted_snapshots)
        return {}

    @staticmethod
    def _require_rollback_target(table: Table, full: str, target: int | str) -> None:
        if isinstance(target, str):
            with client_errors(TAG, target):
                names.check_tag_name(target)
            if not table.tags.exists(target):
                raise not_found(TAG, target, f"table {full} has no tag {target}")
            return
        from strata.operation.rollback import resolve_target

        try:
            resolve_target(table.store, target)
        except SnapshotNotFoundError:
            raise not_found(SNAPSHOT, str(target), f"table {full} has no snapshot {target}") from None

    # -- tags -----------------------------------------------------------------------------------------
    def list_tags(self, database: str, name: str, prefix: str | None = None) -> dict[str, Any]:
        table = self.table(database, name)
        tags = sorted(t.name for t in table.tags.list_all() if t.name.startswith(prefix or ""))
        return {"tags": tags, "nextPageToken": None}

    def create_tag(self, database: str, name: str, body: Any) -> None:
        request = body_object(body, "create tag")
        tag, snapshot_id, retained = request.get("tagName"), request.get("snapshotId"), request.get("timeRetained")
        if not isinstance(tag, str) or not isinstance(retained, str | None):
            raise bad_request(f"create tag: tagName and timeRetained must be strings, got {tag!r}, {retained!r}")
        if snapshot_id is not None and (not isinstance(snapshot_id, int) or isinstance(snapshot_id, bool)):
            raise bad_request(f"create tag: snapshotId must be a snapshot id, got {snapshot_id!r}")
        table = self.table(database, name)
        with client_errors(TAG, tag):
            names.check_tag_name(tag)
        if table.tags.exists(tag):
            raise already_exists(TAG, tag)
        try:
            with client_errors(TAG, tag):
                table.create_tag(tag, snapshot_id, retained)
        except SnapshotNotFoundError:
            what = "no snapshot yet" if snapshot_id is None else f"no snapshot {snapshot_id}"
            raise not_found(SNAPSHOT, str(snapshot_id), f"table {database}.{name} has {what}") from None

    def get_tag(self, database: str, name: str, tag: str) -> dict[str, Any]:
        table = self._tagged(database, name, tag)
        info = table.tags.info(tag)
        created = info.create_time
        return {"tagName": tag, "snapshot": json.loads(info.snapshot.to_json()),
                "tagCreateTime": int(created.timestamp() * 1000) if created else None,
                "tagTimeRetained": None if info.time_retained_ms is None else f"{info.time_retained_ms} ms"}

    def delete_tag(self, database: str, name: str, tag: str) -> None:
        self._tagged(database, name, tag).delete_tag(tag)

    def _tagged(self, database: str, name: str, tag: str) -> Table:
        table = self.table(database, name)
        with client_errors(TAG, tag):
            names.check_tag_name(tag)
        if not table.tags.exists(tag):
            raise not_found(TAG, tag, f"table {database}.{name} has no tag {tag}")
        return table

    # -- partitions -----------------------------------------------------------------------------------
    def list_partitions(self, database: str, name: str, pattern: str | None = None) -> dict[str, Any]:
        table = self.table(database, name)
        latest = table.snapshot_manager.latest()
        if latest is None or not table.schema.partition_keys:
            return {"partitions": [], "nextPageToken": None}
        sums = self.statistics.of(table, latest).partitions
        partitions = [sums[key].to_json() for key in sorted(sums)
                      if matches("/".join(f"{k}={v}" for k, v in sums[key].spec.items()), pattern)]
        return {"partitions": partitions, "nextPageToken": None}

    # -- branches -------------------------------------------------------------------------------------
    def list_branches(self, database: str, name: str) -> dict[str, Any]:
        return {"branches": self.table(database, name).list_branches()}

    def create_branch(self, database: str, name: str, body: Any) -> None:
        request = body_object(body, "create branch")
        table = self.table(database, name)
        branch, tag = request.get("branch"), request.get("fromTag")
        if not isinstance(branch, str) or not isinstance(tag, str | None):
            raise bad_request(f"create branch: branch and fromTag must be strings, got {branch!r}, {tag!r}")
        with client_errors(BRANCH, branch):
            names.check_branch_name(branch)
            if tag is not None:
                names.check_tag_name(tag)
        if branch in table.list_branches():
            raise already_exists(BRANCH, branch)
        if tag is not None and not table.tags.exists(tag):
            raise not_found(TAG, tag, f"table {database}.{name} has no tag {tag}")
        with client_errors(BRANCH, branch):
            table.create_branch(branch, from_tag=tag)

    def drop_branch(self, database: str, name: str, branch: str) -> None:
        table = self.table(database, name)
        if branch not in table.list_branches():
            raise not_found(BRANCH, branch, f"table {database}.{name} has no branch {branch}")
        table.delete_branch(branch)

    def rename_branch(self, database: str, name: str, branch: str, body: Any) -> None:
        """A branch's directory holds only metadata (snapshots, schemas, tags, consumers; data files
        and manifests are the table's): it is copied under the branch's commit lock, then the old
        one deleted."""
        request = body_object(body, "rename branch")
        target = request.get("toBranch")
        if not isinstance(target, str):
            raise bad_request(f"rename branch: toBranch must be a string, got {target!r}")
        table = self.table(database, name)
        with client_errors(BRANCH, target):
            names.check_branch_name(target)
        branches = table.list_branches()
        if branch not in branches:
            raise not_found(BRANCH, branch, f"table {database}.{name} has no branch {branch}")
        if target in branches:
            raise already_exists(BRANCH, target)
        from strata.snapshot.branches import branch_path

        with commit_lock(table.on_branch(branch)):
            copy_tree(table.file_io, branch_path(table.path, branch), branch_path(table.path, target))
            table.delete_branch(branch)

    def forward_branch(self, database: str, name: str, branch: str) -> None:
        table = self.table(database, name)
        if branch not in table.list_branches():
            raise not_found(BRANCH, branch, f"table {database}.{name} has no branch {branch}")
        try:
            table.fast_forward(branch)
        except CommitConflictError as exc:  # main moved meanwhile, or its commits take no lock: unchanged
            raise RestError(409, str(exc), BRANCH, branch) from None
        except (StrataError, ValueError) as exc:  # a branch without snapshots, or the current one
            raise bad_request(f"fast-forward of branch {branch}: {exc}") from None
        self._after_publish(table)

    def _after_publish(self, table: Table) -> None:
        """Run the work after a commit (the Iceberg mirror). The snapshot is durable: a failure here
        is counted and logged, and the client still hears success (else it would re-run its batch)."""
        try:
            self.after_commit(table)
        except Exception as exc:
            metrics.commit_callback_failed(str(table.identifier), "iceberg-sync")
            log.warning("table %s: committed through the REST catalog; the Iceberg mirror after it failed "
                        "(%s: %s)", table.identifier, type(exc).__name__, exc)

    # -- health ---------------------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        return {"status": "ok", "databases": len(self.catalog.list_databases())}


# -- conversions --------------------------------------------------------------------------------------
def matches(name: str, pattern: str | None) -> bool:
    """Paimon's name patterns: SQL LIKE with ``%`` (any run) and ``_`` (one character)."""
    if not pattern:
        return True
    regex = "".join(".*" if ch == "%" else "." if ch == "_" else re.escape(ch) for ch in pattern)
    return re.fullmatch(regex, name) is not None


def rollback_target(instant: Any) -> int | str:
    """Paimon's Instant: ``{"type": "snapshot", "snapshotId": 3}`` or ``{"type": "tag", "tagName": "t"}``."""
    obj = body_object(instant, "rollback: instant")
    kind = obj.get("type")
    if kind == "snapshot":
        snapshot_id = obj.get("snapshotId")
        if not isinstance(snapshot_id, int) or isinstance(snapshot_id, bool) or snapshot_id < 1:
            raise bad_request(f"rollback: snapshotId must be a positive snapshot id, got {snapshot_id!r}")
        return snapshot_id
    if kind == "tag":
        tag = obj.get("tagName")
        if not isinstance(tag, str) or not tag:
            raise bad_request(f"rollback: tagName must be a tag name, got {tag!r}")
        return tag
    raise bad_request(f"rollback: instant type must be 'snapshot' or 'tag', got {kind!r}")


def commit_lock(table: Table) -> contextlib.AbstractContextManager[object]:
    """What excludes every publish of the table's snapshots (the catalog's table lock, or on
    local disk the publish lock), as a fast-forward takes it."""
    return table._commit_lock()


def copy_tree(file_io: FileIO, source: str, target: str) -> None:
    for status in file_io.list_status(source):
        child = status.path.rstrip("/").rsplit("/", 1)[-1]
        if status.is_dir:
            copy_tree(file_io, f"{source}/{child}", f"{target}/{child}")
        else:
            file_io.write_bytes(f"{target}/{child}", file_io.read_bytes(f"{source}/{child}"))


def identifier_of(value: Any, what: str) -> Identifier:
    obj = body_object(value, f"rename table: {what}")
    database, table = obj.get("database"), obj.get("object") or obj.get("table")
    if not isinstance(database, str) or not isinstance(table, str):
        raise bad_request(f"rename table: {what} needs 'database' and 'object'")
    return Identifier(database, table)


def table_id(table: Table) -> str:
    """A table's id: stable while it exists, new when a table of the same name is created again
    (derived from its path and the creation time in schema-0)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{table.path}#{created_millis(table)}"))


# a database's audit times, kept among its properties (the JDBC catalog's) and shown as the
# GetDatabaseResponse's createdAt and updatedAt, not as options
CREATED_AT, UPDATED_AT = "strata.rest.created-at", "strata.rest.updated-at"


def _refuse_audit_keys(properties: Mapping[str, str]) -> None:
    reserved = sorted(k for k in properties if k in (CREATED_AT, UPDATED_AT))
    if reserved:
        raise bad_request(f"database options {reserved} are the catalog's own audit fields")


def _millis(value: str | None) -> int:
    """An audit time kept as text (0 for a database created before they were kept)."""
    try:
        return int(value or 0)
    except ValueError:
        return 0


def _now_millis() -> int:
    return time.time_ns() // 1_000_000


def created_millis(table: Table) -> int:
    """When the table was created: the time of its schema 0 (0 if that file was removed by hand)."""
    try:
        return table.schema_manager.schema(0).time_millis if table.schema.id else table.schema.time_millis
    except (FileNotFoundError, KeyError, CorruptMetadataError):
        return 0


def is_main(table: Table) -> bool:
    from strata.snapshot.branches import is_main as main_branch

    return main_branch(table.branch)


def client_options(table: Table) -> dict[str, str]:
    """The options clients see: the table's own, but with the Iceberg mirror off. The server runs
    Strata's mirror after each commit; a client's own Iceberg callback would write a second,
    conflicting copy of the same metadata."""
    options = dict(table.schema.options)
    if options.get(ICEBERG_STORAGE, "disabled") != "disabled":
        options[ICEBERG_STORAGE] = "disabled"
    return options


def table_response(table: Table, name: str) -> dict[str, Any]:
    schema = table.schema
    body: dict[str, Any] = {
        "fields": [f.to_json() for f in schema.fields], "partitionKeys": schema.partition_keys,
        "primaryKeys": schema.primary_keys, "options": client_options(table),
    }
    if schema.comment is not None:
        body["comment"] = schema.comment
    return {"id": table_id(table), "name": name, "path": table.path, "isExternal": False,
            "schemaId": schema.id, "schema": body}


def schema_from_request(schema: dict[str, Any], where: str) -> TableSchema:
    fields = schema.get("fields")
    if not isinstance(fields, list) or not fields:
        raise bad_request(f"create table {where}: schema needs a non-empty 'fields' list")
    try:
        parsed = [DataField.from_json(f) for f in fields]
    except (KeyError, TypeError, ValueError) as exc:
        raise bad_request(f"create table {where}: malformed field: {type(exc).__name__}: {exc}") from None
    options = string_map(schema.get("options"), "schema options")
    options.pop("path", None)  # where a table lives is the catalog's to decide
    comment = schema.get("comment")
    return TableSchema(id=0, fields=parsed, partition_keys=string_list(schema.get("partitionKeys"), "partitionKeys"),
                       primary_keys=string_list(schema.get("primaryKeys"), "primaryKeys"), options=options,
                       comment=comment if isinstance(comment, str) else None)


def table_snapshot(snapshot: Snapshot, sums: statistics.SnapshotSums) -> dict[str, Any]:
    """Paimon's TableSnapshot: the snapshot with the file counts of its partitions' sums."""
    return {"snapshot": json.loads(snapshot.to_json()), "recordCount": snapshot.total_record_count,
            "fileSizeInBytes": sums.total("fileSizeInBytes"), "fileCount": sums.total("fileCount"),
            "lastFileCreationTime": sums.newest_file_time() or snapshot.time_millis}


def commit_mode(table: Table) -> str:
    """How the table's snapshots are published: 'atomic' (link(2) or conditional PUT), 'lock' (the
    JDBC lock) or 'unsafe' (an object store with neither)."""
    catalog = table.catalog
    if isinstance(catalog, JdbcCatalog):
        return catalog.publish_mode(table)
    if not table.file_io.is_object_store:
        return "atomic"
    conditional = getattr(table.file_io, "conditional_put_supported", None)
    return "atomic" if callable(conditional) and conditional(f"{table.path}/snapshot/snapshot-1") else "unsafe"


def publish(table: Table, snapshot: Snapshot, base_uuid: str | None = None, mode: str = "atomic") -> bool:
    """Publish `snapshot` as the table's next one under the table's own protocol. False when
    surely not published: its id is not the next one or was taken meanwhile, the base the client
    built on (`base_uuid`) was replaced under the same id (a fast-forward or rollback), or nothing
    was written. Raises CommitStateUnknownError when a write failed and the read-back cannot tell."""
    manager = table.snapshot_manager
    latest = manager.latest()
    if snapshot.id != (latest.id + 1 if latest else 1):
        return False
    if base_uuid is not None and latest is not None and latest.uuid is not None and latest.uuid != base_uuid:
        return False  # the client's base is gone; its snapshot may drop what replaced it
    manager.expected_parent = latest  # the server's own fresh read, not the client's base
    publisher = table.snapshot_publisher() or (lambda m, s: m.publish(s))
    try:
        return publisher(manager, snapshot)
    except NothingPublishedError as exc:
        log.info("table %s: snapshot %d not published (%s)", table.identifier, snapshot.id, exc)
        return False
    except OSError as exc:
        return settle_ambiguous(table, snapshot, mode, exc)


def settle_ambiguous(table: Table, snapshot: Snapshot, mode: str, error: OSError) -> bool:
    """After a write whose outcome is unknown: True if snapshot-N is this commit; False only if
    N surely holds another commit for good (a create-if-absent store never overwrites it); else
    unknown (N absent may still receive a late PUT; under the lock a late PUT may overwrite N)."""
    manager = table.snapshot_manager
    try:
        landed: Snapshot | None = read_back(lambda: manager.snapshot(snapshot.id))
    except SnapshotNotFoundError:
        landed = None
    except OSError as exc:
        raise CommitStateUnknownError(f"snapshot {snapshot.id} of {table.identifier}: the write failed "
                                      f"({error}) and reading it back failed too ({exc})") from exc
    if landed is not None and landed.same_commit(snapshot):
        manager.commit_hints(snapshot.id)
        return True
    if landed is not None and mode == "atomic":
        return False
    raise CommitStateUnknownError(f"snapshot {snapshot.id} of {table.identifier}: the write failed ({error}) and "
                                  f"snapshot {snapshot.id} is {'absent' if landed is None else 'another commit'} "
                                  "for now; a delayed write of it may still land")


def mirror_after_commit(table: Table) -> None:
    """Strata's Iceberg mirror of the new snapshot (``metadata.iceberg.storage``), on the table as
    the catalog has it now. The sync reports its own failures; loading the table may raise
    (``PaimonRestCatalog`` counts that and still answers success)."""
    from strata.iceberg import sync_after_commit

    sync_after_commit(table.catalog.get_table(table.identifier) if table.catalog is not None else table)
