#!/usr/bin/env bash
# Install the system tools the suite and the demo need, when missing (Debian/Ubuntu):
#   prometheus + promtool (Debian's prometheus package), chromium (browser tests),
#   npm (to install axe-core for the accessibility checks), postgresql and redis
#   (the database and the broker, started by scripts/ensure_services.sh).
# Usage: scripts/ensure_tools.sh prometheus [chromium]
set -euo pipefail

need=()
for tool in "$@"; do
  case "$tool" in
    prometheus) command -v prometheus >/dev/null && command -v promtool >/dev/null || need+=(prometheus) ;;
    chromium) command -v chromium >/dev/null || need+=(chromium) ;;
    npm) command -v npm >/dev/null || need+=(npm) ;;
    postgresql) { command -v pg_ctlcluster >/dev/null && ls /etc/postgresql/*/main >/dev/null 2>&1; } \
      || need+=(postgresql) ;;
    redis) command -v redis-server >/dev/null || need+=(redis-server) ;;
    *) echo "ensure_tools: unknown tool $tool" >&2; exit 2 ;;
  esac
done
[ ${#need[@]} -eq 0 ] && exit 0

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then SUDO="sudo"; else
    echo "Missing ${need[*]}: install with 'apt-get install ${need[*]}' as root." >&2
    exit 1
  fi
fi
if ! command -v apt-get >/dev/null; then
  echo "Missing ${need[*]} and no apt-get here: install them with your package manager." >&2
  exit 1
fi
echo "Installing ${need[*]} from the distribution's packages..." >&2
export DEBIAN_FRONTEND=noninteractive
# Debian's packages would start their own services; the project runs its own instances.
printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
$SUDO chmod +x /usr/sbin/policy-rc.d
trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
