"""Registering a Python data source so that its streaming queries can start together.

Spark (seen in 4.3) gives all queries of a registered Python data source one shared environment
map, the ``envVars`` of the data source's ``SimplePythonFunction`` (a ``java.util.HashMap``), and
each streaming read's ``PythonStreamingSourceRunner.init()`` puts keys into it in place
(``SPARK_LOCAL_DIRS``, ``SPARK_AUTH_SOCKET_TIMEOUT``, ``SPARK_BUFFER_SIZE``,
``SPARK_PYTHON_RUNTIME``). Queries that start at the same time in one driver race on the HashMap
and can corrupt it (its size no longer matches its entries); the map is serialized into every
task of the source, so from then on every task fails to deserialize on the executors
(``java.io.OptionalDataException`` in ``HashMap.readObject``) and the queries fail.
``register_data_source`` registers the class as ``spark.dataSource.register`` does, but with a
``ConcurrentHashMap``: thread-safe puts and a consistent serialized form.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.datasource import DataSource


def register_data_source(spark: SparkSession, source: type[DataSource]) -> None:
    """Make ``format(source.name())`` available in this session."""
    jvm = _classic_jvm(spark)
    if jvm is None:  # Spark Connect: the server registers it, its JVM is out of reach
        spark.dataSource.register(source)
        return
    function = _python_function(spark, jvm, source)
    wrapper = jvm.org.apache.spark.sql.execution.datasources.v2.python.UserDefinedPythonDataSource(function)
    spark._jsparkSession.dataSource().registerPython(source.name(), wrapper)


def _python_function(spark: SparkSession, jvm: Any, source: type[DataSource]) -> Any:
    """The class as pyspark's ``_wrap_function`` wraps it, with a ConcurrentHashMap environment."""
    from pyspark.core.rdd import _prepare_for_python_RDD

    sc = spark.sparkContext
    pickled, broadcasts, env, includes = _prepare_for_python_RDD(sc, source)
    safe_env = jvm.java.util.concurrent.ConcurrentHashMap()
    for key, value in env.items():
        safe_env.put(key, value)
    return jvm.org.apache.spark.api.python.SimplePythonFunction(
        bytearray(pickled), safe_env, includes, sc.pythonExec, sc.pythonVer, broadcasts, sc._javaAccumulator)


def _classic_jvm(spark: SparkSession) -> Any:
    """The py4j view of a classic (non-Connect) session's JVM, else None."""
    jvm = getattr(spark, "_jvm", None)
    return jvm if jvm is not None and getattr(spark, "_jsparkSession", None) is not None else None
