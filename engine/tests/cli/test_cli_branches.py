"""`strata branch create|delete|list|fast-forward`, and the errors for a missing branch, tag or snapshot."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import strata
from strata.cli import main


def run(capsys: pytest.CaptureFixture[str], warehouse: Path, *args: str) -> tuple[int, str, str]:
    code = main(["--warehouse", str(warehouse), *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_branch_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wh = tmp_path / "wh"
    catalog = strata.load_catalog(str(wh))
    catalog.create_database("db")
    table = catalog.create_table("db.t", pa.schema([pa.field("id", pa.int64(), nullable=False)]),
                                 primary_keys=["id"], options={"bucket": "1"})
    table.write(pa.table({"id": pa.array([1, 2], pa.int64())}))
    table.create_tag("t1")

    code, out, err = run(capsys, wh, "branch", "create", "db.t", "b1", "--tag", "t1")
    assert code == 0, err
    assert "created branch b1 of table db.t (at snapshot 1); write it as db.t$branch_b1" in out
    assert run(capsys, wh, "branch", "create", "db.t", "empty")[0] == 0
    catalog.get_table("db.t$branch_b1").write(pa.table({"id": pa.array([3], pa.int64())}))

    code, out, _ = run(capsys, wh, "branch", "list", "db.t")
    assert code == 0
    lines = {line.split()[0]: line.split() for line in out.splitlines()[2:]}
    assert lines["b1"][1:3] == ["2", "3"] and set(lines) == {"b1", "empty"}

    for args, message in (
            (("create", "db.t", "b2", "--tag", "nope"), "Tag name 'nope' not exists"),
            (("create", "db.t", "b2", "--snapshot", "42"), "snapshot 42 does not exist"),
            (("create", "db.t", "main"), "default branch"),
            (("create", "db.t", "123"), "pure numeric"),
            (("create", "db.t", "b1"), "'b1' already exists"),
            (("delete", "db.t", "zz"), "Branch name 'zz' doesn't exist"),
            (("fast-forward", "db.t", "zz"), "Branch name 'zz' doesn't exist"),
            (("fast-forward", "db.t", "empty"), "does not have snapshot")):
        code, _, err = run(capsys, wh, "branch", *args)
        assert code == 2 and message in err, (args, err)
    code, _, err = run(capsys, wh, "read", "db.t$branch_zz")
    assert code == 2 and "db.t$branch_zz does not exist" in err

    code, out, err = run(capsys, wh, "branch", "fast-forward", "db.t", "b1")
    assert code == 0, err
    assert "fast-forwarded main of table db.t to branch b1 (latest snapshot 2)" in out
    assert sorted(catalog.get_table("db.t").to_arrow().column("id").to_pylist()) == [1, 2, 3]

    assert run(capsys, wh, "branch", "delete", "db.t", "b1")[0] == 0
    assert "b1" not in run(capsys, wh, "branch", "list", "db.t")[1]
