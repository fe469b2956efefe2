"""TPC-H through the whole stack (``make tpch SF=1 REFRESH=2``): Spark loads and refreshes Strata
tables, Trino and Spark run the 22 queries over them, side by side with Trino's own Iceberg tables.
See ``strata_platform.tpch.workload``."""
