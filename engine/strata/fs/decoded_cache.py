"""A process-wide cache of decoded immutable files (manifests, index files), bounded by weight."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any


class DecodedFileCache:
    """Decoded immutable files by path, shared by every table object of the process.

    Manifest files and manifest lists are written once under a fresh UUID name and never
    rewritten, so a decoded copy stays valid until the file is gone (and then nothing refers to
    it). On object storage this saves a GET per manifest list and manifest on every scan and
    commit. Bounded by weight (entries held), least recently used first out."""

    def __init__(self, max_weight: int):
        self.max_weight = max_weight
        self._items: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self._weight = 0
        self._lock = threading.Lock()

    def get(self, path: str) -> Any | None:
        with self._lock:
            item = self._items.get(path)
            if item is None:
                return None
            self._items.move_to_end(path)
            return item[0]

    def put(self, path: str, value: Any, weight: int) -> None:
        weight = max(1, weight)
        if weight > self.max_weight:
            return
        with self._lock:
            if path in self._items:
                return
            self._items[path] = (value, weight)
            self._weight += weight
            while self._weight > self.max_weight:
                _, (_, dropped) = self._items.popitem(last=False)
                self._weight -= dropped

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._weight = 0
