#!/usr/bin/env bash
# `make run`: the portal on http://127.0.0.1:8000 (the workspace proxy in front of gunicorn)
# with a Celery worker and beat and demo data.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
mkdir -p var/log

# PostgreSQL and Redis (the local defaults): installed when missing, and started.
bash scripts/ensure_services.sh || echo "make run: PostgreSQL/Redis could not be set up here (see above)." >&2
exports=$($BIN/python scripts/preflight.py --db --redis --sqlite-fallback var/demo.sqlite3) || {
  echo "make run: fix the above and run it again." >&2
  exit 1
}
eval "$exports"
export DEBUG="${DEBUG:-true}"

pids=()
cleanup() {
  trap - EXIT INT TERM
  echo "Stopping worker, beat, tracker, Prometheus and the sandbox cluster..."
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

# The cluster: yours when KUBECONFIG is set, otherwise the local cluster (state kept in
# var/), started first: it boots (20-30 s) while the database is migrated and seeded.
if [ -z "${KUBECONFIG:-}" ]; then
  # code-server for the sandbox's code-server workspaces (needs Node.js 20; without it,
  # such a workspace's pod fails and says why, the rest of the demo runs).
  bash scripts/install_code_server.sh || echo "code-server not installed (see above)." >&2
  rm -f var/sandbox-ports.json
  # The real components, built from their Go modules once per machine (cached).
  $BIN/python scripts/install_kube_tools.py || true
  KUBECTL=$BIN/kubectl bash localcluster/build.sh >/dev/null
  bash scripts/ensure_inotify.sh
  $BIN/python -m sandbox --profile "${SANDBOX_PROFILE:-default}" --port "${SANDBOX_PORT:-6443}" \
    --metrics-port "${SANDBOX_METRICS_PORT:-9400}" --speed "${SANDBOX_SPEED:-10}" \
    --state var/sandbox --kubeconfig var/sandbox-kubeconfig \
    --ports-file var/sandbox-ports.json >var/log/sandbox.log 2>&1 &
  pids+=($!)
  SANDBOX_PID=$!
  # A second local cluster (several clusters behind one portal, docs/clusters.md): H100s and
  # time-sliced T4s, registered as h100-east. DEMO_SECOND_CLUSTER=0 leaves it out.
  if [ "${DEMO_SECOND_CLUSTER:-1}" != 0 ]; then
    rm -f var/sandbox-east-ports.json
    $BIN/python -m sandbox --profile east --port "${SANDBOX_EAST_PORT:-6444}" \
      --metrics-port "${SANDBOX_EAST_METRICS_PORT:-9401}" --speed "${SANDBOX_SPEED:-10}" \
      --state var/sandbox-east --kubeconfig var/sandbox-east-kubeconfig \
      --ports-file var/sandbox-east-ports.json >var/log/sandbox-east.log 2>&1 &
    pids+=($!)
    EAST_PID=$!
  fi
fi

$BIN/python scripts/ensure_db.py
$BIN/python manage.py migrate --noinput
$BIN/python manage.py seed_demo

if [ -n "${SANDBOX_PID:-}" ]; then
  for _ in $(seq 1 1800); do
    [ -s var/sandbox-ports.json ] && break
    kill -0 "$SANDBOX_PID" 2>/dev/null || break  # it exited: its log says why
    sleep 0.1
  done
  if [ ! -s var/sandbox-ports.json ]; then
    echo "The sandbox cluster did not start; see var/log/sandbox.log" >&2
    tail -n 20 var/log/sandbox.log >&2
    exit 1
  fi
  export KUBECONFIG="$PWD/var/sandbox-kubeconfig"
  CLUSTER="sandbox cluster (profile ${SANDBOX_PROFILE:-default}, logs var/log/sandbox.log; try KUBECONFIG=var/sandbox-kubeconfig .venv/bin/kubectl get nodes)"
  if [ -n "${EAST_PID:-}" ]; then
    for _ in $(seq 1 1800); do
      [ -s var/sandbox-east-ports.json ] && break
      kill -0 "$EAST_PID" 2>/dev/null || break
      sleep 0.1
    done
    if [ -s var/sandbox-east-ports.json ]; then
      $BIN/python manage.py seed_demo --cluster "h100-east=$PWD/var/sandbox-east-kubeconfig" >/dev/null
      CLUSTER="$CLUSTER; and h100-east (profile east, logs var/log/sandbox-east.log)"
    else
      echo "The second demo cluster (h100-east) did not start; see var/log/sandbox-east.log. The demo runs on one." >&2
    fi
  fi
else
  CLUSTER="cluster of KUBECONFIG=$KUBECONFIG"
fi

# The GPU catalog from the nodes and every team's namespace, quota, limits and isolation,
# then the demo's jobs (admitted once the worker is up): as soon as the cluster answers,
# beside the other processes' start rather than after it.
(
  $BIN/python manage.py cluster_sync || echo "Teams not mirrored into the cluster (see above)." >&2
  $BIN/python manage.py demo_jobs || echo "Demo jobs not submitted (see above)." >&2
) &
pids+=($!)

# Prometheus for the GPU dashboards: ours unless PROMETHEUS_URL points at one already.
# It scrapes the cluster's DCGM exporter (the sandbox's, or DCGM_TARGET) and the portal.
if [ -z "${PROMETHEUS_URL:-}" ]; then
  bash scripts/ensure_tools.sh prometheus
  PROM_PORT="${PROMETHEUS_PORT:-9090}"
  if ! $BIN/python -c "import socket,sys; s=socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1])))" "$PROM_PORT" 2>/dev/null; then
    PROM_PORT=$($BIN/python -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
  fi
  if [ -s var/sandbox-ports.json ] && [ -z "${DCGM_TARGET:-}" ]; then
    DCGM_TARGET="127.0.0.1:$($BIN/python -c "import json; print(json.load(open('var/sandbox-ports.json'))['metrics_port'])")"
  fi
  $BIN/python manage.py prometheus_config --config var/prometheus/prometheus.yml \
    --rules var/prometheus/gpu-alerts.yml --portal-target 127.0.0.1:8000 --scrape-interval 5s \
    ${DCGM_TARGET:+--dcgm-target "$DCGM_TARGET"} >/dev/null
  prometheus --config.file=var/prometheus/prometheus.yml --storage.tsdb.path=var/prometheus/data \
    --web.listen-address="127.0.0.1:$PROM_PORT" --storage.tsdb.retention.time=7d \
    >var/log/prometheus.log 2>&1 &
  pids+=($!)
  export PROMETHEUS_URL="http://127.0.0.1:$PROM_PORT"
  # It evaluates the shipped recording rules: the cluster and team lines read them.
  export PROMETHEUS_RECORDING_RULES="${PROMETHEUS_RECORDING_RULES:-true}"
  for _ in $(seq 1 100); do
    $BIN/python -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + '/-/ready', timeout=1)" \
      "$PROMETHEUS_URL" 2>/dev/null && break
    sleep 0.1
  done
  METRICS="Prometheus at $PROMETHEUS_URL (logs var/log/prometheus.log)"
else
  METRICS="Prometheus at $PROMETHEUS_URL"
fi

# Notifications by email go to a local SMTP server (aiosmtpd) that prints each message to
# var/log/mail.log, unless EMAIL_HOST names a real one.
if [ -z "${EMAIL_HOST:-}" ]; then
  export EMAIL_HOST=127.0.0.1 EMAIL_PORT="${DEMO_SMTP_PORT:-8025}"
  $BIN/python -m aiosmtpd -n -l "$EMAIL_HOST:$EMAIL_PORT" >var/log/mail.log 2>&1 &
  pids+=($!)
  MAIL="emails printed to var/log/mail.log (SMTP on $EMAIL_HOST:$EMAIL_PORT)"
else
  MAIL="emails through $EMAIL_HOST:${EMAIL_PORT:-25}"
fi

# The demo's GPU-hour reports fill as it runs: roll up every two minutes, not fifteen.
export ACCOUNTING_INTERVAL_SECONDS="${ACCOUNTING_INTERVAL_SECONDS:-120}"
$BIN/celery -A portal worker --loglevel=INFO --concurrency=2 >var/log/worker.log 2>&1 &
pids+=($!)
$BIN/celery -A portal beat --loglevel=INFO --schedule var/celerybeat-schedule >var/log/beat.log 2>&1 &
pids+=($!)
# Job rows follow the cluster's watch streams; beat's reconcile is the slow safety net.
$BIN/python manage.py track_cluster >var/log/tracker.log 2>&1 &
pids+=($!)

# The workspace proxy in front (an ASGI process: workspaces' HTTP and WebSockets at
# /workspaces/<id>/), the portal's gunicorn behind it, as an ingress would route them.
WEB_ADDR="127.0.0.1:${PORTAL_WEB_PORT:-8001}"
WORKSPACE_PROXY_UPSTREAM="http://$WEB_ADDR" $BIN/uvicorn workspaces.proxy.asgi:application \
  --host 127.0.0.1 --port 8000 --ws wsproto --no-access-log >var/log/proxy.log 2>&1 &
pids+=($!)

cat <<MSG

  GPU Portal: http://127.0.0.1:8000/    (API docs: http://127.0.0.1:8000/api/docs/)
  Served by gunicorn as deployed (gunicorn.conf.py, on $WEB_ADDR; RELOAD=true make run reloads
  on code changes) behind the workspace proxy (uvicorn, logs var/log/proxy.log)
  Users (password "demo"): alice (vision member), bob (vision lead), carol (nlp member), dave (robotics member), admin (platform admin)
  Cluster: $CLUSTER
  Metrics: $METRICS; GPU dashboards at http://127.0.0.1:8000/monitoring/
  Notifications: $MAIL; command line: .venv/bin/gpuportal (a token: Tokens in the menu)
  Logs: var/log/worker.log, var/log/beat.log, var/log/tracker.log, var/log/access.log. Stop with Ctrl-C.

MSG
# In the background, waited for: bash runs a trap only once the foreground command is done,
# so a SIGTERM (a process manager, `kill`) stopped nothing while gunicorn ran in front.
ACCESS_LOG=var/log/access.log bash scripts/serve.sh "$WEB_ADDR" &
pids+=($!)
wait "$!"
