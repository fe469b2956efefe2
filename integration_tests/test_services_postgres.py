"""PostgreSQL provisioned as a local process: SQL round trip, warm restart, loopback only."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import sql

from strata_platform.services.base import Service, listening_addresses

pytestmark = pytest.mark.postgres



def test_sql_round_trip_through_client_env(postgres: Service) -> None:
    dsn = postgres.client_env()["STRATA_PG_DSN"]
    assert dsn == "postgresql://strata:strata@127.0.0.1:15432/strata"
    table = sql.Identifier(f"t_{uuid.uuid4().hex[:12]}")
    rows = [(i, f"name-{i}", i * 1.5) for i in range(100)]
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT current_user, current_database()").fetchone() == ("strata", "strata")
        conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, name text, score float8)").format(table))
        with conn.cursor() as cur:
            cur.executemany(sql.SQL("INSERT INTO {} VALUES (%s, %s, %s)").format(table), rows)
        conn.commit()
        # A rolled-back write is not visible; a committed one is.
        conn.execute(sql.SQL("DELETE FROM {} WHERE id < 50").format(table))
        conn.rollback()
        assert conn.execute(sql.SQL("SELECT * FROM {} ORDER BY id").format(table)).fetchall() == rows
        conn.execute(sql.SQL("DROP TABLE {}").format(table))
        conn.commit()


def test_check_reports_round_trip(postgres: Service) -> None:
    detail = postgres.check()
    assert "ok (3 rows)" in detail
    assert "15." in detail or "16." in detail or "17." in detail


def test_warm_restart_reuses_the_initialised_cluster(postgres: Service) -> None:
    data_dir = postgres.state_dir / "data"
    dsn = postgres.client_env()["STRATA_PG_DSN"]
    table = f"persist_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        system_id = conn.execute("SELECT system_identifier FROM pg_control_system()").fetchone()
        conn.execute(sql.SQL("CREATE TABLE {} (v text)").format(sql.Identifier(table)))
        conn.execute(sql.SQL("INSERT INTO {} VALUES ('kept')").format(sql.Identifier(table)))
    pid_before = postgres.running_pid()
    postgres.stop()
    assert postgres.running_pid() is None
    assert not (data_dir / "postmaster.pid").exists(), "postgres did not shut down cleanly"
    assert "received fast shutdown request" in postgres.log_tail(40)
    seconds = postgres.start()
    assert postgres.running_pid() not in (None, pid_before)
    assert seconds < 60
    with psycopg.connect(dsn, autocommit=True) as conn:
        # Same cluster (initdb ran once), and the data written before the restart is there.
        assert conn.execute("SELECT system_identifier FROM pg_control_system()").fetchone() == system_id
        assert conn.execute(sql.SQL("SELECT v FROM {}").format(sql.Identifier(table))).fetchall() == [
            ("kept",)]
        conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(table)))


def test_listens_only_on_loopback(postgres: Service) -> None:
    assert listening_addresses(postgres.port) == {"127.0.0.1"}
    with pytest.raises(psycopg.OperationalError):
        # Trust is granted on 127.0.0.1 only: other loopback addresses are not even listened on.
        psycopg.connect(f"postgresql://strata:strata@127.0.0.2:{postgres.port}/strata", connect_timeout=2)
