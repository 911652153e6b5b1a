#!/usr/bin/env bash
# Installs what nnx needs, skipping what is already there (idempotent): the pinned Debian
# packages (tools/debian-packages.txt) and the project's Python environment (LibTorch and the
# peers, tools/python/requirements.txt), kept in a cache folder keyed by the requirements' hash.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

# --- Debian packages: the pinned version, or the archive's current one if it has moved on.
mapfile -t pins < <(grep -v '^\s*#' "$root/tools/debian-packages.txt" | grep -v '^\s*$')
missing=()
for pin in "${pins[@]}"; do
  name=${pin%%=*}
  if ! dpkg-query -W -f='${Status}' "$name" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pin")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[install-deps] installing Debian packages: ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  if ! "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"; then
    echo "[install-deps] warning: a pinned version is no longer in the archive;" \
         "installing the archive's versions instead (update tools/debian-packages.txt)" >&2
    "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]%%=*}"
  fi
else
  echo "[install-deps] all ${#pins[@]} Debian packages present"
fi

# --- Python environment: one per requirements hash, complete only once its marker exists.
venv=$("$root/tools/python/venv-path.sh")
if [ -f "$venv/.nnx-complete" ]; then
  echo "[install-deps] Python environment present: $venv"
else
  echo "[install-deps] creating the Python environment (torch, jax, flax, optax): $venv"
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --no-cache-dir -q --no-deps -r "$root/tools/python/requirements.txt"
  "$venv/bin/python" -m pip check
  touch "$venv/.nnx-complete"
fi
