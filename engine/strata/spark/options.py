"""Options of the ``strata`` Spark data source, and the reference to the table they name.

The table is named by ``path`` = ``"<warehouse>#<db>.<table>"`` (``load(...)`` / ``save(...)``
fill ``path``), by ``path`` = a table directory ``<warehouse>/<db>.db/<table>``, or by the options
``warehouse`` and ``table``; ``branch`` picks a branch of it (as ``<db>.<table>$branch_<name>``
does). Options starting with ``catalog.`` go to ``strata.load_catalog``
without the prefix (``catalog.metastore=jdbc``, ``catalog.uri=...``, ``catalog.s3.endpoint=...``).

Spark lower-cases option keys on the way to Python for some paths (the streaming sink sees
``checkpointlocation``), so every key is lower-cased here and looked up lower-case.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from strata.catalog import load_catalog
from strata.errors import OptionError
from strata.snapshot.branches import BRANCH_TABLE_SEPARATOR, is_main, validate_branch_name
from strata.store import Identifier

if TYPE_CHECKING:
    from strata.catalog.base import Catalog
    from strata.table.table import Table

CATALOG_PREFIX = "catalog."
DB_SUFFIX = ".db"
# Environment variables a catalog reads when it is made (S3 credentials and endpoint)
_CATALOG_ENVIRONMENT = ("AWS_", "STRATA_")
_CATALOGS_KEPT = 64  # the oldest is forgotten past this (a test process meets many warehouses)
_catalogs: dict[tuple[object, ...], Catalog] = {}
_catalogs_lock = threading.Lock()


@dataclass(frozen=True)
class TableRef:
    """A picklable pointer to a table; each process loads the table itself (schema, FileIO)."""

    warehouse: str
    identifier: str
    catalog_options: tuple[tuple[str, str], ...] = ()

    def load(self) -> Table:
        """The table as it is now (its latest schema and options; the catalog is this process's)."""
        return self.catalog().get_table(self.identifier)

    def catalog(self) -> Catalog:
        """The warehouse's catalog, made once per process and environment: a Spark query loads each
        table it reads in five places (the source, its schema, the reader, the planning, each task),
        and making a catalog on S3 (a new client) takes 0.1 to 0.3 s where loading a table from it
        takes 0.01 s."""
        environment = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(_CATALOG_ENVIRONMENT)))
        key = (os.getpid(), self.warehouse, self.catalog_options, environment)  # a forked worker makes its own
        with _catalogs_lock:
            catalog = _catalogs.get(key)
            if catalog is None:
                catalog = _catalogs[key] = load_catalog(self.warehouse, **dict(self.catalog_options))
                if len(_catalogs) > _CATALOGS_KEPT:
                    del _catalogs[next(iter(_catalogs))]
        return catalog

    def __str__(self) -> str:
        return f"{self.warehouse}#{self.identifier}"


def normalize(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def table_ref(options: Mapping[str, str]) -> TableRef:
    path = options.get("path")
    warehouse = options.get("warehouse")
    table = options.get("table")
    if path and "#" in path:
        warehouse, table = path.rsplit("#", 1)
    elif path and not table:
        warehouse, table = _split_table_dir(path)
    elif path and not warehouse:
        warehouse = path
    if not warehouse or not table:
        raise OptionError("the strata data source needs the table: load('<warehouse>#<db>.<table>'), "
                          "a table directory '<warehouse>/<db>.db/<table>', or options 'warehouse' and 'table'")
    if "." not in table:
        raise OptionError(f"table {table!r} must be given as '<database>.<table>'")
    table = str(Identifier.parse(on_branch(table, options.get("branch"))))  # the catalog's name check
    catalog = tuple(sorted((k[len(CATALOG_PREFIX):], v) for k, v in options.items()
                           if k.startswith(CATALOG_PREFIX)))
    return TableRef(warehouse, table, catalog)


def on_branch(table: str, branch: str | None) -> str:
    """``db.t`` on branch b1 (Paimon's ``branch`` option): ``db.t$branch_b1``; main is ``db.t``."""
    if branch is None or is_main(branch) or BRANCH_TABLE_SEPARATOR in table:
        return table
    validate_branch_name(branch)
    return f"{table}{BRANCH_TABLE_SEPARATOR}{branch}"


def _split_table_dir(path: str) -> tuple[str, str]:
    trimmed = path.rstrip("/")
    db_dir, name = posixpath.split(trimmed)
    warehouse, db = posixpath.split(db_dir)
    if not db.endswith(DB_SUFFIX) or not name or not warehouse:
        raise OptionError(f"path {path!r} is neither '<warehouse>#<db>.<table>' nor a table directory "
                          "'<warehouse>/<db>.db/<table>'")
    return warehouse, f"{db[: -len(DB_SUFFIX)]}.{name}"


def get_bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    value = options.get(key)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise OptionError(f"option {key!r} must be true or false, got {value!r}")
    return lowered == "true"


def get_int(options: Mapping[str, str], key: str) -> int | None:
    value = options.get(key)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise OptionError(f"option {key!r} must be an integer, got {value!r}") from None


def first_int(options: Mapping[str, str], keys: Sequence[str], minimum: int | None = None) -> int | None:
    """The integer of the first of `keys` (aliases, e.g. Strata's and Paimon's name) that is set."""
    for key in keys:
        value = get_int(options, key)
        if value is None:
            continue
        if minimum is not None and value < minimum:
            raise OptionError(f"option {key!r} must be at least {minimum}, got {value}")
        return value
    return None


def parse_partition_spec(text: str) -> dict[str, str]:
    """'k1=v1,k2=v2' -> {'k1': 'v1', 'k2': 'v2'} (values are converted to the column types later)."""
    spec: dict[str, str] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise OptionError(f"partition spec {text!r} must look like 'k1=v1,k2=v2'")
        spec[key.strip()] = value.strip()
    return spec


def commit_user_for_checkpoint(location: str) -> str:
    """A stable commit user for a streaming query: the same checkpoint location gives the same
    user after a restart, so a replayed micro-batch is recognised by (user, batchId)."""
    loc = location.rstrip("/")
    for prefix in ("file://", "file:"):
        if loc.startswith(prefix):
            loc = "/" + loc[len(prefix):].lstrip("/")
            break
    return "spark-" + hashlib.sha256(loc.encode()).hexdigest()[:20]
