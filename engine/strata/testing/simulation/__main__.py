"""``python -m strata.testing.simulation``: replay one seed, or run seeds for hours.

    --seed S --steps N [--only 3,7,12]   run (replay) one seed; a failure is shrunk and printed
    --hours H --report PATH [--steps N]  run seeds from --seed on until the time is up; write PATH.json/.txt
    --oracles                            the slower tier: Iceberg metadata after every step, pyiceberg, pypaimon
    --faults NAME                        a named fault mix in place of the seed's (e.g. snapshot-unknown,
                                         lock-timeout), for one seed or every seed of --hours
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from strata.testing.simulation.faults import PRESETS
from strata.testing.simulation.report import Report
from strata.testing.simulation.runner import Scenario, describe, run, shrink


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.hours is not None:
        return _run_for(args.hours, args.report, args.steps, args.seed, args.oracles, args.faults)
    if args.seed is None:
        raise SystemExit("give --seed S (to run one seed) or --hours H (to run many)")
    only = tuple(int(i) for i in args.only.split(",")) if args.only else None
    result = run(Scenario(args.seed, args.steps, only, args.oracles, args.faults))
    if result.failure is not None and not args.no_shrink:
        print(f"seed {args.seed} failed ({result.failure.error}); shrinking...", file=sys.stderr)
        result = shrink(result)
    print(describe(result))
    return 1 if result.failure is not None else 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m strata.testing.simulation", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, help="the seed to run (with --hours: the first seed)")
    parser.add_argument("--steps", type=int, default=60, help="operations per seed (default 60)")
    parser.add_argument("--only", help="comma-separated indices of the operations to keep (a shrunk run)")
    parser.add_argument("--no-shrink", action="store_true", help="print a failure as it is, unshrunk")
    parser.add_argument("--oracles", action="store_true",
                        help="check the Iceberg metadata after every step that changes the table, and read the "
                             "table with pyiceberg and pypaimon after each rollback and at the end (slower)")
    parser.add_argument("--faults", default="", choices=["", *sorted(PRESETS)],
                        help="a named fault mix in place of the seed's random one")
    parser.add_argument("--hours", type=float, help="run seeds for this long")
    parser.add_argument("--report", default="build/simulation", help="report path, without extension")
    return parser


def _run_for(hours: float, path: str, steps: int, first_seed: int | None, oracles: bool = False,
             faults: str = "") -> int:
    """Seeds one after another until the deadline, all with the fault mix `faults` if named (else
    each seed's own); each failure is shrunk and reported."""
    deadline = time.monotonic() + hours * 3600
    seed = first_seed if first_seed is not None else random.SystemRandom().randrange(2**31)
    report = Report()
    while time.monotonic() < deadline:
        result = run(Scenario(seed, steps, oracles=oracles, faults=faults))
        report.add(result)
        if result.failure is not None:
            shrunk = shrink(result, max_seconds=max(0.0, min(600.0, deadline - time.monotonic())))
            report.failures.append(shrunk)
            print(describe(shrunk), file=sys.stderr)
        seed += 1
        report.write(path)
    json_path, text_path = report.write(path)
    print(report.summary())
    print(f"report: {json_path}, {text_path}")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
