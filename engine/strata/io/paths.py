"""File and directory names of a table (FileStorePathFactory)."""

from __future__ import annotations

import datetime as dt
import math
import uuid
from collections.abc import Sequence
from decimal import Decimal
from itertools import count

import numpy as np

from strata.schema.types import DataField

DEFAULT_PARTITION_NAME = "__DEFAULT_PARTITION__"
# Characters Paimon's PartitionPathUtils escapes as %XX in partition directory names.
_ESCAPED = set('"#%\'*/:=?\\\x7f{}[]^') | {chr(c) for c in range(32)}
_EPOCH = dt.date(1970, 1, 1)


def escape_path_name(value: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in value)


def partition_value_string(value: object, default_name: str = DEFAULT_PARTITION_NAME,
                           root: str | None = None) -> str:
    """Java toString of the value's internal form (partition.legacy-name = true); `root` is the
    Paimon type root, which tells FLOAT from DOUBLE. Null or blank values name the default partition."""
    if value is None:
        return default_name
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, dt.datetime):
        text = _java_local_date_time(value)
    elif isinstance(value, dt.date):
        text = str((value - _EPOCH).days)  # DATE is an int of days internally
    elif isinstance(value, dt.time):  # TIME is an int of milliseconds of the day internally
        text = str(((value.hour * 60 + value.minute) * 60 + value.second) * 1000 + value.microsecond // 1000)
    elif isinstance(value, float):
        text = _java_float(value, single=root == "FLOAT")
    elif isinstance(value, Decimal):
        text = format(value, "f")
    elif isinstance(value, bytes):
        text = value.hex()
    else:
        text = str(value)
    return default_name if not text or text.isspace() else text


def _java_local_date_time(value: dt.datetime) -> str:
    """LocalDateTime.toString: seconds only when set, fractions as millis, micros (or nanos)."""
    if value.tzinfo is not None:  # TIMESTAMP_LTZ is stored as UTC
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    text = f"{value.year:04d}-{value.month:02d}-{value.day:02d}T{value.hour:02d}:{value.minute:02d}"
    if value.second or value.microsecond:
        text += f":{value.second:02d}"
        if value.microsecond % 1000 == 0 and value.microsecond:
            text += f".{value.microsecond // 1000:03d}"
        elif value.microsecond:
            text += f".{value.microsecond:06d}"
    return text


def _java_float(value: float, single: bool) -> str:
    """Float/Double.toString: shortest digits, plain in [1e-3, 1e7), else like 1.0E-5."""
    if math.isnan(value) or math.isinf(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    shortest = Decimal(str(np.float32(value)) if single else repr(value))
    if shortest == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    if Decimal("0.001") <= abs(shortest) < Decimal(10_000_000):
        text = format(shortest, "f")
        return text if "." in text else text + ".0"
    sign, digits, exponent = shortest.normalize().as_tuple()
    mantissa = f"{digits[0]}.{''.join(map(str, digits[1:])) or '0'}"
    return f"{'-' if sign else ''}{mantissa}E{int(exponent) + len(digits) - 1}"


def partition_path(fields: Sequence[DataField], values: Sequence[object],
                   default_name: str = DEFAULT_PARTITION_NAME) -> str:
    """'k1=v1/k2=v2' (empty for an unpartitioned table)."""
    return "/".join(
        f"{escape_path_name(f.name)}={escape_path_name(partition_value_string(v, default_name, f.type.root))}"
        for f, v in zip(fields, values, strict=True))


class PathFactory:
    """Names new files uniquely: ``<prefix>-<uuid>-<n>.<ext>`` as Paimon does."""

    def __init__(self, table_path: str, data_prefix: str = "data-", changelog_prefix: str = "changelog-"):
        self.table_path = table_path.rstrip("/")
        self.uuid = uuid.uuid4().hex
        self._counter = count()
        self.data_prefix = data_prefix
        self.changelog_prefix = changelog_prefix

    def bucket_dir(self, partition_dir: str, bucket: int) -> str:
        parts = [self.table_path, partition_dir, f"bucket-{bucket}"] if partition_dir else \
            [self.table_path, f"bucket-{bucket}"]
        return "/".join(parts)

    def new_data_file_name(self) -> str:
        return f"{self.data_prefix}{self.uuid}-{next(self._counter)}.parquet"

    def new_changelog_file_name(self) -> str:
        return f"{self.changelog_prefix}{self.uuid}-{next(self._counter)}.parquet"

    def manifest_dir(self) -> str:
        return f"{self.table_path}/manifest"

    def new_manifest_name(self) -> str:
        return f"manifest-{self.uuid}-{next(self._counter)}"

    def new_manifest_list_name(self) -> str:
        return f"manifest-list-{self.uuid}-{next(self._counter)}"

    def new_index_manifest_name(self) -> str:
        return f"index-manifest-{self.uuid}-{next(self._counter)}"

    def index_dir(self) -> str:
        return f"{self.table_path}/index"

    def new_index_file_name(self) -> str:
        return f"index-{self.uuid}-{next(self._counter)}"
