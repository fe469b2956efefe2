"""Apache Paimon's own Java library (paimon-bundle 1.3.1) as a second judge of Strata's tables.

Not a server: ``platform/java/paimon-judge`` is a small Java 17 program of ours that reads, writes
and compacts filesystem-catalog tables with Paimon's Java API and answers in JSON (its Javadoc
lists the commands and how values are spelled). ``build()`` compiles it once with
``mvn -q -B package`` into ``CACHE_DIR/paimon-judge/<digest of pom + sources>`` (a changed source
builds anew; dependencies come from Maven Central through the machine's Maven), under a file lock
since test workers may ask at the same time, and records a class-data-sharing archive from one
``selftest`` run so that each later JVM starts faster. ``read``/``read_many``/``write``/``compact``
run one JVM each; ``judge_rows`` turns a Strata Arrow table into the judge's JSON spelling so the
two sides compare as plain Python values.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata_platform.services.base import CACHE_DIR, REPO_ROOT, InstalledTool, ServiceError, apt_install, file_lock, run
from strata_platform.services.spark import _java_major, java_binary, java_version

if TYPE_CHECKING:
    import pyarrow as pa

PAIMON_VERSION = "1.3.1"
SOURCES = REPO_ROOT / "platform" / "java" / "paimon-judge"
BUILDS = CACHE_DIR / "paimon-judge"
# Short-lived JVMs: the C1 compiler alone and the serial collector start and finish fastest.
JVM_FLAGS = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx1g", "-Xss4m"]
BUILD_TIMEOUT = 1200.0
RUN_TIMEOUT = 600.0
STALE_BUILD_SECONDS = 24 * 3600


class JudgeError(ServiceError):
    """The judge ran and refused: its one-line error (Paimon's exception and causes) is the message."""


def source_digest() -> str:
    """Hash of the pom and every source file: the build directory's name."""
    if not (SOURCES / "pom.xml").exists():
        raise ServiceError(f"the paimon-judge sources are missing ({SOURCES}): run from a checkout")
    digest = hashlib.sha256()
    for path in sorted([SOURCES / "pom.xml", *(p for p in (SOURCES / "src").rglob("*") if p.is_file())]):
        digest.update(str(path.relative_to(SOURCES)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def build_dir() -> Path:
    return BUILDS / source_digest()


def jar_path() -> Path:
    return build_dir() / "target" / "paimon-judge.jar"


def cds_archive() -> Path:
    return build_dir() / "target" / "paimon-judge.jsa"


def build() -> Path:
    """The judge's jar, built first if these sources were never built (cached; cheap after)."""
    work = build_dir()
    done = work / ".complete"
    if done.exists():
        return jar_path()
    BUILDS.mkdir(parents=True, exist_ok=True)
    with file_lock(BUILDS / ".lock"):
        if done.exists():  # another process built it while we waited
            return jar_path()
        if _java_major(java_version()) < 17:
            raise ServiceError(f"the Paimon judge needs Java 17+, found {java_version()}")
        if shutil.which("mvn") is None:
            apt_install("maven")
        shutil.rmtree(work, ignore_errors=True)  # a build that died half-way
        work.mkdir(parents=True)
        shutil.copy2(SOURCES / "pom.xml", work / "pom.xml")
        shutil.copytree(SOURCES / "src", work / "src")
        java_home = str(Path(java_binary()).resolve().parents[1])
        run(["mvn", "-q", "-B", "package"], cwd=work, timeout=BUILD_TIMEOUT,
            env={**os.environ, "JAVA_HOME": os.environ.get("JAVA_HOME", java_home)})
        with tempfile.TemporaryDirectory(prefix="paimon-judge-cds-") as scratch:
            # one real run of every code path, its loaded classes dumped for the later JVMs
            run([java_binary(), *JVM_FLAGS, f"-XX:ArchiveClassesAtExit={cds_archive()}", "-jar",
                 str(jar_path()), "selftest", str(Path(scratch) / "warehouse")], timeout=RUN_TIMEOUT)
        done.touch()
        _prune_old_builds(keep=work)
    return jar_path()


def _prune_old_builds(keep: Path) -> None:
    """Builds of other sources, unused for a day, only take space (each holds ~100 MB of jars)."""
    for other in BUILDS.iterdir():
        if other.is_dir() and other != keep:
            marker = other / ".complete"
            last_used = marker.stat().st_mtime if marker.exists() else other.stat().st_mtime
            if time.time() - last_used > STALE_BUILD_SECONDS:
                shutil.rmtree(other, ignore_errors=True)


def judge(*args: str, timeout: float = RUN_TIMEOUT) -> Any:
    """Run one judge command in a fresh JVM; its JSON answer, parsed."""
    jar = build()
    (jar.parent.parent / ".complete").touch()  # in use: not stale
    cds = [f"-XX:SharedArchiveFile={cds_archive()}"] if cds_archive().exists() else []
    command = [java_binary(), *JVM_FLAGS, *cds, "-jar", str(jar), *args]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise JudgeError(f"paimon-judge {args[0]} timed out after {timeout:.0f}s") from exc
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.splitlines() if line.startswith("paimon-judge:")]
        raise JudgeError(lines[-1] if lines else f"paimon-judge {args[0]} exited with {proc.returncode}: "
                         f"{proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout)


def read(warehouse: str, table: str, snapshot: int | None = None,
         options: Mapping[str, str] | None = None, row_kind: bool = False) -> dict[str, Any]:
    """Paimon's merged read of `table` ("db.t", or "db.t$ro"): {"fields": [...], "rows": [...]};
    `options` are dynamic table options (e.g. incremental-between), `row_kind` adds "_kind"."""
    args = ["read", warehouse, table, *(["--row-kind"] if row_kind else [])]
    if snapshot is not None:
        args += ["--snapshot", str(snapshot)]
    for key, value in (options or {}).items():
        args += ["--option", f"{key}={value}"]
    result: dict[str, Any] = judge(*args)
    return result


def read_many(warehouse: str, jobs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Several reads in one JVM; jobs {"table", "snapshot"?, "options"?, "row_kind"?}; a failed job
    is {"table", "error"}."""
    with _json_file(list(jobs)) as path:
        results: list[dict[str, Any]] = judge("read-many", warehouse, path)
    return results


def write(warehouse: str, specs: Sequence[Mapping[str, Any]], keep_going: bool = False) -> list[dict[str, Any]]:
    """Create the tables of `specs` and run their commits with Paimon's batch writers; with
    `keep_going` a table that fails is {"table", "error"} and the others are still written."""
    with _json_file(list(specs)) as path:
        results: list[dict[str, Any]] = judge("write", warehouse, path, *(["--keep-going"] if keep_going else []))
    return results


def compact(warehouse: str, tables: Sequence[str], full: bool = False) -> list[dict[str, Any]]:
    """Compact every (partition, bucket) of each table, one COMPACT commit per table."""
    results: list[dict[str, Any]] = judge("compact", warehouse, *tables, *(["--full"] if full else []))
    return results


class JudgeSession:
    """One judge JVM serving many commands (``session``): a request a line on its stdin, an
    answer a line on its stdout. `warehouse` is a path, or a mapping of catalog options (Paimon's
    REST catalog: metastore=rest, uri, token, warehouse, s3.*). Not thread-safe: one caller at a
    time; `send` then `receive` lets the caller work while the JVM runs a command."""

    def __init__(self, warehouse: str | Mapping[str, str]):
        jar = build()
        cds = [f"-XX:SharedArchiveFile={cds_archive()}"] if cds_archive().exists() else []
        self._options: Path | None = None
        if not isinstance(warehouse, str):  # the options may hold a token: a file only we can read
            handle, name = tempfile.mkstemp(suffix=".json", prefix="paimon-judge-catalog-")
            with os.fdopen(handle, "w") as out:
                json.dump(dict(warehouse), out)
            self._options = Path(name)
            warehouse = f"@{name}"
        self.proc = subprocess.Popen([java_binary(), *JVM_FLAGS, *cds, "-jar", str(jar), "session", warehouse],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, bufsize=1)

    def send(self, command: str, **arguments: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"command": command, **arguments}) + "\n")
        self.proc.stdin.flush()

    def receive(self) -> Any:
        """The answer to the oldest request not yet received; JudgeError with Paimon's exception."""
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise JudgeError(f"paimon-judge session ended (exit code {self.proc.poll()})")
        answer = json.loads(line)
        if "error" in answer:
            raise JudgeError(answer["error"])
        return answer["ok"]

    def call(self, command: str, **arguments: Any) -> Any:
        self.send(command, **arguments)
        return self.receive()

    def catalog(self, op: str, **arguments: Any) -> Any:
        """One of the catalog's own operations (the judge's CatalogOps)."""
        return self.call("catalog", op=op, **arguments)

    def close(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self._options is not None:
            self._options.unlink(missing_ok=True)

    def __enter__(self) -> JudgeSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def _json_file(value: Any) -> Iterator[str]:
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="paimon-judge-") as handle:
        json.dump(value, handle)
        handle.flush()
        yield handle.name


# -- values in the judge's spelling -----------------------------------------------------------------

def judge_value(value: Any) -> Any:
    """One Python value (as pyarrow's to_pylist gives it) spelled as the judge spells it."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dt.datetime):  # TIMESTAMP_LTZ: the UTC wall clock
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.isoformat(timespec="microseconds")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dt.time):
        return value.isoformat(timespec="milliseconds")
    if isinstance(value, dict):  # a ROW
        return {k: judge_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):  # ARRAY, or MAP as (key, value) pairs
        return [judge_value(v) for v in value]
    raise TypeError(f"no judge spelling for {type(value).__name__}: {value!r}")


ROW_KIND_COLUMN = "_ROW_KIND"  # Strata's column of row kinds in incremental reads


def judge_rows(table: pa.Table) -> list[dict[str, Any]]:
    """Rows of an Arrow table as the judge's JSON reads them back (Strata's _ROW_KIND as "_kind")."""
    return [{("_kind" if k == ROW_KIND_COLUMN else k): judge_value(v) for k, v in row.items()}
            for row in table.to_pylist()]


def canonical(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Rows as a sorted list of JSON texts: a multiset that compares regardless of row order."""
    return sorted(json.dumps(row, sort_keys=True) for row in rows)


class PaimonJavaService(InstalledTool):
    """No process of its own: install builds the judge, check runs its selftest and Strata reads
    the tables it wrote."""

    name = "paimon_java"

    def install(self) -> None:
        build()

    def version(self) -> str:
        return f"paimon {PAIMON_VERSION}"

    def is_ready(self) -> bool:
        return (build_dir() / ".complete").exists()

    def check(self) -> str:
        import strata

        began = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="paimon-judge-check-") as scratch:
            warehouse = str(Path(scratch) / "warehouse")
            answer = judge("selftest", warehouse)
            catalog = strata.load_catalog(warehouse)
            for result in answer["reads"][:2]:
                ours = judge_rows(catalog.get_table(result["table"]).to_arrow())
                if canonical(ours) != canonical(result["rows"]) or not ours:
                    raise ServiceError(f"{result['table']}: Strata read {ours}, Paimon {result['rows']}")
        return (f"java {java_version()}; Paimon wrote, compacted and read a deletion-vector PK table and "
                f"an append table, Strata read the same rows ({time.monotonic() - began:.1f}s)")
