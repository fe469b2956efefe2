"""The docs site's generated reference pages and benchmark figures: every entry of the code is on
its page, and an entry without a description fails the build, naming the entry."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from strata import metrics, options
from strata.cli.app import build_parser
from strata_platform import bench_report, docs_reference
from strata_platform.docs_reference import UndocumentedError


def test_every_option_is_on_the_options_page_with_its_type_and_default() -> None:
    page = docs_reference.options_page()
    for key, option in options.OPTIONS.items():
        default = "(none)" if option.default is None else f"`{option.default}`"
        assert f"| `{key}` | {docs_reference.option_type(option.parse)} | {default} |" in page
    assert "| `merge-engine` | one of `deduplicate`, `partial-update`, `aggregation`, `first-row` |" in page
    assert "| `snapshot.num-retained.min` | integer >= 1 | `10` |" in page


def test_an_option_without_a_description_fails_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    undocumented = options.Option("scan.secret-knob", "1", int, "  ")
    monkeypatch.setitem(options.OPTIONS, undocumented.key, undocumented)
    with pytest.raises(UndocumentedError, match=r"'scan\.secret-knob' has no description"):
        docs_reference.options_page()


def test_every_command_and_flag_of_the_cli_has_help_and_is_on_its_page() -> None:
    page = docs_reference.cli_page()  # raises, naming the command and flag, on one without help
    for command in ("strata create-table", "strata branch fast-forward", "strata iceberg status",
                    "strata expire-partitions", "strata compact"):
        assert f"`{command}`" in page
    flags = {flag for action in _all_actions(build_parser()) for flag in action.option_strings
             if action.help != argparse.SUPPRESS and flag not in ("-h", "--help")}
    assert {"--if-not-exists", "--where", "--order-strategy", "--strategy", "--mode"} <= flags
    missing = [flag for flag in flags if f"`{flag}`" not in page and f"`{flag}," not in page]
    assert not missing


def _all_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    found = list(parser._actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _all_actions(sub)
    return found


def test_a_cli_flag_or_command_without_help_fails_naming_it() -> None:
    parser = argparse.ArgumentParser(prog="strata")
    sub = parser.add_subparsers()
    sub.add_parser("vacuum", help="tidy a table").add_argument("--hard", action="store_true")
    with pytest.raises(UndocumentedError, match="`strata vacuum` argument '--hard' has no help"):
        docs_reference.cli_page(parser)
    parser = argparse.ArgumentParser(prog="strata")
    parser.add_subparsers().add_parser("vacuum")
    with pytest.raises(UndocumentedError, match="command `strata vacuum` has no help"):
        docs_reference.cli_page(parser)


def test_every_metric_is_on_the_metrics_page_with_its_labels() -> None:
    page = docs_reference.metrics_page()
    for metric in metrics.DEFINITIONS:
        labels = ", ".join(f"`{label}`" for label in metric.labels)
        assert f"| `{metric.name}` | {metric.type} | {labels} |" in page


def test_every_variable_the_services_read_is_described() -> None:
    page = docs_reference.environment_page()
    serving = docs_reference.serving_variables()
    assert {"STRATA_WAREHOUSE", "STRATA_CDC_TOPICS", "STRATA_ICEBERG_REST_PORT"} <= set(serving)
    assert serving["STRATA_COMPACTION_INTERVAL_SECONDS"] == "60.0"  # the default beside the name
    for name in serving:
        assert f"| `{name}` |" in page
    assert "| `STRATA_PG_DSN` | `postgres` |" in page  # what `strata-services env postgres` exports


def test_a_variable_without_a_description_fails_naming_it() -> None:
    with pytest.raises(UndocumentedError, match="STRATA_BRAND_NEW has no description"):
        docs_reference._description("STRATA_BRAND_NEW")
    assert "STRATA_JDBC_PASSWORD" in docs_reference._description("STRATA_JDBC_PASSWORD_FILE")


# -- benchmark figures -----------------------------------------------------------------------------
def _report(**extra: object) -> dict[str, object]:
    return {"created": "2026-12-01T10:00:00+0000", "results": [
        {"workload": "W1", "description": "append", "target": ">= 0.6", "pass": True, "ratio": 1.25},
        {"workload": "TRINO_SCAN", "description": "scan", "target": "ratio <= 1.2", "pass": False, "ratio": 1.6},
        {"workload": "GROWTH_COMMIT", "description": "growth", "target": "growth <= 1.5", "pass": True,
         "growth": 1.2, "curve": "100:4.0/7.6ms 1000:5.1/37.0ms"},
    ], **extra}


def test_a_latency_ratio_reads_as_behind_and_a_throughput_ratio_as_ahead() -> None:
    rows = {r["workload"]: r for r in _report()["results"]}  # type: ignore[attr-defined]
    assert bench_report.relative_speed(rows["W1"]) == 1.25
    assert bench_report.relative_speed(rows["TRINO_SCAN"]) == pytest.approx(1 / 1.6)
    assert bench_report.relative_speed(rows["GROWTH_COMMIT"]) is None
    tables = bench_report.markdown_tables(_report())
    assert "| W1 | append | 1.25 | >= 0.6 | yes | 1.25x ahead |" in tables
    assert "| TRINO_SCAN | scan | 1.6 | ratio <= 1.2 | **no** | 0.62x behind |" in tables
    assert "| 1,000 | 5.1 | 37.0 |" in tables


def test_a_bench_run_of_a_subset_keeps_the_other_figures(tmp_path: Path) -> None:
    previous = _report(tpch_per_query={"scale_factor": 1, "phase": "after load", "seconds": {"a": [1.0]}},
                       source="figures of a full run")
    latest = {"created": "2026-12-02", "results": [
        {"workload": "W1", "target": ">= 0.6", "pass": True, "ratio": 0.9}]}
    merged = bench_report.merge(previous, latest)
    assert [(r["workload"], r.get("ratio")) for r in merged["results"]] == [
        ("W1", 0.9), ("TRINO_SCAN", 1.6), ("GROWTH_COMMIT", None)]
    assert merged["tpch_per_query"] == previous["tpch_per_query"]
    assert merged["created"] == "2026-12-02"
    # the caption names what each run measured, also after several subset runs
    assert merged["source"] == f"W1 from a run of 2026-12-02; the other workloads from {previous['source']}"
    later = {"created": "2026-12-03", "results": [{"workload": "TRINO_SCAN", "target": "ratio <= 1.2", "pass": True}]}
    assert bench_report.merge(merged, later)["source"] == (
        f"TRINO_SCAN from a run of 2026-12-03; W1 from a run of 2026-12-02; the other workloads from "
        f"{previous['source']}")
    assert "source" not in bench_report.merge(previous, {**latest, "results": previous["results"]})


def test_bench_report_writes_the_results_and_the_same_plots_from_the_same_json(tmp_path: Path) -> None:
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(_report()))
    docs = tmp_path / "docs"
    docs.mkdir()
    assert bench_report.main([str(bench), "--docs", str(docs)]) == 0
    assert json.loads((docs / "results.json").read_text())["results"][0]["workload"] == "W1"
    first = {name: (docs / name).read_bytes() for name in ("peers.svg", "growth.svg")}
    assert b"TRINO_SCAN" in first["peers.svg"]
    assert not (docs / "tpch.svg").exists()  # no per-query TPC-H seconds: no plot
    assert bench_report.main([str(bench), "--docs", str(docs)]) == 0
    assert {name: (docs / name).read_bytes() for name in first} == first


def test_bench_report_names_what_is_wrong_with_its_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"rows": []}))
    assert bench_report.main([str(bench), "--docs", str(tmp_path)]) == 2
    assert f"{bench}: no 'results' list" in capsys.readouterr().err
    bench.write_text(json.dumps({"results": [{"workload": "W9"}]}))
    with pytest.raises(bench_report.BenchReportError, match=r"result 0 \(W9\) has no target"):
        bench_report.load_results(bench)
    assert bench_report.main([str(tmp_path / "missing.json"), "--docs", str(tmp_path / "empty")]) == 2
    assert "run `make bench` first" in capsys.readouterr().err
