"""Round trips of the three Avro codecs, and the exact schema written in the file header."""

from __future__ import annotations

import io
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import fastavro
import pytest
from manifest_samples import (
    bare_file,
    bare_meta,
    dv_index_entry,
    full_file,
    full_meta,
    global_index_entry,
    hash_index_entry,
    long_row,
)

from strata.manifest import (
    EMPTY_BINARY_ROW,
    FileKind,
    FileSource,
    ManifestCorruptedError,
    ManifestEntry,
    SimpleStats,
    UnsupportedManifestVersionError,
    decode_index_manifest,
    decode_manifest,
    decode_manifest_list,
    encode_index_manifest,
    encode_manifest,
    encode_manifest_list,
)
from strata.manifest.schemas import MANIFEST_ENTRY_SCHEMA

CODECS = ["zstd", "none", "deflate", "bzip2", "xz"]


def _entries() -> list[ManifestEntry]:
    return [
        ManifestEntry(FileKind.ADD, long_row(1), 1, 2, full_file()),
        ManifestEntry(FileKind.DELETE, EMPTY_BINARY_ROW, 0, -1, bare_file()),
        # empty lists must stay empty lists, not turn into None
        ManifestEntry(FileKind.ADD, long_row(2), 0, 2, replace(
            full_file("data-3.parquet"), extra_files=[], value_stats_cols=[], write_cols=[],
            write_cols_sequences=[], embedded_index=b"")),
    ]


@pytest.mark.parametrize("compression", CODECS)
def test_manifest_round_trip(compression: str) -> None:
    entries = _entries()
    assert decode_manifest(encode_manifest(entries, compression)) == entries


def test_optional_fields_decode_as_none_and_kinds_as_enums() -> None:
    [bare] = decode_manifest(encode_manifest([ManifestEntry(FileKind.ADD, b"", 0, 1, bare_file())]))
    f = bare.file
    assert f.extra_files == [] and f.creation_time is None and f.file_source is None
    assert (f.delete_row_count, f.embedded_index, f.value_stats_cols, f.external_path,
            f.first_row_id, f.write_cols, f.write_cols_sequences) == (None,) * 7
    [full] = decode_manifest(encode_manifest(_entries()[:1]))
    assert full.kind is FileKind.ADD and full.file.file_source is FileSource.COMPACT
    assert full.file.key_stats.null_counts == [0, None, 7]


def test_empty_files_round_trip() -> None:
    assert decode_manifest(encode_manifest([])) == []
    assert decode_manifest_list(encode_manifest_list([])) == []
    assert decode_index_manifest(encode_index_manifest([])) == []


@pytest.mark.parametrize("compression", CODECS)
def test_manifest_list_round_trip(compression: str) -> None:
    metas = [full_meta(), bare_meta()]
    assert decode_manifest_list(encode_manifest_list(metas, compression)) == metas


@pytest.mark.parametrize("compression", CODECS)
def test_index_manifest_round_trip(compression: str) -> None:
    entries = [dv_index_entry(), global_index_entry(), hash_index_entry(),
               replace(hash_index_entry(), dv_ranges=[])]
    assert decode_index_manifest(encode_index_manifest(entries, compression)) == entries


def test_many_entries_span_several_blocks() -> None:
    entries = [ManifestEntry(FileKind.ADD, long_row(i % 5), i % 3, 3, full_file(f"data-{i}.orc"))
               for i in range(3000)]
    data = encode_manifest(entries, "none")
    assert len(list(fastavro.block_reader(io.BytesIO(data)))) > 1
    assert decode_manifest(data) == entries


def test_empty_stats_are_paimons() -> None:
    assert SimpleStats(bytes(12), bytes(12), []) == SimpleStats.EMPTY
    assert SimpleStats.EMPTY.is_empty() and not SimpleStats(long_row(1), long_row(1), []).is_empty()


def test_unknown_compression_is_refused() -> None:
    with pytest.raises(ValueError, match="unsupported manifest compression"):
        encode_manifest([], "lzo")


def test_header_carries_javas_schema() -> None:
    """Read our (uncompressed) file with fastavro itself: framing, names and logical types."""
    reader = fastavro.reader(io.BytesIO(encode_manifest(_entries(), "none")))
    schema = reader.writer_schema
    assert isinstance(schema, dict)
    assert schema["name"] == "org.apache.paimon.avro.generated.record"
    fields = {f["name"]: f["type"] for f in schema["fields"]}
    assert list(fields)[:6] == ["_VERSION", "_KIND", "_PARTITION", "_BUCKET", "_TOTAL_BUCKETS",
                                "_FILE"]
    file_type = fields["_FILE"]
    assert file_type["name"] == "org.apache.paimon.avro.generated.record__FILE"
    file_fields = {f["name"]: f for f in file_type["fields"]}
    assert len(file_fields) == 21
    assert file_fields["_KEY_STATS"]["type"]["name"] == (
        "org.apache.paimon.avro.generated.record__FILE__KEY_STATS")
    assert file_fields["_CREATION_TIME"]["type"] == [
        "null", {"type": "long", "logicalType": "timestamp-millis"}]
    assert file_fields["_CREATION_TIME"]["default"] is None
    record = next(reader)
    assert isinstance(record, dict) and record["_VERSION"] == 2
    assert record["_FILE"]["_CREATION_TIME"] == datetime.fromtimestamp(1_700_000_000.123, UTC)


def test_header_codec_is_zstandard_by_default() -> None:
    data = encode_manifest(_entries())
    assert data.startswith(b"Obj\x01") and b"avro.codec\x12zstandard" in data


def _first_record(data: bytes) -> dict[str, Any]:
    record = next(fastavro.reader(io.BytesIO(data)))
    assert isinstance(record, dict)
    return record


def _write_foreign(schema: dict, records: list[dict]) -> bytes:
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(schema), records)
    return buf.getvalue()


def test_foreign_schema_with_fewer_and_extra_fields_decodes() -> None:
    """Other writers name records differently, may lack newer nullable fields or add their own."""
    file_fields = [f for f in MANIFEST_ENTRY_SCHEMA["fields"][5]["type"]["fields"]
                   if f["name"] not in ("_FIRST_ROW_ID", "_WRITE_COLS", "_WRITE_COLS_SEQUENCES")]
    schema = {"type": "record", "name": "ManifestEntry", "fields": [
        *MANIFEST_ENTRY_SCHEMA["fields"][:5],
        {"name": "_FILE", "type": {"type": "record", "name": "DataFileMeta", "fields": file_fields}},
        {"name": "_SOMETHING_NEW", "type": ["null", "string"], "default": None},
    ]}
    expected = ManifestEntry(FileKind.ADD, long_row(1), 1, 2, replace(
        full_file(), first_row_id=None, write_cols=None, write_cols_sequences=None))
    [ours] = decode_manifest(encode_manifest([expected], "none"))
    record = _first_record(encode_manifest([expected], "none"))
    record["_FILE"] = {k: v for k, v in record["_FILE"].items() if k in {f["name"] for f in file_fields}}
    record["_SOMETHING_NEW"] = "x"
    assert decode_manifest(_write_foreign(schema, [record])) == [ours] == [expected]


def test_wrong_version_is_refused() -> None:
    data = encode_manifest(_entries(), "none")
    record = _first_record(data)
    record["_VERSION"] = 1
    with pytest.raises(UnsupportedManifestVersionError, match="_VERSION 1"):
        decode_manifest(_write_foreign(MANIFEST_ENTRY_SCHEMA, [record]), source="manifest-x")


def test_expected_count_catches_missing_entries() -> None:
    data = encode_manifest(_entries())
    assert len(decode_manifest(data, expected_count=3)) == 3
    with pytest.raises(ManifestCorruptedError, match=r"manifest-y: holds 3 entries.* says 4"):
        decode_manifest(data, expected_count=4, source="manifest-y")


def test_ten_thousand_entries_round_trip() -> None:
    # speed is measured by `make bench`, never asserted here
    entries = [ManifestEntry(FileKind.ADD, long_row(i % 7), i % 4, 4, full_file(f"data-{i}.parquet"))
               for i in range(10_000)]
    assert decode_manifest(encode_manifest(entries)) == entries
