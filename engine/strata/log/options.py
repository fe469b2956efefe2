"""The log-store options of one table (`log.*`), resolved once."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field

from strata.errors import OptionError
from strata.store import FileStore, HasStore, store_of

LOG_OFFSETS_PROPERTY = "log.offsets"  # snapshot property: JSON {bucket: next offset}
# snapshot property: JSON {transactional id: {partition: end offset}} of the commit's transactions
LOG_TRANSACTIONS_PROPERTY = "log.transactions"
REPAIR_HEADER = "strata.repair"  # on re-produced records: "<snapshot id> <transactional id>"
BOOTSTRAP_ENV = "STRATA_KAFKA_BOOTSTRAP"
# keys of `log.kafka.*` that are Strata's own, not librdkafka settings
_OWN_KEYS = {"bootstrap-servers", "topic", "writer-id", "transaction-timeout"}


@dataclass(frozen=True)
class LogOptions:
    table: str  # "db.table"
    bootstrap: str
    topic: str
    partitions: int  # Kafka partitions = buckets (1 for bucket-unaware tables)
    consistency: str  # transactional | eventual
    changelog_mode: str  # all | upsert (auto resolved)
    auto_register: bool
    ignore_delete: bool
    primary_keys: tuple[str, ...]
    key_fields: tuple[str, ...]  # the Kafka key: primary key, else bucket key, else none
    writer_id: str
    transaction_timeout_ms: int
    client: dict[str, str] = field(default_factory=dict)  # extra librdkafka settings

    @property
    def transactional(self) -> bool:
        return self.consistency == "transactional"

    def transactional_id(self, commit_user: str) -> str:
        """Stable for (table, commit user, writer id): a restarted writer fences its predecessor."""
        raw = f"strata-{self.table}-{commit_user}-{self.writer_id}"
        if len(raw) <= 200:
            return raw
        return f"strata-{self.table[:80]}-{hashlib.sha256(raw.encode()).hexdigest()[:32]}"


def log_enabled(table: FileStore | HasStore) -> bool:
    table = store_of(table)
    return str(table.core.get("log.system")) == "kafka"


def log_options(table: FileStore | HasStore) -> LogOptions:
    table = store_of(table)
    core = table.core
    where = f"table {table.identifier}"
    raw = core.raw
    bootstrap = raw.get("log.kafka.bootstrap-servers") or raw.get("log.kafka.bootstrap.servers") \
        or os.environ.get(BOOTSTRAP_ENV)
    if not bootstrap:
        raise OptionError(f"{where} has log.system=kafka but no 'log.kafka.bootstrap-servers' "
                          f"(nor ${BOOTSTRAP_ENV})")
    consistency = str(core.get("log.consistency"))
    schema = table.schema
    if consistency == "eventual" and not schema.primary_keys:
        raise OptionError(f"{where}: log.consistency=eventual needs a primary key (it is an upsert log)")
    mode = str(core.get("log.changelog-mode"))
    if mode == "auto":
        mode = "upsert" if consistency == "eventual" else "all"
    if mode == "upsert" and not schema.primary_keys:
        raise OptionError(f"{where}: log.changelog-mode=upsert needs a primary key")
    if str(core.get("log.format")) != "debezium-json":
        raise OptionError(f"{where}: log.format {core.get('log.format')!r} is not supported (debezium-json)")
    bucket = core.bucket
    if schema.primary_keys:
        keys: tuple[str, ...] = tuple(schema.primary_keys)
    elif bucket > 0:
        keys = tuple(schema.bucket_keys())
    else:
        keys = ()
    client = {k[len("log.kafka."):]: v for k, v in raw.items()
              if k.startswith("log.kafka.") and k[len("log.kafka."):] not in _OWN_KEYS
              and k != "log.kafka.bootstrap.servers"}
    return LogOptions(
        table=str(table.identifier), bootstrap=bootstrap,
        topic=raw.get("log.kafka.topic") or f"strata-{table.identifier.database}-{table.identifier.table}",
        partitions=max(bucket, 1), consistency=consistency, changelog_mode=mode,
        auto_register=bool(core.get("log.system.auto-register")),
        ignore_delete=bool(core.get("log.ignore-delete")),
        primary_keys=tuple(schema.primary_keys), key_fields=keys,
        writer_id=raw.get("log.kafka.writer-id", "0"),
        transaction_timeout_ms=int(raw.get("log.kafka.transaction-timeout", "60000")),
        client=client)
