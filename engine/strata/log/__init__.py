"""The Kafka log store of a table (`log.system=kafka`) and the hybrid reader.

Writes go through `Table.write` / `TableWrite` + `TableCommit` as usual; with the option set they
also produce debezium-json records into the table's topic (partition = bucket), transactionally
per commit by default, and each snapshot records the per-bucket log offsets (`log.offsets`).
"""

from strata.log.hybrid import HybridReader, LogOffsetsLostWarning
from strata.log.kafka import (
    LogCommittable,
    LogSystemError,
    LogWriter,
    close_producers,
    ensure_topic,
    snapshot_log_offsets,
)
from strata.log.metrics import fallback_count
from strata.log.options import LOG_OFFSETS_PROPERTY, LogOptions, log_options

__all__ = [
    "LOG_OFFSETS_PROPERTY", "HybridReader", "LogCommittable", "LogOffsetsLostWarning", "LogOptions",
    "LogSystemError", "LogWriter", "close_producers", "ensure_topic", "fallback_count", "log_options",
    "snapshot_log_offsets",
]
