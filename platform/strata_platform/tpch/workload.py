"""TPC-H through the stack: Spark loads and refreshes Strata tables, Trino its own Iceberg tables,
and Trino and Spark run the 22 queries over both.

The load. Trino generates the rows (its ``tpch`` catalog, cast to the spec's types) and writes them
with CREATE TABLE AS into its ``native`` Iceberg catalog (the anchor: the tables a Trino user would
have without Strata). The Parquet files of those tables are copied to local disk (``parquet_dir``):
they are the rows of the source, and the plain-Parquet reference Spark is measured against. Spark
reads them and writes the Strata tables on MinIO with ``format("strata")``, each bucket of a
primary-key table by one task that compacts it (Iceberg readers see a deletion-vector table's
files above level 0 only). Every table is then checked against the source: row count and a
checksum of all columns, computed by Trino over the source, the native table and the Strata table.

The refresh. Round r of RF1 inserts copies of the orders whose key is r modulo 1000 (at SF 1 about
1,500 orders, as the spec's RF1), with their lineitems, under keys moved by ``NEW_KEY_OFFSET``;
RF2 deletes the orders whose key is 500 + r modulo 1000, and their lineitems. Strata's side goes
through Spark as one changelog per table (RF1's rows as ``_ROW_KIND = +I``, RF2's as ``-D``), as a
CDC pipeline writes a primary-key table: one snapshot per table and round, with the sink's commit
user and the round as commit identifier, so a replayed round publishes nothing. The native side
runs Trino's INSERT and DELETE (an Iceberg table takes no deletes by key in an insert).
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata_platform.services.base import REPO_ROOT
from strata_platform.tpch import queries
from strata_platform.tpch.tables import TABLES, TpchTable, database_name, tpch_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

NEW_KEY_OFFSET = 10**10  # RF1's order keys: above every key TPC-H generates (6e8 at SF 100)
REFRESH_USER = "tpch-refresh"  # the Spark sink's commit user of the refresh rounds
ENGINES = ("trino_strata", "trino_native", "spark_strata")
SPARK_SOURCES = ("strata", "strata-python", "parquet", "parquet-s3")
CTAS_THREADS = 3  # tables Trino loads at once (Spark writes them one after the other)
Progress = Callable[[str], None]


@dataclass
class QueryRun:
    seconds: float
    rows: list[tuple[Any, ...]]


@dataclass
class Tpch:
    """One scale factor of TPC-H on the running stack (Trino, its REST catalog, MinIO, PostgreSQL)."""

    scale_factor: float
    spark: SparkSession
    trino: Any  # strata_platform.services.trino.TrinoService
    rest: Any  # strata_platform.services.iceberg_rest.IcebergRestService
    work_dir: Path = field(default_factory=lambda: REPO_ROOT / "build" / "tpch")
    progress: Progress = print
    # the native tables' data files after the load (s3a:// URIs): plain Parquet of the same rows on
    # the same store, Spark's reference (export_parquet lists them)
    native_files: dict[str, list[str]] = field(default_factory=dict)

    @property
    def database(self) -> str:
        return database_name(self.scale_factor)

    @property
    def source(self) -> str:
        return f'tpch."{tpch_schema(self.scale_factor)}"'

    @property
    def parquet_dir(self) -> Path:
        return self.work_dir / self.database / "parquet"

    def catalog_options(self) -> dict[str, str]:
        """The Spark data source's options that reach the REST catalog's warehouse on MinIO."""
        return {f"catalog.{key}": value for key, value in self.rest.catalog_options().items()}

    def uri(self, table: str) -> str:
        return f"{self.rest.warehouse}#{self.database}.{table}"

    def query(self, sql: str) -> list[list[Any]]:
        rows: list[list[Any]] = self.trino.query(sql)
        return rows

    # -- load ---------------------------------------------------------------------------------------
    def load_native(self) -> dict[str, float]:
        """CTAS of every table into Trino's native catalog; seconds per table."""
        from strata_platform.services.postgres import PostgresService, ensure_iceberg_jdbc_tables

        ensure_iceberg_jdbc_tables(PostgresService().dsn)
        self.query(f"CREATE SCHEMA IF NOT EXISTS native.{self.database}")

        def ctas(table: TpchTable) -> float:
            self.query(f"DROP TABLE IF EXISTS native.{self.database}.{table.name}")
            started = time.perf_counter()
            self.query(f"CREATE TABLE native.{self.database}.{table.name} AS " + table.source_select(self.source))
            seconds = time.perf_counter() - started
            self.progress(f"  native  {table.name:<9} CTAS {seconds:7.1f} s")
            return seconds

        return self._each_table(ctas, CTAS_THREADS)

    def _each_table(self, load: Callable[[TpchTable], float], threads: int = 1) -> dict[str, float]:
        """`load` of every table, `threads` at a time, largest first, with the wall time of all of
        them as ``total`` (Trino's CTAS of small tables is mostly fixed costs: planning, commits)."""
        started = time.perf_counter()
        largest_first = sorted(TABLES.values(), key=lambda t: -t.rows_at_sf1)
        if threads == 1:  # in this thread: Spark's Python data sources are not found from other threads
            seconds = {t.name: load(t) for t in largest_first}
        else:
            with ThreadPoolExecutor(threads) as pool:
                seconds = dict(zip((t.name for t in largest_first), pool.map(load, largest_first), strict=True))
        return {**seconds, "total": time.perf_counter() - started}

    def export_parquet(self) -> None:
        """Copy the native tables' Parquet files to ``parquet_dir`` (the source rows, plain Parquet)."""
        import boto3

        from strata_platform.services.minio import MinioService

        env = MinioService().client_env()
        s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name=env["AWS_REGION"],
                          aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
        for table in TABLES:
            target = self.parquet_dir / table
            target.mkdir(parents=True, exist_ok=True)
            for stale in target.glob("*.parquet"):
                stale.unlink()
            files = self.query(f'SELECT file_path FROM native.{self.database}."{table}$files"')
            self.native_files[table] = ["s3a://" + path.removeprefix("s3://") for (path,) in files]
            for index, (path,) in enumerate(files):
                bucket, key = path.removeprefix("s3://").split("/", 1)
                s3.download_file(bucket, key, str(target / f"part-{index:05d}.parquet"))

    def create_strata_tables(self) -> None:
        catalog = self.rest.catalog()
        catalog.create_database(self.database, ignore_if_exists=True)
        for table in TABLES.values():
            identifier = f"{self.database}.{table.name}"
            catalog.drop_table(identifier, ignore_if_not_exists=True)
            catalog.create_table(identifier, table.arrow_schema(), primary_keys=list(table.primary_key),
                                 options=table.strata_options(self.scale_factor))

    def source_frame(self, table: str) -> DataFrame:
        return self.spark.read.parquet(str(self.parquet_dir / table))

    def write_strata(self, table: str, frame: DataFrame, **options: str) -> None:
        from strata.spark import write_table

        settings = {**self.catalog_options(), "write-only": "false", **options}
        write_table(frame, self.uri(table), "append", None, **settings)

    def load_strata(self) -> dict[str, float]:
        """Spark writes every table from the local Parquet copy; seconds per table."""
        self.create_strata_tables()

        def write(table: TpchTable) -> float:
            started = time.perf_counter()
            self.write_strata(table.name, self.source_frame(table.name))
            seconds = time.perf_counter() - started
            self.progress(f"  strata  {table.name:<9} Spark {seconds:7.1f} s")
            return seconds

        return self._each_table(write)

    def load_parquet(self) -> dict[str, float]:
        """The reference of Strata's load: Spark writes every table from the same local Parquet copy,
        in the same order, as plain Parquet to the same MinIO (Spark's own writer, through s3a);
        seconds per table."""
        bucket = self.rest.warehouse.removeprefix("s3://").split("/", 1)[0]

        def write(table: TpchTable) -> float:
            started = time.perf_counter()
            self.source_frame(table.name).write.mode("overwrite").parquet(
                f"s3a://{bucket}/tpch-spark-parquet/{self.database}/{table.name}")
            seconds = time.perf_counter() - started
            self.progress(f"  parquet {table.name:<9} Spark {seconds:7.1f} s")
            return seconds

        return self._each_table(write)

    def checksums(self, relation: Callable[[TpchTable], str]) -> dict[str, tuple[int, str]]:
        """(row count, checksum of all columns) per table, as Trino computes them over `relation`
        (one query for the eight tables)."""
        parts = [f"SELECT '{t.name}', count(*), checksum(ROW({', '.join(t.column_names)})) FROM ({relation(t)})"
                 for t in TABLES.values()]
        rows = self.query(" UNION ALL ".join(parts))
        return {name: (int(count), digest.hex() if isinstance(digest, bytes) else str(digest))
                for name, count, digest in rows}

    def verify_load(self) -> dict[str, tuple[int, str]]:
        """Row counts and checksums of the native and Strata tables against the source; raises on a mismatch."""
        source = self.checksums(lambda t: t.source_select(self.source))
        for catalog in ("native", "strata"):
            got = self.checksums(lambda t, c=catalog: f"SELECT * FROM {c}.{self.database}.{t.name}")  # type: ignore[misc]
            wrong = {name: (got.get(name), source[name]) for name in TABLES if got.get(name) != source[name]}
            if wrong:
                raise AssertionError(f"{catalog} tables differ from the source {self.source} "
                                     f"((rows, checksum) got vs source): {wrong}")
        return source

    # -- refresh ------------------------------------------------------------------------------------
    def refresh_native(self, round_no: int) -> float:
        """RF1 and RF2 of `round_no` through Trino INSERT and DELETE; seconds."""
        started = time.perf_counter()
        for table in ("orders", "lineitem"):
            key = TABLES[table].column_names[0]
            columns = TABLES[table].column_names
            moved = ", ".join([f"{key} + {NEW_KEY_OFFSET}", *columns[1:]])
            self.query(f"INSERT INTO native.{self.database}.{table} SELECT {moved} FROM "
                       f"native.{self.database}.{table} WHERE {key} < {NEW_KEY_OFFSET} AND {key} % 1000 = {round_no}")
        for table in ("lineitem", "orders"):
            key = TABLES[table].column_names[0]
            self.query(f"DELETE FROM native.{self.database}.{table} "
                       f"WHERE {key} < {NEW_KEY_OFFSET} AND {key} % 1000 = {500 + round_no}")
        return time.perf_counter() - started

    def refresh_frame(self, table: str, round_no: int) -> DataFrame:
        """Round `round_no` of RF1 and RF2 on `table` as one changelog (``_ROW_KIND``): the rows RF1
        inserts under moved keys (+I) and the rows RF2 deletes (-D), from one scan of the source."""
        from pyspark.sql import functions as F

        key, *rest = TABLES[table].column_names
        inserted = F.col(key) % 1000 == round_no
        rows = self.source_frame(table).where(inserted | (F.col(key) % 1000 == 500 + round_no))
        return rows.select(F.when(inserted, F.lit("+I")).otherwise(F.lit("-D")).alias("_ROW_KIND"),
                           F.when(inserted, F.col(key) + F.lit(NEW_KEY_OFFSET)).otherwise(F.col(key)).alias(key),
                           *rest)

    def refresh_strata(self, round_no: int) -> float:
        """RF1 and RF2 of `round_no` through Spark, one changelog write (one snapshot) per table,
        exactly once per (table, round); seconds."""
        started = time.perf_counter()
        for table in ("orders", "lineitem"):
            self.write_strata(table, self.refresh_frame(table, round_no), **{
                "commit-user": REFRESH_USER, "commit-identifier": str(round_no)})
        return time.perf_counter() - started

    def visibility_seconds(self, timeout: float = 120.0) -> float:
        """How long until Trino's strata catalog counts what the native catalog counts (both tables)."""
        started = time.perf_counter()
        expected = {t: self.query(f"SELECT count(*) FROM native.{self.database}.{t}") for t in ("orders", "lineitem")}
        while True:
            seen = {t: self.query(f"SELECT count(*) FROM strata.{self.database}.{t}") for t in expected}
            if seen == expected:
                return time.perf_counter() - started
            if time.perf_counter() - started > timeout:
                raise AssertionError(f"Trino's strata catalog counts {seen}, the native one {expected}, "
                                     f"after {timeout} s")
            time.sleep(0.05)

    # -- queries ------------------------------------------------------------------------------------
    def run_trino_pair(self, numbers: tuple[int, ...] = queries.QUERY_IDS,
                       repeat: int = 1) -> dict[str, dict[int, QueryRun]]:
        """Each query on Trino over Strata and Trino native side by side, fairly: both warmed by a
        first run of the query, then `repeat` rounds whose order alternates (Strata first, then
        native first, ...); each side's fastest round counts. With `repeat` 1: one run each, Strata
        first (no warm-up)."""
        out: dict[str, dict[int, QueryRun]] = {"trino_strata": {}, "trino_native": {}}
        for number in numbers:
            sqls = {side: queries.render(number, self.scale_factor, f"{catalog}.{self.database}.")
                    for side, catalog in (("trino_strata", "strata"), ("trino_native", "native"))}
            rows: dict[str, list[tuple[Any, ...]]] = {}
            if repeat > 1:
                for side, sql in sqls.items():
                    rows[side] = [tuple(r) for r in self.query(sql)]
            best = dict.fromkeys(sqls, float("inf"))
            for round_no in range(max(1, repeat)):
                for side in (list(sqls) if round_no % 2 == 0 else list(sqls)[::-1]):
                    run = _fastest(functools.partial(self.query, sqls[side]), 1)
                    best[side] = min(best[side], run.seconds)
                    rows.setdefault(side, run.rows)
            for side in sqls:
                out[side][number] = QueryRun(best[side], rows[side])
            self.progress(f"  Trino Q{number}: Strata {best['trino_strata']:.2f} s, "
                          f"native {best['trino_native']:.2f} s")
        return out

    @contextlib.contextmanager
    def spark_views(self, source: str = "strata", cache: bool = False,
                    tables: tuple[str, ...] = tuple(TABLES)) -> Iterator[None]:
        """`tables` as Spark temporary views, read from `source` (SPARK_SOURCES): Strata's tables
        through ``strata.spark.read_table`` (Spark's Parquet reader over the files Strata plans),
        through ``format("strata")`` (the Python data source), or the local Parquet copy.
        With `cache`, each table is read once and kept in Spark's memory (the queries then cost Spark's
        planning and joins only: what a test on a busy machine can afford)."""
        s3a = self._s3a_options() if source == "parquet-s3" else {}
        frames = []
        for table in tables:
            frame = self._frame(table, source, s3a)
            if cache:
                frame = frame.cache()
                frame.count()
                frames.append(frame)
            frame.createOrReplaceTempView(table)
        try:
            yield
        finally:
            for table in tables:
                self.spark.catalog.dropTempView(table)
            for frame in frames:
                frame.unpersist()

    def _frame(self, table: str, source: str, s3a: dict[str, str]) -> DataFrame:
        """One table as a DataFrame read from `source`: for Strata, its scan is planned here (the
        files of the snapshot, deletion vectors loaded), as a file listing is for plain Parquet."""
        from strata.spark import read_table

        if source == "parquet":
            return self.source_frame(table)
        if source == "strata":
            return read_table(self.spark, self.uri(table), **self.catalog_options())
        if source == "strata-python":
            return self.spark.read.format("strata").options(**self.catalog_options()).load(self.uri(table))
        if source == "parquet-s3":
            return self.spark.read.options(**s3a).parquet(*self.native_files[table])
        raise ValueError(f"source must be one of {SPARK_SOURCES}, got {source!r}")

    def run_spark(self, numbers: tuple[int, ...] = queries.QUERY_IDS, source: str = "strata",
                  cache: bool = False, repeat: int = 1) -> dict[int, QueryRun]:
        """Each query `repeat` times, the fastest run counting. Without `cache`, each run times the
        planning of the tables it names too (their views are created in the run: Strata's scan
        planning and deletion vectors, Spark's file listing of plain Parquet), as a query on a
        catalog table would pay it."""
        if cache:
            with self.spark_views(source, cache=True):
                return self._run_spark_queries(numbers, source, lambda sql: _collect(self.spark, sql), repeat)

        def planned_and_run(sql: str) -> list[Any]:
            with self.spark_views(source, tables=queries.tables_of(sql)):
                return _collect(self.spark, sql)

        return self._run_spark_queries(numbers, source, planned_and_run, repeat)

    def _run_spark_queries(self, numbers: tuple[int, ...], source: str, run: Callable[[str], list[Any]],
                           repeat: int) -> dict[int, QueryRun]:
        out: dict[int, QueryRun] = {}
        for number in numbers:
            sql = queries.render(number, self.scale_factor)
            out[number] = _fastest(functools.partial(run, sql), repeat)
            self.progress(f"  Spark {source} Q{number}: {out[number].seconds:.2f} s")
        return out

    def _s3a_options(self) -> dict[str, str]:
        """The s3a settings that reach MinIO as the Strata tables do."""
        from strata.spark.native import hadoop_options

        return hadoop_options(self.rest.catalog().get_table(f"{self.database}.region"))

    def run_all(self, numbers: tuple[int, ...] = queries.QUERY_IDS, spark_cache: bool = False,
                with_spark: bool = True, repeat: int = 1,
                spark_repeat: int | None = None) -> dict[str, dict[int, QueryRun]]:
        """Every query on the three engines (on the two Trino ones without `with_spark`), each the
        fastest of `repeat` runs (Spark's of `spark_repeat`, when given); raises when a result
        differs from Trino native's."""
        runs = self.run_trino_pair(numbers, repeat)
        if with_spark:
            runs["spark_strata"] = self.run_spark(numbers, cache=spark_cache,
                                                  repeat=repeat if spark_repeat is None else spark_repeat)
        problems = [f"{engine}: {diff}" for engine in runs if engine != "trino_native" for number in numbers
                    if (diff := queries.difference(number, runs[engine][number].rows,
                                                   runs["trino_native"][number].rows))]
        if problems:
            raise AssertionError("results differ from Trino on its native tables:\n" + "\n".join(problems))
        return runs


def _vm_hwm_mb(pid: int) -> float:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    return next((int(line.split()[1]) / 1024 for line in text.splitlines() if line.startswith("VmHWM:")), 0.0)


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = (entry / "stat").read_text()
                children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo += children.get(current, [])
    return found


def peak_rss_mb(trino: Any) -> dict[str, int]:
    """Peak resident set (VmHWM) of this process, each process it started (Spark's JVM, its Python
    workers: the largest) and the Trino server, in MB."""
    me = os.getpid()
    others = [_vm_hwm_mb(pid) for pid in _descendants(me) if pid != me]
    out: dict[str, int] = {"driver_python": round(_vm_hwm_mb(me)),
                           "spark_and_workers_max": round(max(others, default=0.0))}
    pid = trino.running_pid() or _process_with_argument(f"-Dconfig={trino.etc_dir / 'config.properties'}")
    if pid is not None:
        out["trino"] = round(max((_vm_hwm_mb(p) for p in _descendants(pid)), default=0.0))
    return out


def _process_with_argument(argument: str) -> int | None:
    """A process whose command line has `argument` (the shared Trino when its pid file is gone)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if argument.encode() in (entry / "cmdline").read_bytes().split(b"\0"):
                    return int(entry.name)
    return None


def _collect(spark: SparkSession, sql: str) -> list[Any]:
    return spark.sql(sql).collect()


def _fastest(run: Callable[[], Any], repeat: int) -> QueryRun:
    """`run` `repeat` times: the fastest run's seconds (the others pay what a first run pays, once
    on a busy 2-core machine), the first run's rows."""
    rows: list[tuple[Any, ...]] | None = None
    best = float("inf")
    for _ in range(max(1, repeat)):
        started = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - started)
        rows = rows if rows is not None else [tuple(r) for r in result]
    return QueryRun(best, rows or [])
