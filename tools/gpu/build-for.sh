#!/usr/bin/env bash
# Builds, on this machine, the nnx programs a GPU machine runs, against the LibTorch of the torch
# wheel that machine has (its version, e.g. 2.11.0), and copies them into .gpu/bin for
# tools/gpu/build-and-test.sh, which then skips its own build. NCCL is taken at the version that
# torch wheel pins. The wheels come from the package index into .gpu/wheels.
# usage: tools/gpu/build-for.sh TORCH_VERSION [CUDA_ARCH=9.0]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
version=${1:?usage: build-for.sh TORCH_VERSION [CUDA_ARCH]}
arch=${2:-9.0}
python=$("$root/tools/python/venv-path.sh")/bin/python
wheels=$root/.gpu/wheels/torch-$version
build=$root/build-gpu-$version
mkdir -p "$wheels"
cd "$wheels"
if [ ! -d torch ]; then
  "$python" -m pip download -q --no-deps "torch==$version" -d .
  unzip -q -o torch-*.whl 'torch/*'
fi
nccl=$(unzip -p torch-*.whl '*/METADATA' | sed -n 's/^Requires-Dist: \(nvidia-nccl-cu[0-9]*==[0-9.]*\).*/\1/p')
[ -n "$nccl" ] || { echo "the torch $version wheel pins no NCCL wheel" >&2; exit 1; }
if [ ! -d nvidia/nccl ]; then
  "$python" -m pip download -q --no-deps "$nccl" -d .
  unzip -q -o nvidia_nccl*.whl 'nvidia/*'
fi
# LibTorch's CMake asks python for two paths; this stand-in answers from the unpacked wheels.
cat > python <<EOF
#!/usr/bin/env bash
case "\$*" in
  *cmake_prefix_path*) echo "$wheels/torch/share/cmake" ;;
  *nvidia.nccl*) echo "$wheels/nvidia/nccl" ;;
  *) exec "$python" "\$@" ;;
esac
EOF
chmod +x python
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNNX_PYTHON="$wheels/python" \
  -DTORCH_CUDA_ARCH_LIST="$arch" -DNNX_BUILD_EXAMPLES=OFF \
  -DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined  # the CUDA wheels it loads are not here
programs=(tests/nnx_tests tests/flax_peer_values tests/nnx_crash_saver tools/nnx-ckpt/nnx-ckpt
          tools/bench/bench_device_train tools/bench/bench_sharded_init
          tools/bench/bench_device_optimizers)
cmake --build "$build" -j "${NNX_JOBS:-2}" --target "${programs[@]##*/}"
mkdir -p "$root/.gpu/bin"
for p in "${programs[@]}"; do cp "$build/$p" "$root/.gpu/bin/"; done
echo "$version" > "$root/.gpu/bin/torch-version"
echo "built for torch $version ($nccl) into $root/.gpu/bin"
