"""Iceberg-compatible metadata over a Paimon table's files (Paimon's ``metadata.iceberg.*``), so
that Iceberg readers (Trino, pyiceberg, Spark with Iceberg) read Strata tables."""

from strata.iceberg.location import enabled, latest_metadata_location
from strata.iceberg.sync import IcebergSync, SyncResult, sync_after_commit

__all__ = ["IcebergSync", "SyncResult", "enabled", "latest_metadata_location", "sync_after_commit"]
