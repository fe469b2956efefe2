"""Prometheus provisioned as a local process: real scrapes visible through the query API."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from typing import Any

import pytest

from strata_platform.services.base import Service, listening_addresses

pytestmark = pytest.mark.prometheus



def api(service: Service, path: str, **params: str) -> Any:
    url = f"http://127.0.0.1:{service.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=5) as resp:
        payload = json.load(resp)
    assert payload["status"] == "success", payload
    return payload["data"]


def test_self_scrape_visible_through_query_api(prometheus: Service) -> None:
    detail = prometheus.check()
    assert 'up{job="prometheus",instance="127.0.0.1:19090"} = 1' in detail
    result = api(prometheus, "query", query='up{job="prometheus"}')["result"]
    assert [(r["metric"]["instance"], r["value"][1]) for r in result] == [("127.0.0.1:19090", "1")]


def test_scrapes_repeat_every_second(prometheus: Service) -> None:
    prometheus.check()  # at least one scrape landed
    time.sleep(4)
    # Several 1 s scrapes within the last 5 s, and a TSDB counter that keeps growing over the last 3 s
    # (all of them in this run: the TSDB is kept across restarts and a counter restarts at zero).
    count = api(prometheus, "query", query='count_over_time(up{job="prometheus"}[5s])')["result"]
    assert count and float(count[0]["value"][1]) >= 3, count
    now = time.time()
    series = api(prometheus, "query_range", query="prometheus_tsdb_head_samples_appended_total",
                 start=str(now - 3), end=str(now), step="1")["result"]
    values = [float(v) for _, v in series[0]["values"]]
    assert values[-1] > values[0], values


def test_targets_and_config_are_ours(prometheus: Service) -> None:
    targets = api(prometheus, "targets")["activeTargets"]
    assert [(t["labels"]["job"], t["scrapeUrl"], t["health"]) for t in targets] == [
        ("prometheus", "http://127.0.0.1:19090/metrics", "up")]
    flags = api(prometheus, "status/flags")
    assert flags["web.listen-address"] == "127.0.0.1:19090"
    assert flags["storage.tsdb.path"] == str(prometheus.state_dir / "data")


def test_listens_only_on_loopback(prometheus: Service) -> None:
    assert listening_addresses(prometheus.port) == {"127.0.0.1"}
