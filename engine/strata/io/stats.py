"""Column statistics (SimpleStats: min / max BinaryRows and null counts), computed with pyarrow."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from strata.format import binary_row
from strata.manifest.simple_stats import SimpleStats


def _truncate_min(value: Any, limit: int | None) -> Any:
    if limit is None or not isinstance(value, (str, bytes)) or len(value) <= limit:
        return value
    return value[:limit]


def _truncate_max(value: Any, limit: int | None) -> Any:
    """A truncated max must stay >= every value: bump the last kept character, or give up."""
    if limit is None or not isinstance(value, (str, bytes)) or len(value) <= limit:
        return value
    head = value[:limit]
    if isinstance(head, str):
        for i in range(len(head) - 1, -1, -1):
            if ord(head[i]) < 0x10FFFF and not 0xD7FF <= ord(head[i]) < 0xDFFF:
                return head[:i] + chr(ord(head[i]) + 1)
        return None
    for i in range(len(head) - 1, -1, -1):
        if head[i] < 0xFF:
            return head[:i] + bytes([head[i] + 1])
    return None


def column_stats(columns: Sequence[pa.ChunkedArray | pa.Array], truncate: int | None) -> SimpleStats:
    """Stats of the given columns. `truncate`: None = full, 0 = null counts only, N = truncate(N)."""
    types = [c.type for c in columns]
    mins: list[Any] = []
    maxs: list[Any] = []
    nulls: list[int | None] = []
    for column in columns:
        nulls.append(int(column.null_count))
        if truncate == 0 or len(column) == column.null_count or binary_row.is_collection(column.type):
            mins.append(None)
            maxs.append(None)
            continue
        mm = pc.min_max(column)
        mins.append(_truncate_min(mm["min"].as_py(), truncate))
        maxs.append(_truncate_max(mm["max"].as_py(), truncate))
    return SimpleStats(binary_row.serialize(mins, types), binary_row.serialize(maxs, types), nulls)
