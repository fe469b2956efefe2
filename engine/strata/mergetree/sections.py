"""Sections: a bucket's files grouped where their key ranges overlap (Paimon's IntervalPartition).

Every record of a key lies in files whose key range holds that key, and those files all overlap
there, so they share a section: each section merges on its own, and a section of one sorted run
needs no merge at all. Reads go section by section; compactions move a lone run's large files up
a level without rewriting them.
"""

from __future__ import annotations

import pyarrow as pa

from strata.manifest.data_file_meta import DataFileMeta
from strata.mergetree.levels import KeyOrder
from strata.schema.table_schema import TableSchema


def sections_apply(schema: TableSchema) -> bool:
    """Whether decoded keys compare in Python as the writers sorted them: not with a floating
    point key field (NaN compares neither above nor below anything; Arrow sorts it last)."""
    return not any(pa.types.is_floating(f.type.to_arrow()) for f in schema.key_fields())


def key_sections(files: list[DataFileMeta], key_order: KeyOrder) -> list[list[DataFileMeta]]:
    """The files grouped where their key ranges overlap (transitively), sections in key order."""
    if len(files) < 2:
        return [files] if files else []
    bounds = {f.file_name: (key_order(f.min_key), key_order(f.max_key)) for f in files}
    sections: list[list[DataFileMeta]] = []
    high: tuple | None = None
    for f in sorted(files, key=lambda f: bounds[f.file_name]):
        low, top = bounds[f.file_name]
        if high is None or low > high:  # after every key of the section so far: a new one
            sections.append([])
            high = top
        sections[-1].append(f)
        high = max(high, top)
    return sections
