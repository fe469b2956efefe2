"""Partition expiry (Paimon's ``PartitionExpire`` and the ``expire_partitions`` procedure).

A partition expires when its time is older than ``partition.expiration-time``. Its time comes from
``partition.expiration-strategy``:

* ``values-time`` (default): the partition values, through ``partition.timestamp-pattern`` (e.g.
  ``$dt $hour:00:00``; default: the first partition value) and ``partition.timestamp-formatter``
  (a Java DateTimeFormatter pattern such as ``yyyyMMdd``; default ``yyyy-MM-dd[ HH:mm:ss]``).
  A partition whose values do not parse, or hold a null, never expires (Paimon logs and skips it).
* ``update-time``: the newest creation time of the partition's live files.

Expired partitions (at most ``partition.expiration-max-num`` per run, in value order) are dropped
by one OVERWRITE snapshot that deletes all their files, exactly as Paimon's ``dropPartitions``;
their files are physically removed when that snapshot's predecessors expire. After commits the
check runs at most every ``partition.expiration-check-interval`` per process.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import time
import uuid
from collections import defaultdict
from typing import Any

from strata.format import binary_row
from strata.iceberg import sync_after_commit
from strata.io.paths import partition_value_string
from strata.manifest.manifest_entry import live_files
from strata.operation.commit import FileStoreCommit
from strata.store import FileStore, HasStore, store_of

log = logging.getLogger(__name__)

_last_check: dict[str, float] = {}  # table path -> monotonic time of the last automatic check

_DEFAULT_TIME = re.compile(r"^(\d{1,10})-(\d{1,2})-(\d{1,2})"
                           r"(?:[ T](\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.(\d{1,9}))?)?$")
# Java DateTimeFormatter letters -> strptime directives, by run length (None: any length)
_JAVA_LETTERS: dict[str, dict[int | None, str]] = {
    "y": {2: "%y", None: "%Y"}, "u": {2: "%y", None: "%Y"}, "M": {3: "%b", 4: "%B", None: "%m"},
    "d": {None: "%d"}, "H": {None: "%H"}, "h": {None: "%I"}, "m": {None: "%M"}, "s": {None: "%S"},
    "S": {None: "%f"}, "a": {None: "%p"}, "D": {None: "%j"}, "E": {3: "%a", 4: "%A", None: "%a"},
}


def java_pattern_to_strptime(pattern: str) -> str:
    """``yyyyMMdd`` -> ``%Y%m%d``; quoted text ('T') is literal."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "'":
            end = pattern.find("'", i + 1)
            if end < 0:
                raise ValueError(f"unterminated quote in timestamp formatter {pattern!r}")
            out.append("'" if end == i + 1 else pattern[i + 1:end].replace("%", "%%"))
            i = end + 1
            continue
        if c.isalpha():
            j = i
            while j < len(pattern) and pattern[j] == c:
                j += 1
            table = _JAVA_LETTERS.get(c)
            if table is None:
                raise ValueError(f"unsupported letter {c!r} in timestamp formatter {pattern!r}")
            out.append(table.get(j - i, table[None]))
            i = j
            continue
        out.append("%%" if c == "%" else c)
        i += 1
    return "".join(out)


def parse_partition_time(text: str, formatter: str | None) -> dt.datetime:
    """A partition time string -> a naive local datetime (ValueError if it does not parse)."""
    if formatter is None:
        m = _DEFAULT_TIME.match(text.strip())
        if not m:
            raise ValueError(f"not a timestamp: {text!r}")
        y, mo, d, h, mi, s, frac = m.groups()
        micros = int((frac or "0").ljust(9, "0")[:6])
        return dt.datetime(int(y), int(mo), int(d), int(h or 0), int(mi or 0), int(s or 0), micros)
    return dt.datetime.strptime(text, java_pattern_to_strptime(formatter))


def replace_pattern(pattern: str, keys: list[str], values: list[str]) -> str:
    """``$dt $hour:00:00`` with the partition values; longer keys win ($dt1 before $dt)."""
    order = sorted(range(len(keys)), key=lambda i: -len(keys[i]))
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern[i] == "$":
            for idx in order:
                if pattern.startswith(keys[idx], i + 1):
                    out.append(values[idx])
                    i += 1 + len(keys[idx])
                    break
            else:
                out.append("$")
                i += 1
            continue
        out.append(pattern[i])
        i += 1
    return "".join(out)


def _value_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, dt.date):
        return value.isoformat()
    return partition_value_string(value)


def partition_time(table: FileStore | HasStore, values: list[Any]) -> dt.datetime | None:
    """The values-time of a partition, or None if it cannot be extracted."""
    table = store_of(table)
    texts = [_value_text(v) for v in values]
    if any(t is None for t in texts):
        return None
    keys = table.schema.partition_keys
    pattern = table.core.get_str("partition.timestamp-pattern")
    text = replace_pattern(pattern, keys, [str(t) for t in texts]) if pattern else str(texts[0])
    try:
        return parse_partition_time(text, table.core.get_str("partition.timestamp-formatter"))
    except ValueError:
        log.warning("table %s: cannot extract a time from partition %s; it will not expire "
                    "(check partition.timestamp-formatter / -pattern, or use the update-time strategy)",
                    table.identifier, dict(zip(keys, texts, strict=True)))
        return None


def expire_partitions(table: FileStore | HasStore, expiration_ms: int | None = None, now: dt.datetime | None = None,
                      max_expires: int | None = None, strategy: str | None = None,
                      commit_user: str | None = None, dry_run: bool = False) -> list[dict[str, Any]]:
    """Drop the expired partitions in one OVERWRITE commit; returns their values (by key)."""
    table = store_of(table)
    if not table.schema.partition_keys:
        raise ValueError(f"table {table.identifier} is not partitioned")
    if expiration_ms is None:
        expiration_ms = table.core.get("partition.expiration-time")
        if expiration_ms is None:
            raise ValueError(f"table {table.identifier}: give an expiration time or set "
                             "'partition.expiration-time'")
    strategy = (strategy or str(table.core.get("partition.expiration-strategy"))).lower()
    if strategy not in ("values-time", "update-time"):
        raise ValueError(f"unknown partition.expiration-strategy {strategy!r} (values-time or update-time)")
    max_expires = int(table.core.get("partition.expiration-max-num")) if max_expires is None else max_expires
    now = now or dt.datetime.now()
    threshold = now - dt.timedelta(milliseconds=int(expiration_ms))
    latest = table.snapshot_manager.latest()
    if latest is None:
        return []
    store = table.manifest_store
    live = live_files(store.read_entries(store.read_manifest_list(latest.base_manifest_list)
                                         + store.read_manifest_list(latest.delta_manifest_list)))
    updated: dict[bytes, int] = defaultdict(int)
    for e in live:
        updated[e.partition] = max(updated[e.partition], e.file.creation_time or 0)
    types = [f.type.to_arrow() for f in table.schema.partition_fields()]
    keys = table.schema.partition_keys
    expired: list[tuple[bytes, list[Any]]] = []
    for partition, last_update in updated.items():
        values = binary_row.deserialize(partition, types)
        if strategy == "values-time":
            when = partition_time(table, values)
        else:  # creation_time is the writer's local wall clock counted as epoch millis
            when = dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=last_update)
        if when is not None and when < threshold:
            expired.append((partition, values))
    expired.sort(key=lambda pv: ",".join(str(_value_text(v)) for v in pv[1]))
    expired = expired[:max_expires]
    dropped = [dict(zip(keys, values, strict=True)) for _, values in expired]
    if not expired or dry_run:
        return dropped
    commit = FileStoreCommit(table.file_io, table.path, table.schema, commit_user or str(uuid.uuid4()),
                             publish=table.snapshot_publisher(), branch=table.branch)
    commit.metric_table = str(table.identifier)
    commit.overwrite([], [p for p, _ in expired])
    log.info("table %s: expired partitions %s", table.identifier, dropped)
    sync_after_commit(table)  # Iceberg readers see the partitions gone now, not at the next commit
    return dropped


def maybe_expire_partitions(table: FileStore | HasStore) -> list[dict[str, Any]]:
    """After a commit: expire partitions if configured and the check interval has passed."""
    table = store_of(table)
    if table.core.get("partition.expiration-time") is None or not table.schema.partition_keys:
        return []
    interval_s = int(table.core.get("partition.expiration-check-interval")) / 1000
    last = _last_check.get(table.path)
    now = time.monotonic()
    if last is not None and now - last < interval_s:
        return []
    _last_check[table.path] = now
    return expire_partitions(table)
