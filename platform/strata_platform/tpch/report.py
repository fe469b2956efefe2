"""The TPC-H run's table (seconds per query and engine, ratios) and its SVG chart."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from xml.sax.saxutils import escape

from strata_platform.tpch.workload import ENGINES, QueryRun

LABELS = {"trino_strata": "Trino on Strata", "trino_native": "Trino native", "spark_strata": "Spark on Strata"}
COLORS = {"trino_strata": "#1f77b4", "trino_native": "#ff7f0e", "spark_strata": "#2ca02c"}
Runs = Mapping[str, Mapping[int, QueryRun]]


def geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(max(v, 1e-9)) for v in values) / len(values)) if values else float("nan")


def ratios(runs: Runs) -> dict[int, float]:
    """Trino on Strata / Trino native, per query."""
    native = runs["trino_native"]
    return {q: run.seconds / max(native[q].seconds, 1e-9) for q, run in runs["trino_strata"].items()}


def table(phases: Mapping[str, Runs]) -> str:
    """One line per query: seconds on the three engines and the Trino ratio, for each phase."""
    header = "query " + "".join(f"| {phase:^44} " for phase in phases)
    sub = "      " + "| Trino/Strata  Trino/native  Spark/Strata  ratio " * len(phases)
    lines = [header, sub.rstrip()]
    numbers = sorted(next(iter(phases.values()))["trino_native"])
    for q in numbers:
        cells = []
        for runs in phases.values():
            seconds = [runs[e][q].seconds for e in ENGINES]
            cells.append(f"| {seconds[0]:11.2f}  {seconds[1]:12.2f}  {seconds[2]:12.2f}  {ratios(runs)[q]:5.2f} ")
        lines.append(f"Q{q:<5d}" + "".join(cells))
    cells = []
    for runs in phases.values():
        means = [geomean([r.seconds for r in runs[e].values()]) for e in ENGINES]
        cells.append(f"| {means[0]:11.2f}  {means[1]:12.2f}  {means[2]:12.2f}  "
                     f"{geomean(list(ratios(runs).values())):5.2f} ")
    lines.append("geomean" + "".join(cells)[1:])
    return "\n".join(lines)


def svg(phases: Mapping[str, Runs], title: str, path: Path) -> Path:
    """Grouped bars: seconds per query on each engine, one panel per phase (log scale)."""
    numbers = sorted(next(iter(phases.values()))["trino_native"])
    all_seconds = [r.seconds for runs in phases.values() for e in ENGINES for r in runs[e].values()]
    low, high = math.log10(max(min(all_seconds), 1e-3)), math.log10(max(all_seconds))
    low, high = math.floor(low), math.ceil(high + 1e-9)
    group, bar, panel_h, left, top = 36, 10, 220, 60, 40
    width = left + group * len(numbers) + 20
    height = top + (panel_h + 50) * len(phases) + 30
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
             f'font-size="11"><rect width="100%" height="100%" fill="white"/>',
             f'<text x="{left}" y="20" font-size="14">{escape(title)}</text>']
    for i, engine in enumerate(ENGINES):
        parts.append(f'<rect x="{left + 330 + i * 130}" y="10" width="10" height="10" fill="{COLORS[engine]}"/>'
                     f'<text x="{left + 345 + i * 130}" y="19">{LABELS[engine]}</text>')

    def y_of(seconds: float, base: float) -> float:
        fraction = (math.log10(max(seconds, 10**low)) - low) / (high - low)
        return base + panel_h * (1 - fraction)

    for p, (phase, runs) in enumerate(phases.items()):
        base = top + p * (panel_h + 50)
        parts.append(f'<text x="{left}" y="{base - 4}">{escape(phase)} (seconds, log scale)</text>')
        for exponent in range(low, high + 1):
            y = y_of(10.0**exponent, base)
            parts.append(f'<line x1="{left}" x2="{width - 20}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
                         f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{10.0**exponent:g}</text>')
        for g, q in enumerate(numbers):
            x0 = left + g * group + 3
            for i, engine in enumerate(ENGINES):
                seconds = runs[engine][q].seconds
                y = y_of(seconds, base)
                parts.append(f'<rect x="{x0 + i * bar}" y="{y:.1f}" width="{bar - 1}" '
                             f'height="{base + panel_h - y:.1f}" fill="{COLORS[engine]}">'
                             f'<title>Q{q} {LABELS[engine]}: {seconds:.2f} s</title></rect>')
            parts.append(f'<text x="{x0 + 15}" y="{base + panel_h + 14}" text-anchor="middle">Q{q}</text>')
    parts.append("</svg>")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".svg.tmp")
    tmp.write_text("\n".join(parts) + "\n")
    os.replace(tmp, path)
    return path
