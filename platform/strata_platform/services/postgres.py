"""PostgreSQL from Debian's package, one cluster of our own on 127.0.0.1:15432.

PostgreSQL refuses to run as root, so the cluster belongs to the ``postgres`` OS user: ``initdb``
and ``pg_ctl`` run through ``runuser -u postgres --``, and the server itself through ``setpriv``
(which execs, leaving no watching parent: the PID the framework records is the postmaster's own).
The data directory is initialised once and reused by every later start; ``stop`` asks for a fast
shutdown (``pg_ctl stop -m fast``) before the framework's group kill.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import uuid
from pathlib import Path

from strata_platform.services.base import HOST, Service, ServiceError, apt_install, run

OS_USER = "postgres"
DATABASE = "strata"
USER = "strata"
PASSWORD = "strata"

PG_HBA = f"""# Written by strata_platform.services.postgres: trust, and only on loopback.
# TYPE  DATABASE  USER  ADDRESS        METHOD
local   all       all                  trust
host    all       all   {HOST}/32   trust
"""


def find_bindir() -> Path:
    """The bin directory of the newest PostgreSQL server installed under /usr/lib/postgresql."""
    candidates = [p.parent for p in Path("/usr/lib/postgresql").glob("*/bin/postgres")]
    if not candidates:
        found = shutil.which("postgres")
        if found:
            return Path(found).resolve().parent
        raise ServiceError("postgres: no server binary under /usr/lib/postgresql/*/bin")

    def major(bindir: Path) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", bindir.parent.name)) or (0,)

    return max(candidates, key=major)


# Trino's ``native`` Iceberg catalog (iceberg.catalog.type=jdbc) expects these two tables and does not
# create them: without them every query fails with "Cannot check and eventually update SQL schema".
ICEBERG_JDBC_TABLES = (
    "CREATE TABLE IF NOT EXISTS iceberg_namespace_properties (catalog_name VARCHAR(255) NOT NULL, "
    "namespace VARCHAR(255) NOT NULL, property_key VARCHAR(255), property_value VARCHAR(1000), "
    "PRIMARY KEY (catalog_name, namespace, property_key))",
    "CREATE TABLE IF NOT EXISTS iceberg_tables (catalog_name VARCHAR(255) NOT NULL, "
    "table_namespace VARCHAR(255) NOT NULL, table_name VARCHAR(255) NOT NULL, "
    "metadata_location VARCHAR(1000), previous_metadata_location VARCHAR(1000), "
    "iceberg_type VARCHAR(5), PRIMARY KEY (catalog_name, table_namespace, table_name))",
)


def ensure_iceberg_jdbc_tables(dsn: str) -> None:
    """Create the Iceberg JDBC catalog's two tables in ``dsn``'s database if they are missing."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        for statement in ICEBERG_JDBC_TABLES:
            conn.execute(statement)


class PostgresService(Service):
    name = "postgres"
    port = 15432
    startup_timeout = 90.0

    @property
    def data_dir(self) -> Path:
        return self.state_dir / "data"

    @property
    def socket_dir(self) -> Path:
        return self.state_dir / "socket"

    @property
    def dsn(self) -> str:
        return f"postgresql://{USER}:{PASSWORD}@{HOST}:{self.port}/{DATABASE}"

    @property
    def admin_dsn(self) -> str:
        return f"postgresql://{OS_USER}@{HOST}:{self.port}/postgres"

    def install(self) -> None:
        fresh = subprocess.run(["dpkg", "-s", "postgresql"], check=False,
                               capture_output=True).returncode != 0
        apt_install("postgresql")
        if fresh:
            self._stop_distro_clusters()
        find_bindir()

    @staticmethod
    def _stop_distro_clusters() -> None:
        """Stop the cluster Debian's postinst creates and starts where no policy-rc.d forbids it.

        Only called right after our own apt install put the package on the machine, so any
        online cluster is one that install started (Debian's 'main' on port 5432).
        """
        proc = subprocess.run(["pg_lsclusters", "--no-header"], check=False, capture_output=True,
                              text=True)
        for line in proc.stdout.splitlines():
            fields = line.split()
            if len(fields) >= 4 and fields[3].startswith("online"):
                subprocess.run(["pg_ctlcluster", fields[0], fields[1], "stop", "-m", "fast"],
                               check=False, capture_output=True, timeout=120)

    def version(self) -> str:
        return run([str(find_bindir() / "postgres"), "--version"]).stdout.strip().splitlines()[0]

    def _as_postgres(self, *argv: str, timeout: float = 300.0) -> str:
        return run(["runuser", "-u", OS_USER, "--", *argv], timeout=timeout).stdout

    def prepare(self) -> None:
        shutil.chown(self.state_dir, OS_USER, OS_USER)
        self.socket_dir.mkdir(mode=0o700, exist_ok=True)
        shutil.chown(self.socket_dir, OS_USER, OS_USER)
        try:
            self._as_postgres("test", "-w", str(self.state_dir), timeout=30)
        except ServiceError as exc:
            raise ServiceError(f"postgres: the {OS_USER} OS user cannot write {self.state_dir} "
                               "(a parent directory is not traversable); set STRATA_STATE") from exc
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()
        (self.data_dir / "pg_hba.conf").write_text(PG_HBA)
        shutil.chown(self.data_dir / "pg_hba.conf", OS_USER, OS_USER)

    def _initdb(self) -> None:
        """Initialise the cluster into a scratch directory, then move it into place (atomic)."""
        scratch = self.state_dir / "data.initdb"
        if scratch.exists():
            shutil.rmtree(scratch)
        self._as_postgres(str(find_bindir() / "initdb"), "-D", str(scratch), "--username", OS_USER,
                          "--auth", "trust", "--encoding", "UTF8", "--no-locale", "--no-instructions")
        if self.data_dir.exists():  # an empty or partial directory from an interrupted run
            shutil.rmtree(self.data_dir)
        scratch.rename(self.data_dir)

    def command(self) -> list[str]:
        return ["setpriv", f"--reuid={OS_USER}", f"--regid={OS_USER}", "--init-groups", "--",
                str(find_bindir() / "postgres"), "-D", str(self.data_dir),
                "-c", f"listen_addresses={HOST}",
                "-c", f"port={self.port}",
                "-c", f"unix_socket_directories={self.socket_dir}",
                "-c", "logging_collector=off"]

    def is_ready(self) -> bool:
        import psycopg

        with psycopg.connect(self.admin_dsn, connect_timeout=2) as conn:
            return conn.execute("SELECT 1").fetchone() == (1,)

    def after_start(self) -> None:
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.admin_dsn, autocommit=True, connect_timeout=5) as conn:
            if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (USER,)).fetchone() is None:
                conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                    sql.Identifier(USER), sql.Literal(PASSWORD)))
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                            (DATABASE,)).fetchone() is None:
                conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(
                    sql.Identifier(DATABASE), sql.Identifier(USER)))
        ensure_iceberg_jdbc_tables(self.dsn)

    def client_env(self) -> dict[str, str]:
        return {"STRATA_PG_DSN": self.dsn}

    def check(self) -> str:
        import psycopg
        from psycopg import sql

        table = sql.Identifier(f"strata_check_{uuid.uuid4().hex[:12]}")
        rows = [(1, "alpha"), (2, "beta"), (3, "gamma")]
        with psycopg.connect(self.dsn, connect_timeout=5) as conn:
            try:
                conn.execute(sql.SQL("CREATE TABLE {} (id integer PRIMARY KEY, name text NOT NULL)")
                             .format(table))
                with conn.cursor() as cur:
                    cur.executemany(sql.SQL("INSERT INTO {} (id, name) VALUES (%s, %s)").format(table),
                                    rows)
                conn.commit()
                got = conn.execute(sql.SQL("SELECT id, name FROM {} ORDER BY id").format(table)).fetchall()
                server = conn.execute("SHOW server_version").fetchone()
            finally:
                conn.rollback()
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
                conn.commit()
        if got != rows:
            raise ServiceError(f"postgres: SQL round trip returned {got!r}, expected {rows!r}")
        version = server[0] if server else "?"
        return f"create/insert/select/drop ok ({len(rows)} rows) as {USER} on server {version}"

    def stop(self) -> None:
        """Fast shutdown through pg_ctl (SIGTERM would be a smart one), then the group kill."""
        if self.running_pid() is not None and (self.data_dir / "postmaster.pid").exists():
            # If pg_ctl fails, the framework's stop below kills the process group.
            with contextlib.suppress(ServiceError, OSError, subprocess.SubprocessError):
                self._as_postgres(str(find_bindir() / "pg_ctl"), "stop", "-D", str(self.data_dir),
                                  "-m", "fast", "-w", "-t", "60", timeout=90)
        super().stop()
