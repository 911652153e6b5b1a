#!/usr/bin/env bash
# The README's demo command: installs what is missing, builds only the flagship example (and the
# library it needs), runs it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/install-deps.sh"
"$root/tools/build.sh" --target state_tour
"${NNX_BUILD_DIR:-$root/build}/examples/state_tour" "$@"
