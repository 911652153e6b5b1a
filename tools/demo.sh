#!/usr/bin/env bash
# The README's demo command: installs what is missing, builds, runs the flagship example.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/install-deps.sh"
"$root/tools/build.sh"
"${NNX_BUILD_DIR:-$root/build}/examples/state_tour" "$@"
