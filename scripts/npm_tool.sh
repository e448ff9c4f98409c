#!/usr/bin/env bash
# scripts/npm_tool.sh NAME PACKAGE@VERSION: the npm package installed once per machine (and
# version) under ~/.cache/gpu-portal, with var/NAME linking to it, so a second clone
# installs nothing. The tests find it at var/NAME/node_modules/PACKAGE.
set -euo pipefail
cd "$(dirname "$0")/.."
name=$1 spec=$2
dest="${XDG_CACHE_HOME:-$HOME/.cache}/gpu-portal/npm-${spec//[@\/]/-}"
if [ ! -f "$dest/.installed" ]; then
  bash scripts/ensure_tools.sh npm
  echo "Installing $spec from npm into $dest..." >&2
  rm -rf "$dest"
  npm install --prefix "$dest" --no-audit --no-fund --silent "$spec"
  touch "$dest/.installed"
fi
mkdir -p var
[ -L "var/$name" ] || rm -rf "var/$name"
ln -sfn "$dest" "var/$name"
