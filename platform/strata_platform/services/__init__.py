"""Real components (MinIO, Kafka, Trino, PostgreSQL, Prometheus, Spark, Docker) as local processes.

Each service is one module exposing a ``Service`` subclass; ``registry.SERVICES`` lists them in
start order. All listen on 127.0.0.1 on non-default ports; downloads are cached under
``STRATA_CACHE`` (default ``~/.cache/strata``), run state lives under ``STRATA_STATE``
(default ``<repo>/build/services``).
"""
