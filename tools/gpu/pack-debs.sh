#!/usr/bin/env bash
# On a Debian (bookworm) machine: downloads the Debian packages a GPU machine without them needs
# to build and run nnx (Open MPI and its libraries, fmt, Catch2, nlohmann-json) into one folder,
# for tools/gpu/build-and-test.sh to unpack there. The versions are this machine's candidates;
# those pinned in tools/debian-packages.txt are taken at their pins.
# usage: tools/gpu/pack-debs.sh [DIR]   (default .gpu/debs, ignored by git)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=${1:-$root/.gpu/debs}
packages=(openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev libhwloc15 libevent-core-2.1-7
          libevent-pthreads-2.1-7 libpmix2 libfabric1 libucx0 libibverbs1 librdmacm1 libnl-3-200
          libnl-route-3-200 libpsm2-2 libpsm-infinipath1 libnuma1 libmunge2 libpciaccess0 libltdl7
          libxnvctrl0 libfmt-dev catch2 nlohmann-json3-dev)
pinned() {  # name=version from the pins, else the name alone
  local pin
  pin=$(grep -E "^$1=" "$root/tools/debian-packages.txt" || true)
  echo "${pin:-$1}"
}
mkdir -p "$dir"
cd "$dir"
rm -f ./*.deb
args=()
for p in "${packages[@]}"; do args+=("$(pinned "$p")"); done
apt-get download "${args[@]}"
echo "packed $(ls ./*.deb | wc -l) packages ($(du -sh . | cut -f1)) into $dir"
