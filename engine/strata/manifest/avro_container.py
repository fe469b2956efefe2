"""The Avro object container format (header, blocks, sync markers) with strict checking.

fastavro encodes and decodes the records, but its zstandard codec needs ``backports.zstd``,
which Strata does not ship, and it cannot tell a file cut at a block boundary from a whole
one. So the framing lives here: blocks are compressed with the ``zstandard`` package (as
Avro's codec "zstandard": one zstd frame per block), every length, count and sync marker is
checked, and any fault raises ``ManifestCorruptedError`` naming the file and block.
"""

from __future__ import annotations

import bz2
import functools
import io
import json
import lzma
import os
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import fastavro
import pyarrow as pa
import zstandard

from strata.manifest.errors import ManifestCorruptedError

MAGIC = b"Obj\x01"
SYNC_SIZE = 16
# Java's DataFileWriter flushes a block once this many uncompressed bytes are buffered.
BLOCK_TARGET_BYTES = 64_000
# Paimon's option names for manifest.compression, mapped to Avro codec names.
_CODEC_ALIASES = {"zstd": "zstandard", "none": "null", "uncompressed": "null", "gzip": "deflate"}
_MAX_VARINT_BYTES = 10

Schema = dict[str, Any]


def codec_name(compression: str) -> str:
    """The Avro codec name for a Paimon ``manifest.compression`` value (or an Avro name)."""
    name = _CODEC_ALIASES.get(compression.lower(), compression.lower())
    if name not in _COMPRESSORS:
        raise ValueError(f"unsupported manifest compression {compression!r}; "
                         f"use one of zstd, snappy, none, deflate, bzip2, xz")
    return name


# -- codecs ---------------------------------------------------------------------------------

def _zstd_compress(data: bytes, level: int | None) -> bytes:
    # Level 1 is Paimon's file.compression.zstd-level default; the frame checksum lets readers
    # catch flipped bits, which Avro itself never would.
    compressor = zstandard.ZstdCompressor(level=1 if level is None else level, write_checksum=True)
    return compressor.compress(data)


def _zstd_decompress(data: bytes) -> bytes:
    # Frames may lack a content size (Java streams them) and a block may hold several frames.
    out = []
    rest = data
    while rest:
        frame = zstandard.ZstdDecompressor().decompressobj()
        out.append(frame.decompress(rest))
        if not frame.eof:
            raise ValueError("zstd frame is truncated")
        rest = frame.unused_data
    return b"".join(out)


def _deflate_compress(data: bytes, level: int | None) -> bytes:
    # Avro's "deflate" is raw deflate (RFC 1951): no zlib header or checksum.
    comp = zlib.compressobj(-1 if level is None else level, zlib.DEFLATED, -15)
    return comp.compress(data) + comp.flush()


def _deflate_decompress(data: bytes) -> bytes:
    inflater = zlib.decompressobj(-15)
    out = inflater.decompress(data)
    if not inflater.eof:
        raise ValueError("deflate stream is truncated")
    return out


def _snappy_compress(data: bytes, _level: int | None) -> bytes:
    # Avro's "snappy": a raw snappy block, then the CRC32 of the uncompressed data (big-endian)
    return pa.compress(data, codec="snappy", asbytes=True) + zlib.crc32(data).to_bytes(4, "big")


def _snappy_decompress(data: bytes) -> bytes:
    body, crc = data[:-4], int.from_bytes(data[-4:], "big")
    size = _snappy_uncompressed_length(body)
    out = pa.decompress(body, decompressed_size=size, codec="snappy", asbytes=True)
    if zlib.crc32(out) != crc:
        raise ValueError("snappy block checksum mismatch")
    return out


def _snappy_uncompressed_length(block: bytes) -> int:
    """A raw snappy block starts with its uncompressed length as a little-endian varint."""
    value = shift = 0
    for byte in block[:_MAX_VARINT_BYTES]:
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value
        shift += 7
    raise ValueError("snappy block has no valid length")


_COMPRESSORS: dict[str, Callable[[bytes, int | None], bytes]] = {
    "null": lambda data, _level: data,
    "zstandard": _zstd_compress,
    "deflate": _deflate_compress,
    "bzip2": lambda data, _level: bz2.compress(data),
    "xz": lambda data, _level: lzma.compress(data),
    "snappy": _snappy_compress,
}
_DECOMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    "null": lambda data: data,
    "zstandard": _zstd_decompress,
    "deflate": _deflate_decompress,
    "bzip2": bz2.decompress,
    "xz": lzma.decompress,
    "snappy": _snappy_decompress,
}


# -- varints --------------------------------------------------------------------------------

def _encode_long(value: int) -> bytes:
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zigzag > 0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def _encode_bytes(value: bytes) -> bytes:
    return _encode_long(len(value)) + value


class _Cursor:
    """Reads Avro primitives from a buffer; running off the end is corruption."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def at_end(self) -> bool:
        return self.pos >= len(self.data)

    def read_long(self) -> int:
        result = shift = 0
        for _ in range(_MAX_VARINT_BYTES):
            byte = self.read_fixed(1)[0]
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return (result >> 1) ^ -(result & 1)
            shift += 7
        raise ValueError("varint longer than 10 bytes")

    def read_fixed(self, size: int) -> bytes:
        if size < 0 or self.pos + size > len(self.data):
            raise ValueError(f"needs {size} bytes at offset {self.pos}, file has {len(self.data)}")
        chunk = self.data[self.pos:self.pos + size]
        self.pos += size
        return chunk

    def read_bytes(self) -> bytes:
        return self.read_fixed(self.read_long())


# -- writing --------------------------------------------------------------------------------

def _header(schema_json: str, codec: str, sync: bytes, extra: Mapping[str, str] | None = None) -> bytes:
    meta = {"avro.schema": schema_json.encode(), "avro.codec": codec.encode(),
            **{key: value.encode() for key, value in (extra or {}).items()}}
    parts = [MAGIC, _encode_long(len(meta))]
    for key, value in meta.items():
        parts += [_encode_bytes(key.encode()), _encode_bytes(value)]
    parts += [_encode_long(0), sync]
    return b"".join(parts)


def _block(records: bytes, count: int, codec: str, level: int | None, sync: bytes) -> bytes:
    payload = _COMPRESSORS[codec](records, level)
    return b"".join([_encode_long(count), _encode_long(len(payload)), payload, sync])


def write_container(schema: Schema, parsed: Any, records: Iterable[dict[str, Any]],
                    compression: str = "zstd", level: int | None = None,
                    metadata: Mapping[str, str] | None = None) -> bytes:
    """Encode records into an Avro file whose header carries ``schema`` (and ``metadata``).

    ``parsed`` is the fastavro-parsed schema used to encode (same layout as ``schema``).
    """
    codec = codec_name(compression)
    sync = os.urandom(SYNC_SIZE)
    out = [_header(json.dumps(schema, separators=(",", ":")), codec, sync, metadata)]
    buf = io.BytesIO()
    count = 0
    for record in records:
        fastavro.schemaless_writer(buf, parsed, record)
        count += 1
        if buf.tell() >= BLOCK_TARGET_BYTES:
            out.append(_block(buf.getvalue(), count, codec, level, sync))
            buf, count = io.BytesIO(), 0
    if count:
        out.append(_block(buf.getvalue(), count, codec, level, sync))
    return b"".join(out)


# -- reading --------------------------------------------------------------------------------

def strip_logical_types(node: Any) -> Any:
    """Drop logicalType annotations: the encoding is unchanged, and raw longs are wanted."""
    if isinstance(node, dict):
        return {k: strip_logical_types(v) for k, v in node.items() if k != "logicalType"}
    if isinstance(node, list):
        return [strip_logical_types(v) for v in node]
    return node


@functools.lru_cache(maxsize=64)
def _reader_schema(schema_json: str) -> Any:
    # Files of one table share a handful of writer schemas; parse each once.
    return fastavro.parse_schema(strip_logical_types(json.loads(schema_json)))


def _read_header(cur: _Cursor) -> tuple[dict[str, bytes], bytes]:
    if cur.read_fixed(len(MAGIC)) != MAGIC:
        raise ValueError("not an Avro object container file (bad magic)")
    meta: dict[str, bytes] = {}
    while (count := cur.read_long()) != 0:
        if count < 0:  # a negative count is followed by the block's byte size
            count = -count
            cur.read_long()
        for _ in range(count):
            key = cur.read_bytes().decode()
            meta[key] = cur.read_bytes()
    return meta, cur.read_fixed(SYNC_SIZE)


def _decode_block(block: bytes, count: int, parsed: Any) -> list[Any]:
    buf = io.BytesIO(block)
    records = [fastavro.schemaless_reader(buf, parsed, None) for _ in range(count)]
    if buf.tell() != len(block):
        raise ValueError(f"{len(block) - buf.tell()} stray bytes after {count} records")
    return records


def _iter_blocks(cur: _Cursor, codec: str, sync: bytes) -> Iterator[tuple[int, bytes]]:
    decompress = _DECOMPRESSORS[codec]
    while not cur.at_end():
        count = cur.read_long()
        size = cur.read_long()
        if count < 0 or size < 0:
            raise ValueError(f"negative block count {count} or size {size}")
        payload = cur.read_fixed(size)
        if cur.read_fixed(SYNC_SIZE) != sync:
            raise ValueError("sync marker mismatch after block")
        yield count, decompress(payload)


def read_blocks(data: bytes, what: str) -> tuple[str, list[tuple[int, bytes]]]:
    """The writer schema (JSON) and the decompressed blocks (record count, bytes) of an Avro
    file, every length, sync marker and checksum checked, or raise ``ManifestCorruptedError``."""
    cur = _Cursor(bytes(data))
    try:
        meta, sync = _read_header(cur)
        codec = meta.get("avro.codec", b"null").decode()
        if codec not in _DECOMPRESSORS:
            raise ValueError(f"unsupported Avro codec {codec!r}")
        schema_json = meta["avro.schema"].decode()
    except Exception as exc:
        raise ManifestCorruptedError(f"{what}: unreadable Avro header: {exc}") from exc
    blocks: list[tuple[int, bytes]] = []
    try:
        for block in _iter_blocks(cur, codec, sync):
            blocks.append(block)
    except Exception as exc:
        raise _block_error(what, blocks, exc) from exc
    return schema_json, blocks


def _block_error(what: str, before: list[tuple[int, bytes]], exc: Exception) -> ManifestCorruptedError:
    records = sum(count for count, _ in before)
    return ManifestCorruptedError(
        f"{what}: corrupt or truncated Avro block {len(before)} (after {records} records): {exc}")


def read_container(data: bytes, what: str) -> list[Any]:
    """Decode every record of an Avro file, or raise ``ManifestCorruptedError``.

    Records come back as fastavro dicts, decoded with the file's own writer schema (so any
    record names and extra fields are accepted) and with timestamps as raw longs.
    """
    return decode_records(*read_blocks(data, what), what)


def decode_records(schema_json: str, blocks: list[tuple[int, bytes]], what: str) -> list[Any]:
    """The records of blocks from ``read_blocks``, decoded by fastavro."""
    try:
        parsed = _reader_schema(schema_json)
    except Exception as exc:
        raise ManifestCorruptedError(f"{what}: unreadable Avro header: {exc}") from exc
    records: list[Any] = []
    for i, (count, block) in enumerate(blocks):
        try:
            records += _decode_block(block, count, parsed)
        except Exception as exc:
            raise _block_error(what, blocks[:i], exc) from exc
    return records


def plain_container(schema_json: str, blocks: list[tuple[int, bytes]]) -> bytes:
    """An uncompressed Avro file of already decompressed blocks (for decoders that lack a codec)."""
    sync = bytes(SYNC_SIZE)
    parts = [_header(schema_json, "null", sync)]
    parts += [b"".join([_encode_long(count), _encode_long(len(block)), block, sync]) for count, block in blocks]
    return b"".join(parts)
