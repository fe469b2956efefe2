"""File and directory names of a table (FileStorePathFactory)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from decimal import Decimal
from itertools import count

from strata.schema.types import DataField

DEFAULT_PARTITION_NAME = "__DEFAULT_PARTITION__"
# Characters Paimon's PartitionPathUtils escapes as %XX in partition directory names.
_ESCAPED = set('"#%\'*/:=?\\\x7f{[]^') | {chr(c) for c in range(1, 32)}


def escape_path_name(value: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in value)


def partition_value_string(value: object, default_name: str = DEFAULT_PARTITION_NAME) -> str:
    """Java toString of a partition value (partition.legacy-name = true)."""
    if value is None:
        return default_name
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        return value.isoformat(sep="T") if value.microsecond else value.strftime("%Y-%m-%dT%H:%M")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, bytes):
        return value.hex()
    text = str(value)
    return text if text else default_name


def partition_path(fields: Sequence[DataField], values: Sequence[object],
                   default_name: str = DEFAULT_PARTITION_NAME) -> str:
    """'k1=v1/k2=v2' (empty for an unpartitioned table)."""
    return "/".join(f"{escape_path_name(f.name)}={escape_path_name(partition_value_string(v, default_name))}"
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
