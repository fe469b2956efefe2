"""Avro files decoded into Arrow columns by polars' native Avro reader, when polars is installed.

fastavro builds a Python dict per record, which is most of the time it takes to plan a table of
many files; polars decodes the same blocks natively, several times faster. The framing (header,
blocks, sync markers, codecs, checksums) stays with ``avro_container``, which hands polars one
uncompressed file of the checked blocks: polars lacks the zstandard codec, and its errors would
not name the block. Whatever polars refuses (a schema shape it does not know, a record it cannot
decode) returns None, and the caller decodes with fastavro, which either reads it or names the
fault. Small files decode with fastavro until polars is loaded anyway: a short job reading a
small table skips its import.
"""

from __future__ import annotations

import functools
import io
import json
import sys
from typing import Any

import pyarrow as pa

from strata.manifest.avro_container import plain_container, strip_logical_types

# Importing polars costs as much as fastavro decoding thousands of entries: a smaller file is not
# worth that import, only the use of a polars already loaded.
MIN_RECORDS_TO_LOAD = 5_000


@functools.cache
def _polars() -> Any | None:
    try:
        import polars
    except ImportError:
        return None
    return polars


def available() -> bool:
    """True when polars is installed (the ``polars`` extra); loads it."""
    return _polars() is not None


@functools.lru_cache(maxsize=64)
def _raw_schema(schema_json: str) -> str:
    # without logical types, timestamps come back as the raw longs the format stores
    return json.dumps(strip_logical_types(json.loads(schema_json)), separators=(",", ":"))


def decode_table(schema_json: str, blocks: list[tuple[int, bytes]], *, force: bool = False) -> pa.Table | None:
    """The records of blocks from ``read_blocks`` as an Arrow table, or None when polars is
    not installed, cannot decode them, or (unless ``force``) is not worth loading for them."""
    expected = sum(count for count, _ in blocks)
    if expected == 0:
        return None  # polars needs a record to type its columns
    if not force and expected < MIN_RECORDS_TO_LOAD and "polars" not in sys.modules:
        return None
    polars = _polars()
    if polars is None:
        return None
    try:
        frame = polars.read_avro(io.BytesIO(plain_container(_raw_schema(schema_json), blocks)))
    except Exception:
        return None
    if frame.height != expected:
        return None
    return frame.to_arrow()
