#!/usr/bin/env bash
# `make bench [NAME=...]`: the benchmarks need PostgreSQL, Redis and (dashboard) Prometheus.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
export PORTAL_ENV=development DEBUG=false
$BIN/python scripts/preflight.py --db --redis
bash scripts/ensure_tools.sh prometheus
# shellcheck disable=SC2086
exec $BIN/python -m bench ${1+"$@"}
