"""The report of a long simulation: seeds run, steps, operations and faults by kind, and each
failure's seed with its shrunk, replayable operation list (JSON, plus a text summary)."""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from strata.testing.simulation.runner import RunResult, describe, to_json


@dataclass
class Report:
    seeds: int = 0
    steps: int = 0
    seconds: float = 0.0
    counters: Counter[str] = field(default_factory=Counter)
    failures: list[RunResult] = field(default_factory=list)

    def add(self, result: RunResult) -> None:
        self.seeds += 1
        self.steps += result.steps_run
        self.seconds += result.seconds
        self.counters.update(result.counters)

    def to_json(self) -> dict[str, Any]:
        return {"seeds": self.seeds, "steps": self.steps, "seconds": round(self.seconds, 1),
                "operations": _by_prefix(self.counters, "op:"), "reads": _by_prefix(self.counters, "read:"),
                "faults": _by_prefix(self.counters, "fault:"), "tables": _by_prefix(self.counters, "table:"),
                "outcomes": _by_prefix(self.counters, "outcome:"), "iceberg": _by_prefix(self.counters, "iceberg:"),
                "oracles": _by_prefix(self.counters, "oracle:"),
                "failures": [to_json(f) for f in self.failures]}

    def summary(self) -> str:
        lines = [f"{self.seeds} seeds, {self.steps} steps in {self.seconds:.0f} s; "
                 f"{len(self.failures)} failure(s)"]
        for title, prefix in (("operations", "op:"), ("reads", "read:"), ("faults", "fault:"),
                              ("outcomes", "outcome:"), ("iceberg", "iceberg:"), ("oracles", "oracle:")):
            counts = _by_prefix(self.counters, prefix)
            if counts:
                lines.append(f"{title}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        lines += [describe(f) for f in self.failures]
        return "\n".join(lines)

    def write(self, path: str) -> tuple[str, str]:
        """`path`.json and `path`.txt (a directory `path` gets report.json and report.txt)."""
        base = os.path.join(path, "report") if os.path.isdir(path) or path.endswith(os.sep) else path
        os.makedirs(os.path.dirname(os.path.abspath(base)), exist_ok=True)
        with open(f"{base}.json", "w") as out:
            json.dump(self.to_json(), out, indent=2)
        with open(f"{base}.txt", "w") as out:
            out.write(self.summary() + "\n")
        return f"{base}.json", f"{base}.txt"


def _by_prefix(counters: Counter[str], prefix: str) -> dict[str, int]:
    return {k[len(prefix):]: v for k, v in counters.items() if k.startswith(prefix)}
