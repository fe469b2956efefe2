"""Puffin files of Iceberg v3 deletion vectors (strata.iceberg.puffin), parsed here byte by byte as
the Puffin spec (file and footer layout) and the ``deletion-vector-v1`` blob definition say."""

from __future__ import annotations

import json
import struct
import zlib

import numpy as np
import pytest
from pyroaring import BitMap

from strata.deletionvectors.vector import DeletionVector
from strata.errors import CorruptDataError
from strata.iceberg.puffin import dv_blob, read_dv_blob, read_footer, write_puffin

POSITIONS = {
    "s3://b/t/bucket-0/data-1.parquet": ([0, 1, 2, 99, 70_000, 70_001, 2**31 + 5, 2**32 + 7, 5 * 2**32], True),
    "/t/bucket-1/data-2.parquet": (list(range(0, 20_000, 3)), True),  # a bitset container
    "/t/bucket-1/data-3.parquet": ([4, 5, 6, 7, 8, 1000], False),  # 32-bit: widened to the 64-bit blob
    "/t/bucket-1/data-4.parquet": ([], True),
}


def _spec_positions(bitmap: bytes) -> list[int]:
    """The spec's portable 64-bit layout: a LE 8-byte bitmap count, then per bitmap a LE 4-byte
    key (ascending) and a 32-bit portable roaring bitmap."""
    (count,) = struct.unpack_from("<Q", bitmap, 0)
    at, keys, out = 8, [], []
    for _ in range(count):
        (key,) = struct.unpack_from("<I", bitmap, at)
        keys.append(key)
        inner = BitMap.deserialize(bitmap[at + 4:])
        at += 4 + len(inner.serialize())
        out += [(key << 32) | p for p in inner]
    assert keys == sorted(set(keys))
    assert at == len(bitmap), "the bitmap fills the blob exactly"
    return out


def test_puffin_file_layout_per_spec() -> None:
    vectors = [(path, DeletionVector.from_positions(np.array(p, dtype=np.int64), wide))
               for path, (p, wide) in POSITIONS.items()]
    data, blobs = write_puffin(vectors)

    assert data[:4] == b"PFA1" and data[-4:] == b"PFA1"
    assert data[-8:-4] == b"\0\0\0\0", "flags: an uncompressed footer"
    (size,) = struct.unpack("<i", data[-12:-8])
    footer_start = len(data) - 12 - size
    assert data[footer_start - 4:footer_start] == b"PFA1"
    footer = json.loads(data[footer_start:len(data) - 12].decode("utf-8"))
    assert footer == read_footer(data, "f")
    assert footer["properties"]["created-by"].startswith("Strata")

    offset = 4
    for (path, (positions, _)), meta, blob in zip(POSITIONS.items(), footer["blobs"], blobs, strict=True):
        assert meta["type"] == "deletion-vector-v1"
        assert meta["fields"] == [2147483545]
        assert (meta["snapshot-id"], meta["sequence-number"]) == (-1, -1)  # inherited, as the spec says
        assert "compression-codec" not in meta
        assert meta["properties"] == {"referenced-data-file": path, "cardinality": str(len(positions))}
        assert (meta["offset"], meta["length"]) == (blob.offset, blob.length) == (offset, blob.length)
        assert (blob.referenced_data_file, blob.cardinality) == (path, len(positions))
        offset += meta["length"]

        raw = data[meta["offset"]:meta["offset"] + meta["length"]]
        (length,) = struct.unpack(">I", raw[:4])
        assert length == len(raw) - 8, "the length counts the magic and the bitmap"
        body = raw[4:4 + length]
        assert body[:4] == bytes([0xD1, 0xD3, 0x39, 0x64])
        assert struct.unpack(">I", raw[-4:])[0] == zlib.crc32(body), "CRC-32 of magic + bitmap, big endian"
        assert _spec_positions(body[4:]) == sorted(positions)
        assert read_dv_blob(raw, path, len(positions)).tolist() == sorted(positions)
    assert offset == footer_start - 4, "the blobs fill the file between the magics"


def test_a_64_bit_vector_blob_is_paimons_frame() -> None:
    """Paimon's 64-bit deletion vector frame (length, LE magic 1681511377, bitmap, CRC) is the
    Iceberg blob byte for byte, which is what lets Paimon point Iceberg at its index files."""
    wide = DeletionVector.from_positions(np.array([3, 2**33 + 1]), bitmap64=True)
    assert dv_blob(wide) == wide.serialize()[0]
    narrow = DeletionVector.from_positions(np.array([3, 9]), bitmap64=False)
    assert dv_blob(narrow) == DeletionVector.from_positions(np.array([3, 9]), bitmap64=True).serialize()[0]


def test_damaged_blobs_and_files_are_refused() -> None:
    blob = dv_blob(DeletionVector.from_positions(np.array([1, 2, 3]), bitmap64=True))
    flipped = bytearray(blob)
    flipped[12] ^= 0x01
    with pytest.raises(CorruptDataError, match="CRC-32"):
        read_dv_blob(bytes(flipped), "x")
    with pytest.raises(CorruptDataError, match="3 positions, 4 expected"):
        read_dv_blob(blob, "x", cardinality=4)
    with pytest.raises(CorruptDataError, match="length"):
        read_dv_blob(blob[:-1], "x")
    with pytest.raises(CorruptDataError, match="magic"):
        read_dv_blob(blob[:4] + b"\0\0\0\0" + blob[8:], "x")
    data, _ = write_puffin([("p", DeletionVector.from_positions(np.array([1]), bitmap64=True))])
    with pytest.raises(CorruptDataError, match="not a Puffin file"):
        read_footer(b"PAR1" + data[4:], "x")
