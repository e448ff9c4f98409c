#!/usr/bin/env bash
# `make run`: the portal on http://127.0.0.1:8000 with a Celery worker and beat and demo data.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
mkdir -p var/log

exports=$($BIN/python scripts/preflight.py --db --redis --sqlite-fallback var/demo.sqlite3) || {
  echo "make run: fix the above and run it again." >&2
  exit 1
}
eval "$exports"
export DEBUG="${DEBUG:-true}"

$BIN/python scripts/ensure_db.py
$BIN/python manage.py migrate --noinput
$BIN/python manage.py seed_demo

pids=()
cleanup() {
  trap - EXIT INT TERM
  echo "Stopping worker and beat..."
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

$BIN/celery -A portal worker --loglevel=INFO --concurrency=2 >var/log/worker.log 2>&1 &
pids+=($!)
$BIN/celery -A portal beat --loglevel=INFO --schedule var/celerybeat-schedule >var/log/beat.log 2>&1 &
pids+=($!)

cat <<MSG

  GPU Portal: http://127.0.0.1:8000/    (API docs: http://127.0.0.1:8000/api/docs/)
  Users (password "demo"): alice (vision member), bob (vision lead), carol (nlp member), admin (platform admin)
  Logs: var/log/worker.log, var/log/beat.log. Stop with Ctrl-C.

MSG
$BIN/python manage.py runserver 127.0.0.1:8000
