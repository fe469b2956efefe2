"""A Paimon REST catalog over a Strata warehouse: ``python -m strata_platform.paimon_rest``.

Java Paimon (``metastore=rest``: Flink and Spark jobs) and pypaimon share Strata's catalog through
it: the API of Paimon's OpenAPI spec (``rest-catalog-open-api.yaml``) as the 1.3 Java client
(``RESTApi``, ``ResourcePaths``) and pypaimon 2.1 call it. Databases are Strata databases, tables
Strata tables (schema, options and path). Clients read and write the table's files themselves and
send each new snapshot to the commit endpoint; the server publishes it under Strata's own commit
protocol for the table (the JDBC lock, or a conditional PUT: ``Table.snapshot_publisher``), and
then runs Strata's Iceberg mirror (``metadata.iceberg.storage``) so Trino sees the commit. A
snapshot whose id is taken answers ``success: false``: the client retries on the new latest one.
Commit answers say what happened, as the clients act on them: ``success: false`` only when the
snapshot is surely not published (its id taken, its parent moved, its ``baseSnapshotUuid`` no
longer the latest snapshot's, nothing written); a 500 ``outcome unknown`` when a write failed and
reading it back cannot tell (the clients keep their files and look for their snapshot on retry).
On an object store with neither a conditional PUT nor the JDBC lock commits are refused (501):
two of them could both win one snapshot id.

Endpoints (``{prefix}`` is the warehouse name the config answer gives; JSON bodies; errors as
``{"message", "resourceType", "resourceName", "code"}``: 400 malformed input or name, 401 no or
wrong token, 404 unknown warehouse, database, table, snapshot, branch or tag, 409 already exists
or a fast-forward that raced a commit to main, 501 not supported, 500 with the exception's class
only):

``GET  /v1/config[?warehouse=]``                             defaults (``prefix``), overrides
``GET|POST /v1/{prefix}/databases``                          list (``databaseNamePattern``), create
``GET|POST|DELETE /v1/{prefix}/databases/{db}``              get (location, options), alter, drop
``GET|POST /v1/{prefix}/databases/{db}/tables``              list (``tableNamePattern``), create
``GET  /v1/{prefix}/databases/{db}/table-details``           every table as by get
``GET|POST|DELETE /v1/{prefix}/databases/{db}/tables/{t}``   get (id, path, schema), alter, drop
``POST /v1/{prefix}/tables/rename``                          rename by metadata: no file moves (JDBC; else 501)
``POST /v1/{prefix}/databases/{db}/tables/{t}/commit``       publish the client's snapshot
``GET  /v1/{prefix}/databases/{db}/tables/{t}/snapshot``     latest snapshot, counts from commits' statistics
``GET  /v1/{prefix}/databases/{db}/tables/{t}/snapshots/{v}`` a snapshot by id or tag
``GET  /v1/{prefix}/databases/{db}/tables/{t}/partitions``   partitions, sums of commits' statistics
``GET  /v1/{prefix}/databases/{db}/tables/{t}/token``        object-store options (when vended)
``GET|POST /v1/{prefix}/databases/{db}/tables/{t}/branches`` list, create (``fromTag``)
``DELETE /v1/{prefix}/databases/{db}/tables/{t}/branches/{b}``, ``POST .../branches/{b}/forward``
``POST /v1/{prefix}/databases/{db}/tables/{t}/rollback``     to a snapshot or tag, under the table's
                                                             commit lock (``fromSnapshot``: 409 if not latest)
``GET|POST /v1/{prefix}/databases/{db}/tables/{t}/tags``     list (``tagNamePrefix``), create (spec 1.4)
``GET|DELETE /v1/{prefix}/databases/{db}/tables/{t}/tags/{tag}`` get, delete
``GET  /v1/{prefix}/databases/{db}/views|functions``         empty (Strata has neither)
``GET  /health``, ``GET /metrics``                           no token needed

A database may be created with a ``location`` option (JDBC catalog): it must lie inside the
warehouse and be, contain or lie inside no other database's directory (400 otherwise), since
dropping a database (always with its tables, as the clients ask) deletes its directory.

A table's ``{t}`` may name a branch (``t$branch_b1``): commits to it publish on the branch.
Every other route answers 501 in the error shape above: the clients' fallbacks (Java's partition
listing from files, mark-done ignored) trigger on 501 only.

Object-store credentials: clients bring their own ``s3.*`` options (the default). With
``STRATA_PAIMON_REST_VEND_S3=true`` the config answer turns on ``data-token.enabled`` and the
token endpoint hands out the S3 endpoint and credentials the server itself uses, so clients need
only the catalog's URI and bearer token; they are long-lived keys, not scoped per table, so this
is off by default.

Configuration (environment; flags win): ``STRATA_WAREHOUSE`` (``--warehouse``),
``STRATA_CATALOG_OPTIONS``, ``STRATA_JDBC_URI`` / ``_USER`` / ``_PASSWORD`` (the JDBC catalog) and
the AWS variables for S3, as every Strata service; ``STRATA_PAIMON_REST_HOST`` (default
127.0.0.1), ``STRATA_PAIMON_REST_PORT`` (default 19193; 0 picks one),
``STRATA_PAIMON_REST_WAREHOUSE_NAME`` (``--name``, default ``strata``), ``STRATA_PAIMON_REST_TOKEN``
(or ``STRATA_PAIMON_REST_TOKEN_FILE``): when set every endpoint but ``/health`` and ``/metrics``
needs ``Authorization: Bearer <token>``. SIGTERM and SIGINT stop it. It prints
``strata paimon rest catalog ready on http://HOST:PORT`` once it serves.
"""

from strata_platform.paimon_rest.catalog import PaimonRestCatalog, RestError
from strata_platform.paimon_rest.server import DEFAULT_PORT, RestServer, start

__all__ = ["DEFAULT_PORT", "PaimonRestCatalog", "RestError", "RestServer", "start"]
