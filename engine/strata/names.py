"""Names of databases, tables, branches and tags: the one check every entry point applies, and the
guard that keeps a path made from a name under the warehouse.

Paimon's rules are the base: ``sys`` is the system database; ``$`` separates a table from its
system table or branch (``t$snapshots``, ``t$branch_b1``); a branch is not ``main``, blank or all
digits (``BranchManager.validateBranch``); a tag is not blank (``TagManager.createTag``). A name
also becomes a directory (``<warehouse>/<db>.db/<table>``, ``branch/branch-<b>``, ``tag/tag-<t>``),
an S3 key, a URI path segment and a JDBC column value, so every kind of name is also refused when
it is empty, ``.`` or ``..``, holds ``/``, ``\\``, NUL or another control character, has leading
or trailing whitespace, or is longer than ``MAX_NAME_BYTES`` in UTF-8.

Look-alikes, decided as follows:

* URL-encoding: a percent-escape (``%2e%2e``, ``%2F``) is refused. The name itself is harmless on
  a filesystem, but it travels through URIs (Iceberg metadata locations, Hadoop paths, REST
  paths) where a layer that decodes it once more would see ``..`` or a separator.
* Unicode: the name and its NFKC form must both pass, so a fullwidth solidus (U+FF0F), a small
  reverse solidus (U+FE68) or a one-dot leader pair that folds to ``..`` is refused, while
  fullwidth letters and digits that fold to ordinary ones are kept. Slash-shaped characters that
  NFKC leaves alone (division slash U+2215, fraction slash U+2044, ...) are refused by name, as are
  invisible and format characters (zero-width space, bidi overrides: two names that look the same)
  and surrogates, private-use and unassigned code points.
* A database or table name holds no ``.``: ``'database.table'`` could not name it (nor Paimon's
  ``Identifier.fromString``). Branch and tag names may (``release-1.0``).

Symbolic links inside the warehouse are not followed by the path guard: it works on the strings.
"""

from __future__ import annotations

import posixpath
import re
import unicodedata
from typing import NoReturn

from strata.errors import InvalidNameError

SYSTEM_DATABASE = "sys"  # Paimon's Catalog.SYSTEM_DATABASE_NAME
SYSTEM_TABLE_SEPARATOR = "$"  # t$snapshots, t$branch_b1$files
BRANCH_TABLE_PREFIX = "branch_"  # the object name of branch b1 of t: t$branch_b1
MAIN_BRANCH = "main"
# A directory entry holds at most 255 bytes; a name gets ".db", "branch-" or "tag-" added, and the
# JDBC catalog stores it in a VARCHAR(255).
MAX_NAME_BYTES = 240

_PERCENT_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
_SEPARATOR_LOOKALIKES = frozenset("\u2044\u2215\u2216\u29f5\u29f8\u29f9\u2afd\u2afb")
_REFUSED_CATEGORIES = {
    "Cc": "a control character",
    "Cf": "an invisible formatting character",
    "Cs": "a surrogate",
    "Co": "a private-use character",
    "Cn": "an unassigned code point",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
}


def _refuse(kind: str, name: object, rule: str) -> NoReturn:
    raise InvalidNameError(f"{kind} name {name!r} {rule}")


def _char(ch: str) -> str:
    return f"U+{ord(ch):04X} {unicodedata.name(ch, '')}".rstrip()


def _check_form(kind: str, name: str, form: str, how: str) -> None:
    """The character rules on `form` (the name itself, or its NFKC form: `how` says which)."""
    if form in (".", ".."):
        _refuse(kind, name, f"is a relative path component{how}")
    for ch in form:
        if ch in "/\\":
            _refuse(kind, name, f"must not contain a path separator {ch!r}{how}")
        if ch in _SEPARATOR_LOOKALIKES:
            _refuse(kind, name, f"must not contain {_char(ch)}, which looks like a path separator{how}")
        category = unicodedata.category(ch)
        if category in _REFUSED_CATEGORIES:
            _refuse(kind, name, f"must not contain {_REFUSED_CATEGORIES[category]} ({_char(ch)}){how}")
    escape = _PERCENT_ESCAPE.search(form)
    if escape:
        _refuse(kind, name, f"must not contain a percent-escape ({escape.group()!r}): a layer that decodes "
                            f"it would see another name{how}")


def _check_common(kind: str, name: object) -> str:
    if not isinstance(name, str):
        raise InvalidNameError(f"{kind} name must be a string, got {type(name).__name__} {name!r}")
    if not name or name.isspace():
        _refuse(kind, name, "is blank")
    _check_form(kind, name, name, "")
    if name != name.strip():
        _refuse(kind, name, "must not begin or end with whitespace")
    size = len(name.encode("utf-8"))
    if size > MAX_NAME_BYTES:
        _refuse(kind, name[:40] + "...", f"is {size} bytes long in UTF-8; at most {MAX_NAME_BYTES} are allowed")
    folded = unicodedata.normalize("NFKC", name)
    if folded != name:
        _check_form(kind, name, folded, f" (its NFKC form is {folded!r})")
    return name


def _check_no_dot(kind: str, name: str) -> None:
    if "." in name:
        _refuse(kind, name, "must not contain '.' ('database.table' could not name it)")


def check_database_name(name: str) -> str:
    """`name` if it may name a database, else InvalidNameError naming the rule it breaks."""
    _check_common("database", name)
    _check_no_dot("database", name)
    if name == SYSTEM_DATABASE:
        _refuse("database", name, "is reserved for Paimon's system database")
    return name


def check_table_name(name: str) -> str:
    """`name` if it may name a table (the object name alone, not ``db.table``)."""
    _check_common("table", name)
    _check_no_dot("table", name)
    if SYSTEM_TABLE_SEPARATOR in name:
        _refuse("table", name, f"must not contain {SYSTEM_TABLE_SEPARATOR!r} (it names system tables and "
                               "branches: t$snapshots, t$branch_b1)")
    return name


def _check_branch_characters(name: str) -> str:
    _check_common("branch", name)
    if SYSTEM_TABLE_SEPARATOR in name:
        _refuse("branch", name, f"must not contain {SYSTEM_TABLE_SEPARATOR!r} (t$branch_b1$files could not "
                                "name its system tables)")
    return name


def check_branch_name(name: str) -> str:
    """`name` if a branch may be created with it (Paimon's ``BranchManager.validateBranch`` too)."""
    if isinstance(name, str) and name == MAIN_BRANCH:
        _refuse("branch", name, "is the default branch and cannot be used")
    _check_branch_characters(name)
    if name.isdigit():
        _refuse("branch", name, "must not be a pure numeric string (it would read as a snapshot id)")
    return name


def check_tag_name(name: str) -> str:
    """`name` if it may name a tag."""
    return _check_common("tag", name)


def check_object_name(name: str) -> str:
    """`name` if it names a table, a branch of it or a system table of either: ``t``,
    ``t$snapshots``, ``t$branch_b1``, ``t$branch_b1$files`` (main may be named as a branch here)."""
    if not isinstance(name, str):
        raise InvalidNameError(f"table name must be a string, got {type(name).__name__} {name!r}")
    base, _, rest = name.partition(SYSTEM_TABLE_SEPARATOR)
    check_table_name(base)
    if not rest:
        if name != base:
            _refuse("table", name, f"ends with {SYSTEM_TABLE_SEPARATOR!r} and no system table or branch after it")
        return name
    system = rest
    if rest.startswith(BRANCH_TABLE_PREFIX):
        branch, _, system = rest[len(BRANCH_TABLE_PREFIX):].partition(SYSTEM_TABLE_SEPARATOR)
        _check_branch_characters(branch)
        if not system and rest.endswith(SYSTEM_TABLE_SEPARATOR):
            _refuse("table", name, f"ends with {SYSTEM_TABLE_SEPARATOR!r} and no system table after it")
        if not system:
            return name
    _check_common("system table", system)
    if SYSTEM_TABLE_SEPARATOR in system:
        _refuse("system table", system, f"must not contain {SYSTEM_TABLE_SEPARATOR!r}")
    return name


# -- the path guard ---------------------------------------------------------------------------------
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
_SAME_SCHEME = {"s3a": "s3", "s3n": "s3", "file": ""}


def _split_location(location: str) -> tuple[str, str]:
    """``s3://bucket/key`` -> ('s3://bucket', '/key'); ``file:///p`` and ``/p`` -> ('', '/p')."""
    match = _SCHEME.match(location)
    if match is None:
        return "", location
    scheme = _SAME_SCHEME.get(match.group(1).lower(), match.group(1).lower())
    rest = location[match.end():]
    if rest.startswith("//"):
        authority, slash, path = rest[2:].partition("/")
        return (f"{scheme}://{authority}" if scheme else authority), slash + path
    return scheme, rest


def _climbs_above_start(path: str) -> bool:
    """True if some ``..`` of `path` goes above where the path starts (``a/../..``, ``/..``)."""
    depth = 0
    for part in path.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return True
        elif part not in ("", "."):
            depth += 1
    return False


def _normpath(path: str, rooted: bool, original: str) -> str:
    """`path` with ``.``, ``..`` and repeated separators collapsed (a bucket's keys are rooted);
    ``/..`` is refused, where POSIX would quietly read it as ``/``."""
    if rooted and not path.startswith("/"):
        path = "/" + path
    if path.startswith("/") and _climbs_above_start(path):
        raise InvalidNameError(f"path {original!r} climbs above the root of its file system or bucket")
    normalized = posixpath.normpath(path) if path else "."
    return "/" + normalized.lstrip("/") if normalized.startswith("//") else normalized


def require_under(root: str, path: str) -> str:
    """`path` with ``.`` and ``..`` collapsed, if it lies strictly below the warehouse `root`
    (local paths, ``file:`` and object-store URIs alike); else InvalidNameError. The answer is
    spelled from `root`, so it compares equal to the paths the catalog lists."""
    if "\x00" in path:
        raise InvalidNameError(f"path {path!r} contains NUL")
    root_prefix, root_path = _split_location(root)
    prefix, raw = _split_location(path)
    if prefix != root_prefix:
        raise InvalidNameError(f"path {path!r} is not under the warehouse {root!r} (another file system or bucket)")
    base = _normpath(root_path, bool(root_prefix), root)
    normalized = _normpath(raw, bool(prefix), path)
    if base == ".":
        relative = "" if normalized == ".." or normalized.startswith(("/", "../")) else normalized
    else:
        stem = base if base.endswith("/") else base + "/"
        relative = normalized[len(stem):] if normalized.startswith(stem) else ""
    if relative in ("", "."):
        raise InvalidNameError(f"path {path!r} is not strictly under the warehouse {root!r} "
                               f"(normalized: {normalized!r})")
    return f"{root.rstrip('/')}/{relative}"


def path_under(root: str, child: str) -> str:
    """``<root>/<child>`` with ``.`` and ``..`` collapsed, if `child` never climbs above `root`
    and the result lies strictly below it; else InvalidNameError. Every database and table
    directory is made through it."""
    if child.startswith("/"):
        raise InvalidNameError(f"path {child!r} is absolute; it must be relative to the warehouse {root!r}")
    if _climbs_above_start(child):
        raise InvalidNameError(f"path {child!r} climbs out of the warehouse {root!r}")
    return require_under(root, f"{root.rstrip('/')}/{child}")


def path_relation(path: str, other: str) -> str | None:
    """How directory `path` meets directory `other`: "is", "contains", "lies inside", or None when
    they are disjoint. Both must be spelled from one warehouse root (`require_under`,
    `path_under`), so comparing the strings compares the directories."""
    path, other = path.rstrip("/"), other.rstrip("/")
    if path == other:
        return "is"
    if other.startswith(path + "/"):
        return "contains"
    if path.startswith(other + "/"):
        return "lies inside"
    return None
