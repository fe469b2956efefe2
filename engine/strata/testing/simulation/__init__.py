"""A deterministic simulation of a Strata table: a random table (every type, nested columns
anywhere, keys, bucket modes, merge engines, deletion vectors, changelog producers, the Iceberg
mirror), random operations applied to it and to a plain in-memory model, random reads and
invariants checked after every step. Everything follows from one seed; a failure is shrunk to the
shortest list of operations that still fails and printed with the command that replays it.

    python -m strata.testing.simulation --seed 7 --steps 60
    python -m strata.testing.simulation --hours 2 --report build/simulation

Parts: ``schemas`` (tables), ``values`` (random values), ``model``, ``operations``, ``readers``,
``invariants``, ``runner`` (run, shrink, replay), ``report``.
"""

from strata.testing.simulation.runner import Failure, RunResult, Scenario, describe, run, shrink

__all__ = ["Failure", "RunResult", "Scenario", "describe", "run", "shrink"]
