#!/usr/bin/env bash
# code-server (Coder's VS Code in the browser), pinned, from the npm registry into
# var/code-server: the sandbox's kubelet runs it for the pods of code-server images, as it
# runs JupyterLab for the Jupyter images (sandbox/jupyter.py).
#
# Only the npm registry is reachable here, so two steps differ from `npm install -g`:
# - the one dependency its VS Code takes from GitHub (@vscode/proxy-agent, pinned to a
#   commit) is taken from npm at the same version;
# - the native modules (argon2, node-pty, spdlog, the file watcher) are built against the
#   local Node.js headers instead of downloading prebuilt binaries or headers.
# code-server 4.96 runs on Node.js 20 only. Usage: scripts/install_code_server.sh [DEST]
# Without DEST it is installed once per machine under ~/.cache/gpu-portal and var/code-server
# links to it, so a second clone installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=4.96.4
command -v node >/dev/null && command -v npm >/dev/null || {
  echo "code-server needs Node.js 20 and npm (apt-get install nodejs npm)." >&2
  exit 1
}
# Its native modules are built for this Node.js's ABI: another Node.js installs again.
abi=$(node -p process.versions.modules)
if [ -n "${1:-}" ]; then
  DEST=$(realpath -m "$1")
else
  DEST="${XDG_CACHE_HOME:-$HOME/.cache}/gpu-portal/code-server-$VERSION-node-abi-$abi"
  mkdir -p var
  [ -L var/code-server ] || rm -rf var/code-server  # an install of before the cache
  ln -sfn "$DEST" var/code-server
fi
STAMP="$DEST/.installed-$VERSION-node-abi-$abi"
[ -f "$STAMP" ] && exit 0

major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" != 20 ]; then
  echo "code-server $VERSION runs on Node.js 20; this machine has $(node -v)." >&2
  exit 1
fi
# Headers for node-gyp: the ones installed with Node.js (no download from nodejs.org).
nodedir=$(node -p 'require("path").resolve(process.execPath, "../..")')
if [ ! -f "$nodedir/include/node/node.h" ]; then
  echo "Node.js headers are missing ($nodedir/include/node/node.h): install Node.js's" \
    "development headers (Debian: libnode-dev)." >&2
  exit 1
fi
export npm_config_nodedir="$nodedir"
export npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false

echo "Installing code-server $VERSION into $DEST (about a minute)..." >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
npm pack --silent --pack-destination "$work" "code-server@$VERSION" >/dev/null
tar -xzf "$work/code-server-$VERSION.tgz" -C "$work"
pkg="$work/package"
(
  cd "$pkg"
  npm install --silent --omit=dev --ignore-scripts
  # argon2's installer would download a prebuilt binary from GitHub: build it here instead.
  npm_config_build_from_source=true npm rebuild --silent argon2
)

tarball=$(npm view "@vscode/proxy-agent@0.27.0" dist.tarball)
integrity=$(npm view "@vscode/proxy-agent@0.27.0" dist.integrity)
python3 - "$pkg/lib/vscode/npm-shrinkwrap.json" "$tarball" "$integrity" <<'EOF'
import json, sys
path, tarball, integrity = sys.argv[1:]
with open(path) as f:
    lock = json.load(f)
entry = lock["packages"]["node_modules/@vscode/proxy-agent"]
assert entry["version"] == "0.27.0", entry
entry["resolved"], entry["integrity"] = tarball, integrity
with open(path, "w") as f:
    json.dump(lock, f, indent=2)
EOF
(
  cd "$pkg/lib/vscode"
  npm install --silent --omit=dev --ignore-scripts
  npm rebuild --silent @vscode/spdlog node-pty native-watchdog @parcel/watcher
  # What code-server's own postinstall does: VS Code looks for its modules there.
  ln -sfn node_modules node_modules.asar
)
(cd "$pkg" && node -e 'require("argon2")')

rm -rf "$DEST"
mkdir -p "$(dirname "$DEST")"
mv "$pkg" "$DEST"
touch "$STAMP"
echo "code-server $VERSION installed in $DEST" >&2
