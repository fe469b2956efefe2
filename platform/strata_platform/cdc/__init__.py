"""CDC ingestion: Kafka topics of debezium-json / canal-json change events into Strata tables.

    python -m strata_platform.cdc --bootstrap 127.0.0.1:19092 --topic shop.orders \\
        --warehouse /data/warehouse --database shop [--table orders] [--format canal-json]

Runs on confluent-kafka in one Python process (`job.py`, the default) or, with ``--engine spark
--checkpoint DIR``, on Spark Structured Streaming (`spark_job.py`, the ``strata-kafka`` source).
"""

from strata_platform.cdc.formats import ChangeEvent, parse, parse_canal, parse_debezium
from strata_platform.cdc.job import CdcError, CdcJob, JobStats

__all__ = ["CdcError", "CdcJob", "ChangeEvent", "JobStats", "parse", "parse_canal", "parse_debezium"]
