#!/usr/bin/env bash
# The portal's web process as `make run` serves it: gunicorn with the deployed settings
# (gunicorn.conf.py), on the given address. Sync workers behind gunicorn's listen backlog,
# so a burst of clients waits its turn instead of being reset (runserver's backlog is 5).
#   scripts/serve.sh [HOST:PORT]        RELOAD=true: restart workers when code changes;
#                                       ACCESS_LOG=FILE: the access log there
set -euo pipefail
cd "$(dirname "$0")/.."
args=(portal.wsgi --config gunicorn.conf.py --bind "${1:-127.0.0.1:8000}")
# The access log (Prometheus scrapes /metrics every few seconds) to a file, not the terminal.
if [ -n "${ACCESS_LOG:-}" ]; then
  args+=(--access-logfile "$ACCESS_LOG")
fi
if [ "${RELOAD:-false}" = "true" ]; then
  args+=(--reload)
fi
exec .venv/bin/gunicorn "${args[@]}"
