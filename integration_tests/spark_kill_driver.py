"""The Spark driver that ``test_spark_exactly_once`` kills with SIGKILL and restarts.

One local Spark session runs one streaming query per target table, all reading the same
directory of Parquet files (one file per micro-batch) and writing through the ``strata`` sink
with their own checkpoint under ``--checkpoints``. Trigger.AvailableNow: a run that is not
killed consumes the rest of the source and exits 0.

    python spark_kill_driver.py --warehouse W --source DIR --checkpoints DIR

With ``--master spark://...`` the executors run on a standalone cluster; ``--source-table
DB.T`` then streams a strata table of the warehouse (one snapshot per micro-batch) instead of
the directory, and ``--catalog KEY=VALUE`` options reach the catalog (e.g. JDBC and S3).

Prints ``STARTED`` once every query runs and ``DONE`` when all have finished.
"""

from __future__ import annotations

import argparse
import sys

SOURCE_SCHEMA = "id bigint, key bigint, grp bigint, v string"
# table -> the columns the query writes (SQL expressions over the source)
QUERIES = {
    "pk": ["key AS id", "id AS last_id", "v"],
    "log": ["id", "key", "v"],
    "agg": ["grp", "id AS total", "CAST(1 AS bigint) AS n"],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--source", help="directory of Parquet files")
    parser.add_argument("--checkpoints", required=True)
    parser.add_argument("--files-per-trigger", type=int, default=1)
    parser.add_argument("--master")
    parser.add_argument("--source-table")
    parser.add_argument("--catalog", action="append", default=[], help="KEY=VALUE catalog option")
    args = parser.parse_args()
    if not (args.source or args.source_table):
        parser.error("give --source DIR or --source-table DB.T")

    from strata.spark import register

    if args.master:
        from strata_platform.services.spark_cluster import cluster_session

        spark = cluster_session("strata-kill-driver", master=args.master, spark_sql_shuffle_partitions="2")
    else:
        from strata_platform.services.spark import spark_session

        spark = spark_session("strata-kill-driver", spark_sql_shuffle_partitions="2")
    register(spark)
    catalog = {f"catalog.{k}": v for k, v in (option.split("=", 1) for option in args.catalog)}
    if args.source_table:
        stream = (spark.readStream.format("strata").options(**catalog).option("scan.mode", "from-snapshot")
                  .option("scan.snapshot-id", "1").option("max-files-per-trigger", args.files_per_trigger)
                  .load(f"{args.warehouse}#{args.source_table}"))
    else:
        stream = (spark.readStream.schema(SOURCE_SCHEMA).option("maxFilesPerTrigger", args.files_per_trigger)
                  .parquet(args.source))
    queries = []
    for table, columns in QUERIES.items():
        query = (stream.selectExpr(*columns).writeStream.format("strata").queryName(table).options(**catalog)
                 .option("checkpointLocation", f"{args.checkpoints}/{table}")
                 .trigger(availableNow=True).start(f"{args.warehouse}#db.{table}"))
        queries.append(query)
    print("STARTED", flush=True)
    for query in queries:
        query.awaitTermination()
        if query.exception() is not None:
            print(f"query {query.name} failed: {query.exception()}", file=sys.stderr, flush=True)
            return 1
    print("DONE", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
