"""Storage faults the engine tests inject in place of a failing object store."""

from __future__ import annotations

from strata.fs.file_io import LocalFileIO


class CompactOutage(LocalFileIO):
    """Refuses the next `failures` writes of a COMPACT snapshot (before they take effect)."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 0

    def write_new(self, path: str, data: bytes) -> bool:
        if self.failures and "/snapshot/snapshot-" in path and b'"COMPACT"' in data:
            self.failures -= 1
            raise OSError(f"injected: the store refused {path}")
        return super().write_new(path, data)
