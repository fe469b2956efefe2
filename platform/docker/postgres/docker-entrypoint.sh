#!/bin/bash
# The official postgres image's contract, in short: initialise PGDATA once (user, password,
# database from POSTGRES_*), then run the server as the postgres user with the given arguments.
set -euo pipefail
if [ "${1:0:1}" = '-' ]; then
  set -- postgres "$@"
fi
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"; }
if [ "$1" = 'postgres' ]; then
  mkdir -p "$PGDATA" /var/run/postgresql
  chown postgres:postgres "$PGDATA" /var/run/postgresql
  chmod 700 "$PGDATA"
  if [ ! -s "$PGDATA/PG_VERSION" ]; then
    user="${POSTGRES_USER:-postgres}"
    pwfile="$(mktemp)"; printf '%s' "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}" > "$pwfile"
    chown postgres "$pwfile"
    as_postgres initdb -D "$PGDATA" --username="$user" --pwfile="$pwfile" --auth-local=trust \
      --auth-host=scram-sha-256 --encoding=UTF8 --no-locale >/dev/null
    rm -f "$pwfile"
    printf 'host all all all scram-sha-256\n' >> "$PGDATA/pg_hba.conf"
    db="${POSTGRES_DB:-$user}"
    if [ "$db" != 'postgres' ]; then
      as_postgres pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -c unix_socket_directories=/var/run/postgresql" -w start >/dev/null
      as_postgres psql -v ON_ERROR_STOP=1 -h /var/run/postgresql -U "$user" -d postgres \
        -c "CREATE DATABASE \"$db\"" >/dev/null
      as_postgres pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
    fi
    echo "PostgreSQL init process complete; ready for start up."
  fi
  shift
  exec setpriv --reuid=postgres --regid=postgres --init-groups -- postgres -D "$PGDATA" \
    -c unix_socket_directories=/var/run/postgresql "$@"
fi
exec "$@"
