"""Tags: named snapshots kept in ``tag/tag-<name>`` (snapshot JSON plus tag fields)."""

from __future__ import annotations

import json
import time

from strata.errors import SnapshotNotFoundError
from strata.fs import FileIO
from strata.snapshot.snapshot import Snapshot


class TagManager:
    def __init__(self, file_io: FileIO, table_path: str):
        self.file_io = file_io
        self.dir = f"{table_path.rstrip('/')}/tag"

    def path(self, name: str) -> str:
        return f"{self.dir}/tag-{name}"

    def create(self, name: str, snapshot: Snapshot) -> None:
        obj = json.loads(snapshot.to_json())
        obj["tagCreateTime"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime())
        if not self.file_io.write_new(self.path(name), json.dumps(obj, indent=2).encode()):
            raise ValueError(f"tag {name!r} already exists")

    def get(self, name: str) -> Snapshot:
        try:
            data = self.file_io.read_bytes(self.path(name))
        except FileNotFoundError:
            raise SnapshotNotFoundError(f"tag {name!r} does not exist") from None
        return Snapshot.from_json(data, where=self.path(name))

    def delete(self, name: str) -> None:
        self.file_io.delete(self.path(name))

    def names(self) -> list[str]:
        return sorted(s.path.rsplit("/", 1)[-1][len("tag-"):] for s in self.file_io.list_status(self.dir)
                      if s.path.rsplit("/", 1)[-1].startswith("tag-"))
