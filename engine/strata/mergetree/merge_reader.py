"""Streaming, vectorized merge of sorted runs (SortMergeReader), in bounded memory.

Each run yields tables sorted by key with unique keys. The merge repeatedly takes, from every
run's current batch, the rows whose key is <= the smallest "last key" among those batches: no
later batch of any run can hold such a key, so those rows can be merged and emitted at once.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa

from strata.mergetree.merge_function import MergeFunction
from strata.mergetree.sorting import _as_numpy, _numeric, sort_by_key
from strata.schema.table_schema import SEQUENCE_NUMBER


def merge_runs(runs: Sequence[Iterator[pa.Table]], key_names: Sequence[str],
               merge_function: MergeFunction) -> Iterator[pa.Table]:
    if len(runs) == 1:
        yield from runs[0]
        return
    cursors = [_Cursor(run, key_names) for run in runs]
    cursors = [c for c in cursors if c.batch is not None]
    while cursors:
        if len(cursors) == 1:
            yield from cursors[0].drain()
            return
        bound = min(c.last_key() for c in cursors)
        parts = [c.take_through(bound) for c in cursors]
        combined = pa.concat_tables([p for p in parts if p.num_rows])
        order = sort_by_key(combined, key_names, SEQUENCE_NUMBER)
        yield merge_function.merge(combined.take(order), key_names)
        cursors = [c for c in cursors if c.batch is not None]


class _Cursor:
    def __init__(self, run: Iterator[pa.Table], key_names: Sequence[str]):
        self.run = run
        self.key_names = list(key_names)
        self.batch: pa.Table | None = None
        self._advance()

    def _advance(self) -> None:
        self.batch = None
        for batch in self.run:
            if batch.num_rows:
                self.batch = batch
                return

    def _key(self, i: int) -> tuple:
        assert self.batch is not None
        return tuple(self.batch.column(k)[i].as_py() for k in self.key_names)

    def last_key(self) -> tuple:
        assert self.batch is not None
        return self._key(self.batch.num_rows - 1)

    def take_through(self, bound: tuple) -> pa.Table:
        """Remove and return the leading rows with key <= bound."""
        assert self.batch is not None
        batch = self.batch
        n = self._count_through(bound)
        head = batch.slice(0, n)
        if n == batch.num_rows:
            self._advance()
        else:
            self.batch = batch.slice(n)
        return head

    def _count_through(self, bound: tuple) -> int:
        assert self.batch is not None
        if len(self.key_names) == 1 and _numeric(self.batch.column(self.key_names[0])):
            values = _as_numpy(self.batch.column(self.key_names[0]))
            target = np.asarray(bound[0]).astype(values.dtype) if not hasattr(bound[0], "year") \
                else _as_numpy(pa.array([bound[0]], self.batch.column(self.key_names[0]).type))[0]
            return int(np.searchsorted(values, target, side="right"))
        return bisect.bisect_right(range(self.batch.num_rows), bound, key=self._key)

    def drain(self) -> Iterator[pa.Table]:
        while self.batch is not None:
            batch = self.batch
            self._advance()
            yield batch
