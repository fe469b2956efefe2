"""The Helm chart installed for real on the project's single-node Kubernetes (the `kubernetes`
service: kube-apiserver, controller manager, scheduler, containerd and a kubelet on 127.0.0.1).

The release uses helm/strata/ci/host-network.yaml: every pod on the host network bound to
127.0.0.1, the Service names resolved through /etc/hosts entries, the images of `make images`
imported into the node's containerd (imagePullPolicy Never). Then, in order:

* `helm install --wait` brings every workload to Ready, and every server listens on 127.0.0.1 only;
* the ingest job (Spark in its pod) writes rows through the JDBC catalog on the chart's PostgreSQL
  to the chart's MinIO, nothing lost or duplicated;
* the compaction job commits COMPACT snapshots of that table;
* the Iceberg REST catalog lists the table and Trino's `strata` catalog counts its rows;
* Prometheus scrapes every Strata target;
* `helm upgrade` with one changed value (the compaction interval) replaces the compaction pod only,
  and the table keeps every row;
* `helm uninstall` leaves no pod; the claims the chart documents as kept (the ingest checkpoint, the
  StatefulSets' data) stay bound, with the warehouse's files on MinIO's volume, and Prometheus's
  claim goes.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

import strata
from strata_platform import images
from strata_platform.services import helm as helm_tool
from strata_platform.services.base import Service, listening_addresses, port_open
from strata_platform.services.kubernetes import KubernetesService
from strata_platform.services.testing import provide

pytestmark = [pytest.mark.k8s, pytest.mark.helm, pytest.mark.docker, pytest.mark.e2e]

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "helm" / "strata"
VALUES = yaml.safe_load((CHART / "ci" / "host-network.yaml").read_text())
RELEASE = "strata"
NAMESPACE = "strata-e2e"
IMAGE_SECTIONS = {"minio": ("minio",), "postgres": ("postgresql",), "kafka": ("kafka",), "trino": ("trino",),
                  "prometheus": ("prometheus",), "strata": ("strata",)}
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, interval: float = 1.0) -> T:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            value = probe()
            if value:
                return value
            last = value
        except Exception as exc:  # not there yet, whatever the reason
            last = exc
        time.sleep(interval)
    raise AssertionError(f"{what}: not reached after {timeout:.0f}s (last: {last!r})")


def release_values(tags: dict[str, str]) -> dict[str, Any]:
    """The values file with the image tags `make images` built here (a version bump moves them)."""
    values = json.loads(json.dumps(VALUES))
    for image, sections in IMAGE_SECTIONS.items():
        repository, _, tag = tags[image].rpartition(":")
        for section in sections:
            values[section]["image"] = {"repository": repository, "tag": tag, "pullPolicy": "Never"}
    return values


def host_ports(values: dict[str, Any]) -> dict[str, int]:
    strata_values = values["strata"]
    return {
        "minio": values["minio"]["port"], "minio-console": values["minio"]["consolePort"],
        "postgresql": values["catalog"]["port"], "kafka": values["kafka"]["port"],
        "kafka-controller": values["kafka"]["controllerPort"], "trino": values["trino"]["port"],
        "prometheus": values["prometheus"]["port"], "exporter": strata_values["exporter"]["port"],
        "ingest": strata_values["ingest"]["metricsPort"], "compaction": strata_values["compaction"]["metricsPort"],
        "cdc": strata_values["cdc"]["metricsPort"], "metaservice": strata_values["metaservice"]["port"],
        "iceberg-rest": strata_values["icebergRest"]["port"], "paimon-rest": strata_values["paimonRest"]["port"],
    }


@dataclass
class Release:
    cluster: KubernetesService
    values: dict[str, Any]
    values_file: Path
    home: Path
    timings: dict[str, float]

    @property
    def ports(self) -> dict[str, int]:
        return host_ports(self.values)

    def helm(self, *args: str, timeout: float = 900.0) -> str:
        proc = helm_tool.helm(*args, "--kubeconfig", str(self.cluster.kubeconfig), "--namespace", NAMESPACE,
                              home=self.home, timeout=timeout)
        assert proc.returncode == 0, f"helm {' '.join(args)}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}\n" \
                                     f"{self.diagnose()}"
        return proc.stdout

    def get(self, kind: str, *args: str) -> list[dict[str, Any]]:
        out = self.cluster.kubectl("--namespace", NAMESPACE, "get", kind, "-o", "json", *args).stdout
        items: list[dict[str, Any]] = json.loads(out)["items"]
        return items

    def pods(self) -> dict[str, dict[str, Any]]:
        """component -> its one running pod (pods being deleted left out)."""
        return {p["metadata"]["labels"]["app.kubernetes.io/component"]: p for p in self.get("pods")
                if not p["metadata"].get("deletionTimestamp")}

    def diagnose(self) -> str:
        """Pod phases and the last log lines of pods that are not ready: what a failure needs."""
        lines = []
        try:
            for pod in self.get("pods"):
                name = pod["metadata"]["name"]
                ready = all(s.get("ready") for s in pod["status"].get("containerStatuses", []))
                lines.append(f"{name}: {pod['status'].get('phase')} ready={ready}")
                if not ready:
                    logs = self.cluster.kubectl("--namespace", NAMESPACE, "logs", name, "--all-containers",
                                                "--tail=15").stdout
                    lines.append("    " + logs.replace("\n", "\n    "))
        except Exception as exc:
            lines.append(f"(diagnosis failed: {exc})")
        return "\n".join(lines)

    def catalog(self) -> strata.Catalog:
        return strata.load_catalog(
            f"s3://{VALUES.get('objectStore', {}).get('bucket', 'warehouse')}/strata", metastore="jdbc",
            uri=f"jdbc:postgresql://127.0.0.1:{self.ports['postgresql']}/strata",
            **{"jdbc.user": "strata", "jdbc.password": "strata",
               "s3.endpoint": f"http://127.0.0.1:{self.ports['minio']}", "s3.access-key": "strata",
               "s3.secret-key": "strata-secret", "s3.region": "us-east-1"})

    def prometheus(self, promql: str) -> list[dict[str, Any]]:
        url = (f"http://127.0.0.1:{self.ports['prometheus']}/api/v1/query?"
               + urllib.parse.urlencode({"query": promql}))
        with urllib.request.urlopen(url, timeout=5) as resp:
            payload = json.load(resp)
        assert payload["status"] == "success", payload
        result: list[dict[str, Any]] = payload["data"]["result"]
        return result


def remove_previous_release(cluster: KubernetesService) -> None:
    """On a cluster left running by an earlier session: its namespace goes, its volumes are emptied."""
    cluster.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true", timeout=300)

    def still_bound() -> bool:
        volumes = cluster.api("GET", "/api/v1/persistentvolumes")["items"]
        return any(v["spec"].get("claimRef", {}).get("namespace") == NAMESPACE and v["status"]["phase"] == "Bound"
                   for v in volumes)

    wait_for("the previous release's volumes released", lambda: not still_bound(), timeout=120)
    cluster.reclaim_released_volumes()


@pytest.fixture(scope="module")
def cluster() -> Iterator[Service]:
    yield from provide("kubernetes")


@pytest.fixture(scope="module")
def release(docker: Service, cluster: KubernetesService,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    timings: dict[str, float] = {}
    began = time.monotonic()
    tags = {name: result.tag for name, result in images.ensure_images(report=print).items()}
    timings["images"] = time.monotonic() - began
    began = time.monotonic()
    imported = cluster.import_docker_images(sorted(tags.values()))
    timings["import"] = time.monotonic() - began
    print(f"imported into the node's containerd: {imported or 'nothing (all there)'}")
    remove_previous_release(cluster)
    work = tmp_path_factory.mktemp("helm-k8s")
    values = release_values(tags)
    busy = {name: port for name, port in host_ports(values).items() if port_open(port)}
    assert not busy, f"host ports of the release already taken: {busy}"
    values_file = work / "values.json"
    values_file.write_text(json.dumps(values))
    release = Release(cluster, values, values_file, work / "helm-home", timings)
    began = time.monotonic()
    release.helm("install", RELEASE, str(CHART), "--create-namespace", "-f", str(values_file), "--wait",
                 "--timeout", "10m", timeout=720)  # within pytest's 900 s for the first test
    timings["install"] = time.monotonic() - began
    try:
        yield release
    finally:
        print(f"helm on k8s timings (s): {json.dumps({k: round(v, 1) for k, v in timings.items()})}")
        helm_tool.helm("uninstall", RELEASE, "--kubeconfig", str(cluster.kubeconfig), "--namespace", NAMESPACE,
                       "--wait", home=release.home, timeout=300)


def test_install_is_ready_on_loopback(release: Release) -> None:
    pods = release.pods()
    assert set(pods) == {"minio", "postgresql", "kafka", "trino", "prometheus", "ingest", "compaction", "cdc",
                         "exporter", "metaservice", "iceberg-rest", "paimon-rest"}, sorted(pods)
    for component, pod in pods.items():
        assert pod["spec"]["hostNetwork"] is True, component
        assert pod["spec"]["nodeName"] == "strata-node", component
        assert pod["status"]["podIP"] == "127.0.0.1", component
        # `helm install --wait` returned: every container is ready, none restarted
        assert pod["status"]["phase"] == "Running", (component, release.diagnose())
        statuses = pod["status"]["containerStatuses"]
        assert all(s["ready"] and s["restartCount"] == 0 for s in statuses), \
            (component, [(s["name"], s["ready"], s["restartCount"], s.get("lastState")) for s in statuses])
    for name, port in release.ports.items():
        addresses = listening_addresses(port)
        assert addresses and addresses <= {"127.0.0.1", "::1"}, \
            f"{name} on port {port} listens on {addresses or 'nothing'}, not loopback only"


def test_ingest_job_writes(release: Release) -> None:
    catalog = release.catalog()
    table = wait_for("demo.events has three snapshots",
                     lambda: (t := catalog.get_table("demo.events")) and len(t.snapshots()) >= 3 and t, timeout=300)
    ids = sorted(table.to_arrow(columns=["id"]).column("id").to_pylist())
    assert ids and ids == list(range(len(ids))), "ids are not contiguous from 0 (lost or duplicated rows)"
    files = table.system_table("files").column("file_path").to_pylist()
    assert files and all(path.startswith("s3://warehouse/strata/") for path in files)


def test_compaction_job_commits(release: Release) -> None:
    catalog = release.catalog()
    compacted = wait_for("a COMPACT snapshot of demo.events by the compaction job",
                         lambda: [s for s in catalog.get_table("demo.events").snapshots()
                                  if s.commit_kind == "COMPACT" and s.commit_user.startswith("strata-compaction-")],
                         timeout=180)
    assert compacted

    def logged() -> bool:
        logs = release.cluster.kubectl("--namespace", NAMESPACE, "logs", "deployment/strata-compaction").stdout
        if "compacted demo.events" not in logs:
            raise LookupError(logs[-2000:])  # wait_for reports the last one
        return True

    # the job logs a compaction once `compact()` returns, a moment after its snapshot is published
    wait_for("the compaction job's log of it", logged, timeout=60)


def test_trino_and_the_iceberg_rest_catalog_read_the_rows(release: Release) -> None:
    import trino

    rest = f"http://127.0.0.1:{release.ports['iceberg-rest']}"
    with urllib.request.urlopen(f"{rest}/v1/namespaces/demo/tables", timeout=10) as resp:
        assert {"namespace": ["demo"], "name": "events"} in json.load(resp)["identifiers"]
    conn = trino.dbapi.connect(host="127.0.0.1", port=release.ports["trino"], user="strata", http_scheme="http")
    cursor = conn.cursor()
    cursor.execute("SELECT count(*), count(DISTINCT id), min(id) FROM strata.demo.events")
    (count, distinct, smallest), = cursor.fetchall()
    after = release.catalog().get_table("demo.events").to_arrow(columns=["id"]).num_rows
    # Trino reads the newest published metadata: a commit that lands meanwhile only adds rows
    assert count == distinct and smallest == 0 and 0 < count <= after, (count, distinct, smallest, after)


def test_paimon_rest_catalog_lists_the_databases(release: Release) -> None:
    """Paimon's REST API answers behind its bearer token with the databases the release created."""
    paimon = f"http://127.0.0.1:{release.ports['paimon-rest']}"
    token = {"Authorization": f"Bearer {VALUES['strata']['paimonRest']['token']}"}
    with urllib.request.urlopen(urllib.request.Request(f"{paimon}/v1/config", headers=token), timeout=10) as resp:
        prefix = json.load(resp)["defaults"]["prefix"]
    with urllib.request.urlopen(urllib.request.Request(f"{paimon}/v1/{prefix}/databases", headers=token),
                                timeout=10) as resp:
        assert "demo" in json.load(resp)["databases"]
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{paimon}/v1/{prefix}/databases", timeout=10)
    assert refused.value.code == 401


def test_prometheus_scrapes_the_strata_targets(release: Release) -> None:
    wanted = {"strata-exporter/", "strata-services/ingest", "strata-services/compaction", "strata-services/cdc",
              "strata-services/metaservice", "strata-services/iceberg-rest"}

    def up() -> dict[str, str] | None:
        found = {f"{r['metric']['job']}/{r['metric'].get('component', '')}": r["value"][1]
                 for r in release.prometheus('up{job=~"strata-.*"}')}
        return found if wanted <= set(found) and all(found[k] == "1" for k in wanted) else None

    wait_for("every Strata target up", up, timeout=90)
    wait_for("the exporter's snapshot id of demo.events",
             lambda: release.prometheus('strata_table_snapshot_latest_id{table="demo.events"} > 0'), timeout=60)
    wait_for("compaction commits counted", lambda: release.prometheus(
        'strata_commits_total{component="compaction",kind="compact",result="success"} > 0'), timeout=60)


def test_upgrade_rolls_only_what_changed(release: Release) -> None:
    before = {component: pod["metadata"]["uid"] for component, pod in release.pods().items()}
    rows_before = release.catalog().get_table("demo.events").to_arrow(columns=["id"]).num_rows
    release.values["strata"]["compaction"]["intervalSeconds"] += 1
    release.values_file.write_text(json.dumps(release.values))
    began = time.monotonic()
    release.helm("upgrade", RELEASE, str(CHART), "-f", str(release.values_file), "--wait", "--timeout", "8m")
    release.timings["upgrade"] = time.monotonic() - began
    after = {component: pod["metadata"]["uid"] for component, pod in release.pods().items()}
    replaced = {component for component in before if after.get(component) != before[component]}
    assert replaced == {"compaction"}, f"the upgrade replaced {sorted(replaced)}"
    env = {e["name"]: e.get("value") for e in release.pods()["compaction"]["spec"]["containers"][0]["env"]}
    assert env["STRATA_COMPACTION_INTERVAL_SECONDS"] == str(release.values["strata"]["compaction"]["intervalSeconds"])
    catalog = release.catalog()
    wait_for("ingest commits after the upgrade",
             lambda: catalog.get_table("demo.events").to_arrow(columns=["id"]).num_rows > rows_before, timeout=120)
    ids = sorted(catalog.get_table("demo.events").to_arrow(columns=["id"]).column("id").to_pylist())
    assert ids == list(range(len(ids))), "rows lost or duplicated across the upgrade"


def test_uninstall_leaves_no_pod_and_keeps_the_documented_data(release: Release) -> None:
    claims = {c["metadata"]["name"]: c["spec"]["volumeName"] for c in release.get("persistentvolumeclaims")}
    assert {"strata-ingest-checkpoints", "data-strata-minio-0", "data-strata-postgresql-0", "data-strata-kafka-0",
            "strata-prometheus-data"} <= set(claims), claims
    began = time.monotonic()
    release.helm("uninstall", RELEASE, "--wait", "--timeout", "5m")
    release.timings["uninstall"] = time.monotonic() - began
    wait_for("no pod left", lambda: not release.get("pods"), timeout=120)
    kept = {c["metadata"]["name"]: c for c in release.get("persistentvolumeclaims")}
    # kept: the checkpoint (helm.sh/resource-policy: keep) and what the StatefulSets created
    assert set(kept) == {"strata-ingest-checkpoints", "data-strata-minio-0", "data-strata-postgresql-0",
                         "data-strata-kafka-0"}, sorted(kept)
    assert all(c["status"]["phase"] == "Bound" for c in kept.values())
    volumes = {v["metadata"]["name"]: v for v in release.get("persistentvolumes")}
    minio_dir = Path(volumes[claims["data-strata-minio-0"]]["spec"]["hostPath"]["path"])
    assert list((minio_dir / "warehouse" / "strata").glob("demo.db/events/snapshot/*")), \
        f"no snapshot of demo.events left under {minio_dir}"
    assert list(Path(volumes[claims["strata-ingest-checkpoints"]]["spec"]["hostPath"]["path"]).rglob("commits/*"))
    # Prometheus's claim is the chart's own: it goes with the release (its volume is Released, not bound)
    assert volumes[claims["strata-prometheus-data"]]["status"]["phase"] == "Released"
    assert not [p for p in release.cluster.kubectl("get", "pods", "--all-namespaces", "-o", "name").stdout.split()]
