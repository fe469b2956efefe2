"""Puffin files holding Iceberg v3 deletion vectors (``deletion-vector-v1`` blobs), written from
Strata's deletion vectors, and read back as the Puffin and Iceberg specs define them.

A ``deletion-vector-v1`` blob is ``length (4 bytes BE) | magic D1 D3 39 64 | 64-bit roaring bitmap
(portable serialization, little endian) | CRC-32 of magic + bitmap (4 bytes BE)``, where length
counts the magic and the bitmap. It is byte for byte the frame of a Paimon 64-bit deletion vector
(whose magic 1681511377, stored little endian, is those four bytes), so a 64-bit vector's frame is
reused as it is and a 32-bit one is widened first (the positions are the same).

A Puffin file is ``PFA1 | blobs | PFA1 | footer JSON | footer size (4 bytes LE) | flags (4 zero
bytes) | PFA1``; each blob's footer entry carries its offset and length (which the manifest entry
repeats as ``content_offset`` / ``content_size_in_bytes``), ``snapshot-id`` and ``sequence-number``
-1 (inherited, as the spec requires of deletion vectors) and the properties
``referenced-data-file`` and ``cardinality``.

Table statistics files (``write_statistics``) hold ``apache-datasketches-theta-v1`` blobs: one
compact serialized theta sketch per column, the blob carrying the column's field id, the snapshot
id and sequence number the statistics were computed for and the ``ndv`` property (the sketch's
estimate), which is what Trino reads from the table metadata's ``blob-metadata``.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pyroaring import BitMap64

from strata.deletionvectors.vector import DeletionVector
from strata.errors import CorruptDataError

MAGIC = b"PFA1"
DV_MAGIC = b"\xd1\xd3\x39\x64"
DV_BLOB_TYPE = "deletion-vector-v1"
THETA_BLOB_TYPE = "apache-datasketches-theta-v1"
NDV_PROPERTY = "ndv"
ROW_POSITION_FIELD_ID = 2147483545  # the _pos metadata column the blobs are computed for
CREATED_BY = "Strata"


@dataclass(frozen=True)
class Blob:
    """One deletion-vector blob as the footer (and the manifest entry) describes it."""

    referenced_data_file: str
    offset: int
    length: int
    cardinality: int


def dv_blob(vector: DeletionVector) -> bytes:
    """The ``deletion-vector-v1`` blob of a vector (either bitmap width)."""
    if vector.bitmap64:
        return vector.serialize()[0]
    wide = BitMap64(np.asarray(vector.positions(), dtype=np.uint64))
    wide.run_optimize()
    data = DV_MAGIC + wide.serialize()
    return struct.pack(">I", len(data)) + data + struct.pack(">I", zlib.crc32(data))


def write_puffin(vectors: Sequence[tuple[str, DeletionVector]]) -> tuple[bytes, list[Blob]]:
    """A Puffin file holding one deletion vector per referenced data file path, and its blobs."""
    parts = [MAGIC]
    offset = len(MAGIC)
    blobs = []
    for path, vector in vectors:
        blob = dv_blob(vector)
        parts.append(blob)
        blobs.append(Blob(path, offset, len(blob), vector.cardinality))
        offset += len(blob)
    footer = json.dumps({"blobs": [{
        "type": DV_BLOB_TYPE, "fields": [ROW_POSITION_FIELD_ID], "snapshot-id": -1, "sequence-number": -1,
        "offset": b.offset, "length": b.length,
        "properties": {"referenced-data-file": b.referenced_data_file, "cardinality": str(b.cardinality)}}
        for b in blobs], "properties": {"created-by": CREATED_BY}}, separators=(",", ":")).encode()
    parts += [MAGIC, footer, struct.pack("<i", len(footer)), bytes(4), MAGIC]
    return b"".join(parts), blobs


@dataclass(frozen=True)
class ThetaBlob:
    """One column's sketch for a statistics file: its field id, compact serialized sketch and NDV."""

    field_id: int
    sketch: bytes
    ndv: int


@dataclass(frozen=True)
class StatisticsFile:
    """A written statistics Puffin file: its bytes, footer size and blob metadata (the footer's
    entries without offsets, as the table metadata's ``blob-metadata`` lists them)."""

    data: bytes
    footer_size: int
    blob_metadata: list[dict[str, Any]]


def write_statistics(blobs: Sequence[ThetaBlob], snapshot_id: int, sequence_number: int) -> StatisticsFile:
    """A Puffin statistics file of theta-sketch blobs computed at one snapshot (uncompressed blobs)."""
    parts = [MAGIC]
    offset = len(MAGIC)
    entries: list[dict[str, Any]] = []
    for blob in blobs:
        entries.append({"type": THETA_BLOB_TYPE, "fields": [blob.field_id], "snapshot-id": snapshot_id,
                        "sequence-number": sequence_number, "offset": offset, "length": len(blob.sketch),
                        "properties": {NDV_PROPERTY: str(blob.ndv)}})
        parts.append(blob.sketch)
        offset += len(blob.sketch)
    footer = json.dumps({"blobs": entries, "properties": {"created-by": CREATED_BY}},
                        separators=(",", ":")).encode()
    parts += [MAGIC, footer, struct.pack("<i", len(footer)), bytes(4), MAGIC]
    # the footer as the spec counts it: magic, payload, payload size, flags, magic
    metadata = [{k: v for k, v in e.items() if k not in ("offset", "length")} for e in entries]
    return StatisticsFile(b"".join(parts), len(MAGIC) * 2 + len(footer) + 8, metadata)


# -- reading (the spec's view; for checks and for readers of deletion vectors by offset) ----------------

def read_footer(data: bytes, where: str) -> dict[str, Any]:
    """The FileMetadata JSON of a whole Puffin file (uncompressed footers only)."""
    if data[:4] != MAGIC or data[-4:] != MAGIC:
        raise CorruptDataError(f"{where} is not a Puffin file (no PFA1 magic at both ends)")
    (size,) = struct.unpack_from("<i", data, len(data) - 12)
    flags = data[-8:-4]
    if flags[0] & 1:
        raise CorruptDataError(f"{where}: compressed Puffin footers are not supported")
    start = len(data) - 12 - size
    if start < 4 or data[start - 4:start] != MAGIC:
        raise CorruptDataError(f"{where}: the Puffin footer magic is missing")
    return dict(json.loads(data[start:start + size]))


def read_dv_blob(blob: bytes, where: str, cardinality: int | None = None) -> np.ndarray:
    """The deleted positions (sorted int64) of a ``deletion-vector-v1`` blob, its length, magic,
    CRC and (when given) cardinality checked."""
    if len(blob) < 12:
        raise CorruptDataError(f"deletion vector blob of {where} is truncated")
    (length,) = struct.unpack_from(">I", blob, 0)
    if length != len(blob) - 8:
        raise CorruptDataError(f"deletion vector blob of {where}: length {length}, blob {len(blob)} bytes")
    data = blob[4:4 + length]
    if data[:4] != DV_MAGIC:
        raise CorruptDataError(f"deletion vector blob of {where} has the magic {data[:4].hex()}")
    (crc,) = struct.unpack_from(">I", blob, 4 + length)
    if crc != zlib.crc32(data):
        raise CorruptDataError(f"deletion vector blob of {where} fails its CRC-32 check")
    bitmap = BitMap64.deserialize(data[4:])
    if cardinality is not None and len(bitmap) != cardinality:
        raise CorruptDataError(f"deletion vector blob of {where}: {len(bitmap)} positions, {cardinality} expected")
    return np.frombuffer(bitmap.to_array(), dtype=np.uint64).astype(np.int64) if bitmap else np.empty(0, np.int64)
