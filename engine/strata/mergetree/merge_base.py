"""What every merge engine shares: the row kinds, the MergeFunction interface, MergeError, and
masks over a batch's row kinds."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from strata.errors import StrataError
from strata.mergetree.sequence import SequenceOrder
from strata.schema.table_schema import VALUE_KIND

INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE = 0, 1, 2, 3


class MergeError(StrataError, ValueError):
    """Records the merge engine refuses (e.g. a retraction it cannot apply), or an overflow."""


class MergeFunction(ABC):
    sequence: SequenceOrder | None = None

    @abstractmethod
    def merge(self, table: pa.Table, key_names: Sequence[str]) -> pa.Table:
        """One row per key of a table sorted by (key, sequence)."""

    def required_columns(self, columns: Sequence[str]) -> list[str]:
        """Columns a merge of ``columns`` also needs (sequence fields, sequence-group fields)."""
        return [f for f in self.sequence.fields if f not in columns] if self.sequence else []

    def check_kinds(self, kinds: np.ndarray, columns: Sequence[str]) -> None:
        """Raise early (at write time) for row kinds the engine will refuse to merge."""
        return None  # every row kind is accepted


def retraction_mask(kinds: np.ndarray) -> np.ndarray:
    return (kinds == UPDATE_BEFORE) | (kinds == DELETE)


def drop_retractions(table: pa.Table) -> pa.Table:
    """Keep only +I/+U records."""
    kinds = table.column(VALUE_KIND).to_numpy()
    keep = (kinds == INSERT) | (kinds == UPDATE_AFTER)
    return table if keep.all() else table.filter(pa.array(keep))


def live_rows_mask(kinds: np.ndarray) -> np.ndarray:
    return (kinds == INSERT) | (kinds == UPDATE_AFTER)
