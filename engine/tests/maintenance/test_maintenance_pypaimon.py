"""pypaimon 2.1 (Apache Paimon's Python implementation) and Strata share tags, and read tables after
Strata's expiry and rollback: tag files (with and without a retention) written by one are read by
the other, and pypaimon sees the same rows as Strata at the latest snapshot and at each tag."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from maintenance_helpers import PK_SCHEMA, pk_batch, rows

import strata

pytestmark = pytest.mark.pypaimon

DRIVER = """
import json, sys
from pypaimon import CatalogFactory

catalog = CatalogFactory.create({"warehouse": sys.argv[1]})
table = catalog.get_table("db.t")

def read(t):
    builder = t.new_read_builder()
    data = builder.new_read().to_arrow(builder.new_scan().plan().splits())
    return sorted(zip(*(data.column(c).to_pylist() for c in ("dt", "id", "v"))))

out = {"latest": read(table)}
for name in sys.argv[2].split(","):
    tag = table.tag_manager().get(name)
    out[name] = {"rows": read(table.copy({"scan.tag-name": name})), "snapshot": tag.id,
                 "retained_s": tag.tag_time_retained.total_seconds() if tag.tag_time_retained else None,
                 "has_create_time": tag.tag_create_time is not None}
table.create_tag("from-pypaimon", snapshot_id=int(sys.argv[3]), time_retained="2h")
print(json.dumps(out))
"""


def test_tags_expiry_and_rollback_interoperate(tmp_path: Path) -> None:
    from pypaimon_oracle import run_pypaimon

    warehouse = str(tmp_path / "wh")
    catalog = strata.load_catalog(warehouse)
    catalog.create_database("db")
    table = catalog.create_table("db.t", PK_SCHEMA, partition_keys=["dt"], primary_keys=["dt", "id"],
                                 options={"bucket": "2", "write-only": "true"})
    for i in range(1, 9):
        table.write(pk_batch("a" if i % 2 else "b", [i % 3, i], i))
        if i == 4:
            table.compact(full=True)
    table.create_tag("plain", 3)
    table.create_tag("kept", 6, time_retained="1 h")
    expected = {"plain": rows(table, tag="plain"), "kept": rows(table, tag="kept")}
    table.expire_snapshots(retain_min=3, time_retained=0)  # snapshots 3 and 6 now live only in tags
    table.rollback_to(table.snapshot_manager.latest_id() - 1)
    latest = rows(table)

    out = json.loads(run_pypaimon(DRIVER, warehouse, "plain,kept", str(table.snapshot_manager.latest_id()))
                     .strip().splitlines()[-1])
    assert [tuple(r) for r in out["latest"]] == latest
    for name in ("plain", "kept"):
        assert [tuple(r) for r in out[name]["rows"]] == expected[name]
    assert out["plain"]["retained_s"] is None and not out["plain"]["has_create_time"]
    assert out["kept"]["retained_s"] == 3600.0 and out["kept"]["has_create_time"]

    # and Strata reads pypaimon's tag
    info = table.tags.info("from-pypaimon")
    assert info.time_retained_ms == 2 * 3600_000 and info.create_time is not None
    assert rows(table, tag="from-pypaimon") == latest
    assert os.path.exists(table.tags.path("from-pypaimon"))
