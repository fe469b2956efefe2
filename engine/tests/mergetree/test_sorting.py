"""sort_by_key: the order of (key, sequence), however the sorted runs were concatenated."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from strata.mergetree import sorting
from strata.mergetree.sorting import sort_by_key

# sorted runs of distinct keys; a later run is newer (higher sequence numbers)
runs_strategy = st.lists(st.lists(st.integers(0, 40), max_size=30, unique=True).map(sorted), min_size=1, max_size=5)


def _concat(runs: list[list[int]], order: list[int]) -> pa.Table:
    """The runs concatenated in `order`, each row with its run's sequence numbers."""
    sequences, start = [], 0
    for run in runs:
        sequences.append(list(range(start, start + len(run))))
        start += len(run)
    keys = [k for i in order for k in runs[i]]
    seqs = [s for i in order for s in sequences[i]]
    return pa.table({"k": pa.array(keys, pa.int64()), "s": pa.array(seqs, pa.int64())})


def _expected(table: pa.Table) -> list[tuple[int, int]]:
    return sorted(zip(table.column("k").to_pylist(), table.column("s").to_pylist(), strict=True))


@settings(max_examples=200, deadline=None)
@given(runs_strategy, st.randoms(use_true_random=False))
def test_sorted_by_key_then_sequence_in_any_run_order(runs: list[list[int]], random) -> None:
    orders = [list(range(len(runs))), list(reversed(range(len(runs))))]
    shuffled = list(range(len(runs)))
    random.shuffle(shuffled)
    for order in [*orders, shuffled]:
        table = _concat(runs, order)
        got = table.take(pa.array(sort_by_key(table, ["k"], "s"), pa.int64()))
        assert list(zip(got.column("k").to_pylist(), got.column("s").to_pylist(), strict=True)) == _expected(table)


def test_newest_first_runs_take_one_stable_sort() -> None:
    """Runs listed newest first (as compaction units list them) are ordered without the lexsort
    fallback: equal keys are reversed in place."""
    table = _concat([[1, 2, 3], [2, 3, 4], [3, 5]], [2, 1, 0])
    key, seq = table.column("k").to_numpy(), table.column("s").to_numpy()
    order = sorting._key_order_if_ties_in_sequence(key, seq)
    assert order is not None
    assert list(zip(key[order], seq[order], strict=True)) == _expected(table)
    # ties in both directions: no single reversal orders them
    mixed = _concat([[1, 2], [1, 2], [2]], [1, 0, 2])
    assert sorting._key_order_if_ties_in_sequence(mixed.column("k").to_numpy(), mixed.column("s").to_numpy()) is None
