"""A hash map from int32 key hashes to int16 bucket ids, in two numpy arrays.

The hash index of a dynamic-bucket partition is looked up for every written row and grows by the
new keys of every batch. numpy has no hash table: a sorted array needs a sort of each batch, a
binary search per key and a merge of the whole index now and then. This map is open addressing
with linear probing, kept at most half full. With numba installed (the `numba` extra) each key
walks its probe sequence in compiled code (hash_kernels); without, a batch is probed in numpy
rounds, each handling every key still looking for its slot, which is slower than the sorted
arrays' binary search, but keeps one layout and one behaviour for both.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType

import numpy as np

MIN_SLOTS = 1024  # a power of two
FREE = -1  # bucket ids are >= 0: a slot holding -1 is free (hash_kernels tests the sign)
PENDING = 32767  # a key added by `assign` before its bucket is known (Paimon's bucket ids stay below)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: the slot comes from the product's high bits

USE_COMPILED = True  # the tests turn it off to check the numpy probing too


@functools.cache
def compiled_kernels() -> ModuleType | None:
    """hash_kernels when numba is installed, imported on first use (numba takes 0.25 s to import)."""
    try:
        from strata.index import hash_kernels
    except ImportError:
        return None
    return hash_kernels


def distinct_sorted(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values by a sort: numpy's hash-based `unique` of 32-bit keys is far slower
    on batches of thousands of keys."""
    ordered = np.sort(values)
    return ordered[np.concatenate([[True], ordered[1:] != ordered[:-1]])] if len(ordered) else ordered


class HashBucketMap:
    """int32 hash -> int16 bucket; `get` and `put` take whole arrays."""

    def __init__(self) -> None:
        self.size = 0
        self._compiled = compiled_kernels() if USE_COMPILED else None
        self._allocate(MIN_SLOTS)

    def _allocate(self, slots: int) -> None:
        self.keys = np.zeros(slots, dtype=np.int32)
        self.values = np.full(slots, FREE, dtype=np.int16)
        self._mask = slots - 1
        self._shift = np.uint64(64 - (slots.bit_length() - 1))

    def _slots(self, keys: np.ndarray) -> np.ndarray:
        # key hashes are often sequential or share low bits: a multiplication spreads them first
        return ((keys.view(np.uint32).astype(np.uint64) * _GOLDEN) >> self._shift).astype(np.intp)

    def get(self, keys: np.ndarray) -> np.ndarray:
        """The bucket of each key (int16), -1 for keys not in the map."""
        keys = np.ascontiguousarray(keys, dtype=np.int32)
        out = np.empty(len(keys), dtype=np.int16)
        if self._compiled is not None:
            self._compiled.probe_get(self.keys, self.values, keys, self._slots(keys), out)
            return out
        out.fill(FREE)
        rows = np.arange(len(keys))
        slots = self._slots(keys)
        while len(rows):
            values = self.values[slots]
            hit = self.keys[slots] == keys  # a free slot's -1 answers "absent" as well
            out[rows[hit]] = values[hit]
            probe = ~hit & (values != FREE)  # a free slot ends the probe: the key is absent
            rows, keys, slots = rows[probe], keys[probe], (slots[probe] + 1) & self._mask
        return out

    def put(self, keys: np.ndarray, values: np.ndarray) -> None:
        """Add keys that are distinct and not in the map yet, with their buckets (>= 0)."""
        keys = np.ascontiguousarray(keys, dtype=np.int32)
        values = np.ascontiguousarray(values, dtype=np.int16)
        self._reserve(self.size + len(keys))
        self.size += len(keys)
        slots = self._slots(keys)
        if self._compiled is not None:
            self._compiled.probe_put(self.keys, self.values, keys, values, slots)
            return
        while len(keys):
            free = self.values[slots] == FREE
            taken = slots[free]
            # keys that reach one free slot in the same round all write it and one write stays:
            # whichever it is claims the slot, the others probe on
            self.keys[taken] = keys[free]
            won = np.zeros(len(keys), dtype=bool)
            won[free] = self.keys[taken] == keys[free]
            self.values[slots[won]] = values[won]
            lost = ~won
            keys, values, slots = keys[lost], values[lost], (slots[lost] + 1) & self._mask

    def assign(self, keys: np.ndarray, place: Callable[[int], np.ndarray]
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each key's bucket (int64); the keys not in the map get theirs from `place(count)`, given
        the count of distinct new keys and answering their buckets in order of first appearance,
        and are added. Returns the buckets, the new keys and theirs. If `place` raises, the map
        is left as it was."""
        keys = np.ascontiguousarray(keys, dtype=np.int32)
        if self._compiled is None:
            return self._assign_in_rounds(keys, place)
        self._reserve_for_new(keys)  # the table must not grow in the middle of the probe
        out = np.empty(len(keys), dtype=np.int64)
        new_slots = np.empty(len(keys), dtype=np.intp)
        added = self._compiled.probe_assign(self.keys, self.values, keys, self._slots(keys), PENDING, out, new_slots)
        new_slots = new_slots[:added]
        try:
            placed = np.asarray(place(added), dtype=np.int64)
        except BaseException:
            # the new keys hold slots that were free before: freeing them restores every probe sequence
            self.values[new_slots] = FREE
            raise
        self._compiled.settle_pending(self.values, new_slots, placed, out)
        self.size += added
        return out, self.keys[new_slots], placed

    def _assign_in_rounds(self, keys: np.ndarray, place: Callable[[int], np.ndarray]
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`assign` without the compiled probe: a lookup, the new keys' distinct values, an insert."""
        import pandas as pd  # here: `import strata` stays free of pandas

        found = self.get(keys).astype(np.int64)
        unknown = np.flatnonzero(found < 0)
        codes, new = pd.factorize(keys[unknown])  # distinct, in order of first appearance
        new = np.asarray(new, dtype=np.int32)
        placed = np.asarray(place(len(new)), dtype=np.int64)
        found[unknown] = placed[codes]
        self.put(new, placed)
        return found, new, placed

    def _reserve_for_new(self, keys: np.ndarray) -> None:
        """Room for every key of the batch that is new. Only when the batch does not fit the
        table's headroom are the new ones counted first: a large batch of known keys must not
        grow the table."""
        if self.size + len(keys) <= len(self.values) // 2:
            return
        unknown = keys[self.get(keys) < 0]
        self._reserve(self.size + len(distinct_sorted(unknown)))

    def _reserve(self, size: int) -> None:
        """Keep the table at most half full: a miss probes 2.5 slots on average then."""
        slots = len(self.values)
        if 2 * size <= slots:
            return
        while 2 * size > slots:
            slots *= 2
        if self._compiled is not None:
            old_keys, old_values = self.keys, self.values
            self._allocate(slots)
            self._compiled.rehash(old_keys, old_values, self.keys, self.values, _GOLDEN, self._shift)
            return
        occupied = self.values != FREE
        keys, values = self.keys[occupied], self.values[occupied]
        self._allocate(slots)
        self.size = 0
        self.put(keys, values)
