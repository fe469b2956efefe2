"""Spark's offset log: the end offsets of a micro-batch's sources, as the query's checkpoint records
them (``<checkpoint>/offsets/<batch id>``: a version line, a metadata line, one offset per source)."""

from __future__ import annotations

import json


def upstream_snapshot(checkpoint: str, batch_id: int) -> int:
    """The ``strata`` source's end offset of micro-batch `batch_id`, from Spark's offset log (a
    version line, a metadata line, then one offset per source; this writer expects one source)."""
    path, lines = _offset_log(checkpoint, batch_id)
    offsets = [json.loads(line) for line in lines[2:]]
    found = [o["snapshot"] for o in offsets if isinstance(o, dict) and "snapshot" in o]
    if len(found) != 1:
        raise ValueError(f"Spark offset log {path} must hold exactly one strata source offset "
                         f"({{'snapshot': N}}), found {lines[2:]}")
    return int(found[0])


def source_offsets(checkpoint: str, batch_id: int) -> list[dict]:
    """The end offsets of micro-batch `batch_id` of every ``strata`` source of the query (those
    with a "snapshot"; newer ones also name their table, "table": "<warehouse>#<db>.<table>")."""
    _path, lines = _offset_log(checkpoint, batch_id)
    offsets = [json.loads(line) for line in lines[2:]]
    return [o for o in offsets if isinstance(o, dict) and "snapshot" in o]


def _offset_log(checkpoint: str, batch_id: int) -> tuple[str, list[str]]:
    path = f"{checkpoint.rstrip('/')}/offsets/{batch_id}"
    if path.startswith("file:"):
        path = path[len("file://"):] if path.startswith("file://") else path[len("file:"):]
    try:
        with open(path) as fh:
            lines = [line.strip() for line in fh if line.strip()]
    except FileNotFoundError:
        raise FileNotFoundError(f"no Spark offset log {path} for micro-batch {batch_id}: is {checkpoint} the "
                                "query's checkpointLocation?") from None
    return path, lines
