"""The probing loops of HashBucketMap, compiled with numba (the `numba` extra).

numpy can only probe a batch a round at a time, each round a pass of gathers and masks over the
keys still looking for their slot; compiled, each key walks its own probe sequence once.
Importing this module imports numba: hash_map imports it only when numba is installed.
"""

from __future__ import annotations

import numba
import numpy as np

# A slot is free when its value is negative: bucket ids are >= 0 and hash_map marks free slots
# with FREE = -1. Testing the sign keeps this module free of imports from hash_map (a cycle).


@numba.njit(cache=True, nogil=True)
def probe_get(table_keys: np.ndarray, table_values: np.ndarray, keys: np.ndarray, slots: np.ndarray,
              out: np.ndarray) -> None:  # pragma: no cover (compiled: coverage does not see it)
    mask = table_values.shape[0] - 1
    for i in range(keys.shape[0]):
        slot = slots[i]
        while True:
            value = table_values[slot]
            if value < 0 or table_keys[slot] == keys[i]:
                out[i] = value
                break
            slot = (slot + 1) & mask


@numba.njit(cache=True, nogil=True)
def probe_put(table_keys: np.ndarray, table_values: np.ndarray, keys: np.ndarray, values: np.ndarray,
              slots: np.ndarray) -> None:  # pragma: no cover (compiled)
    mask = table_values.shape[0] - 1
    for i in range(keys.shape[0]):
        slot = slots[i]
        while table_values[slot] >= 0:
            slot = (slot + 1) & mask
        table_keys[slot] = keys[i]
        table_values[slot] = values[i]


@numba.njit(cache=True, nogil=True)
def probe_assign(table_keys: np.ndarray, table_values: np.ndarray, keys: np.ndarray, slots: np.ndarray,
                 pending: int, out: np.ndarray, new_slots: np.ndarray) -> int:  # pragma: no cover (compiled)
    """One probe per key: a key found gives its value; a key not found takes the free slot that
    ended its probe, marked `pending`, and the slot is listed in new_slots (in order of first
    appearance). Every key with a pending slot gets -(slot + 1) in out. Returns the new keys' count."""
    mask = table_values.shape[0] - 1
    added = 0
    for i in range(keys.shape[0]):
        slot = slots[i]
        while True:
            value = table_values[slot]
            if value < 0:
                table_keys[slot] = keys[i]
                table_values[slot] = pending
                new_slots[added] = slot
                added += 1
                out[i] = -(slot + 1)
                break
            if table_keys[slot] == keys[i]:
                out[i] = -(slot + 1) if value == pending else value
                break
            slot = (slot + 1) & mask
    return added


@numba.njit(cache=True, nogil=True)
def settle_pending(table_values: np.ndarray, new_slots: np.ndarray, placed: np.ndarray,
                   out: np.ndarray) -> None:  # pragma: no cover (compiled)
    """After probe_assign: the new keys' slots take their placed buckets, and every key that
    waited on a slot (-(slot + 1) in out) takes its slot's bucket."""
    for j in range(new_slots.shape[0]):
        table_values[new_slots[j]] = placed[j]
    for i in range(out.shape[0]):
        if out[i] < 0:
            out[i] = table_values[-(out[i] + 1)]


@numba.njit(cache=True, nogil=True)
def rehash(old_keys: np.ndarray, old_values: np.ndarray, table_keys: np.ndarray, table_values: np.ndarray,
           golden: np.uint64, shift: np.uint64) -> None:  # pragma: no cover (compiled)
    """Every occupied slot of the old table put in the new, empty one, its slot hashed as
    HashBucketMap._slots does: one pass, without gathering the old keys first."""
    mask = table_values.shape[0] - 1
    for i in range(old_values.shape[0]):
        if old_values[i] < 0:
            continue
        slot = np.int64((np.uint64(np.uint32(old_keys[i])) * golden) >> shift)  # int64: uint64 + int is float
        while table_values[slot] >= 0:
            slot = (slot + 1) & mask
        table_keys[slot] = old_keys[i]
        table_values[slot] = old_values[i]
