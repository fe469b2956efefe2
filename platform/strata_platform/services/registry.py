"""The provisioned services, in start order. Each lives in its own module of this package."""

from __future__ import annotations

import importlib

from strata_platform.services.base import Service

# name -> "module:Class"; modules are imported lazily so one broken service never hides the others.
SERVICES: dict[str, str] = {
    "minio": "strata_platform.services.minio:MinioService",
    "postgres": "strata_platform.services.postgres:PostgresService",
    "kafka": "strata_platform.services.kafka:KafkaService",
    "iceberg_rest": "strata_platform.services.iceberg_rest:IcebergRestService",
    "paimon_rest": "strata_platform.services.paimon_rest:PaimonRestService",
    "trino": "strata_platform.services.trino:TrinoService",
    "prometheus": "strata_platform.services.prometheus:PrometheusService",
    "spark": "strata_platform.services.spark:SparkService",
    "spark_cluster": "strata_platform.services.spark_cluster:SparkClusterService",
    "docker": "strata_platform.services.docker:DockerService",
    "paimon_java": "strata_platform.services.paimon_java:PaimonJavaService",
    "kubernetes": "strata_platform.services.kubernetes:KubernetesService",
    "chromium": "strata_platform.services.chromium:ChromiumService",
}


def get(name: str) -> Service:
    try:
        target = SERVICES[name]
    except KeyError:
        raise KeyError(f"unknown service {name!r}; known: {', '.join(SERVICES)}") from None
    module_name, class_name = target.split(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    service: Service = cls()
    return service
