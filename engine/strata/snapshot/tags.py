"""Tags: named snapshots kept in ``tag/tag-<name>`` (Paimon's TagManager and Tag).

A tag file is the snapshot JSON; with a retention it also carries ``tagCreateTime`` (a Java
LocalDateTime, which Paimon's Jackson writes as ``[y, mo, d, h, mi, s, nanos]`` in local time) and
``tagTimeRetained`` (a Java Duration, written as decimal seconds). As Paimon, a tag without a
retention has no ``tagCreateTime``, which keeps it readable by old readers. A tag keeps the files
of its snapshot alive after the snapshot expires: expiry and rollback consult the tags.

Deleting a tag and cleaning the files only it used is ``strata.operation.expire.delete_tag``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
from dataclasses import dataclass
from typing import Any

from strata.errors import SnapshotNotFoundError
from strata.fs import FileIO
from strata.fs.file_io import publish_new
from strata.names import check_tag_name
from strata.snapshot.snapshot import Snapshot

TAG_PREFIX = "tag-"
_TAG_FIELDS = ("tagCreateTime", "tagTimeRetained")


@dataclass(frozen=True)
class TagInfo:
    name: str
    snapshot: Snapshot
    create_time: dt.datetime | None  # local wall-clock time, as Java's LocalDateTime
    time_retained_ms: int | None
    file_mtime_millis: int = 0

    def expires_at(self) -> dt.datetime | None:
        if self.create_time is None or self.time_retained_ms is None:
            return None
        return self.create_time + dt.timedelta(milliseconds=self.time_retained_ms)


def local_datetime_to_json(value: dt.datetime) -> list[int]:
    return [value.year, value.month, value.day, value.hour, value.minute, value.second,
            value.microsecond * 1000]


def local_datetime_from_json(value: Any) -> dt.datetime | None:
    """Jackson's LocalDateTime: an array [y, mo, d, h, mi(, s(, nanos))] or an ISO string."""
    if value is None:
        return None
    if isinstance(value, list):
        parts = [int(v) for v in value] + [0] * (7 - len(value))
        return dt.datetime(parts[0], parts[1], parts[2], parts[3], parts[4], parts[5], parts[6] // 1000)
    return dt.datetime.fromisoformat(str(value))


_ISO_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")


def duration_from_json(value: Any) -> int | None:
    """Jackson's Duration: decimal seconds (``5.000000000``) or ISO-8601 (``PT5S``) -> millis."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return round(float(value) * 1000)
    m = _ISO_DURATION.match(str(value).upper())
    if not m:
        raise ValueError(f"not a duration: {value!r}")
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups())
    return round((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)


def trim_to_snapshot(tag: Snapshot) -> Snapshot:
    """The snapshot of a tag, without the tag's own fields (Paimon's ``Tag.trimToSnapshot``)."""
    extra = {k: v for k, v in tag.extra.items() if k not in _TAG_FIELDS}
    return dataclasses.replace(tag, extra=extra)


class TagManager:
    def __init__(self, file_io: FileIO, table_path: str):
        self.file_io = file_io
        self.dir = f"{table_path.rstrip('/')}/tag"

    def path(self, name: str) -> str:
        return f"{self.dir}/{TAG_PREFIX}{check_tag_name(name)}"

    def create(self, name: str, snapshot: Snapshot, time_retained_ms: int | None = None,
               ignore_if_exists: bool = False, now: dt.datetime | None = None) -> bool:
        """Tag `snapshot`; False if the tag exists and `ignore_if_exists`, else ValueError."""
        obj = json.loads(snapshot.to_json())
        for key in _TAG_FIELDS:
            obj.pop(key, None)
        if time_retained_ms is not None:
            obj["tagCreateTime"] = local_datetime_to_json(now or dt.datetime.now())
            obj["tagTimeRetained"] = time_retained_ms / 1000
        # a write whose reply was lost is read back (CommitStateUnknownError if that fails too)
        if not publish_new(self.file_io, self.path(name), json.dumps(obj, indent=2).encode(), f"tag {name!r}"):
            if ignore_if_exists:
                return False
            raise ValueError(f"tag {name!r} already exists")
        return True

    def exists(self, name: str) -> bool:
        return self.file_io.exists(self.path(name))

    def _raw(self, name: str, path: str) -> Snapshot:
        try:
            data = self.file_io.read_bytes(path)
        except FileNotFoundError:
            raise SnapshotNotFoundError(f"tag {name!r} does not exist") from None
        return Snapshot.from_json(data, where=path)

    def _read(self, name: str, path: str, mtime: int = 0) -> TagInfo:
        raw = self._raw(name, path)
        create_time = local_datetime_from_json(raw.extra.get("tagCreateTime"))
        retained = duration_from_json(raw.extra.get("tagTimeRetained"))
        return TagInfo(name, trim_to_snapshot(raw), create_time, retained, mtime)

    def info(self, name: str) -> TagInfo:
        """The tag: its snapshot (without the tag's own fields), create time and retention."""
        return self._read(name, self.path(name))

    def get(self, name: str) -> Snapshot:
        """The tag file as a Snapshot; ``extra`` still holds ``tagCreateTime``/``tagTimeRetained``."""
        return self._raw(name, self.path(name))

    def delete(self, name: str) -> None:
        """Delete the tag file only; ``strata.operation.expire.delete_tag`` also cleans files."""
        self.file_io.delete(self.path(name))

    def names(self) -> list[str]:
        return sorted(s.path.rsplit("/", 1)[-1][len(TAG_PREFIX):] for s in self.file_io.list_status(self.dir)
                      if not s.is_dir and s.path.rsplit("/", 1)[-1].startswith(TAG_PREFIX))

    def list_all(self) -> list[TagInfo]:
        """Every tag, by snapshot id then name (a tag deleted while listing is skipped)."""
        out = []
        for status in self.file_io.list_status(self.dir):
            file_name = status.path.rsplit("/", 1)[-1]
            if status.is_dir or not file_name.startswith(TAG_PREFIX):
                continue
            try:
                out.append(self._read(file_name[len(TAG_PREFIX):], status.path, status.mtime_millis))
            except SnapshotNotFoundError:
                continue
        return sorted(out, key=lambda t: (t.snapshot.id, t.name))

    def tagged_snapshots(self) -> list[Snapshot]:
        """The distinct tagged snapshots, by id."""
        by_id: dict[int, Snapshot] = {}
        for tag in self.list_all():
            by_id.setdefault(tag.snapshot.id, tag.snapshot)
        return [by_id[i] for i in sorted(by_id)]
