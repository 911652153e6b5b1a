#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, runs every test suite.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/install-deps.sh"
"$root/tools/build.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "${NNX_BUILD_DIR:-$root/build}"
ctest --output-on-failure "$@"
