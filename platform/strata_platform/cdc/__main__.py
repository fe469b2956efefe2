"""`python -m strata_platform.cdc`: run the CDC ingestion job.

``--engine python`` (the default, also what the ``cdc`` role of ``strata_platform.serve`` runs):
one confluent-kafka process, progress in the tables' snapshots. ``--engine spark``: the same sync
on Spark Structured Streaming (``spark_job``), progress in ``--checkpoint``; ``--until-idle``
then means: catch up with the topics and stop (Trigger.AvailableNow).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from dataclasses import asdict

from strata_platform.cdc.job import CdcJob


def _pairs(values: list[str] | None) -> dict[str, str]:
    out = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"expected key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m strata_platform.cdc",
        description="Sync Kafka CDC topics (debezium-json, canal-json) into Strata tables.")
    parser.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers")
    parser.add_argument("--topic", action="append", required=True,
                        help="topic(s) to consume; repeat or separate with commas")
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--database", required=True)
    parser.add_argument("--table", help="sync into this one table (default: the table named by each event)")
    parser.add_argument("--format", default="debezium-json", choices=["debezium-json", "canal-json"])
    parser.add_argument("--primary-keys", help="comma-separated primary key of created tables "
                                               "(default: from the events)")
    parser.add_argument("--table-conf", action="append", help="option of created tables, key=value")
    parser.add_argument("--catalog-conf", action="append", help="catalog option, key=value")
    parser.add_argument("--name", default="cdc", help="job name: the commit user is strata-cdc-<name>")
    parser.add_argument("--batch-size", type=int, default=10_000,
                        help="--engine python: events per batch (spark: see --max-offsets-per-trigger)")
    parser.add_argument("--until-idle", type=float, help="stop after this many seconds without events "
                                                         "(--engine spark: stop once caught up)")
    parser.add_argument("--engine", default="python", choices=["python", "spark"])
    parser.add_argument("--checkpoint", help="--engine spark: the streaming query's checkpoint location")
    parser.add_argument("--trigger-interval", default="5 seconds", help="--engine spark: micro-batch interval")
    parser.add_argument("--max-offsets-per-trigger", type=int, help="--engine spark: admission control")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    topics = [t.strip() for item in args.topic for t in item.split(",") if t.strip()]
    if args.engine == "spark":
        return run_spark(args, topics)
    job = CdcJob(args.bootstrap, topics, args.warehouse, args.database, fmt=args.format, table=args.table,
                 primary_keys=[k.strip() for k in args.primary_keys.split(",")] if args.primary_keys else None,
                 table_options=_pairs(args.table_conf), name=args.name, batch_size=args.batch_size,
                 catalog_options=_pairs(args.catalog_conf))

    def stop(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        stats = job.run(until_idle=args.until_idle)
    except KeyboardInterrupt:
        stats = job.stats
    finally:
        job.close()
    json.dump(asdict(stats), sys.stdout)
    sys.stdout.write("\n")
    return 0


def run_spark(args: argparse.Namespace, topics: list[str]) -> int:
    from strata_platform.cdc.spark_job import SparkCdcJob
    from strata_platform.services.spark import spark_session

    if not args.checkpoint:
        raise SystemExit("--engine spark needs --checkpoint (where the streaming query keeps its offsets)")
    spark = spark_session(f"strata-cdc-{args.name}")
    try:
        job = SparkCdcJob(spark, args.bootstrap, topics, args.warehouse, args.database, args.checkpoint,
                          fmt=args.format, table=args.table,
                          primary_keys=[k.strip() for k in args.primary_keys.split(",")] if args.primary_keys else None,
                          table_options=_pairs(args.table_conf), catalog_options=_pairs(args.catalog_conf),
                          max_offsets_per_trigger=args.max_offsets_per_trigger)
        if args.until_idle is not None:
            job.run_available_now()
        else:
            query = job.start(query_name=f"strata-cdc-{args.name}", processingTime=args.trigger_interval)
            signal.signal(signal.SIGTERM, lambda *_: query.stop())
            query.awaitTermination()
        json.dump(asdict(job.stats), sys.stdout)
        sys.stdout.write("\n")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
