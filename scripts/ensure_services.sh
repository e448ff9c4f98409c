#!/usr/bin/env bash
# PostgreSQL and Redis on loopback, as `make run` and `make test` need them: installed from
# Debian's packages when missing, PostgreSQL's loopback made trust for user `postgres` (the
# project's default DATABASE_URL has no password), both started when not answering.
# Only for the local defaults: with DATABASE_URL/REDIS_URL (or TEST_*) pointing elsewhere,
# the caller's preflight checks them and nothing here is changed.
set -euo pipefail
cd "$(dirname "$0")/.."

local_pg=true
case "${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/}" in
  postgres://postgres@127.0.0.1:5432/*|postgres://postgres@localhost:5432/*) ;;
  *) local_pg=false ;;
esac
local_redis=true
case "${REDIS_URL:-redis://127.0.0.1:6379/0}" in
  redis://127.0.0.1:6379/*|redis://localhost:6379/*) ;;
  *) local_redis=false ;;
esac

answers() { python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=1)" "$1" 2>/dev/null; }

if $local_pg; then
  bash scripts/ensure_tools.sh postgresql
  version=$(ls /etc/postgresql | sort -V | tail -n1)
  hba=/etc/postgresql/$version/main/pg_hba.conf
  # Debian's default asks for a password on 127.0.0.1; the old machines trusted loopback for
  # `postgres`. The first matching line wins, so ours go first.
  if ! grep -q "^# gpu-portal: loopback trust" "$hba"; then
    tmp=$(mktemp)
    { echo "# gpu-portal: loopback trust for the local development database (scripts/ensure_services.sh)"
      echo "host    all             postgres        127.0.0.1/32            trust"
      echo "host    all             postgres        ::1/128                 trust"
      cat "$hba"; } >"$tmp"
    cat "$tmp" >"$hba" && rm -f "$tmp"
    pg_ctlcluster --skip-systemctl-redirect "$version" main reload 2>/dev/null || true
  fi
  if ! answers 5432; then
    echo "Starting PostgreSQL $version..." >&2
    pg_ctlcluster --skip-systemctl-redirect "$version" main start
  fi
fi

if $local_redis; then
  bash scripts/ensure_tools.sh redis
  if ! answers 6379; then
    echo "Starting Redis..." >&2
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
      --logfile /tmp/gpu-portal-redis.log
  fi
fi
for _ in $(seq 1 50); do
  { ! $local_pg || answers 5432; } && { ! $local_redis || answers 6379; } && exit 0
  sleep 0.2
done
echo "PostgreSQL or Redis did not start (see /var/log/postgresql/, /tmp/gpu-portal-redis.log)" >&2
exit 1
