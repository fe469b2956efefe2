"""`strata-services prebuild`: the slow set-ups of the container tests, done ahead of them.

Left to the tests, three set-ups take minutes each: test_compose builds the stack's images
(``strata_platform.images``), test_helm builds helm with ``go install``, and test_helm_k8s copies
every image into the cluster node's containerd. ``make test`` runs this command in the background,
at the lowest CPU priority, while the engine tests run, so that those set-ups find their work done:
the images up to date, the helm binary cached, the images in the node's image store (which
outlives the cluster). Everything is cached, so a second run costs seconds.

Two lanes run side by side: helm's Go build, and the images then their import into the cluster.
A service this command starts (the Docker engine, the cluster) it stops again, also when it is
ended with SIGTERM (``make test`` does that when the engine tests fail). Each step prints its wall
time; the first failure fails the command (exit 1), after both lanes have ended.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import FrameType

from strata_platform.services import registry
from strata_platform.services.base import Service

Report = Callable[[str], None]
_STARTED: list[Service] = []  # services started here and not stopped yet


def _stop_started_and_exit(signum: int, frame: FrameType | None) -> None:
    while _STARTED:
        _STARTED.pop().stop()
    os._exit(128 + signum)  # the lanes' threads end with the process


def prebuild(report: Report) -> None:
    """Build helm, the stack's images and the cluster's copy of them; raise on the first failure.
    Call it from the main thread (it handles SIGTERM)."""
    signal.signal(signal.SIGTERM, _stop_started_and_exit)
    lanes: list[Callable[[Report], None]] = [build_helm, build_and_import_images]
    with ThreadPoolExecutor(max_workers=len(lanes)) as pool:
        futures = [pool.submit(lane, report) for lane in lanes]
        errors = [future.exception() for future in futures]
    for error in errors:
        if error is not None:
            raise error


def build_helm(report: Report) -> None:
    from strata_platform.services import helm

    began = time.monotonic()
    path = helm.helm_binary()
    report(f"{'helm':<15} {path.name} ready in {time.monotonic() - began:6.1f}s")


def build_and_import_images(report: Report) -> None:
    from strata_platform import images

    with _running("docker", report):
        began = time.monotonic()
        built = images.ensure_images(report=lambda line: report(f"{'image':<15} {line}"))
        report(f"{'images':<15} {sum(r.built for r in built.values())} built, "
               f"{sum(not r.built for r in built.values())} up to date in {time.monotonic() - began:6.1f}s")
        with _running("kubernetes", report) as cluster:
            began = time.monotonic()
            from strata_platform.services.kubernetes import KubernetesService

            assert isinstance(cluster, KubernetesService)
            imported = cluster.import_docker_images(sorted(r.tag for r in built.values()))
            report(f"{'cluster images':<15} {len(imported)} imported into the node's containerd "
                   f"in {time.monotonic() - began:6.1f}s")


class _running:
    """The service `name` up for a block: started (and stopped after) unless it already runs."""

    def __init__(self, name: str, report: Report) -> None:
        self.service = registry.get(name)
        self.report = report
        self.started_here = False

    def __enter__(self) -> Service:
        self.started_here = self.service.running_pid() is None
        if self.started_here:
            _STARTED.append(self.service)
        try:
            seconds = self.service.start()
        except BaseException:
            if self.started_here:
                self.service.stop()
                _STARTED.remove(self.service)
            raise
        self.report(f"{self.service.name:<15} up in {seconds:6.1f}s")
        return self.service

    def __exit__(self, *exc: object) -> None:
        if self.started_here:
            began = time.monotonic()
            self.service.stop()
            _STARTED.remove(self.service)
            self.report(f"{self.service.name:<15} down in {time.monotonic() - began:6.1f}s")
