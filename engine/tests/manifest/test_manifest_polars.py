"""polars decodes manifests into the very entries fastavro does, for every shape Strata, Java
Paimon and pypaimon write; what it cannot read falls back to fastavro, never to a wrong answer."""

from __future__ import annotations

import dataclasses

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from manifest_samples import bare_file, full_file, long_row

from strata.manifest import (
    EMPTY_BINARY_ROW,
    FileKind,
    FileSource,
    ManifestCorruptedError,
    ManifestEntry,
    SimpleStats,
    decode_manifest,
    encode_manifest,
)
from strata.manifest.avro_container import write_container
from strata.manifest.codec import _entry_to_avro
from strata.manifest.errors import UnsupportedManifestVersionError
from strata.manifest.schemas import MANIFEST_ENTRY_SCHEMA

_names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=30)
_bytes = st.binary(max_size=40)
_longs = st.integers(-(2**63), 2**63 - 1)
_counts = st.lists(st.one_of(st.none(), st.integers(0, 2**40)), max_size=4)
_stats = st.one_of(st.just(SimpleStats.EMPTY), st.builds(SimpleStats, _bytes, _bytes, _counts))


@st.composite
def _entries(draw: st.DrawFn) -> ManifestEntry:
    base = draw(st.sampled_from([full_file(), bare_file()]))
    file = dataclasses.replace(
        base, file_name=draw(_names), file_size=draw(_longs), row_count=draw(_longs),
        min_key=draw(_bytes), max_key=draw(_bytes), key_stats=draw(_stats), value_stats=draw(_stats),
        min_sequence_number=draw(_longs), level=draw(st.integers(-(2**31), 2**31 - 1)),
        extra_files=draw(st.lists(_names, max_size=2)),
        creation_time=draw(st.one_of(st.none(), st.integers(-(2**62), 2**62))),
        delete_row_count=draw(st.one_of(st.none(), _longs)),
        embedded_index=draw(st.one_of(st.none(), _bytes)),
        file_source=draw(st.sampled_from([None, *FileSource])),
        value_stats_cols=draw(st.one_of(st.none(), st.lists(_names, max_size=3))),
        external_path=draw(st.one_of(st.none(), _names)),
        write_cols_sequences=draw(st.one_of(st.none(), st.lists(_longs, max_size=3))))
    return ManifestEntry(draw(st.sampled_from(list(FileKind))), draw(_bytes),
                         draw(st.integers(-(2**31), 2**31 - 1)), draw(st.integers(-(2**31), 2**31 - 1)), file)


@settings(max_examples=60, deadline=None)
@given(st.lists(_entries(), min_size=1, max_size=40), st.sampled_from(["zstd", "none", "snappy", "deflate"]))
def test_polars_and_fastavro_decode_the_same_entries(entries: list[ManifestEntry], compression: str) -> None:
    data = encode_manifest(entries, compression)
    assert decode_manifest(data, decoder="polars") == decode_manifest(data, decoder="fastavro") == entries


def test_decoded_values_have_the_reference_types() -> None:
    """Not just equal: the same enums and shared objects the fastavro path gives."""
    [full, bare] = decode_manifest(encode_manifest([ManifestEntry(FileKind.DELETE, long_row(3), 1, 2, full_file()),
                                                    ManifestEntry(FileKind.ADD, b"", 0, 1, bare_file())]),
                                   decoder="polars")
    assert full.kind is FileKind.DELETE and full.file.file_source is FileSource.COMPACT
    assert isinstance(full.file.creation_time, int) and full.file.creation_time == 1_700_000_000_123
    assert full.file.key_stats.null_counts == [0, None, 7]
    assert bare.file.key_stats is SimpleStats.EMPTY and bare.file.value_stats is SimpleStats.EMPTY
    assert bare.file.file_source is None and bare.file.extra_files == []


def _foreign(schema: dict, records: list[dict]) -> bytes:
    return write_container(schema, fastavro.parse_schema(schema), records, "zstd")


def test_a_foreign_schema_with_fewer_and_extra_fields_decodes_with_polars() -> None:
    """pypaimon and older Paimon write other record names, extra fields and fewer optional ones."""
    schema = {**MANIFEST_ENTRY_SCHEMA, "name": "ManifestEntry"}
    file_schema = next(f["type"] for f in schema["fields"] if f["name"] == "_FILE")
    kept = [f for f in file_schema["fields"] if f["name"] not in ("_FIRST_ROW_ID", "_WRITE_COLS", "_EXTERNAL_PATH")]
    file_schema = {**file_schema, "name": "DataFileMeta", "fields": [*kept, {"name": "_SOMETHING_NEW", "type": "long"}]}
    schema = {**schema, "fields": [f if f["name"] != "_FILE" else {**f, "type": file_schema} for f in schema["fields"]]}
    expected = ManifestEntry(FileKind.ADD, long_row(1), 0, 1, full_file())
    record = _entry_to_avro(expected)
    kept_names = {f["name"] for f in kept}
    record["_FILE"] = {k: v for k, v in record["_FILE"].items() if k in kept_names} | {"_SOMETHING_NEW": 5}
    expected = dataclasses.replace(expected, file=dataclasses.replace(
        expected.file, first_row_id=None, write_cols=None, external_path=None))
    assert decode_manifest(_foreign(schema, [record]), decoder="polars") == [expected]


def test_bad_values_name_the_record_with_polars() -> None:
    entries = [ManifestEntry(FileKind.ADD, EMPTY_BINARY_ROW, 0, 1, bare_file(f"f-{i}")) for i in range(3)]
    records = [_entry_to_avro(e) for e in entries]
    records[2]["_KIND"] = 7
    with pytest.raises(ManifestCorruptedError, match=r"manifest-k: record 2: bad value: unknown _KIND 7"):
        decode_manifest(_foreign(MANIFEST_ENTRY_SCHEMA, records), source="manifest-k", decoder="polars")
    records[2]["_KIND"], records[1]["_FILE"]["_FILE_SOURCE"] = 0, 9
    with pytest.raises(ManifestCorruptedError, match=r"record 1: bad value: unknown _FILE_SOURCE 9"):
        decode_manifest(_foreign(MANIFEST_ENTRY_SCHEMA, records), decoder="polars")
    records[1]["_FILE"]["_FILE_SOURCE"], records[0]["_VERSION"] = None, 3
    with pytest.raises(UnsupportedManifestVersionError, match=r"record 0: unsupported _VERSION 3"):
        decode_manifest(_foreign(MANIFEST_ENTRY_SCHEMA, records), decoder="polars")


def test_what_polars_cannot_read_falls_back_to_fastavro() -> None:
    """An empty manifest has no records to type polars' columns; "auto" reads it with fastavro,
    and forcing polars says it cannot."""
    empty = encode_manifest([])
    assert decode_manifest(empty, decoder="auto") == []
    with pytest.raises(ValueError, match="polars cannot decode"):
        decode_manifest(empty, decoder="polars")


_LOADING = """
import sys
from strata.manifest import EMPTY_BINARY_ROW, FileKind, ManifestEntry, decode_manifest, encode_manifest
from strata.manifest.avro_arrow import MIN_RECORDS_TO_LOAD
sys.path.insert(0, {samples!r})
from manifest_samples import bare_file
entries = [ManifestEntry(FileKind.ADD, EMPTY_BINARY_ROW, 0, 1, bare_file(f"f-{{i}}"))
           for i in range(MIN_RECORDS_TO_LOAD)]
assert decode_manifest(encode_manifest(entries[:-1])) == entries[:-1]
assert "polars" not in sys.modules, "a small manifest loaded polars"
assert decode_manifest(encode_manifest(entries)) == entries
assert "polars" in sys.modules, "a large manifest did not load polars"
"""


def test_only_a_large_manifest_loads_polars() -> None:
    """Loading polars costs what fastavro takes for thousands of entries: a short job reading
    small manifests never pays it."""
    import subprocess
    import sys
    from pathlib import Path

    code = _LOADING.format(samples=str(Path(__file__).parent))
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
