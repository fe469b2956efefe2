"""Branches: independent lines of snapshots of one table (Paimon's ``FileSystemBranchManager``).

A branch ``b1`` lives in ``<table>/branch/branch-b1/`` with its own ``snapshot/``, ``schema/``,
``tag/`` and ``consumer/`` directories; data files, manifests and index files stay in the table's
directories and are shared with ``main`` (a branch starts from a copy of one of main's snapshots,
or empty with main's schemas). ``main`` is the table directory itself.

Paimon's rules: ``main`` is reserved, a name must not be blank or all digits; a branch exists
when its directory does. Fast-forward deletes main's snapshots from the branch's earliest
snapshot on, its schemas from that snapshot's schema on and its tags of those snapshots, then
copies the branch's snapshots, schemas and tags into main; where main's committers take no lock,
only the part of that which cannot race them (``BranchManager.fast_forward``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from strata.errors import CommitConflictError, SnapshotNotFoundError, StrataError
from strata.fs import FileIO
from strata.names import BRANCH_TABLE_PREFIX, SYSTEM_TABLE_SEPARATOR, check_branch_name, check_tag_name
from strata.schema.schema_manager import SchemaManager
from strata.snapshot.snapshot import Snapshot
from strata.snapshot.snapshot_manager import SnapshotManager
from strata.snapshot.tags import trim_to_snapshot

MAIN_BRANCH = "main"
BRANCH_DIR = "branch"
BRANCH_PREFIX = "branch-"
BRANCH_TABLE_SEPARATOR = SYSTEM_TABLE_SEPARATOR + BRANCH_TABLE_PREFIX  # db.t$branch_b1: the table on branch b1
_TAG_DIR, _TAG_PREFIX = "tag", "tag-"
_SNAPSHOT_FILE = re.compile(r"^snapshot-(\d+)$")
_SCHEMA_FILE = re.compile(r"^schema-(\d+)$")


class BranchNotFoundError(StrataError, KeyError):
    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def is_main(branch: str | None) -> bool:
    return branch is None or branch == MAIN_BRANCH or not branch.strip()


def normalize_branch(branch: str | None) -> str:
    """Blank or None is main (Paimon's ``BranchManager.normalizeBranch``)."""
    return MAIN_BRANCH if branch is None or not branch.strip() else branch


def branch_path(table_path: str, branch: str | None) -> str:
    """Where a branch's snapshot/, schema/, tag/ and consumer/ live; main's is the table's."""
    root = table_path.rstrip("/")
    return root if is_main(branch) else f"{root}/{BRANCH_DIR}/{BRANCH_PREFIX}{branch}"


def validate_branch_name(name: str) -> str:
    """Paimon's ``BranchManager.validateBranch`` plus what would break a path (``strata.names``)."""
    return check_branch_name(name)


def split_branch_table(table_name: str) -> tuple[str, str | None, str | None]:
    """``t$branch_b1$files`` -> ('t', 'b1', 'files'); ``t$snapshots`` -> ('t', None, 'snapshots')."""
    base, _, rest = table_name.partition("$")
    if not rest:
        return base, None, None
    if rest.startswith(BRANCH_TABLE_SEPARATOR[1:]):
        branch, _, system = rest[len(BRANCH_TABLE_SEPARATOR) - 1:].partition("$")
        return base, branch, system or None
    return base, None, rest


@dataclass(frozen=True)
class BranchInfo:
    name: str
    create_time: dt.datetime  # when its first schema file was written (Paimon: the directory's mtime)


def _names(file_io: FileIO, directory: str, pattern: re.Pattern[str]) -> dict[int, str]:
    out = {}
    for status in file_io.list_status(directory):
        m = pattern.match(status.path.rsplit("/", 1)[-1])
        if m and not status.is_dir:
            out[int(m.group(1))] = status.path
    return out


def _copy(file_io: FileIO, source: str, target: str) -> None:
    file_io.write_bytes(target, file_io.read_bytes(source))


class BranchManager:
    """The branches of the table at `table_path`; `current` is the branch the caller works on."""

    def __init__(self, file_io: FileIO, table_path: str, current: str = MAIN_BRANCH):
        self.file_io = file_io
        self.table_path = table_path.rstrip("/")
        self.current = normalize_branch(current)
        self.dir = f"{self.table_path}/{BRANCH_DIR}"

    def path(self, name: str) -> str:
        return branch_path(self.table_path, name)

    def names(self) -> list[str]:
        """Branch names (not main), sorted."""
        return sorted(s.path.rstrip("/").rsplit("/", 1)[-1][len(BRANCH_PREFIX):]
                      for s in self.file_io.list_status(self.dir)
                      if s.is_dir and s.path.rstrip("/").rsplit("/", 1)[-1].startswith(BRANCH_PREFIX))

    def exists(self, name: str) -> bool:
        return is_main(name) or name in self.names()

    def infos(self) -> list[BranchInfo]:
        """Every branch with its creation time, oldest first (the ``$branches`` system table)."""
        out = []
        for name in self.names():
            stamps = [s.mtime_millis for s in self.file_io.list_status(f"{self.path(name)}/schema")
                      if not s.is_dir]
            out.append(BranchInfo(name, dt.datetime.fromtimestamp(min(stamps, default=0) / 1000)))
        return sorted(out, key=lambda b: (b.create_time, b.name))

    def require(self, name: str) -> None:
        if not self.exists(name):
            raise BranchNotFoundError(f"Branch name '{name}' doesn't exist in table {self.table_path}.")

    def _source(self) -> str:
        return branch_path(self.table_path, self.current)

    # -- create / delete ---------------------------------------------------------------------------
    def create(self, name: str, from_tag: str | None = None, from_snapshot: int | None = None) -> None:
        """An empty branch with the current branch's schemas, or one starting at a tag (the tag,
        its snapshot and the schemas up to its schema come along) or at a snapshot."""
        validate_branch_name(name)
        if from_tag is not None:
            check_tag_name(from_tag)  # it becomes a path: tag/tag-<name>
        if from_tag is not None and from_snapshot is not None:
            raise ValueError("create a branch from a tag or from a snapshot, not both")
        if self.exists(name):
            raise ValueError(f"Branch name '{name}' already exists.")
        source, target = self._source(), self.path(name)
        schemas = SchemaManager(self.file_io, source)
        if from_tag is not None:
            tag_path = f"{source}/{_TAG_DIR}/{_TAG_PREFIX}{from_tag}"
            try:
                data = self.file_io.read_bytes(tag_path)
            except FileNotFoundError:
                raise SnapshotNotFoundError(f"Tag name '{from_tag}' not exists ({tag_path}).") from None
            snapshot = Snapshot.from_json(data, where=tag_path)
            self._copy_schemas(schemas, target, snapshot.schema_id)
            self.file_io.write_bytes(f"{target}/{_TAG_DIR}/{_TAG_PREFIX}{from_tag}", data)
            self._write_snapshot(target, without_changelog(_trimmed(snapshot)))
        elif from_snapshot is not None:
            snapshot = SnapshotManager(self.file_io, source).snapshot(from_snapshot)
            self._copy_schemas(schemas, target, snapshot.schema_id)
            self._write_snapshot(target, without_changelog(snapshot))
        else:
            latest = schemas.latest()
            if latest is None:
                raise StrataError(f"table {self.table_path} has no schema to branch from")
            self._copy_schemas(schemas, target, latest.id)

    def _copy_schemas(self, schemas: SchemaManager, target: str, up_to: int) -> None:
        for schema_id in schemas.list_ids():
            if schema_id <= up_to:
                _copy(self.file_io, schemas.path(schema_id), f"{target}/schema/schema-{schema_id}")

    def _write_snapshot(self, target: str, snapshot: Snapshot) -> None:
        manager = SnapshotManager(self.file_io, target)
        self.file_io.write_bytes(manager.path(snapshot.id), snapshot.to_json().encode())
        for hint in ("EARLIEST", "LATEST"):
            self.file_io.write_bytes(f"{manager.dir}/{hint}", str(snapshot.id).encode())

    def delete(self, name: str) -> None:
        """Delete the branch's metadata; data files only it wrote become orphans (Paimon's note:
        ``remove_orphan_files`` clears them)."""
        if is_main(name):
            raise ValueError(f"Branch name '{MAIN_BRANCH}' is the default branch and cannot be deleted.")
        self.require(name)
        self.file_io.delete_dir(self.path(name))

    # -- fast-forward ------------------------------------------------------------------------------
    def fast_forward(self, name: str,
                     lock: Callable[[], contextlib.AbstractContextManager[object]] | None = None) -> int:
        """Make the current branch (main) what branch `name` is; returns its new latest snapshot id.

        `lock` is what excludes every publish of main's snapshots: the catalog's table lock, or on
        local disk the lock every publish holds. Under it this is Paimon's fast-forward: the
        branch's snapshots, schemas and tags replace main's from the branch's first snapshot on,
        main's later snapshots go, and a committer that built on a replaced snapshot retries.
        Without one (``None`` or a ``nullcontext``: an object store's conditional PUT, where
        committers take no lock) replacing snapshots would race them, so it is refused with
        CommitConflictError, main unchanged."""
        if is_main(name):
            raise ValueError(f"Branch name '{MAIN_BRANCH}' do not use in fast-forward.")
        if name == self.current:
            raise ValueError(f"Fast-forward from the current branch '{name}' is not allowed.")
        self.require(name)
        source = self.path(name)
        branch_snapshots = SnapshotManager(self.file_io, source)
        earliest = branch_snapshots.earliest_id()
        latest = branch_snapshots.latest_id()
        if earliest is None or latest is None:
            raise StrataError(f"Cannot fast forward branch {name}, because it does not have snapshot.")
        main = SnapshotManager(self.file_io, self._source())
        expected_latest = main.latest_id()
        held = lock() if lock is not None else contextlib.nullcontext()
        if isinstance(held, contextlib.nullcontext):
            raise CommitConflictError(
                f"fast-forward of branch '{name}' in {self.table_path} needs the table's commit lock: main's "
                "committers publish here without one (an object store's conditional PUT), and replacing main's "
                "snapshots could race them; main is unchanged: retry through a catalog whose commits take the "
                "table lock (metastore=jdbc)")
        with held:
            if main.latest_id() != expected_latest:
                raise CommitConflictError(
                    f"fast-forward of branch '{name}' in {self.table_path} conflicts with a commit to "
                    f"main (latest snapshot moved from {expected_latest} to {main.latest_id()}); retry")
            first = branch_snapshots.snapshot(earliest)
            self._refuse_a_diverged_main(name, main, first)
            self._replace_main(name, source, first, expected_latest)
        return latest

    def _refuse_a_diverged_main(self, name: str, main: SnapshotManager, first: Snapshot) -> None:
        """Main keeps its snapshots below the branch's first one, which must then lead to it: main
        must still hold that snapshot as the branch copied it. Main rolled back below the branch
        point (and maybe committed since) would keep snapshots of another history, with a gap and
        schemas the fast-forward deletes; Paimon does not check this, and leaves such a table."""
        earliest = main.earliest_id()
        if earliest is None or earliest >= first.id:
            return  # every snapshot of main is replaced (or main is empty)
        try:
            at_fork = main.snapshot(first.id)
        except SnapshotNotFoundError:
            at_fork = None
        if at_fork is None or not at_fork.same_commit(first):
            raise CommitConflictError(
                f"fast-forward of branch '{name}' in {self.table_path}: main no longer holds the branch's first "
                f"snapshot {first.id} (rolled back below it since the branch was created), so its snapshots "
                f"before {first.id} belong to another history; main is unchanged: roll main back to a snapshot "
                f"before {first.id} and create the branch again, or roll the branch's rows into main by writing them")

    def _replace_main(self, name: str, source: str, first: Snapshot, main_latest: int | None) -> None:
        """Paimon's fast-forward, under a lock that excludes every publish to main: schemas first
        (a snapshot is never visible before its schema), then the snapshots, then main's later
        snapshots go."""
        io, root = self.file_io, self._source()
        branch_files = _names(io, f"{source}/snapshot", _SNAPSHOT_FILE)
        branch_schemas = _names(io, f"{source}/schema", _SCHEMA_FILE)
        new_latest = max(branch_files)
        below = self._schemas_main_lacks(name, branch_schemas, first.schema_id)
        for schema_id, path in branch_schemas.items():
            if schema_id >= first.schema_id or schema_id in below:
                _copy(io, path, f"{root}/schema/schema-{schema_id}")
        for sid in sorted(branch_files, reverse=True):
            _copy(io, branch_files[sid], f"{root}/snapshot/snapshot-{sid}")
        for sid, path in sorted(_names(io, f"{root}/snapshot", _SNAPSHOT_FILE).items(), reverse=True):
            if sid > new_latest:
                io.delete(path)
        for schema_id, path in _names(io, f"{root}/schema", _SCHEMA_FILE).items():
            if schema_id >= first.schema_id and schema_id not in branch_schemas:
                io.delete(path)
        io.write_bytes(f"{root}/snapshot/LATEST", str(new_latest).encode())
        self._replace_tags(source, first.id)

    def _schemas_main_lacks(self, name: str, branch_schemas: dict[int, str], first_schema: int) -> set[int]:
        """The branch's schemas below its first snapshot's that main does not hold. Main normally
        holds them as the branch copied them; an earlier fast-forward from another branch may have
        deleted some (the branch's files still need them). One main holds otherwise is another
        history: refused before anything changes."""
        io, root = self.file_io, self._source()
        lacking = set()
        for schema_id, path in branch_schemas.items():
            if schema_id >= first_schema:
                continue
            try:
                held = io.read_bytes(f"{root}/schema/schema-{schema_id}")
            except FileNotFoundError:
                lacking.add(schema_id)
                continue
            if held != io.read_bytes(path):
                raise CommitConflictError(
                    f"fast-forward of branch '{name}' in {self.table_path}: main's schema {schema_id} is not the "
                    f"one the branch was created with (main took another history since), and the branch's files "
                    f"need the branch's; main is unchanged")
        return lacking

    def _replace_tags(self, source: str, first_id: int) -> None:
        io, root = self.file_io, self._source()
        for status in io.list_status(f"{root}/{_TAG_DIR}"):
            if status.is_dir or not status.path.rsplit("/", 1)[-1].startswith(_TAG_PREFIX):
                continue
            with contextlib.suppress(FileNotFoundError):
                if Snapshot.from_json(io.read_bytes(status.path), where=status.path).id >= first_id:
                    io.delete(status.path)
        for status in io.list_status(f"{source}/{_TAG_DIR}"):
            file_name = status.path.rsplit("/", 1)[-1]
            if not status.is_dir and file_name.startswith(_TAG_PREFIX):
                _copy(io, status.path, f"{root}/{_TAG_DIR}/{file_name}")

    # -- what every branch references (for expiry and orphan cleanup) ------------------------------
    def ref_paths(self, exclude: str | None = None) -> list[str]:
        """Metadata paths of main and every branch, except `exclude`'s."""
        names = [MAIN_BRANCH, *self.names()]
        return [self.path(n) for n in names if exclude is None or normalize_branch(exclude) != n]


def without_changelog(snapshot: Snapshot) -> Snapshot:
    """A branch's first snapshot: its data, not the changelog of the commit that made it on its
    source, which that branch's expiry deletes with the snapshot (as a tag's)."""
    return replace(snapshot, changelog_manifest_list=None, changelog_manifest_list_size=None,
                   changelog_record_count=None)


def _trimmed(tag: Snapshot) -> Snapshot:
    """The snapshot a tag file holds, without the tag's own fields."""
    return trim_to_snapshot(tag)
