"""Counters of the log store (plain process-wide integers, always on), also forwarded to the
Prometheus helpers of `strata.metrics` (`log_produced`, `log_transaction`, `log_hybrid_fallback`)
when that module provides them."""

from __future__ import annotations

import threading
from collections import Counter

_lock = threading.Lock()
_counters: Counter[str] = Counter()

HYBRID_FALLBACKS = "log.hybrid.fallbacks"  # hybrid reads that fell back to snapshots (offsets gone)
RECORDS_PRODUCED = "log.records.produced"
RECORDS_REPAIRED = "log.records.repaired"  # re-produced for commits whose transaction never committed
TRANSACTIONS_COMMITTED = "log.transactions.committed"
TRANSACTIONS_ABORTED = "log.transactions.aborted"


def inc(name: str, amount: int = 1) -> None:
    with _lock:
        _counters[name] += amount


def engine(helper: str, *args: object) -> None:
    """Call `strata.metrics.<helper>(*args)` if it exists; metrics never break the log store."""
    try:
        from strata import metrics as engine_metrics

        function = getattr(engine_metrics, helper, None)
        if callable(function):
            function(*args)
    except Exception:  # pragma: no cover - a metrics failure must not fail a write
        return


def get(name: str) -> int:
    with _lock:
        return _counters[name]


def snapshot() -> dict[str, int]:
    """All counters, e.g. {'log.hybrid.fallbacks': 1, ...}."""
    with _lock:
        return dict(_counters)


def fallback_count() -> int:
    """How many hybrid reads fell back to snapshot-based reading because Kafka lost offsets."""
    return get(HYBRID_FALLBACKS)
