"""Spark in local mode, through PySpark (PyPI) on the machine's Java 17+.

There is no server: the driver JVM is started inside the client process by ``spark_session``, and
executors are threads of it (``local[2]``). Python UDFs, ``mapInArrow`` and the Python data source
run in Python worker processes that Spark forks from ``PYSPARK_PYTHON``, which we point at the
interpreter running this code (the project's venv) so workers import the same packages.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata_platform.services.base import CACHE_DIR, HOST, STATE_DIR, Service, ServiceError, download, maven_url

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

SPARK_STATE = STATE_DIR / "spark"
MIN_JAVA = 17

# Defaults for a small, private, loopback-only local Spark; callers override any of them.
DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": HOST,
    "spark.driver.bindAddress": HOST,
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",
}


# Spark's own Parquet reader on s3:// needs Hadoop's s3a file system: hadoop-aws of the Hadoop that
# PySpark ships, with the AWS SDK and the analytics stream its pom names (by Hadoop version).
S3A_DEPENDENCIES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "3.5.0": (("org.apache.hadoop", "hadoop-aws", "3.5.0"),
              ("software.amazon.awssdk", "bundle", "2.35.4"),  # 690 MB: the SDK hadoop-aws is built on
              ("software.amazon.s3.analyticsaccelerator", "analyticsaccelerator-s3", "1.3.1")),
}


def hadoop_version() -> str:
    """The Hadoop client PySpark ships (its ``hadoop-client-api`` jar)."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    found = sorted(jars.glob("hadoop-client-api-*.jar"))
    if not found:
        raise ServiceError(f"no hadoop-client-api jar in {jars}")
    return found[0].name.removeprefix("hadoop-client-api-").removesuffix(".jar")


def s3a_jars() -> list[Path]:
    """The jars that give Spark ``s3a://`` (downloaded once into the cache)."""
    version = hadoop_version()
    if version not in S3A_DEPENDENCIES:
        raise ServiceError(f"no s3a jars known for Hadoop {version} (known: {sorted(S3A_DEPENDENCIES)})")
    target = CACHE_DIR / "spark-s3a"
    return [download(maven_url(group, artifact, release), target / f"{artifact}-{release}.jar")
            for group, artifact, release in S3A_DEPENDENCIES[version]]


def java_binary() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise ServiceError("no java on PATH and no JAVA_HOME (Spark needs Java 17+; "
                           "apt-get install openjdk-17-jre-headless)")
    return found


def java_version() -> str:
    """The JVM's version string, e.g. '17.0.15'."""
    proc = subprocess.run([java_binary(), "-version"], capture_output=True, text=True,
                          timeout=60, check=False)
    match = re.search(r'version "([^"]+)"', proc.stderr + proc.stdout)
    if proc.returncode != 0 or match is None:
        raise ServiceError(f"`java -version` failed: {proc.stderr.strip()[-500:]}")
    return match.group(1)


def _java_major(version: str) -> int:
    parts = version.split(".")
    return int(parts[1]) if parts[0] == "1" else int(re.sub(r"\D.*", "", parts[0]) or 0)


def python_env() -> dict[str, str]:
    """Environment that makes Spark's Python workers run this interpreter, on loopback only."""
    return {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": HOST}


def s3a_conf() -> dict[str, str]:
    """Spark settings that put ``s3a_jars`` on the driver's and executors' class path (not
    spark.jars: those are copied for the executors, 690 MB): ``spark_session(name, **s3a_conf())``."""
    path = os.pathsep.join(str(jar) for jar in s3a_jars())
    return {"spark.driver.extraClassPath": path, "spark.executor.extraClassPath": path}


def spark_session(app_name: str = "strata", **conf: str) -> SparkSession:
    """A local[2] SparkSession on 127.0.0.1 with the UI off and Python workers on this venv.

    ``conf`` keys use underscores for dots, e.g. ``spark_sql_shuffle_partitions="8"``, or pass
    exact keys with ``**{"spark.some.key": "v"}``. ``master`` may be given as ``master="local[4]"``.
    With ``**s3a_conf()``, Spark's own file sources read ``s3a://`` (``strata.spark.read_table``
    reads Strata tables on S3 with them). getOrCreate semantics: an active session is reused (its
    static conf is not changed).
    """
    os.environ.update(python_env())
    from pyspark.sql import SparkSession

    SPARK_STATE.mkdir(parents=True, exist_ok=True)
    master = conf.pop("master", "local[2]")
    settings = {
        **DEFAULT_CONF,
        "spark.sql.warehouse.dir": str(SPARK_STATE / "warehouse"),
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
    }
    for key, value in conf.items():
        settings[key if "." in key else key.replace("_", ".")] = str(value)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _double_arrow(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import pyarrow as pa
    import pyarrow.compute as pc

    for batch in batches:
        ids = batch.column("id")
        yield pa.RecordBatch.from_arrays([ids, pc.multiply(ids, 2)], names=["id", "doubled"])


def run_smoke_job(spark: SparkSession) -> dict[str, Any]:
    """A small job that crosses the JVM and the Python worker path; returns what it computed."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    df = spark.range(1000)
    jvm_sum = df.agg(F.sum("id")).first()[0]  # type: ignore[index]

    square = F.udf(lambda x: x * x, LongType())
    udf_sum = df.select(square("id").alias("sq")).agg(F.sum("sq")).first()[0]  # type: ignore[index]

    doubled = df.mapInArrow(_double_arrow, "id long, doubled long")
    arrow_sum = doubled.agg(F.sum("doubled")).first()[0]  # type: ignore[index]

    worker_pids = {row[0] for row in df.repartition(2).rdd.mapPartitions(
        lambda _rows: [os.getpid()]).map(lambda pid: (pid,)).collect()}
    return {"sum": jvm_sum, "udf_sum_squares": udf_sum, "arrow_sum_doubled": arrow_sum,
            "python_workers": len(worker_pids)}


EXPECTED = {"sum": 499500, "udf_sum_squares": 332833500, "arrow_sum_doubled": 999000}


class SparkService(Service):
    """No process of its own: start() verifies Java and PySpark; sessions live in the client."""

    name = "spark"

    @property
    def state_dir(self) -> Path:
        return SPARK_STATE

    def install(self) -> None:
        try:
            import pyspark  # noqa: F401
        except ImportError as exc:
            raise ServiceError("pyspark is not installed in this environment "
                               "(pip install 'strata[spark]')") from exc
        major = _java_major(java_version())
        if major < MIN_JAVA:
            raise ServiceError(f"Spark 4 needs Java {MIN_JAVA}+, found {java_version()}")

    def version(self) -> str:
        return metadata.version("pyspark")

    def start(self) -> float:
        began = time.monotonic()
        self.install()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        os.environ.update(python_env())
        return time.monotonic() - began

    def stop(self) -> None:
        """Nothing to stop: a session's JVM belongs to the process that created it."""

    def running_pid(self) -> int | None:
        return None

    def is_ready(self) -> bool:
        try:
            self.install()
        except ServiceError:
            return False
        return True

    def client_env(self) -> dict[str, str]:
        env = python_env()
        java_home = os.environ.get("JAVA_HOME")
        if java_home:
            env["JAVA_HOME"] = java_home
        return env

    def check(self) -> str:
        began = time.monotonic()
        spark = spark_session("strata-spark-check")
        try:
            session_seconds = time.monotonic() - began
            result = run_smoke_job(spark)
        finally:
            spark.stop()
        wrong = {k: (result[k], v) for k, v in EXPECTED.items() if result[k] != v}
        if wrong or result["python_workers"] < 1:
            raise ServiceError(f"wrong results (got, expected): {wrong or result}")
        return (f"java {java_version()}; session {session_seconds:.1f}s, jobs "
                f"{time.monotonic() - began - session_seconds:.1f}s; sum(range(1000))=499500, "
                f"python UDF and mapInArrow correct on {result['python_workers']} python worker(s)")
