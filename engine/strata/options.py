"""Table options (Paimon's CoreOptions subset Strata understands), with defaults and validation.

Unknown keys and invalid values are rejected at table creation / alteration with an error naming
the option. Tables written by other Paimon engines may carry options Strata does not know; those
are kept untouched when reading.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from strata.errors import OptionError

MiB = 1024 * 1024


def parse_memory(text: str) -> int:
    """'128 mb', '256MB', '1 gb', '4096' (bytes) -> bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([kmgt]?i?b?|bytes)?\s*", text.lower())
    if not m:
        raise ValueError(f"not a memory size: {text!r}")
    unit = (m.group(2) or "b").rstrip("b").rstrip("i") or "b"
    factor = {"b": 1, "byte": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}.get(unit)
    if factor is None:
        raise ValueError(f"unknown memory unit in {text!r}")
    return int(m.group(1)) * factor


def parse_duration_ms(text: str) -> int:
    """'1 h', '30 min', '10 s', '500 ms', '2d' -> milliseconds."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", text.lower())
    if not m:
        raise ValueError(f"not a duration: {text!r}")
    units = {"": 1, "ms": 1, "s": 1000, "sec": 1000, "min": 60000, "m": 60000, "h": 3600000,
             "hour": 3600000, "d": 86400000, "day": 86400000, "days": 86400000}
    if m.group(2) not in units:
        raise ValueError(f"unknown duration unit in {text!r}")
    return int(m.group(1)) * units[m.group(2)]


def _bool(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise ValueError(f"expected true or false, got {text!r}")
    return text.lower() == "true"


def _choice(*values: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text.lower() not in values:
            raise ValueError(f"expected one of {', '.join(values)}, got {text!r}")
        return text.lower()
    return parse


def _int_at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise ValueError(f"must be >= {low}, got {value}")
        return value
    return parse


def _ratio(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"must be between 0 and 1, got {value}")
    return value


POSTPONE_BUCKET = -2  # bucket option, and the bucket of the files a postpone-bucket table has not placed yet


def _bucket(text: str) -> int:
    value = int(text)
    if value == 0 or value < -2:
        raise ValueError(f"bucket must be -1 (dynamic/unaware), -2 (postpone) or > 0, got {value}")
    return value


def _str(text: str) -> str:
    return text


@dataclass(frozen=True)
class Option:
    key: str
    default: str | None
    parse: Callable[[str], Any]
    doc: str


# The purge threshold of a table that publishes Iceberg metadata. Iceberg readers apply its deletes
# row by row at every query (Trino tests the position of every row of a data file with any), and a
# deleted position costs them far more than scanning a row: files are rewritten without their
# deleted rows much sooner than on a table that only Strata reads.
ICEBERG_DELETE_RATIO_THRESHOLD = 0.01

_OPTIONS: list[Option] = [
    Option("bucket", "-1", _bucket, "number of buckets; -1 = unaware (append) / dynamic (PK)"),
    Option("bucket-key", None, _str, "comma-separated bucket key columns"),
    Option("dynamic-bucket.target-row-num", "2000000", _int_at_least(1),
           "dynamic buckets (bucket=-1, PK): keys a bucket takes before new keys open another"),
    Option("dynamic-bucket.max-buckets", "-1", int,
           "dynamic buckets: buckets per partition at most (-1: no limit); past it keys go to a random one"),
    Option("dynamic-bucket.initial-buckets", None, _int_at_least(1),
           "dynamic buckets: Paimon's initial assigner count (Flink/Spark parallelism); accepted"),
    Option("file.format", "parquet", _choice("parquet"), "data file format"),
    Option("file.compression", "zstd", _choice("zstd", "snappy", "gzip", "lz4", "none", "uncompressed"),
           "data file compression"),
    Option("file.compression.zstd-level", "1", int, "zstd level"),
    Option("manifest.compression", "zstd", _choice("zstd", "null", "deflate", "snappy"), "manifest codec"),
    Option("target-file-size", None, parse_memory, "target data file size (128 MB PK, 256 MB append)"),
    Option("write-buffer-size", "256 mb", parse_memory, "memory of a writer's buffers before a flush"),
    Option("write-buffer-spillable", None, _bool,
           "a primary-key writer spills a full buffer to local disk as a sorted run and merges the runs into one "
           "level-0 run when it flushes (default: on object storage, or when target-file-size > write-buffer-size)"),
    Option("write-buffer-spill.max-disk-size", None, parse_memory,
           "local disk a writer's spilled runs may take; past it the writer flushes instead (default: no limit)"),
    Option("spill-compression", "lz4", _choice("zstd", "lz4", "none"),
           "compression of spilled runs (lz4: they are read back within the commit, so speed beats size; "
           "Paimon's writers default to zstd)"),
    Option("spill-compression.zstd-level", "1", int, "zstd level of spilled runs"),
    Option("local-sort.max-num-file-handles", "128", _int_at_least(2),
           "spilled runs a writer keeps before merging them into one on local disk"),
    Option("page-size", "64 kb", parse_memory, "accepted for compatibility"),
    Option("merge-engine", "deduplicate",
           _choice("deduplicate", "partial-update", "aggregation", "first-row"), "merge engine"),
    Option("sequence.field", None, _str, "fields deciding merge order"),
    Option("sequence.field.sort-order", "ascending", _choice("ascending", "descending"), "order"),
    Option("rowkind.field", None, _str, "string column holding +I/-U/+U/-D"),
    Option("ignore-delete", "false", _bool, "drop delete records"),
    Option("partial-update.remove-record-on-delete", "false", _bool, "partial-update delete"),
    Option("partial-update.remove-record-on-sequence-group", None, _str, "partial-update"),
    Option("aggregation.remove-record-on-delete", "false", _bool, "a -D removes the whole aggregated row"),
    Option("changelog-producer", "none", _choice("none", "input", "lookup", "full-compaction"),
           "changelog producer"),
    Option("changelog-producer.row-deduplicate", "false", _bool, "suppress unchanged -U/+U"),
    Option("num-sorted-run.compaction-trigger", "5", _int_at_least(1), "sorted runs that trigger compaction"),
    Option("num-sorted-run.stop-trigger", None, _int_at_least(1), "sorted runs that stall writes"),
    Option("num-levels", None, _int_at_least(2), "LSM levels"),
    Option("compaction.max-size-amplification-percent", "200", _int_at_least(0), "size amplification"),
    Option("compaction.size-ratio", "1", _int_at_least(0), "size ratio"),
    Option("compaction.min.file-num", "5", _int_at_least(1), "append compaction min files"),
    Option("compaction.max.file-num", "50", _int_at_least(1), "append compaction max files"),
    Option("compaction.delete-ratio-threshold", "0.2", _ratio,
           "deletion vectors: files with more deleted rows than this share are rewritten without them "
           "(append tables: by compaction; primary-key tables: by the writer, in the background); "
           f"unset, {ICEBERG_DELETE_RATIO_THRESHOLD:g} for a table that publishes Iceberg metadata"),
    Option("full-compaction.delta-commits", None, _int_at_least(1), "full compaction every N commits"),
    Option("zorder.var-length-contribution", "8", _int_at_least(1), "z-order bytes of a string column"),
    Option("write-only", "false", _bool, "skip compaction and expiry in writers"),
    Option("snapshot.num-retained.min", "10", _int_at_least(1), "min snapshots kept"),
    Option("snapshot.num-retained.max", str(2**31 - 1), _int_at_least(1), "max snapshots kept"),
    Option("snapshot.time-retained", "1 h", parse_duration_ms, "snapshot retention"),
    Option("snapshot.expire.limit", "50", _int_at_least(1), "snapshots expired per run"),
    # table maintenance (strata.operation.expire / partition_expire)
    Option("snapshot.clean-empty-directories", "false", _bool, "remove emptied data directories at expiry"),
    Option("partition.expiration-time", None, parse_duration_ms, "partitions older than this are dropped"),
    Option("partition.expiration-check-interval", "1 h", parse_duration_ms, "partition expiry check interval"),
    Option("partition.expiration-strategy", "values-time", _choice("values-time", "update-time"),
           "partition time from its values or from its files' creation time"),
    Option("partition.expiration-max-num", "100", _int_at_least(1), "partitions expired per run"),
    Option("partition.timestamp-formatter", None, _str, "Java DateTimeFormatter pattern of partition times"),
    Option("partition.timestamp-pattern", None, _str, "partition time from values, e.g. '$dt $hour:00:00'"),
    Option("tag.num-retained-max", None, _int_at_least(1), "tags kept at most (oldest deleted first)"),
    Option("tag.default-time-retained", None, parse_duration_ms, "retention of new tags"),
    Option("manifest.target-file-size", "8 mb", parse_memory, "manifest file size"),
    Option("manifest.merge-min-count", "30", _int_at_least(1), "manifests merged at least"),
    Option("manifest.full-compaction-threshold-size", "16 mb", parse_memory, "manifest full merge"),
    Option("partition.default-name", "__DEFAULT_PARTITION__", _str, "name of the null partition"),
    Option("partition.legacy-name", "true", _bool, "Java toString partition values"),
    Option("commit.max-retries", "10", _int_at_least(0), "commit retries"),
    Option("commit.min-retry-wait", "10 ms", parse_duration_ms, "commit back-off start"),
    Option("commit.max-retry-wait", "10 s", parse_duration_ms, "commit back-off cap"),
    Option("commit.timeout", None, parse_duration_ms, "commit deadline"),
    Option("commit.compaction-retry-timeout", "1 min", parse_duration_ms,
           "how long a commit whose own compaction failed after its batch published keeps compacting the "
           "batch's level-0 files on the latest snapshot, in tables whose readers skip level 0 (deletion "
           "vectors, first-row) or take their changelog from it (lookup); 0: no retry"),
    Option("commit.user-prefix", None, _str, "prefix of generated commit users"),
    Option("metadata.stats-mode", "truncate(16)", _str, "none | counts | full | truncate(N)"),
    Option("primary-key", None, _str, "primary key (alternative to the schema's)"),
    Option("partition", None, _str, "partition keys (alternative to the schema's)"),
    Option("scan.mode", "default", _choice("default", "latest-full", "full", "latest", "latest-delta",
                                           "compacted-full", "from-timestamp", "from-snapshot",
                                           "from-snapshot-full", "incremental"), "scan mode"),
    Option("scan.snapshot-id", None, int, "scan snapshot"),
    Option("scan.timestamp-millis", None, int, "scan timestamp"),
    Option("scan.tag-name", None, _str, "scan tag"),
    Option("consumer-id", None, _str, "consumer"),
    Option("consumer.expiration-time", None, parse_duration_ms, "consumer expiry"),
    Option("log.system", "none", _choice("none", "kafka"), "log store"),
    Option("log.consistency", "transactional", _choice("transactional", "eventual"), "log consistency"),
    Option("log.system.auto-register", "false", _bool, "create the log topic (partitions = buckets) on demand"),
    Option("log.changelog-mode", "auto", _choice("auto", "all", "upsert"),
           "log records: all row kinds, or upsert (no -U); auto = all (transactional) / upsert (eventual)"),
    Option("log.format", "debezium-json", _choice("debezium-json"), "log record value format"),
    Option("log.key.format", "json", _choice("json"), "log record key format"),
    Option("log.ignore-delete", "false", _bool, "do not write -D records to the log"),
    Option("deletion-vectors.enabled", "false", _bool, "merge-on-write: deletion vectors mark superseded rows"),
    Option("deletion-vectors.bitmap64", "false", _bool, "64-bit roaring bitmaps (Iceberg-compatible)"),
    Option("deletion-vector.index-file.target-size", "2 mb", parse_memory, "deletion-vector index file size"),
    Option("deletion-vectors.index-file.target-size", None, parse_memory,
           "alias of deletion-vector.index-file.target-size"),
    Option("metadata.iceberg.storage", "disabled",
           _choice("disabled", "table-location", "hadoop-catalog", "rest-catalog"),
           "publish Iceberg metadata after each snapshot (rest-catalog: in the table, served by Strata's catalog)"),
    Option("metadata.iceberg.format-version", "2", _choice("2", "3"),
           "Iceberg format version of the published metadata (2: position-delete files, read by Trino 476; "
           "3: row lineage and Puffin deletion vectors)"),
    Option("metadata.iceberg.previous-versions-max", "0", _int_at_least(0), "older metadata files kept"),
    Option("metadata.iceberg.delete-after-commit.enabled", "true", _bool,
           "delete metadata files past previous-versions-max"),
    Option("metadata.iceberg.statistics", "compaction", _choice("compaction", "manual"),
           "NDV statistics for Iceberg readers (Puffin theta sketches; needs the stats extra): computed for the "
           "first rows and refreshed after a compaction that finds them stale, or only by `strata iceberg stats`"),
    Option("metadata.iceberg.manifest-compression", "snappy", _choice("snappy", "zstd", "gzip", "deflate", "none"),
           "codec of the Iceberg manifests"),
    Option("path", None, _str, "table path"),
    Option("type", None, _str, "table type"),
    Option("data-file.prefix", "data-", _str, "data file prefix"),
    Option("changelog-file.prefix", "changelog-", _str, "changelog file prefix"),
]
OPTIONS: dict[str, Option] = {o.key: o for o in _OPTIONS}
# options with a per-field or free-form part, e.g. fields.price.aggregate-function
_PATTERNS = [
    re.compile(r"^fields\.[^.]+(,[^.]+)*\.(aggregate-function|ignore-retract|sequence-group|"
               r"default-aggregate-function|list-agg-delimiter|distinct|nested-key)$"),
    re.compile(r"^fields\.default-aggregate-function$"),
    re.compile(r"^log\.kafka\..+$|^kafka\..+$|^strata\..+$"),
]


def validate(options: Mapping[str, str], context: str) -> None:
    """Reject unknown keys and unparsable values; `context` names the table for the message."""
    for key, value in options.items():
        option = OPTIONS.get(key)
        if option is None:
            if any(p.match(key) for p in _PATTERNS):
                continue
            raise OptionError(f"unknown option {key!r} for {context}{_did_you_mean(key)}")
        try:
            option.parse(str(value))
        except ValueError as exc:
            raise OptionError(f"invalid value {value!r} for option {key!r} of {context}: {exc}") from None


def _did_you_mean(key: str) -> str:
    """'; did you mean 'bucket'?' for a near miss of a known option, else ''."""
    close = difflib.get_close_matches(key, OPTIONS, n=1, cutoff=0.8)
    return f"; did you mean {close[0]!r}?" if close else ""


class CoreOptions:
    """Typed access to a table's options, with Paimon's defaults."""

    def __init__(self, options: Mapping[str, str]):
        self.raw = dict(options)

    def get(self, key: str) -> Any:
        option = OPTIONS[key]
        text = self.raw.get(key, option.default)
        return None if text is None else option.parse(text)

    def get_str(self, key: str, default: str | None = None) -> str | None:
        return self.raw.get(key, default)

    @property
    def bucket(self) -> int:
        return int(self.get("bucket"))

    def bucket_key(self) -> list[str]:
        value = self.get("bucket-key")
        return [f.strip() for f in value.split(",") if f.strip()] if value else []

    def target_file_size(self, has_primary_key: bool) -> int:
        size = self.get("target-file-size")
        if size is not None:
            return int(size)
        return (128 if has_primary_key else 256) * MiB

    def write_buffer_spillable(self, has_primary_key: bool, object_store: bool) -> bool:
        """Paimon's default: spillable on object storage (where every file costs requests) or when
        a file may hold more than one buffer's worth of rows."""
        value = self.get("write-buffer-spillable")
        if value is not None:
            return bool(value)
        return object_store or self.target_file_size(has_primary_key) > int(self.get("write-buffer-size"))

    @property
    def merge_engine(self) -> str:
        return str(self.get("merge-engine"))

    @property
    def compaction_trigger(self) -> int:
        return int(self.get("num-sorted-run.compaction-trigger"))

    @property
    def stop_trigger(self) -> int:
        value = self.get("num-sorted-run.stop-trigger")
        return int(value) if value is not None else self.compaction_trigger + 3

    @property
    def delete_ratio_threshold(self) -> float:
        """compaction.delete-ratio-threshold, whose default is lower for a table that publishes
        Iceberg metadata (see ICEBERG_DELETE_RATIO_THRESHOLD); a value set on the table wins."""
        if "compaction.delete-ratio-threshold" not in self.raw and self.get("metadata.iceberg.storage") != "disabled":
            return ICEBERG_DELETE_RATIO_THRESHOLD
        return float(self.get("compaction.delete-ratio-threshold"))

    @property
    def num_levels(self) -> int:
        value = self.get("num-levels")
        return int(value) if value is not None else self.compaction_trigger + 1

    def field_option(self, field: str, suffix: str) -> str | None:
        return self.raw.get(f"fields.{field}.{suffix}")

    def sequence_fields(self) -> list[str]:
        value = self.get("sequence.field")
        return [f.strip() for f in value.split(",") if f.strip()] if value else []

    def stats_truncate_length(self) -> int | None:
        """None = full stats; 0 = no min/max (counts/none); N = truncate strings to N chars."""
        mode = str(self.get("metadata.stats-mode")).lower()
        if mode == "full":
            return None
        if mode in ("none", "counts"):
            return 0
        m = re.fullmatch(r"truncate\((\d+)\)", mode)
        if not m:
            raise OptionError(f"invalid metadata.stats-mode {mode!r}")
        return int(m.group(1))
