"""Services for test sessions: the one way the engine and integration test suites get a real
service (installed from cache, started on 127.0.0.1).

Outside CI a service that cannot be brought up skips the tests that need it; under CI=true that
is a failure, never a skip.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from strata_platform.services import registry
from strata_platform.services.base import Service

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def provide(name: str) -> Iterator[Service]:
    """The running service `name` for as long as the caller's fixture lives: started here unless
    something else already runs it (then left running), and stopped here if started here."""
    service = registry.get(name)
    started_here = service.running_pid() is None
    try:
        service.start()
    except Exception as exc:
        if started_here:
            service.stop()
        if IN_CI:
            pytest.fail(f"service {name} could not be started under CI: {exc}", pytrace=False)
        pytest.skip(f"service {name} unavailable: {exc}")
    try:
        yield service
    finally:
        if started_here:
            service.stop()
