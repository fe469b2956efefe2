"""The Helm chart (helm/strata): `helm lint`, `helm template` with every values file of
helm/strata/ci, and every rendered manifest validated against the Kubernetes API schemas
(kubernetes-validate, strict: unknown fields are errors). No cluster is needed.

Helm is built from source once with `go install` (strata_platform.services.helm, cached).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from strata_platform.services import helm as helm_tool

pytestmark = pytest.mark.helm

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "helm" / "strata"
VALUES_FILES = sorted((CHART / "ci").glob("*.yaml"))
KUBERNETES_VERSIONS = ("1.30.0", "1.33.0")
WORKLOADS = ("Deployment", "StatefulSet")


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Any:
    home = tmp_path_factory.mktemp("helm-home")
    helm_tool.helm_binary()

    def run(*args: str) -> Any:
        return helm_tool.helm(*args, home=home)

    return run


def render(helm: Any, *args: str, kube: str = KUBERNETES_VERSIONS[-1]) -> list[dict[str, Any]]:
    proc = helm("template", "strata-ci", str(CHART), "--namespace", "lakehouse", "--kube-version", kube, *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def containers(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield from doc["spec"]["template"]["spec"]["containers"]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


# -- lint and schema validation ----------------------------------------------------------------
@pytest.mark.parametrize("values", [None, *VALUES_FILES], ids=lambda v: v.stem if v else "no-values")
def test_lint_strict(helm: Any, values: Path | None) -> None:
    args = ["lint", "--strict", str(CHART), *(["-f", str(values)] if values else [])]
    proc = helm(*args)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "0 chart(s) failed" in proc.stdout


@pytest.mark.parametrize("kube", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("values", VALUES_FILES, ids=lambda v: v.stem)
def test_every_manifest_is_valid_kubernetes(helm: Any, values: Path, kube: str) -> None:
    docs = render(helm, "-f", str(values), kube=kube)
    assert docs
    for doc in docs:
        where = f"{values.name}: {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        try:
            kubernetes_validate.validate(doc, kube, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{where} is not valid Kubernetes {kube}: {exc.message} at {list(exc.path)}")
        assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == "strata-ci", where


def test_validation_catches_a_broken_manifest() -> None:
    """The validator is strict: a misspelt field is an error (so the test above means something)."""
    bad = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"},
           "spec": {"ports": [{"port": 80, "targetPrt": 8080}]}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES_VERSIONS[-1], strict=True)


def test_values_schema_rejects_bad_values(helm: Any) -> None:
    for bad in ("strata.compaction.intervalSeconds=-1", "strata.cdc.format=avro", "minio.port=70000",
                "strata.ingest.table=no_database", "trino.heap=lots", "typo.enabled=true"):
        proc = helm("template", "strata-ci", str(CHART), "--set", bad)
        assert proc.returncode != 0, f"--set {bad} was accepted"
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(values) <= set(schema["properties"])


def test_external_endpoints_are_required(helm: Any) -> None:
    proc = helm("template", "strata-ci", str(CHART), "--set", "minio.enabled=false")
    assert proc.returncode != 0 and "objectStore.endpoint is required" in proc.stderr
    proc = helm("template", "strata-ci", str(CHART), "--set", "postgresql.enabled=false")
    assert proc.returncode != 0 and "catalog.host is required" in proc.stderr


# -- what the chart renders ----------------------------------------------------------------------
def test_defaults_deploy_every_component(helm: Any) -> None:
    docs = render(helm)
    workloads = {d["metadata"]["labels"]["app.kubernetes.io/component"] for d in docs if d["kind"] in WORKLOADS}
    assert workloads == {"minio", "postgresql", "kafka", "trino", "prometheus", "grafana",
                         "ingest", "compaction", "cdc", "exporter", "metaservice", "iceberg-rest",
                         "paimon-rest"}
    for doc in (d for d in docs if d["kind"] in WORKLOADS):
        for container in containers(doc):
            where = f"{doc['metadata']['name']}/{container['name']}"
            assert container["resources"]["requests"] and container["resources"]["limits"], where
            assert "readinessProbe" in container and "livenessProbe" in container, where
            for value in env_of(container).values():  # credentials only through Secrets
                assert value not in ("strata-secret",), where
    strata = by_kind(docs, "Deployment")["strata-ci-compaction"]
    env = env_of(next(containers(strata)))
    assert env["STRATA_WAREHOUSE"] == "s3://warehouse/strata"
    assert env["AWS_ENDPOINT_URL"] == "http://strata-ci-minio:9000"
    assert env["STRATA_JDBC_URI"] == "jdbc:postgresql://strata-ci-postgresql:5432/strata"
    assert env["STRATA_JDBC_PASSWORD"] == {"secretKeyRef": {"name": "strata-ci-catalog", "key": "password"}}
    assert env["AWS_SECRET_ACCESS_KEY"] == {"secretKeyRef": {"name": "strata-ci-object-store", "key": "secret-key"}}
    assert strata["spec"]["template"]["spec"]["initContainers"][0]["args"] == ["init"]
    cdc = env_of(next(containers(by_kind(docs, "Deployment")["strata-ci-cdc"])))
    assert cdc["STRATA_CDC_BOOTSTRAP"] == "strata-ci-kafka:9092"
    # Prometheus scrapes every Strata service and carries the project's alert rules
    prom = yaml.safe_load(by_kind(docs, "ConfigMap")["strata-ci-prometheus"]["data"]["prometheus.yml"])
    targets = {t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    assert {"strata-ci-exporter:19187", "strata-ci-ingest:19188", "strata-ci-compaction:19189",
            "strata-ci-cdc:19190"} <= targets
    rules = yaml.safe_load(by_kind(docs, "ConfigMap")["strata-ci-prometheus"]["data"]["strata.rules.yml"])
    assert rules == yaml.safe_load((REPO / "observability" / "alerts" / "strata.rules.yml").read_text())
    # Grafana gets every dashboard of observability/
    dashboards = by_kind(docs, "ConfigMap")["strata-ci-grafana-dashboards"]["data"]
    shipped = {p.name for p in (REPO / "observability" / "grafana" / "dashboards").glob("*.json")}
    assert set(dashboards) == shipped
    secrets = by_kind(docs, "Secret")
    assert set(secrets) == {"strata-ci-object-store", "strata-ci-catalog", "strata-ci-grafana"}
    # the ingest job keeps its Spark checkpoint on a volume that survives restarts and uninstalls
    pvc = by_kind(docs, "PersistentVolumeClaim")["strata-ci-ingest-checkpoints"]
    assert pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def trino_catalog(docs: list[dict[str, Any]], name: str) -> dict[str, str] | None:
    data = by_kind(docs, "ConfigMap")["strata-ci-trino"]["data"]
    text = data.get(f"catalog.{name}.properties")
    if text is None:
        return None
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def test_iceberg_rest_catalog_and_trino_strata_catalog(helm: Any) -> None:
    docs = render(helm)
    rest = by_kind(docs, "Deployment")["strata-ci-iceberg-rest"]
    container = next(containers(rest))
    assert container["command"] == ["python", "-m", "strata_platform.iceberg_rest"]
    assert "args" not in container
    for probe in ("startupProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}, probe
    assert container["ports"] == [{"name": "http", "containerPort": 19192, "protocol": "TCP"}]
    env = env_of(container)
    assert env["STRATA_WAREHOUSE"] == "s3://warehouse/strata"
    assert env["STRATA_JDBC_URI"] == "jdbc:postgresql://strata-ci-postgresql:5432/strata"
    assert env["STRATA_ICEBERG_REST_HOST"] == "0.0.0.0" and env["STRATA_ICEBERG_REST_PORT"] == "19192"
    assert env["STRATA_ICEBERG_REST_VEND_S3"] == "false"
    assert "STRATA_ICEBERG_REST_TOKEN" not in env  # no token by default
    service = by_kind(docs, "Service")["strata-ci-iceberg-rest"]
    assert service["spec"]["ports"] == [{"name": "http", "port": 19192, "targetPort": "http", "protocol": "TCP"}]
    # Trino's strata catalog: the Iceberg connector on the REST catalog, credentials from the Secret
    assert trino_catalog(docs, "strata") == {
        "connector.name": "iceberg", "iceberg.catalog.type": "rest",
        "iceberg.rest-catalog.uri": "http://strata-ci-iceberg-rest:19192", "iceberg.security": "read_only",
        "fs.native-s3.enabled": "true", "s3.endpoint": "http://strata-ci-minio:9000", "s3.region": "us-east-1",
        "s3.path-style-access": "true", "s3.aws-access-key": "${ENV:AWS_ACCESS_KEY_ID}",
        "s3.aws-secret-key": "${ENV:AWS_SECRET_ACCESS_KEY}"}
    trino = next(containers(by_kind(docs, "Deployment")["strata-ci-trino"]))
    assert env_of(trino) == {
        "AWS_ACCESS_KEY_ID": {"secretKeyRef": {"name": "strata-ci-object-store", "key": "access-key"}},
        "AWS_SECRET_ACCESS_KEY": {"secretKeyRef": {"name": "strata-ci-object-store", "key": "secret-key"}}}
    mounts = {m["mountPath"]: m["subPath"] for m in trino["volumeMounts"]}
    assert mounts["/etc/trino/catalog/strata.properties"] == "catalog.strata.properties"
    prom = yaml.safe_load(by_kind(docs, "ConfigMap")["strata-ci-prometheus"]["data"]["prometheus.yml"])
    targets = {t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    assert "strata-ci-iceberg-rest:19192" in targets


def test_iceberg_rest_token(helm: Any) -> None:
    docs = render(helm, "--set", "strata.icebergRest.token=t0ken")
    secret = by_kind(docs, "Secret")["strata-ci-iceberg-rest"]
    assert secret["stringData"] == {"token": "t0ken"}
    ref = {"secretKeyRef": {"name": "strata-ci-iceberg-rest", "key": "token"}}
    assert env_of(next(containers(by_kind(docs, "Deployment")["strata-ci-iceberg-rest"])))[
        "STRATA_ICEBERG_REST_TOKEN"] == ref
    assert env_of(next(containers(by_kind(docs, "Deployment")["strata-ci-trino"])))["STRATA_ICEBERG_REST_TOKEN"] == ref
    catalog = trino_catalog(docs, "strata")
    assert catalog is not None
    assert catalog["iceberg.rest-catalog.security"] == "OAUTH2"
    assert catalog["iceberg.rest-catalog.oauth2.token"] == "${ENV:STRATA_ICEBERG_REST_TOKEN}"
    for doc in docs:  # the token itself only in its Secret
        if doc["kind"] != "Secret":
            assert "t0ken" not in yaml.safe_dump(doc), doc["metadata"]["name"]
    # an existing Secret instead: nothing rendered for it, the same references
    docs = render(helm, "--set", "strata.icebergRest.existingSecret=rest-token")
    assert "strata-ci-iceberg-rest" not in by_kind(docs, "Secret")
    assert env_of(next(containers(by_kind(docs, "Deployment")["strata-ci-trino"])))["STRATA_ICEBERG_REST_TOKEN"] == {
        "secretKeyRef": {"name": "rest-token", "key": "token"}}


def test_paimon_rest_catalog(helm: Any) -> None:
    docs = render(helm, "--set", "strata.paimonRest.token=p4imon")
    container = next(containers(by_kind(docs, "Deployment")["strata-ci-paimon-rest"]))
    assert container["command"] == ["python", "-m", "strata_platform.paimon_rest"]
    assert container["ports"] == [{"name": "http", "containerPort": 19193, "protocol": "TCP"}]
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    env = env_of(container)
    assert env["STRATA_JDBC_URI"] == "jdbc:postgresql://strata-ci-postgresql:5432/strata"
    assert env["STRATA_PAIMON_REST_PORT"] == "19193" and env["STRATA_PAIMON_REST_WAREHOUSE_NAME"] == "strata"
    assert env["STRATA_PAIMON_REST_TOKEN"] == {"secretKeyRef": {"name": "strata-ci-paimon-rest", "key": "token"}}
    assert by_kind(docs, "Secret")["strata-ci-paimon-rest"]["stringData"] == {"token": "p4imon"}
    service = by_kind(docs, "Service")["strata-ci-paimon-rest"]
    assert service["spec"]["ports"] == [{"name": "http", "port": 19193, "targetPort": "http", "protocol": "TCP"}]
    prom = yaml.safe_load(by_kind(docs, "ConfigMap")["strata-ci-prometheus"]["data"]["prometheus.yml"])
    assert "strata-ci-paimon-rest:19193" in {t for job in prom["scrape_configs"] for sc in job["static_configs"]
                                             for t in sc["targets"]}
    docs = render(helm, "--set", "strata.paimonRest.enabled=false")
    assert "strata-ci-paimon-rest" not in by_kind(docs, "Deployment")


def test_trino_strata_catalog_follows_the_rest_catalog(helm: Any) -> None:
    docs = render(helm, "--set", "strata.icebergRest.enabled=false")
    assert "strata-ci-iceberg-rest" not in by_kind(docs, "Deployment")
    assert trino_catalog(docs, "strata") is None
    assert "env" not in next(containers(by_kind(docs, "Deployment")["strata-ci-trino"]))
    # a strata catalog of one's own wins over the chart's
    docs = render(helm, "--set", "trino.catalogs.strata.connector\\.name=memory")
    assert trino_catalog(docs, "strata") == {"connector.name": "memory"}


def test_existing_services_and_secrets(helm: Any) -> None:
    docs = render(helm, "-f", str(CHART / "ci" / "external-services.yaml"))
    components = {d["metadata"]["labels"]["app.kubernetes.io/component"] for d in docs}
    assert not components & {"minio", "postgresql", "kafka", "grafana", "ingest"}
    assert not by_kind(docs, "Secret")  # every credential comes from an existing Secret
    env = env_of(next(containers(by_kind(docs, "Deployment")["strata-ci-cdc"])))
    assert env["AWS_ENDPOINT_URL"] == "https://s3.eu-west-1.amazonaws.com"
    assert env["STRATA_WAREHOUSE"] == "s3://acme-lakehouse/warehouse/prod"
    assert env["STRATA_JDBC_URI"] == "jdbc:postgresql://pg.databases.svc.cluster.local:5432/lakehouse"
    assert env["STRATA_CDC_BOOTSTRAP"].startswith("kafka-0.kafka.streaming.svc:9092")
    assert env["STRATA_CDC_TOPICS"] == "erp.public.orders,erp.public.customers"
    assert env["STRATA_CATALOG_OPTIONS"] == "s3.conditional-put=true"
    assert env["AWS_ACCESS_KEY_ID"] == {"secretKeyRef": {"name": "lakehouse-s3", "key": "access-key"}}


def test_minimal_renders_only_what_is_enabled(helm: Any) -> None:
    docs = render(helm, "-f", str(CHART / "ci" / "minimal.yaml"))
    assert sorted((d["kind"], d["metadata"]["name"]) for d in docs if d["kind"] in WORKLOADS) == [
        ("Deployment", "strata-ci-compaction"), ("Deployment", "strata-ci-exporter")]
    env = env_of(next(containers(by_kind(docs, "Deployment")["strata-ci-compaction"])))
    assert env["STRATA_COMPACTION_FULL"] == "true" and env["STRATA_COMPACTION_DATABASES"] == "sales"


def test_notes_render(helm: Any, tmp_path: Path) -> None:
    """NOTES.txt renders (helm shows it only on install, which needs a cluster: render it through a
    ConfigMap in a copy of the chart instead)."""
    import shutil

    chart = tmp_path / "strata"
    shutil.copytree(CHART, chart, symlinks=False)
    (chart / "notes.tpl").write_text((CHART / "templates" / "NOTES.txt").read_text())
    (chart / "templates" / "zz-notes.yaml").write_text(
        'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\n'
        'data:\n  notes: {{ tpl (.Files.Get "notes.tpl") . | quote }}\n')
    proc = helm("template", "strata-ci", str(chart), "--namespace", "lakehouse",
                "--show-only", "templates/zz-notes.yaml")
    assert proc.returncode == 0, proc.stderr[-2000:]
    notes = yaml.safe_load(proc.stdout)["data"]["notes"]
    assert "deployment/strata-ci-compaction" in notes
    assert "port-forward svc/strata-ci-grafana 3000" in notes
    assert "WARNING: the object store uses the chart's default credentials" in notes
