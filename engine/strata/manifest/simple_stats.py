"""Column statistics as Paimon stores them in manifests (``stats/SimpleStats.java``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

# Serialized BinaryRow of arity 0: 4-byte big-endian arity, then the fixed part, which for
# arity 0 is just the 8-byte header/null-bitset word ((0 + 63 + 8) // 64 * 8), all zero.
EMPTY_BINARY_ROW = b"\x00" * 12


@dataclass(frozen=True, slots=True)
class SimpleStats:
    """Min/max values (each a serialized BinaryRow) and per-column null counts.

    ``null_counts[i]`` is None when the count for column i is unknown.
    """

    min_values: bytes
    max_values: bytes
    null_counts: list[int | None]

    EMPTY: ClassVar[SimpleStats]

    def is_empty(self) -> bool:
        """True for the stats of zero columns (what Paimon writes when none are collected)."""
        return (not self.null_counts and self.min_values == EMPTY_BINARY_ROW
                and self.max_values == EMPTY_BINARY_ROW)


# Java's SimpleStats.EMPTY_STATS: two empty BinaryRows and an empty (not null) count array.
SimpleStats.EMPTY = SimpleStats(EMPTY_BINARY_ROW, EMPTY_BINARY_ROW, [])


def in_bounds(value: Any, low: Any, high: Any) -> bool:
    """Whether `value` may lie in [low, high]: also when the two cannot be compared, or it is NaN
    (which has no order), since a pruning caller must keep what it cannot rule out."""
    try:
        return bool(low <= value <= high) or (isinstance(value, float) and math.isnan(value))
    except TypeError:
        return True
