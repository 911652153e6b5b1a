#!/usr/bin/env bash
# Prints where the project's Python environment lives: $NNX_VENV if set, else a cache folder
# keyed by the hash of tools/python/requirements.txt (install-deps and CMake both ask here).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
if [ -n "${NNX_VENV:-}" ]; then echo "$NNX_VENV"; exit 0; fi
hash=$(sha256sum "$root/tools/python/requirements.txt" | cut -c1-16)
echo "${NNX_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/nnx}/venv-$hash"
