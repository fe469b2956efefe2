"""The JDBC catalog: the table list in a database, table metadata in files, and a table lock.

As Paimon's ``JdbcCatalog``: a table is registered as a row of ``paimon_tables(catalog_key,
database_name, table_name)``, a database as rows of ``paimon_database_properties`` (the
``exists=true`` marker and its ``location``), and the schema, snapshots, manifests and data stay in
files under ``<location>/<table>`` (by default ``<warehouse>/<db>.db/<table>``), so any Paimon
reader can open the table by path. Several catalogs share one database through ``catalog-key``
(default ``jdbc``).

A table lives at ``<database location>/<table>`` unless Strata's own row in ``strata_tables``
names another directory: a renamed table keeps its directory (``rename_table`` changes rows only,
so a commit racing it loses nothing), and a table created where a renamed one lives gets a
directory of its own. Paimon's Java ``JdbcCatalog`` does not read that row: it opens a renamed
table through Strata's REST catalog, whose answer carries the table's path.

A database's ``location`` may be given at creation: it must lie inside the warehouse and be,
contain or lie inside no other database's directory (of any catalog key in this warehouse), since
dropping a database with cascade deletes its directory. A table name must leave its lock id
``<catalog-key>.<db>.<table>`` within ``lock-key-max-length`` (255).

Databases: SQLite (``uri=sqlite:///path`` or ``jdbc:sqlite:path``; the embedded default is
``<warehouse>/catalog.sqlite`` for a local warehouse) and PostgreSQL (``uri=postgresql://...`` or
``jdbc:postgresql://host:port/db``, with ``jdbc.user`` / ``jdbc.password`` as Paimon passes them).

Publishing ``snapshot-N`` (``snapshot_publisher``):

* local filesystem: the FileIO's atomic create-if-absent (link(2)); no lock;
* object store, ``commit.lock-free`` = ``true``, or ``auto`` (default) when the store honours
  ``If-None-Match: *``: the conditional PUT alone decides, no lock;
* object store otherwise (``lock.enabled``, default true there): under the JDBC lock on
  ``<catalog-key>.<db>.<table>``: check that ``snapshot-N`` is absent, write it (conditionally
  when the store can), update the ``LATEST`` hint, release. As Paimon's ``RenamingSnapshotCommit``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import pyarrow as pa
from sqlalchemy import Engine, create_engine, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError

from strata import metrics
from strata.catalog.base import Catalog, CatalogOperationNotSupportedError
from strata.catalog.filesystem import DB_SUFFIX
from strata.catalog.lock import JdbcCatalogLock, LockedPublisher, lock_key_max_length, table_lock_id
from strata.errors import (
    CorruptMetadataError,
    DatabaseNotEmptyError,
    DatabaseNotFoundError,
    InvalidNameError,
    OptionError,
    TableAlreadyExistsError,
    TableNotFoundError,
)
from strata.fs import FileIO, file_io_for
from strata.names import check_database_name, check_table_name, path_relation, path_under, require_under
from strata.schema.schema_manager import SchemaManager
from strata.snapshot.snapshot_manager import NothingPublishedError
from strata.store import Identifier
from strata.table.table import Table

if TYPE_CHECKING:
    from strata.schema.table_schema import TableSchema
    from strata.snapshot.snapshot import Snapshot
    from strata.snapshot.snapshot_manager import SnapshotManager

log = logging.getLogger(__name__)

TABLES = "paimon_tables"
DATABASE_PROPERTIES = "paimon_database_properties"
EXISTS_PROPERTY = "exists"
LOCATION_PROPERTY = "location"
DEFAULT_SQLITE_NAME = "catalog.sqlite"
TABLE_ROWS = "strata_tables"  # Strata's own per-table facts beside Paimon's rows: where a renamed table lives

_CREATE_TABLES = (f"CREATE TABLE {TABLES} ("
                  "catalog_key VARCHAR(255) NOT NULL, database_name VARCHAR(255) NOT NULL, "
                  "table_name VARCHAR(255) NOT NULL, "
                  "PRIMARY KEY (catalog_key, database_name, table_name))")
_CREATE_DATABASE_PROPERTIES = (f"CREATE TABLE {DATABASE_PROPERTIES} ("
                               "catalog_key VARCHAR(255) NOT NULL, database_name VARCHAR(255) NOT NULL, "
                               "property_key VARCHAR(255), property_value VARCHAR(1000), "
                               "PRIMARY KEY (catalog_key, database_name, property_key))")

_CREATE_TABLE_ROWS = (f"CREATE TABLE {TABLE_ROWS} ("
                      "catalog_key VARCHAR(255) NOT NULL, database_name VARCHAR(255) NOT NULL, "
                      "table_name VARCHAR(255) NOT NULL, location VARCHAR(1000), "
                      "PRIMARY KEY (catalog_key, database_name, table_name))")
_WHERE_TABLE = "catalog_key = :key AND database_name = :db AND table_name = :t"

PublishFn = Callable[["SnapshotManager", "Snapshot"], bool]


class LocationConflictError(OptionError):
    """A database location that is, contains or lies inside another database's directory (and so
    its tables'): dropping either database would delete the other's files."""


def sqlalchemy_url(uri: str, options: Mapping[str, str] | None = None) -> str:
    """A JDBC-style or SQLAlchemy URI -> a SQLAlchemy URL (psycopg 3 for PostgreSQL)."""
    opts = dict(options or {})
    if uri.startswith("jdbc:"):
        uri = uri[len("jdbc:"):]
    if uri.startswith("sqlite:"):
        rest = uri[len("sqlite:"):]
        if rest.startswith("//"):
            return uri  # sqlite:///relative or sqlite:////absolute, SQLAlchemy's form
        return f"sqlite:///{rest}"  # jdbc:sqlite:/abs/path or jdbc:sqlite:relative
    if uri.startswith(("postgresql:", "postgres:", "postgresql+")):
        parts = urlsplit(uri)
        query = dict(parse_qsl(parts.query))
        user = opts.get("jdbc.user") or query.pop("user", None)
        password = opts.get("jdbc.password") or query.pop("password", None)
        url = make_url(parts._replace(scheme="postgresql+psycopg", query=urlencode(query)).geturl())
        if user:
            url = url.set(username=user)
        if password:
            url = url.set(password=password)
        return url.render_as_string(hide_password=False)
    raise OptionError(f"JDBC catalog: unsupported uri {uri!r} (use sqlite:///path or postgresql://...)")


def _choice(options: Mapping[str, str], key: str, default: str, allowed: tuple[str, ...]) -> str:
    value = options.get(key, default).lower()
    if value not in allowed:
        raise OptionError(f"catalog option {key!r} must be one of {', '.join(allowed)}, got {value!r}")
    return value


class JdbcCatalog(Catalog):
    def __init__(self, warehouse: str, options: Mapping[str, str] | None = None,
                 file_io: FileIO | None = None):
        self.warehouse = warehouse.rstrip("/")
        self.options = dict(options or {})
        self.file_io = file_io or file_io_for(self.warehouse, self.options)
        self.catalog_key = self.options.get("catalog-key", "jdbc")
        self.uri = self._uri()
        self.engine = self._engine(self.uri)
        self.lock_enabled = _choice(self.options, "lock.enabled",
                                    str(self.file_io.is_object_store).lower(), ("true", "false")) == "true"
        self.lock_free = _choice(self.options, "commit.lock-free", "auto", ("true", "false", "auto"))
        self._warned: set[str] = set()
        self._init_tables()
        self.locks = JdbcCatalogLock(self.engine, self.catalog_key, self.options) if self.lock_enabled else None

    def __reduce__(self) -> tuple[Any, ...]:
        # a connection pool does not cross processes: reconnect from the options
        return (JdbcCatalog, (self.warehouse, self.options))

    def close(self) -> None:
        self.engine.dispose()

    # -- connection ---------------------------------------------------------------------------
    def _uri(self) -> str:
        uri = self.options.get("uri")
        if uri:
            return sqlalchemy_url(uri, self.options)
        if self.file_io.is_object_store:
            raise OptionError("JDBC catalog on an object store needs option 'uri' "
                              "(postgresql://... or sqlite:///path on a local disk)")
        local = self.warehouse[len("file://"):] if self.warehouse.startswith("file://") else self.warehouse
        os.makedirs(local, exist_ok=True)
        return f"sqlite:///{os.path.abspath(os.path.join(local, DEFAULT_SQLITE_NAME))}"

    @staticmethod
    def _engine(url: str) -> Engine:
        if url.startswith("sqlite"):
            # several processes share the file: wait for each other's write transactions
            return create_engine(url, connect_args={"timeout": 60})
        # a fixed session time zone keeps acquired_at (CURRENT_TIMESTAMP) comparable across clients
        return create_engine(url, pool_pre_ping=True, pool_size=2, max_overflow=4,
                             connect_args={"options": "-c TimeZone=UTC", "connect_timeout": 10})

    def _init_tables(self) -> None:
        for name, ddl in ((TABLES, _CREATE_TABLES), (DATABASE_PROPERTIES, _CREATE_DATABASE_PROPERTIES),
                          (TABLE_ROWS, _CREATE_TABLE_ROWS)):
            if inspect(self.engine).has_table(name):
                continue
            try:
                with self.engine.begin() as conn:
                    conn.execute(text(ddl))
            except DBAPIError:
                if not inspect(self.engine).has_table(name):  # else: created by a concurrent catalog
                    raise

    def _rows(self, sql: str, **params: str) -> list[tuple]:
        with self.engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(sql), {"key": self.catalog_key, **params})]

    def _execute(self, sql: str, **params: str) -> int:
        with self.engine.begin() as conn:
            return int(conn.execute(text(sql), {"key": self.catalog_key, **params}).rowcount or 0)

    # -- databases ---------------------------------------------------------------------------------
    def _database_exists(self, name: str) -> bool:
        check_database_name(name)  # every database method asks this first
        return bool(
            self._rows(f"SELECT 1 FROM {TABLES} WHERE catalog_key = :key AND database_name = :db", db=name)
            or self._rows(f"SELECT 1 FROM {DATABASE_PROPERTIES} WHERE catalog_key = :key AND database_name = :db",
                          db=name))

    def database_properties(self, name: str) -> dict[str, str]:
        check_database_name(name)
        rows = self._rows(f"SELECT property_key, property_value FROM {DATABASE_PROPERTIES} "
                          "WHERE catalog_key = :key AND database_name = :db", db=name)
        props = {str(k): str(v) for k, v in rows if k is not None}
        props.pop(EXISTS_PROPERTY, None)
        return props

    def database_path(self, name: str) -> str:
        """The database's ``location`` (default ``<warehouse>/<name>.db``), which must lie under the
        warehouse: dropping a database deletes it."""
        return self._location(name, self.database_properties(name).get(LOCATION_PROPERTY))

    def _location(self, name: str, stored: str | None) -> str:
        if stored:
            return require_under(self.warehouse, stored.rstrip("/"))
        return path_under(self.warehouse, f"{name}{DB_SUFFIX}")

    def _database_locations(self) -> dict[tuple[str, str], str]:
        """The directory of every database in this warehouse, by (catalog key, name): this
        catalog's, and other catalog keys' whose stored location lies in this warehouse."""
        stored = {(str(k), str(db)): str(v) for k, db, v in self._rows(
            f"SELECT catalog_key, database_name, property_value FROM {DATABASE_PROPERTIES} "
            "WHERE property_key = :pk AND property_value IS NOT NULL", pk=LOCATION_PROPERTY)}
        for name in self.list_databases():
            stored.setdefault((self.catalog_key, name), "")
        locations = {}
        for (key, name), location in stored.items():
            try:
                locations[(key, name)] = self._location(name, location)
            except InvalidNameError:
                continue  # elsewhere (another warehouse), or a name only another catalog allows
        return locations

    def _overlap(self, name: str, location: str) -> str | None:
        """Why `location` may not be database `name`'s directory: it is, contains or lies inside
        another database's; None when it overlaps none."""
        for (key, other), path in sorted(self._database_locations().items()):
            relation = path_relation(location, path)
            if relation is None or (key, other) == (self.catalog_key, name):
                continue
            owner = f"database {other!r}" + ("" if key == self.catalog_key else f" of catalog key {key!r}")
            return f"{location!r} {relation} the directory of {owner} ({path!r})"
        return None

    def _check_location(self, name: str, location: str) -> None:
        conflict = self._overlap(name, location)
        if conflict is not None:
            raise LocationConflictError(
                f"database {name!r}: location {conflict}; dropping one database would delete the other's "
                "tables. Give a location of its own inside the warehouse, or none")

    def table_path(self, ident: Identifier) -> str:
        """Where the table lives: the directory its row names (a renamed table keeps its own), else
        ``<database location>/<table>``."""
        stored = self._rows(f"SELECT location FROM {TABLE_ROWS} WHERE {_WHERE_TABLE} AND location IS NOT NULL",
                            db=ident.database, t=ident.table)
        if stored:
            return require_under(self.warehouse, str(stored[0][0]))
        return self._default_table_path(ident)

    def _default_table_path(self, ident: Identifier) -> str:
        return path_under(self.database_path(ident.database), ident.table)

    def _new_table_path(self, ident: Identifier) -> tuple[str, bool]:
        """The directory of a table about to be created, and whether it is not the default one (the
        default is taken by a table renamed away from this name, which kept its directory)."""
        path = self._default_table_path(ident)
        if self._rows(f"SELECT 1 FROM {TABLE_ROWS} WHERE location = :p", p=path):
            return f"{path}-{uuid.uuid4().hex[:8]}", True
        return path, False

    def create_database(self, name: str, ignore_if_exists: bool = False,
                        properties: Mapping[str, str] | None = None) -> None:
        if self._database_exists(name):
            if ignore_if_exists:
                return
            raise TableAlreadyExistsError(f"database {name!r} already exists")
        props = {EXISTS_PROPERTY: "true", **dict(properties or {})}
        props[LOCATION_PROPERTY] = self._location(name, props.get(LOCATION_PROPERTY))
        self._check_location(name, props[LOCATION_PROPERTY])
        try:
            with self.engine.begin() as conn:
                conn.execute(text(f"INSERT INTO {DATABASE_PROPERTIES} "
                                  "(catalog_key, database_name, property_key, property_value) "
                                  "VALUES (:key, :db, :pk, :pv)"),
                             [{"key": self.catalog_key, "db": name, "pk": k, "pv": v} for k, v in props.items()])
        except IntegrityError:
            if not ignore_if_exists:
                raise TableAlreadyExistsError(f"database {name!r} already exists") from None
            return
        try:  # a concurrent create of an overlapping database passed its check too: both back out
            self._check_location(name, props[LOCATION_PROPERTY])
        except LocationConflictError:
            self._unregister_database(name)
            raise
        self.file_io.mkdirs(props[LOCATION_PROPERTY])  # browsable by path, as a filesystem catalog's

    def drop_database(self, name: str, ignore_if_not_exists: bool = False, cascade: bool = False) -> None:
        if not self._database_exists(name):
            if ignore_if_not_exists:
                return
            raise DatabaseNotFoundError(f"database {name!r} does not exist")
        tables = self.list_tables(name)
        if tables and not cascade:
            raise DatabaseNotEmptyError(f"database {name!r} is not empty; use cascade=True")
        path = self.database_path(name)
        shared = self._overlap(name, path)
        if shared is not None:  # registered before locations were checked: its files are not its own
            log.warning("database %s: unregistered without deleting any file: its location %s", name, shared)
        for table in tables if shared is None else ():
            ident = Identifier(name, table)
            self._drop_table(ident, self.table_path(ident), ignore_if_not_exists=True)
        self._unregister_database(name)
        if cascade and shared is None:
            self.file_io.delete_dir(path)

    def _unregister_database(self, name: str) -> None:
        self._execute(f"DELETE FROM {TABLES} WHERE catalog_key = :key AND database_name = :db", db=name)
        self._execute(f"DELETE FROM {TABLE_ROWS} WHERE catalog_key = :key AND database_name = :db", db=name)
        self._execute(f"DELETE FROM {DATABASE_PROPERTIES} WHERE catalog_key = :key AND database_name = :db",
                      db=name)

    def list_databases(self) -> list[str]:
        names = {r[0] for r in self._rows(f"SELECT DISTINCT database_name FROM {TABLES} WHERE catalog_key = :key")}
        names |= {r[0] for r in self._rows(
            f"SELECT DISTINCT database_name FROM {DATABASE_PROPERTIES} WHERE catalog_key = :key")}
        return sorted(names)

    def list_tables(self, database: str) -> list[str]:
        if not self._database_exists(database):
            raise DatabaseNotFoundError(f"database {database!r} does not exist")
        return sorted(r[0] for r in self._rows(
            f"SELECT table_name FROM {TABLES} WHERE catalog_key = :key AND database_name = :db", db=database))

    # -- tables ------------------------------------------------------------------------------
    def _registered(self, ident: Identifier) -> bool:
        return bool(self._rows(f"SELECT 1 FROM {TABLES} WHERE catalog_key = :key AND database_name = :db "
                               "AND table_name = :t", db=ident.database, t=ident.table))

    def table_exists(self, name: str | Identifier) -> bool:
        return self._registered(Identifier.parse(name))

    def check_lock_id(self, ident: Identifier) -> None:
        """Refuse a table whose lock id would not fit the lock table: it could be created but never
        committed to under the lock (by Strata on an object store, or by Paimon with its lock on)."""
        lock_id = table_lock_id(self.catalog_key, ident.database, ident.table)
        limit = lock_key_max_length(self.options)
        if len(lock_id) > limit:
            raise InvalidNameError(
                f"table {ident}: its lock id '<catalog-key>.<database>.<table>' would be {len(lock_id)} "
                f"characters long, and the JDBC lock takes at most {limit} (option lock-key-max-length): "
                "shorten the database or table name")

    def create_table(self, name: str | Identifier, schema: pa.Schema | TableSchema,
                     partition_keys: list[str] | None = None, primary_keys: list[str] | None = None,
                     options: Mapping[str, str] | None = None, comment: str | None = None,
                     ignore_if_exists: bool = False) -> Table:
        ident = Identifier.parse(name)
        check_table_name(ident.table)  # not a system table or a branch (as Paimon)
        self.check_lock_id(ident)
        table_schema = self._new_table_schema(ident, schema, partition_keys, primary_keys, options, comment)
        if self._registered(ident):
            if ignore_if_exists:
                return self.get_table(ident)
            raise TableAlreadyExistsError(f"table {ident} already exists")
        path, relocated = self._new_table_path(ident)
        try:
            SchemaManager(self.file_io, path).create(table_schema, str(ident))
        except TableAlreadyExistsError:
            if ignore_if_exists and self._registered(ident):  # a concurrent create won
                return self.get_table(ident)
            raise TableAlreadyExistsError(
                f"table {ident}: {path} already holds a table schema (not registered in catalog "
                f"{self.catalog_key!r}, or created concurrently)") from None
        try:
            self._register_table(ident, path if relocated else None)
        except IntegrityError:
            self.file_io.delete_dir(path)
            if ignore_if_exists:
                return self.get_table(ident)
            raise TableAlreadyExistsError(f"table {ident} already exists") from None
        except Exception:
            self.file_io.delete_dir(path)  # not registered: leave no orphan schema behind
            raise
        return self._mirrored(self.get_table(ident))

    def _register_table(self, ident: Identifier, location: str | None) -> None:
        params = {"key": self.catalog_key, "db": ident.database, "t": ident.table, "loc": location}
        with self.engine.begin() as conn:
            conn.execute(text(f"INSERT INTO {TABLES} (catalog_key, database_name, table_name) "
                              "VALUES (:key, :db, :t)"), params)
            conn.execute(text(f"DELETE FROM {TABLE_ROWS} WHERE {_WHERE_TABLE}"), params)
            if location is not None:
                conn.execute(text(f"INSERT INTO {TABLE_ROWS} (catalog_key, database_name, table_name, location) "
                                  "VALUES (:key, :db, :t, :loc)"), params)

    def rename_table(self, source: str | Identifier, target: str | Identifier) -> Table:
        """Rename by the catalog's rows alone: the table keeps its directory (clients find it by the
        path in the table's metadata), so nothing is copied and a commit racing the rename lands in
        the same files. Under the lock mode the old name's lock is held meanwhile, and a commit
        locks whatever name the table has when it publishes (``snapshot_publisher``). Within one
        database only: dropping the old database would delete the files of a table moved out."""
        source, target = Identifier.parse(source), Identifier.parse(target)
        check_table_name(source.table)
        check_table_name(target.table)
        self.check_lock_id(target)
        table = self.get_table(source)
        if not self._database_exists(target.database):
            raise DatabaseNotFoundError(f"database {target.database!r} does not exist")
        if target.database != source.database:
            raise CatalogOperationNotSupportedError(
                f"rename {source} to {target}: a table keeps its directory when renamed, which lies in database "
                f"{source.database!r}; moving it to another database would need every file copied")
        params = {"key": self.catalog_key, "db": source.database, "t": source.table, "t2": target.table,
                  "loc": table.path}
        with self.schema_change_lock(table):
            try:
                with self.engine.begin() as conn:
                    moved = conn.execute(text(f"UPDATE {TABLES} SET table_name = :t2 WHERE {_WHERE_TABLE}"), params)
                    if not moved.rowcount:
                        raise TableNotFoundError(f"table {source} does not exist")
                    conn.execute(text(f"DELETE FROM {TABLE_ROWS} WHERE {_WHERE_TABLE}"), params)
                    conn.execute(text(f"INSERT INTO {TABLE_ROWS} (catalog_key, database_name, table_name, location) "
                                      "VALUES (:key, :db, :t2, :loc)"), params)
            except IntegrityError:
                raise TableAlreadyExistsError(f"table {target} already exists") from None
        metrics.forget_table(str(source))
        return self.get_table(target)

    def get_table(self, name: str | Identifier) -> Table:
        ident = Identifier.parse(name)
        system = self._system_table(ident)  # db.t$snapshots, db.t$files, ...
        if system is not None:
            return system
        if not self._registered(ident):
            raise TableNotFoundError(f"table {ident} does not exist")
        path = self.table_path(ident)
        schema = SchemaManager(self.file_io, path).latest()
        if schema is None:
            raise CorruptMetadataError(f"table {ident} is registered in catalog {self.catalog_key!r} but "
                                       f"{path} has no schema")
        return Table(self.file_io, path, ident, schema, catalog=self)

    def drop_table(self, name: str | Identifier, ignore_if_not_exists: bool = False) -> None:
        ident = Identifier.parse(name)
        check_table_name(ident.table)  # not a system table or a branch (as Paimon)
        path = None
        if self._database_exists(ident.database):
            database = self.database_path(ident.database)
            shared = self._overlap(ident.database, database)
            if shared is not None:  # see drop_database: the directory may be another database's table
                log.warning("table %s: unregistered without deleting any file: its database's location %s",
                            ident, shared)
            path = self.table_path(ident) if shared is None else None
        self._drop_table(ident, path, ignore_if_not_exists)

    def _drop_table(self, ident: Identifier, path: str | None, ignore_if_not_exists: bool) -> None:
        """Unregister the table and delete its mirror and `path` (its directory; None: no file)."""
        from strata.iceberg.sync import drop_mirror

        if path is not None:
            with contextlib.suppress(TableNotFoundError, CorruptMetadataError):
                drop_mirror(self.get_table(ident))
        params = {"key": self.catalog_key, "db": ident.database, "t": ident.table}
        with self.engine.begin() as conn:
            deleted = conn.execute(text(f"DELETE FROM {TABLES} WHERE {_WHERE_TABLE}"), params).rowcount
            conn.execute(text(f"DELETE FROM {TABLE_ROWS} WHERE {_WHERE_TABLE}"), params)
        if not deleted:
            if ignore_if_not_exists:
                return
            raise TableNotFoundError(f"table {ident} does not exist")
        metrics.forget_table(str(ident))
        if path is not None:
            self.file_io.delete_dir(path)

    def schema_change_lock(self, table: Table) -> contextlib.AbstractContextManager[object]:
        """Schema versions are published under the table lock when snapshots are (as Paimon's
        ``JdbcCatalog.alterTableImpl``, which runs ``commitChanges`` with the lock)."""
        if self.locks is not None and self.publish_mode(table) == "lock":
            return self.locks.lock(table.identifier.database, table.identifier.table)
        return contextlib.nullcontext()

    # -- publishing snapshots --------------------------------------------------------------------
    def publish_mode(self, table: Table) -> str:
        """'atomic' (the FileIO's create-if-absent is atomic by itself: local disk, or an object
        store with a conditional PUT chosen lock-free), 'lock' (JDBC lock around check-and-write),
        or 'unsafe' (object store without conditional PUT and with lock.enabled=false)."""
        if not self.file_io.is_object_store:
            return "atomic"
        conditional = getattr(self.file_io, "conditional_put_supported", None)
        supported = bool(conditional(f"{table.path}/snapshot/snapshot-1")) if callable(conditional) else False
        if self.lock_free == "true":
            if not supported:
                raise OptionError(f"commit.lock-free=true but the object store of {table.path} does not honour "
                                  "If-None-Match:* (set s3.conditional-put, or use the lock)")
            return "atomic"
        if self.lock_free == "auto" and supported:
            return "atomic"
        if self.locks is not None:
            return "lock"
        return "atomic" if supported else "unsafe"

    def snapshot_publisher(self, table: Table) -> PublishFn | None:
        mode = self.publish_mode(table)
        if mode == "atomic":
            return None  # SnapshotManager.publish -> FileIO.write_new (link(2) / conditional PUT)
        if mode == "unsafe":
            if str(table.identifier) in self._warned:
                return None
            self._warned.add(str(table.identifier))
            log.warning("table %s: publishing snapshots on an object store without a lock or conditional PUT "
                        "(lock.enabled=false): concurrent commits may lose a snapshot", table.identifier)
            return None
        locks = self.locks
        assert locks is not None

        def lock_id() -> str:
            return locks.lock_id(table.identifier.database, self._lock_name(table))

        return LockedPublisher(lambda: locks.lock(table.identifier.database, self._lock_name(table)),
                               margin_seconds=min(5.0, locks.expire_seconds / 4), current_lock_id=lock_id)

    def _lock_name(self, table: Table) -> str:
        """The name whose lock guards `table`'s commits now: its name when loaded, or the one it was
        renamed to since (found by its directory, which a rename keeps); a branch's suffix kept."""
        from strata.snapshot.branches import split_branch_table

        base = split_branch_table(table.identifier.table)[0]
        suffix = table.identifier.table[len(base):]
        ident = Identifier(table.identifier.database, base)
        if self._registered(ident) and self.table_path(ident) == table.path:
            return table.identifier.table
        renamed = self._rows(f"SELECT table_name FROM {TABLE_ROWS} WHERE catalog_key = :key AND database_name = :db "
                             "AND location = :p", db=ident.database, p=table.path)
        if not renamed:
            raise NothingPublishedError(f"table {ident} was dropped: nothing published to {table.path}")
        return f"{renamed[0][0]}{suffix}"
