"""Truncated, garbled or mistyped files raise ManifestCorruptedError; nothing partial comes back."""

from __future__ import annotations

import random

import pytest
from manifest_samples import dv_index_entry, full_file, full_meta, long_row

from strata.errors import CorruptMetadataError
from strata.manifest import (
    FileKind,
    ManifestCorruptedError,
    ManifestEntry,
    decode_index_manifest,
    decode_manifest,
    decode_manifest_list,
    encode_index_manifest,
    encode_manifest,
    encode_manifest_list,
)

ENTRIES = [ManifestEntry(FileKind.ADD, long_row(i), i, 4, full_file(f"data-{i}.parquet"))
           for i in range(3)]


@pytest.mark.parametrize("compression", ["zstd", "none", "deflate"])
def test_every_truncation_of_a_manifest_is_detected(compression: str) -> None:
    data = encode_manifest(ENTRIES, compression)
    header_end = data.index(data[-16:]) + 16  # the header ends with the file's sync marker
    for cut in range(len(data)):
        if cut == header_end:  # a bare header is a valid empty file: only the count tells
            assert decode_manifest(data[:cut]) == []
            with pytest.raises(ManifestCorruptedError, match="holds 0 entries"):
                decode_manifest(data[:cut], expected_count=len(ENTRIES))
            continue
        with pytest.raises(ManifestCorruptedError):
            decode_manifest(data[:cut])


def test_truncated_manifest_list_and_index_manifest_are_detected() -> None:
    for data, decode in [(encode_manifest_list([full_meta()]), decode_manifest_list),
                         (encode_index_manifest([dv_index_entry()]), decode_index_manifest)]:
        header_end = data.index(data[-16:]) + 16
        for cut in [*range(0, header_end, 7), *range(header_end + 1, len(data), 3)]:
            with pytest.raises(ManifestCorruptedError):
                decode(data[:cut])


def test_truncation_at_a_block_boundary_needs_the_expected_count() -> None:
    entries = ENTRIES * 200  # several Avro blocks
    data = encode_manifest(entries, "none")
    sync = data[-16:]
    first_block_end = data.index(sync, data.index(sync) + 16) + 16
    partial = decode_manifest(data[:first_block_end])  # a whole, shorter Avro file
    assert 0 < len(partial) < len(entries)
    with pytest.raises(ManifestCorruptedError, match="says 600"):
        decode_manifest(data[:first_block_end], expected_count=len(entries))


@pytest.mark.parametrize("data", [
    b"", b"Obj", b"Obj\x01", b"not avro at all", b"Obj\x01" + bytes(64),
    random.Random(7).randbytes(500), b"Obj\x01" + random.Random(8).randbytes(500),
])
def test_garbage_is_refused(data: bytes) -> None:
    with pytest.raises(ManifestCorruptedError):
        decode_manifest(data)


def test_flipped_bytes_in_a_zstd_block_are_caught() -> None:
    data = encode_manifest(ENTRIES)
    header_end = data.index(b"zstandard") + len("zstandard") + 16 + 1
    for pos in range(header_end + 8, len(data) - 16, 5):
        broken = bytearray(data)
        broken[pos] ^= 0x55
        with pytest.raises(ManifestCorruptedError):
            decode_manifest(bytes(broken))


def test_broken_sync_marker_and_trailing_garbage_are_caught() -> None:
    data = encode_manifest(ENTRIES)
    with pytest.raises(ManifestCorruptedError, match="sync marker"):
        decode_manifest(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(ManifestCorruptedError):
        decode_manifest(data + b"\x00junk")


def test_a_file_of_another_kind_is_refused() -> None:
    with pytest.raises(ManifestCorruptedError, match="manifest-list-1: record 0: missing field"):
        decode_manifest(encode_manifest_list([full_meta()]), source="manifest-list-1")
    with pytest.raises(ManifestCorruptedError, match="_VERSION 2"):
        decode_index_manifest(encode_manifest(ENTRIES))


def test_errors_name_the_file_and_are_strata_metadata_errors() -> None:
    with pytest.raises(CorruptMetadataError, match="manifest-abc: unreadable Avro header"):
        decode_manifest(b"junk", source="manifest-abc")
