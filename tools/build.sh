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
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$build" -j "$jobs" "$@"
