"""The shape of a benchmark workload defined outside the core W1-W4 set.

A module of ``strata.bench`` listed in ``strata.bench.EXTENSIONS`` exports
``WORKLOADS: dict[str, Workload]``. The runner executes each part in its own process (so peak
RSS is per part), then calls ``summarize`` with every part's result to build the report row;
``key`` names the field of that row the target applies to. The printed table shows the row's
``value`` and ``reference`` (e.g. rows/s of Strata and of raw pyarrow) and ``ratio`` when present.

Part functions take ``(work_dir, scale)`` and return a JSON-able dict; they import heavy
dependencies (pyspark, confluent_kafka) inside, so that listing workloads stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

PartResult = dict[str, Any]
PartFunction = Callable[[str, float], PartResult]


@dataclass(frozen=True)
class Target:
    op: str  # ">=" or "<="
    value: float

    def met(self, measured: float) -> bool:
        return measured >= self.value if self.op == ">=" else measured <= self.value

    def __str__(self) -> str:
        return f"{self.op} {self.value:g}"


@dataclass(frozen=True)
class Workload:
    description: str
    target: Target
    key: str  # the field of the summarized row compared with the target, e.g. "ratio", "p99_ms"
    metric: str  # how the key is printed, e.g. "ratio to raw pyarrow", "p99 ms"
    parts: Mapping[str, PartFunction]  # part name -> function; run in this order
    summarize: Callable[[Mapping[str, PartResult]], dict[str, Any]]
    # why it cannot run here (a service is missing), or None; checked once before its parts run
    unavailable: Callable[[], str | None] | None = None
    # further lines of the printed table: (metric, value) pairs taken from the summarized row
    extra_lines: tuple[tuple[str, str], ...] = field(default=())
    # runs only when named in ``--only`` (a long run that a plain ``make bench`` leaves out)
    opt_in: bool = False


def alternating(strata_part: PartFunction, reference_part: PartFunction, rounds: int) -> dict[str, PartFunction]:
    """Parts `strata`, `reference`, `strata-2`, `reference-2`, ...: the runner spawns them in
    this order, so that load on the machine falls on both sides alike."""
    parts = {}
    for n in range(1, rounds + 1):
        suffix = "" if n == 1 else f"-{n}"
        parts[f"strata{suffix}"], parts[f"reference{suffix}"] = strata_part, reference_part
    return parts


def rounds_of(parts: Mapping[str, PartResult], side: str) -> list[PartResult]:
    """The results of every round of one side (`strata` or `reference`) of `alternating` parts."""
    return [p for name, p in parts.items() if name == side or name.startswith(f"{side}-")]
