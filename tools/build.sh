#!/usr/bin/env bash
# Configures and builds nnx into ./build (or $NNX_BUILD_DIR): 2 jobs, ccache when present.
# LibTorch comes from the project's Python environment (tools/install-deps.sh); extra arguments
# go to `cmake --build` (e.g. --target state_tour).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${NNX_BUILD_DIR:-$root/build}
jobs=${NNX_JOBS:-2}
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# Configure where nothing is configured yet, or where the last configure failed (a cache but no
# build files, e.g. when it ran before tools/install-deps.sh).
configured=1
[ -f "$build/CMakeCache.txt" ] || configured=0
[ -f "$build/build.ninja" ] || [ -f "$build/Makefile" ] || configured=0
if [ "$configured" = 0 ]; then
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$build" -j "$jobs" "$@"
