#!/usr/bin/env bash
# The README's demo command: installs what is missing, builds only the flagship example (and the
# library it needs), and trains it on Fashion-MNIST over as many ranks as there are cores (a power
# of two, at most 8). Extra arguments go to the example (--help lists them).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/install-deps.sh"
"$root/tools/build.sh" --target fashion_mnist
cores=$(nproc)
ranks=${NNX_DEMO_RANKS:-1}
if [ -z "${NNX_DEMO_RANKS:-}" ]; then
  while [ $((ranks * 2)) -le "$cores" ] && [ $((ranks * 2)) -le 8 ]; do ranks=$((ranks * 2)); done
fi
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
cd "$root"
exec mpirun -np "$ranks" --oversubscribe "${NNX_BUILD_DIR:-$root/build}/examples/fashion_mnist" "$@"
