"""Consumers live in ``strata.snapshot.consumers`` (beside the snapshot manager); this path stays importable."""

from strata.snapshot.consumers import CONSUMER_PREFIX, ConsumerInfo, ConsumerManager  # noqa: F401
