"""Consumers: a reader's saved progress in ``consumer/consumer-<id>`` (Paimon's ConsumerManager).

A consumer file holds ``{"nextSnapshot": N}``: the reader has consumed every snapshot before N.
Snapshot expiry keeps every snapshot >= the smallest ``nextSnapshot`` of the live consumers, so a
slow reader never finds its next snapshot gone. A consumer whose file was not updated for
``consumer.expiration-time`` is expired (deleted), so an abandoned reader does not pin snapshots
forever; the file's modification time is its last progress.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass

from strata.errors import CorruptMetadataError
from strata.fs import FileIO

CONSUMER_PREFIX = "consumer-"


@dataclass(frozen=True)
class ConsumerInfo:
    consumer_id: str
    next_snapshot: int
    modified_millis: int


def _check_id(consumer_id: str) -> str:
    if not consumer_id or consumer_id.isspace():
        raise ValueError("consumer id must not be blank")
    if "/" in consumer_id:
        raise ValueError(f"consumer id {consumer_id!r} must not contain '/'")
    return consumer_id


class ConsumerManager:
    def __init__(self, file_io: FileIO, table_path: str):
        self.file_io = file_io
        self.dir = f"{table_path.rstrip('/')}/consumer"

    def path(self, consumer_id: str) -> str:
        return f"{self.dir}/{CONSUMER_PREFIX}{_check_id(consumer_id)}"

    @staticmethod
    def encode(next_snapshot: int) -> bytes:
        return json.dumps({"nextSnapshot": int(next_snapshot)}, indent=2).encode()

    def _decode(self, data: bytes, where: str) -> int:
        try:
            return int(json.loads(data)["nextSnapshot"])
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptMetadataError(f"consumer file {where} is unreadable: {exc}") from None

    def consumer(self, consumer_id: str) -> int | None:
        """The consumer's next snapshot, or None if there is no such consumer."""
        path = self.path(consumer_id)
        try:
            data = self.file_io.read_bytes(path)
        except FileNotFoundError:
            return None
        return self._decode(data, path)

    def reset(self, consumer_id: str, next_snapshot: int) -> None:
        """Create or move a consumer (Paimon's reset_consumer procedure)."""
        if next_snapshot < 1:
            raise ValueError(f"next snapshot of consumer {consumer_id!r} must be >= 1, got {next_snapshot}")
        self.file_io.write_bytes(self.path(consumer_id), self.encode(next_snapshot))

    def delete(self, consumer_id: str) -> None:
        self.file_io.delete(self.path(consumer_id))

    def list_all(self) -> list[ConsumerInfo]:
        """Every consumer, by id. A file deleted while listing is skipped."""
        out = []
        for status in self.file_io.list_status(self.dir):
            name = status.path.rsplit("/", 1)[-1]
            if status.is_dir or not name.startswith(CONSUMER_PREFIX):
                continue
            try:
                data = self.file_io.read_bytes(status.path)
            except FileNotFoundError:
                continue
            out.append(ConsumerInfo(name[len(CONSUMER_PREFIX):], self._decode(data, status.path),
                                    status.mtime_millis))
        return sorted(out, key=lambda c: c.consumer_id)

    def consumers(self) -> dict[str, int]:
        return {c.consumer_id: c.next_snapshot for c in self.list_all()}

    def min_next_snapshot(self) -> int | None:
        """The smallest next snapshot of all consumers (what snapshot expiry must keep)."""
        values = [c.next_snapshot for c in self.list_all()]
        return min(values) if values else None

    def expire(self, expiration_ms: int, now_millis: int | None = None) -> list[str]:
        """Delete consumers not updated for `expiration_ms`; returns their ids."""
        now = int(time.time() * 1000) if now_millis is None else now_millis
        threshold = now - expiration_ms
        expired = []
        for status in self.file_io.list_status(self.dir):
            name = status.path.rsplit("/", 1)[-1]
            if status.is_dir or not name.startswith(CONSUMER_PREFIX):
                continue
            if status.mtime_millis < threshold:
                self.file_io.delete(status.path)
                expired.append(name[len(CONSUMER_PREFIX):])
        return sorted(expired)

    def clear(self, including: str = ".*", excluding: str | None = None) -> list[str]:
        """Delete the consumers whose id fully matches `including` and not `excluding` (regular
        expressions, as Paimon's clear_consumers procedure); returns their ids."""
        inc = re.compile(including)
        exc = re.compile(excluding) if excluding else None
        cleared = []
        for status in self.file_io.list_status(self.dir):
            name = status.path.rsplit("/", 1)[-1]
            if status.is_dir or not name.startswith(CONSUMER_PREFIX):
                continue
            consumer_id = name[len(CONSUMER_PREFIX):]
            if inc.fullmatch(consumer_id) and not (exc is not None and exc.fullmatch(consumer_id)):
                self.file_io.delete(status.path)
                cleared.append(consumer_id)
        return sorted(cleared)
