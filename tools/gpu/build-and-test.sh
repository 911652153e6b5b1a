#!/usr/bin/env bash
# On a machine with a GPU and a CUDA PyTorch (python3), but without Open MPI or the other Debian
# packages: unpacks the packages tools/gpu/pack-debs.sh gathered into a folder of its own, builds
# nnx against that python3's LibTorch, and runs the suites with CUDA tensors:
#   - the [gpu] cases and the single-process suite on the GPU (NNX_DEVICE=cuda);
#   - the 2- and 4-rank suites sharing the GPU, through the MPI engine's host staging;
#   - the whole CTest suite on the CPU of that machine (NNX_DEVICE=cpu), as a baseline;
#   - the seed guide's losses on the GPU against the CPU, the peak GPU memory of sharded init,
#     and the GPU benchmarks (nnx, plain LibTorch, Flax NNX under jit) into benchmarks.jsonl.
# Logs go to OUT_DIR (default $OUT, else /tmp/nnx-gpu); the script goes on after a failing
# step and exits non-zero if any failed.
# usage: tools/gpu/build-and-test.sh [DEBS_DIR] [OUT_DIR]
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
debs=${1:-$root/.gpu/debs}
out=${2:-${OUT:-/tmp/nnx-gpu}}
prefix=/tmp/nnx-debs
build=$root/build-gpu
mkdir -p "$out"
failed=()
step() {  # step NAME COMMAND...: runs it, logging to OUT_DIR/NAME.log
  local name=$1
  shift
  echo "== $name: $*"
  local start=$SECONDS
  if "$@" > "$out/$name.log" 2>&1; then
    echo "   ok in $((SECONDS - start)) s"
  else
    echo "   FAILED (status $?) in $((SECONDS - start)) s; last lines:"
    tail -15 "$out/$name.log" | sed 's/^/   | /'
    failed+=("$name")
  fi
}

rm -rf "$prefix" && mkdir -p "$prefix"
for f in "$debs"/*.deb; do dpkg -x "$f" "$prefix"; done
usr=$prefix/usr
lib=$usr/lib/x86_64-linux-gnu
# dpkg -x leaves out the alternatives links, and Open MPI finds its relocated files by OPAL_PREFIX.
for tool in mpirun mpiexec mpicxx mpicc; do ln -sf "$tool.openmpi" "$usr/bin/$tool"; done
export OPAL_PREFIX=$usr PATH=$usr/bin:$PATH
export LD_LIBRARY_PATH=$lib/openmpi/lib:$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
missing=$(ldd "$usr/bin/orterun" "$lib/libmpi.so.40" 2>&1 | grep "not found" | sort -u)
[ -z "$missing" ] || echo "libraries missing from the packed folder:"$'\n'"$missing"

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.txt" 2>&1
python3 -c 'import torch; print(torch.__version__, torch.cuda.is_available(), torch.cuda.device_count())' \
  >> "$out/gpu.txt" 2>&1
cat "$out/gpu.txt"

step configure cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DNNX_PYTHON="$(command -v python3)" -DCMAKE_PREFIX_PATH="$usr" \
  -DMPI_CXX_COMPILER="$usr/bin/mpicxx.openmpi" -DMPIEXEC_EXECUTABLE="$usr/bin/mpirun.openmpi" \
  -DTORCH_CUDA_ARCH_LIST=9.0
step build cmake --build "$build" -j "$(nproc)"
tests=$build/tests/nnx_tests
step gpu_cases env NNX_DEVICE=cuda "$tests" "[gpu]"
step unit_cuda env NNX_DEVICE=cuda "$tests" "~[ranks2]~[ranks4]~[ranks8]"
step ranks2_cuda_mpi env NNX_DEVICE=cuda NNX_CHECK_COLLECTIVES=1 \
  mpirun -np 2 --oversubscribe "$tests" "[ranks2]"
step ranks4_cuda_mpi env NNX_DEVICE=cuda NNX_CHECK_COLLECTIVES=1 \
  mpirun -np 4 --oversubscribe "$tests" "[ranks4]"
step ctest_cpu env NNX_DEVICE=cpu ctest --test-dir "$build" --output-on-failure -E fuzz_parsers

# The seed guide's losses on the GPU (1 rank; 2 ranks sharing it) against the CPU run.
values=$build/tests/flax_peer_values
step guide_cpu env NNX_DEVICE=cpu "$values" dot_relu_dot 1 1 "$out/guide_cpu.json"
step guide_cuda env NNX_DEVICE=cuda "$values" dot_relu_dot 1 1 "$out/guide_cuda.json"
step guide_cuda_2ranks env NNX_DEVICE=cuda mpirun -np 2 --oversubscribe \
  "$values" dot_relu_dot 1 2 "$out/guide_cuda_2ranks.json"
step guide_compare python3 "$root/tools/gpu/compare_losses.py" "$out/guide_cpu.json" \
  "$out/guide_cuda.json" "$out/guide_cuda_2ranks.json"
# Sharded init larger than one rank's share: peak GPU memory per rank against its share.
step sharded_init_memory env NNX_DEVICE=cuda mpirun -np 2 --oversubscribe \
  "$build/tools/bench/bench_sharded_init" 8 16
# GPU benchmarks, side by side: nnx and plain LibTorch in one process, then Flax NNX (jit).
with_flax=true
python3 -c 'import jax, flax, optax' 2>/dev/null || {
  with_flax=false
  echo "== flax_*: skipped, python3 has no jax/flax/optax (pip install 'jax[cuda12]' flax optax)"
}
for workload in dot_relu_dot gpt; do
  step "bench_$workload" env NNX_DEVICE=cuda "$build/tools/bench/bench_device_train" "$workload" 20
  $with_flax && step "flax_$workload" python3 "$root/tools/bench/peers/flax_device.py" \
    "$workload" --steps 20
done
grep -h '"bench"' "$out"/bench_*.log "$out"/flax_*.log "$out"/sharded_init_memory.log \
  > "$out/benchmarks.jsonl" 2>/dev/null

echo "logs in $out"
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed steps: ${failed[*]}"
  exit 1
fi
