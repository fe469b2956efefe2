"""Commit callbacks: work that follows a durable commit (Paimon's ``CommitCallback``).

The table registers them (``strata.table.commit.TableCommit.callbacks`` lists them in their
order); ``run_commit_callbacks`` runs each after the snapshot is published. A callback's failure
never turns the durable commit into an error (ARCHITECTURE decision 9): it is caught, counted in
``strata_commit_callback_failures_total{table, type=<callback>}``, named in one warning line per
commit and recorded in ``CommitResult.callback_failures``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from strata import metrics
from strata.operation.commit import CommitResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommitCallback:
    """One step after a commit. `run` sees the commit's result; it runs only after a commit that
    published snapshots, or, with `always`, after any commit that returned (a replay skipped as
    a duplicate, a commit with nothing to publish)."""

    name: str  # the metric's `type` label and the key in CommitResult.callback_failures
    run: Callable[[CommitResult], None]
    always: bool = False

    def applies_to(self, result: CommitResult) -> bool:
        return self.always or result.published


def run_commit_callbacks(callbacks: Sequence[CommitCallback], result: CommitResult, table: str) -> CommitResult:
    """Run the callbacks that apply to `result`, in order; each failure is caught, counted and
    recorded in the result, and the failures of the commit are logged as one warning."""
    for callback in callbacks:
        if not callback.applies_to(result):
            continue
        try:
            callback.run(result)
        except Exception as exc:
            result.callback_failures[callback.name] = f"{type(exc).__name__}: {exc}"
            metrics.commit_callback_failed(table, callback.name)
            log.debug("table %s: commit callback %s failed", table, callback.name, exc_info=True)
    if result.callback_failures:
        failures = "; ".join(f"{name}: {error}" for name, error in result.callback_failures.items())
        log.warning("table %s: snapshot(s) %s committed; work after the commit failed (%s)", table,
                    result.snapshot_ids or "(replay)", failures)
    return result
