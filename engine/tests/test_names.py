"""Names never reach outside the warehouse: every naming rule of ``strata.names``, the path guard
on local paths and S3 keys, and hostile names (generated) against both catalogs with a sentinel
directory beside the warehouse that must stay exactly as it was."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from strata.catalog import Catalog, FileSystemCatalog, Identifier
from strata.catalog.jdbc import JdbcCatalog
from strata.errors import (
    DatabaseNotEmptyError,
    DatabaseNotFoundError,
    InvalidNameError,
    TableAlreadyExistsError,
    TableNotFoundError,
)
from strata.names import (
    MAX_NAME_BYTES,
    check_branch_name,
    check_database_name,
    check_object_name,
    check_table_name,
    check_tag_name,
    path_under,
    require_under,
)

SCHEMA = pa.schema([("id", pa.int64())])
CHECKS: dict[str, Callable[[str], str]] = {
    "database": check_database_name, "table": check_table_name, "branch": check_branch_name, "tag": check_tag_name}

# (name, what the message says) refused for every kind of name
REFUSED_EVERYWHERE = [
    ("", "is blank"),
    ("   ", "is blank"),
    (".", "relative path component"),
    ("..", "relative path component"),
    ("a/b", "path separator '/'"),
    ("../../etc", "path separator '/'"),
    ("/abs", "path separator '/'"),
    ("a\\b", "path separator '\\\\'"),
    ("..\\..\\x", "path separator"),
    ("a\x00b", "control character (U+0000)"),
    ("a\nb", "control character (U+000A)"),
    ("a\x7fb", "control character (U+007F)"),
    ("%2e%2e", "percent-escape ('%2e')"),
    ("a%2Fb", "percent-escape ('%2F')"),
    ("..%2f..%2fx", "percent-escape"),
    ("a\uff0fb", "its NFKC form is 'a/b'"),  # fullwidth solidus
    ("a\ufe68b", "its NFKC form is 'a\\\\b'"),  # small reverse solidus
    ("\u2024\u2024", "relative path component (its NFKC form is '..')"),  # one dot leaders
    ("\uff0e\uff0e", "relative path component (its NFKC form is '..')"),  # fullwidth full stops
    ("a\u2215b", "DIVISION SLASH, which looks like a path separator"),
    ("a\u2044b", "FRACTION SLASH"),
    ("a\u29f8b", "BIG SOLIDUS"),
    ("a\u200bb", "invisible formatting character (U+200B ZERO WIDTH SPACE)"),
    ("a\u202eb", "RIGHT-TO-LEFT OVERRIDE"),
    ("\ufeffa", "ZERO WIDTH NO-BREAK SPACE"),
    ("a\u2028b", "line separator"),
    ("a\ud800b", "surrogate"),
    ("a\ue000b", "private-use character"),
    (" a", "begin or end with whitespace"),
    ("a\u00a0", "begin or end with whitespace"),
    ("x" * (MAX_NAME_BYTES + 1), f"at most {MAX_NAME_BYTES} are allowed"),
    ("\u00e9" * (MAX_NAME_BYTES // 2 + 1), "bytes long in UTF-8"),
]
ACCEPTED_EVERYWHERE = ["orders", "Orders_2024", "a-b", "a b", "\u00e9t\u00e9", "\u8ba2\u5355", "x" * MAX_NAME_BYTES,
                       "\uff41\uff42",  # fullwidth letters: NFKC 'ab', nothing broken
                       "100%", "a%zz"]


@pytest.mark.parametrize("kind", sorted(CHECKS))
@pytest.mark.parametrize(("name", "message"), REFUSED_EVERYWHERE)
def test_every_kind_refuses_what_would_break_a_path(kind: str, name: str, message: str) -> None:
    with pytest.raises(InvalidNameError, match=None) as caught:
        CHECKS[kind](name)
    text = str(caught.value)
    assert text.startswith(f"{kind} name "), text
    assert message in text, text
    assert repr(name)[:40] in text  # the message names the name


@pytest.mark.parametrize("kind", sorted(CHECKS))
@pytest.mark.parametrize("name", ACCEPTED_EVERYWHERE)
def test_ordinary_names_are_kept(kind: str, name: str) -> None:
    assert CHECKS[kind](name) == name


@pytest.mark.parametrize(("check", "name", "message"), [
    (check_database_name, "sys", "reserved for Paimon's system database"),
    (check_database_name, "a.b", "must not contain '.'"),
    (check_table_name, "a.b", "must not contain '.'"),
    (check_table_name, "t$snapshots", "must not contain '$'"),
    (check_branch_name, "main", "default branch"),
    (check_branch_name, "123", "pure numeric"),
    (check_branch_name, "b$1", "must not contain '$'"),
])
def test_paimon_rules(check: Callable[[str], str], name: str, message: str) -> None:
    with pytest.raises(InvalidNameError, match=message.replace("$", r"\$").replace(".", r"\.")):
        check(name)


def test_paimon_allows_what_it_allows() -> None:
    assert check_branch_name("release-1.0") == "release-1.0"
    assert check_tag_name("v1.0") == "v1.0" and check_tag_name("123") == "123" and check_tag_name("main") == "main"
    assert check_tag_name("a$b") == "a$b"
    assert check_database_name("SYS") == "SYS"  # Paimon's system database is exactly 'sys'
    with pytest.raises(InvalidNameError, match="must be a string"):
        check_database_name(None)


@pytest.mark.parametrize("name", ["t", "t$snapshots", "t$branch_b1", "t$branch_b1$files", "t$branch_v1.0",
                                  "t$branch_main"])
def test_object_names_of_system_tables_and_branches(name: str) -> None:
    assert check_object_name(name) == name


@pytest.mark.parametrize(("name", "message"), [
    ("t$", "ends with '$'"), ("t$branch_b1$", "ends with '$'"), ("t$branch_", "branch name '' is blank"),
    ("t$branch_a/b", "branch name 'a/b' must not contain a path separator"), ("..$files", "relative path"),
    ("t$a/b", "system table name 'a/b'"), ("a.b$files", "must not contain '.'"),
])
def test_malformed_object_names(name: str, message: str) -> None:
    with pytest.raises(InvalidNameError, match=message.replace("$", r"\$").replace(".", r"\.")):
        check_object_name(name)


def test_identifier_checks_both_names() -> None:
    assert Identifier.parse("db.t$branch_v1.0") == Identifier("db", "t$branch_v1.0")
    for bad, message in (("a.b.c", "table name 'b.c' must not contain '.'"), ("db", "must be 'database.table'"),
                         (".t", "database name '' is blank"), ("db.", "table name '' is blank"),
                         ("../x.t", "database name '' is blank"), ("sys.t", "system database")):
        with pytest.raises(InvalidNameError, match=message.replace(".", r"\.")):
            Identifier.parse(bad)
    with pytest.raises(InvalidNameError, match="path separator"):
        Identifier("../..", "t")
    with pytest.raises(ValueError, match="path separator"):  # InvalidNameError is a ValueError
        Identifier("db", "t/../../x")


# -- the path guard ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("root", "child", "expected"), [
    ("/w/a/wh", "db.db", "/w/a/wh/db.db"),
    ("/w/a/wh/", "db.db/t", "/w/a/wh/db.db/t"),
    ("/w/a/wh", "./db.db/./t", "/w/a/wh/db.db/t"),
    ("/w/a/wh", "db.db/x/../t", "/w/a/wh/db.db/t"),
    ("file:///w/a/wh", "db.db", "file:///w/a/wh/db.db"),
    ("wh", "db.db", "wh/db.db"),
    ("../wh", "db.db", "../wh/db.db"),
    ("s3://bucket/wh", "db.db/t", "s3://bucket/wh/db.db/t"),
    ("s3a://bucket/wh", "db.db", "s3a://bucket/wh/db.db"),
    ("s3://bucket", "db.db", "s3://bucket/db.db"),
    ("s3://bucket/wh//", "db.db//t", "s3://bucket/wh/db.db/t"),
])
def test_path_under_keeps_paths_in_the_warehouse(root: str, child: str, expected: str) -> None:
    assert path_under(root, child) == expected


@pytest.mark.parametrize(("root", "child", "message"), [
    ("/w/a/wh", "../../victim.db", "climbs out of the warehouse"),
    ("/w/a/wh", "../wh/db.db", "climbs out"),  # even a detour that comes back
    ("/w/a/wh", "db.db/../../x", "climbs out"),
    ("/w/a/wh", "..", "climbs out"),
    ("/w/a/wh", "/etc", "is absolute"),
    ("/w/a/wh", "", "not strictly under"),
    ("/w/a/wh", ".", "not strictly under"),
    ("/w/a/wh", "db.db/..", "not strictly under"),
    ("s3://bucket/wh", "../other/x", "climbs out"),
    ("s3://bucket", "../x", "climbs out"),  # a bucket root has no parent to climb to
    ("s3://bucket", "a/../../x", "climbs out"),
    ("wh", "../x", "climbs out"),
])
def test_path_under_refuses_what_leaves_it(root: str, child: str, message: str) -> None:
    with pytest.raises(InvalidNameError, match=message):
        path_under(root, child)


@pytest.mark.parametrize(("root", "path", "message"), [
    ("/w/a/wh", "/w/victim.db", "not strictly under"),
    ("/w/a/wh", "/w/a/whx/db.db", "not strictly under"),  # a sibling sharing the prefix
    ("/w/a/wh", "/w/a/wh", "not strictly under"),  # the root itself: dropping it empties the warehouse
    ("/w/a/wh", "/w/a/wh/../../victim.db", "not strictly under"),
    ("/w/a/wh", "s3://w/a/wh/db.db", "another file system or bucket"),
    ("s3://bucket/wh", "s3://other/wh/db.db", "another file system or bucket"),
    ("s3://bucket/wh", "s3://bucket/wh2/db.db", "not strictly under"),
    ("s3://bucket/wh", "s3://bucket/../bucket/wh/x", "climbs above the root"),
    ("s3://bucket/wh", "s3://bucket/wh/x\x00y", "NUL"),
])
def test_require_under_refuses_locations_elsewhere(root: str, path: str, message: str) -> None:
    with pytest.raises(InvalidNameError, match=message):
        require_under(root, path)


def test_require_under_accepts_its_own_spellings() -> None:
    assert require_under("/w/a/wh", "file:///w/a/wh/db.db") == "/w/a/wh/db.db"
    assert require_under("s3a://bucket/wh", "s3://bucket/wh/db.db/") == "s3a://bucket/wh/db.db"
    assert require_under("/w/a/wh", "/w/a/wh/./db.db") == "/w/a/wh/db.db"


# -- hostile names against both catalogs --------------------------------------------------------------------
FRAGMENTS = ["..", ".", "/", "\\", "\x00", "\x1f", "\n", "%2e", "%2E%2e", "%2f", "%5c", "%00", "\uff0f", "\uff3c",
             "\u2215", "\u2044", "\uff0e", "\u2024", "\u200b", "\u202e", "\ufeff", " ", "$", "sys", "victim", "etc",
             "a", "db", ".db", "wh", "x" * 120]
hostile_names = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(min_size=1, max_size=3)),
                         min_size=1, max_size=6).map("".join)
EXPECTED_REFUSALS = (InvalidNameError, DatabaseNotFoundError, TableNotFoundError, TableAlreadyExistsError,
                     DatabaseNotEmptyError)


def _tree(root: Path, skip: Path) -> dict[str, tuple[object, ...]]:
    """Everything under `root` but the warehouse `skip`: each entry's kind, size, mtime and content hash."""
    seen: dict[str, tuple[object, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if here / d != skip]
        for name in dirnames:
            st_ = (here / name).stat()
            seen[str((here / name).relative_to(root))] = ("dir", st_.st_mtime_ns)
        for name in filenames:
            path = here / name
            st_ = path.stat()
            seen[str(path.relative_to(root))] = ("file", st_.st_size, st_.st_mtime_ns,
                                                 hashlib.sha256(path.read_bytes()).hexdigest())
    return seen


class Sandbox:
    """``<tmp>/a/wh`` is the warehouse; ``<tmp>/victim.db``, ``<tmp>/a/victim.db`` and
    ``<tmp>/etc.db`` hold a file each, as a database and a table directory would."""

    def __init__(self, root: Path):
        self.root = root
        self.warehouse = root / "a" / "wh"
        (self.warehouse / "jdbc").mkdir(parents=True)
        for sentinel in (root / "victim.db", root / "a" / "victim.db", root / "etc.db" / "t"):
            sentinel.mkdir(parents=True)
            (sentinel / "keep.txt").write_text("must survive")
        (root / "victim.db" / "t" / "schema").mkdir(parents=True)  # looks like a table to a catalog
        (root / "victim.db" / "t" / "schema" / "schema-0").write_text("{}")
        self.catalogs: dict[str, Catalog] = {
            "filesystem": FileSystemCatalog(str(self.warehouse)),
            "jdbc": JdbcCatalog(str(self.warehouse / "jdbc"),
                                {"uri": f"sqlite:///{self.warehouse / 'jdbc' / 'catalog.sqlite'}"}),
        }
        for catalog in self.catalogs.values():
            catalog.create_database("db")
        self.outside = _tree(root, self.warehouse)

    def check_untouched(self, name: str) -> None:
        assert _tree(self.root, self.warehouse) == self.outside, f"{name!r} changed something outside the warehouse"


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with tempfile.TemporaryDirectory() as tmp:
        box = Sandbox(Path(tmp))
        yield box
        for catalog in box.catalogs.values():
            if isinstance(catalog, JdbcCatalog):
                catalog.close()


def _attempt(action: Callable[[], object]) -> str:
    try:
        action()
    except EXPECTED_REFUSALS as exc:
        return type(exc).__name__
    return "ok"


def _exercise(catalog: Catalog, name: str) -> dict[str, str]:
    """Every database and table operation with `name` in each position; what each answered."""
    answers = {
        "create_database": _attempt(lambda: catalog.create_database(name)),
        "list_tables": _attempt(lambda: catalog.list_tables(name)),
        "create_table db.<name>": _attempt(lambda: catalog.create_table(f"db.{name}", SCHEMA)),
        "create_table <name>.t": _attempt(lambda: catalog.create_table(f"{name}.t", SCHEMA)),
        "get_table <name>.t": _attempt(lambda: catalog.get_table(f"{name}.t")),
        "drop_table db.<name>": _attempt(lambda: catalog.drop_table(f"db.{name}")),
        "drop_table <name>.t": _attempt(lambda: catalog.drop_table(f"{name}.t")),
        "drop_database": _attempt(lambda: catalog.drop_database(name, ignore_if_not_exists=True, cascade=True)),
    }
    assert "db" in catalog.list_databases()
    return answers


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=hostile_names)
@example(name="../../victim")
@example(name="../victim")
@example(name="../../etc")
@example(name="..")
@example(name=".")
@example(name="/abs")
@example(name="%2e%2e%2f%2e%2e%2fvictim")
@example(name="\uff0e\uff0e\uff0f\uff0e\uff0e\uff0fvictim")
@example(name="..\u2215..\u2215victim")
@example(name="x" * 400)
@example(name="sys")
def test_hostile_names_stay_in_the_warehouse(sandbox: Sandbox, name: str) -> None:
    assume(name != "db")  # the database every example shares
    refused_by_rule = _attempt(lambda: check_database_name(name)) == "InvalidNameError"
    for kind, catalog in sandbox.catalogs.items():
        answers = _exercise(catalog, name)
        sandbox.check_untouched(name)
        if refused_by_rule:  # never looked up: the rule answers first, in every position
            assert answers["create_database"] == answers["list_tables"] == answers["drop_database"] \
                == answers["create_table <name>.t"] == "InvalidNameError", (kind, name, answers)
        else:  # a good name makes its database inside the warehouse, and drop removes just that
            assert answers["create_database"] == "ok" and answers["drop_database"] == "ok", (kind, name, answers)
            assert name not in catalog.list_databases()


def test_traversal_names_are_refused_before_any_file_is_touched(sandbox: Sandbox) -> None:
    for catalog in sandbox.catalogs.values():
        for name in ("../../victim", "../victim", "../../etc"):
            with pytest.raises(InvalidNameError, match=r"database name '\.\./.*' must not contain a path separator"):
                catalog.drop_database(name, cascade=True)
            with pytest.raises(InvalidNameError):
                catalog.list_tables(name)
            with pytest.raises(InvalidNameError):
                catalog.drop_table(f"{name}.t")
    sandbox.check_untouched("traversal")
    assert (sandbox.root / "victim.db" / "keep.txt").read_text() == "must survive"


def test_jdbc_database_location_must_be_in_the_warehouse(sandbox: Sandbox) -> None:
    catalog = sandbox.catalogs["jdbc"]
    assert isinstance(catalog, JdbcCatalog)
    for location in (str(sandbox.root / "victim.db"), f"{catalog.warehouse}/../../victim.db", catalog.warehouse):
        with pytest.raises(InvalidNameError, match="not strictly under the warehouse"):
            catalog.create_database("elsewhere", properties={"location": location})
        assert "elsewhere" not in catalog.list_databases()
    catalog.create_database("inside", properties={"location": f"{catalog.warehouse}/custom/inside.db"})
    assert catalog.database_path("inside") == f"{catalog.warehouse}/custom/inside.db"
    catalog.drop_database("inside", cascade=True)
    sandbox.check_untouched("location")


def test_jdbc_drop_refuses_a_registered_location_outside_the_warehouse(sandbox: Sandbox) -> None:
    """A row written by another writer (or an older Strata) that points outside: the drop refuses
    instead of deleting that directory."""
    catalog = sandbox.catalogs["jdbc"]
    assert isinstance(catalog, JdbcCatalog)
    name = f"planted_{uuid.uuid4().hex[:8]}"
    with sqlite3.connect(catalog.warehouse + "/catalog.sqlite") as conn:
        conn.executemany("INSERT INTO paimon_database_properties VALUES ('jdbc', ?, ?, ?)",
                         [(name, "exists", "true"), (name, "location", str(sandbox.root / "victim.db"))])
    with pytest.raises(InvalidNameError, match="not strictly under the warehouse"):
        catalog.drop_database(name, cascade=True)
    with pytest.raises(InvalidNameError, match="not strictly under the warehouse"):
        catalog.create_table(f"{name}.t", SCHEMA)
    sandbox.check_untouched("planted location")


@pytest.mark.minio
def test_s3_keys_stay_under_the_warehouse_prefix(minio_options: dict[str, str]) -> None:
    """One round trip on MinIO: a sentinel object beside the warehouse prefix survives create,
    list and drop of traversal names, and a good name still works."""
    from strata.fs import file_io_for
    from strata_platform.services.minio import BUCKET

    base = f"s3://{BUCKET}/engine-tests/{uuid.uuid4().hex[:16]}"
    io = file_io_for(base, minio_options)
    sentinel = f"{base}/victim.db/t/schema/schema-0"
    io.write_bytes(sentinel, b"{}")
    try:
        catalog = FileSystemCatalog(f"{base}/a/wh", minio_options)
        catalog.create_database("db")
        for name in ("../../victim", "..", "%2e%2e%2fvictim", "\uff0e\uff0e\uff0fvictim"):
            answers = _exercise(catalog, name)
            assert set(answers.values()) == {"InvalidNameError"}, (name, answers)
        catalog.create_database("ok")
        assert catalog.list_databases() == ["db", "ok"]
        catalog.drop_database("ok", cascade=True)
        assert io.read_bytes(sentinel) == b"{}"
    finally:
        io.delete_dir(base)
