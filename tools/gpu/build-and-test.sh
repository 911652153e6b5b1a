#!/usr/bin/env bash
# On a machine with a GPU and a CUDA PyTorch (python3), but without Open MPI or the other Debian
# packages: unpacks the packages tools/gpu/pack-debs.sh gathered into a folder of its own, takes
# the programs tools/gpu/build-for.sh built for this machine's torch (.gpu/bin) or else builds nnx
# against that python3's LibTorch, and runs, by phase:
#   figures: the [gpu] cases; the seed guide's losses on the GPU against the CPU; the peak GPU
#            memory of sharded init; the GPU benchmarks (nnx, plain LibTorch, Flax NNX under jit);
#   cases, benchmarks: the [gpu] cases alone; the benchmarks of nnx, plain LibTorch and PyTorch's
#            optimizers alone (the optimizers in float32, bfloat16 and float16);
#   optimizers: the optimizer benchmarks alone;
#   suites:  the single-process suite on the GPU (NNX_DEVICE=cuda, NCCL); the 2- and 4-rank
#            suites sharing the GPU, through the MPI engine's host staging;
#   compare: builds from other trees (e.g. a kernel before and after a change) in .gpu/compare:
#            nnx_tests* run the [gpu] cases; bench_* (bench_device_optimizers) run in turn,
#            three rounds, in NNX_COMPARE_DTYPE (float32, bfloat16, float16; default float32);
#            then PyTorch's optimizers (logs compare_*.log, left out of
#            benchmarks.jsonl);
#   zero:    the ZeRO tests on 8 ranks sharing the GPU;
#   by_file: the suites on 1, 2 and 4 ranks with each test file in a process of its own (one
#            line per file; cuda-gdb's backtrace for the first crashes);
#   ctest:   the whole CTest suite on the CPU of that machine (needs a build there).
# Every step has a time limit. Logs go to /tmp/nnx-gpu/logs and, packed with the JSON results,
# to OUT_DIR/gpu-logs.tgz (OUT_DIR defaults to $OUT, else /tmp/nnx-gpu); the script goes on
# after a failing step and exits non-zero if any failed.
# usage: tools/gpu/build-and-test.sh [PHASE...]   (default: figures suites)
# environment: DEBS_DIR, OUT_DIR, NNX_GPU_DEADLINE (seconds the whole run may take)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
debs=${DEBS_DIR:-$root/.gpu/debs}
out=${OUT_DIR:-${OUT:-/tmp/nnx-gpu}}
phases=("$@")
[ $# -gt 0 ] || phases=(figures suites)
logs=/tmp/nnx-gpu/logs
prefix=/tmp/nnx-debs
build=$root/build-gpu
mkdir -p "$out" "$logs"
failed=()
pack() {  # the logs and results, as one file in OUT_DIR
  grep -h '"bench"' "$logs"/bench_*.log "$logs"/flax_*.log "$logs"/torch_*.log \
    "$logs"/sharded_init_memory.log \
    > "$logs/benchmarks.jsonl" 2>/dev/null
  tar -czf "$out/gpu-logs.tgz" -C "$logs" . 2>/dev/null
}
trap pack EXIT
deadline=${NNX_GPU_DEADLINE:-100000}  # seconds; later steps get what is left, or are skipped
step() {  # step NAME SECONDS COMMAND...: runs it under a time limit, logging to logs/NAME.log
  local name=$1 limit=$2
  shift 2
  ((limit > deadline - SECONDS)) && limit=$((deadline - SECONDS))
  if ((limit < 15)); then
    echo "== $name: skipped, the deadline (NNX_GPU_DEADLINE=$deadline s) is reached"
    failed+=("$name")
    return
  fi
  echo "== $name ($limit s at most): $*"
  local start=$SECONDS
  if timeout -k 10 "$limit" "$@" > "$logs/$name.log" 2>&1; then
    echo "   ok in $((SECONDS - start)) s"
  else
    echo "   FAILED (status $?) in $((SECONDS - start)) s; last lines:"
    tail -15 "$logs/$name.log" | sed 's/^/   | /'
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
export PMIX_MCA_pcompress_base_silence_warning=1  # the packed PMIx has no zlib component
missing=$(ldd "$usr/bin/orterun" "$lib/libmpi.so.40" 2>&1 | grep "not found" | sort -u)
[ -z "$missing" ] || echo "libraries missing from the packed folder:"$'\n'"$missing"

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$logs/gpu.txt" 2>&1
python3 -c 'import torch; print(torch.__version__, torch.cuda.is_available(), torch.cuda.device_count())' \
  >> "$logs/gpu.txt" 2>&1
cat "$logs/gpu.txt"
torch_version=$(python3 -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null)

# The programs: those built for this torch elsewhere (.gpu/bin), found through this python3's
# LibTorch and CUDA wheels, else a build here.
bin=$root/.gpu/bin
if [ -x "$bin/nnx_tests" ] && [ "$(cat "$bin/torch-version" 2>/dev/null)" = "$torch_version" ]; then
  site=$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
  for dir in "$site"/torch/lib "$site"/nvidia/*/lib /usr/local/cuda/lib64; do
    [ -d "$dir" ] && LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$dir
  done
  export LD_LIBRARY_PATH
  "$bin/nnx_tests" --list-tags > "$logs/prebuilt.log" 2>&1  # its status is the tag count
  grep -q '\[gpu\]' "$logs/prebuilt.log" || { cat "$logs/prebuilt.log"; bin=; }
else
  bin=
fi
if [ -n "$bin" ]; then
  echo "== programs built for torch $torch_version: $bin"
  tests=$bin/nnx_tests values=$bin/flax_peer_values
  bench_train=$bin/bench_device_train bench_init=$bin/bench_sharded_init
  bench_opt=$bin/bench_device_optimizers
  # The helper programs the checkpoint suites run, in place of the paths of the build elsewhere.
  export NNX_CKPT_TOOL=$bin/nnx-ckpt NNX_CRASH_SAVER=$bin/nnx_crash_saver NNX_PYTHON=python3 \
    NNX_NUMPY_READ=$root/tests/checkpoint/numpy_read.py
else
  step configure 300 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DNNX_PYTHON="$(command -v python3)" -DCMAKE_PREFIX_PATH="$usr" \
    -DMPI_CXX_COMPILER="$usr/bin/mpicxx.openmpi" -DMPIEXEC_EXECUTABLE="$usr/bin/mpirun.openmpi" \
    -DTORCH_CUDA_ARCH_LIST=9.0
  step build 1800 cmake --build "$build" -j "$(nproc)"
  tests=$build/tests/nnx_tests values=$build/tests/flax_peer_values
  bench_train=$build/tools/bench/bench_device_train bench_init=$build/tools/bench/bench_sharded_init
  bench_opt=$build/tools/bench/bench_device_optimizers
fi

# A [gpu] case skips itself where no CUDA device is visible (as in CI); here a skip is a failure,
# or a LibTorch without CUDA would pass every case unchecked.
gpu_cases() {
  step gpu_cases 90 env NNX_DEVICE=cuda "$tests" "[gpu]"
  if grep -q "no CUDA device" "$logs/gpu_cases.log" 2>/dev/null; then
    echo "   FAILED: [gpu] cases found no CUDA device and skipped themselves"
    failed+=("gpu_cases_skipped")
  fi
}

bench_nnx() { step "bench_$1" 90 env NNX_DEVICE=cuda "$bench_train" "$1" 20; }  # and LibTorch
# The optimizer step alone: nnx's kernel, the same chains by tensor ops, LibTorch's, PyTorch's.
optimizer_benchmarks() {
  local dtype
  for dtype in float32 bfloat16 float16; do
    step "bench_optimizers_$dtype" 90 env NNX_DEVICE=cuda "$bench_opt" 50 "dtype=$dtype"
    step "torch_optimizers_$dtype" 90 python3 \
      "$root/tools/bench/peers/torch_optimizers_device.py" --steps 50 --dtype "$dtype"
  done
}
nnx_benchmarks() { bench_nnx dot_relu_dot; bench_nnx gpt; optimizer_benchmarks; }
compare_builds() {  # builds of the optimizer benchmark (and of the tests) from other trees
  local round program found=0 compare_args=
  # A dtype only where asked: builds of older trees take no dtype argument.
  [ -n "${NNX_COMPARE_DTYPE:-}" ] && compare_args="dtype=$NNX_COMPARE_DTYPE"
  shopt -s nullglob
  for program in "$root"/.gpu/compare/nnx_tests*; do
    step "compare_cases_${program##*/}" 90 env NNX_DEVICE=cuda "$program" "[gpu]"
  done
  for round in 1 2 3; do
    for program in "$root"/.gpu/compare/bench_*; do
      found=1
      step "compare_${program##*/}_$round" 60 env NNX_DEVICE=cuda "$program" 50 $compare_args
    done
  done
  shopt -u nullglob
  if ((found == 0)); then
    echo "== compare: no builds in $root/.gpu/compare (bench_* programs)"
    failed+=(compare)
  fi
  step compare_torch_optimizers 90 python3 "$root/tools/bench/peers/torch_optimizers_device.py" \
    --steps 50 --dtype "${NNX_COMPARE_DTYPE:-float32}"
}

figures() {
  gpu_cases
  # The seed guide's losses on the GPU (1 rank; 2 ranks sharing it) against the CPU run.
  step guide_cpu 60 env NNX_DEVICE=cpu "$values" dot_relu_dot 1 1 "$logs/guide_cpu.json"
  step guide_cuda 60 env NNX_DEVICE=cuda "$values" dot_relu_dot 1 1 "$logs/guide_cuda.json"
  step guide_cuda_2ranks 60 env NNX_DEVICE=cuda mpirun -np 2 --oversubscribe \
    "$values" dot_relu_dot 1 2 "$logs/guide_cuda_2ranks.json"
  step guide_compare 30 python3 "$root/tools/gpu/compare_losses.py" "$logs/guide_cpu.json" \
    "$logs/guide_cuda.json" "$logs/guide_cuda_2ranks.json"
  # Sharded init larger than one rank's share: peak GPU memory per rank against its share.
  step sharded_init_memory 60 env NNX_DEVICE=cuda mpirun -np 2 --oversubscribe "$bench_init" 8 16
  # GPU benchmarks, side by side: nnx and plain LibTorch in one process, then Flax NNX (jit).
  local with_flax=true
  python3 -c 'import jax, flax, optax' 2>/dev/null || {
    with_flax=false
    echo "== flax_*: skipped, python3 has no jax/flax/optax (pip install 'jax[cuda13]' flax optax)"
  }
  for workload in dot_relu_dot gpt; do
    bench_nnx "$workload"
    $with_flax && step "flax_$workload" 120 python3 "$root/tools/bench/peers/flax_device.py" \
      "$workload" --steps 20
  done
  optimizer_benchmarks
  grep -h '"bench"' "$logs"/bench_*.log "$logs"/flax_*.log "$logs"/torch_*.log \
    "$logs"/sharded_init_memory.log
}

suites() {
  step unit_cuda 200 env NNX_DEVICE=cuda "$tests" "~[ranks2]~[ranks4]~[ranks8]"
  step ranks2_cuda_mpi 200 env NNX_DEVICE=cuda NNX_CHECK_COLLECTIVES=1 \
    mpirun -np 2 --oversubscribe "$tests" "[ranks2]"
  step ranks4_cuda_mpi 200 env NNX_DEVICE=cuda NNX_CHECK_COLLECTIVES=1 \
    mpirun -np 4 --oversubscribe "$tests" "[ranks4]"
}

# Each test file in a process of its own, so that one crash does not hide the files after it;
# one line per file (and rank count) with Catch's totals; cuda-gdb's backtrace for a crash.
by_file() {
  local tags ranks file traces=0
  for ranks in 1 2 4; do
    local only="[ranks$ranks]"
    ((ranks > 1)) || only="~[ranks2]~[ranks4]~[ranks8]"
    tags=$("$tests" -# --list-tags "$only" | grep -o '\[#[a-z_0-9]*\]' | sort -u)
    for file in $tags; do
      local log=$logs/ranks${ranks}_${file:2:-1}.log
      if ((ranks == 1)); then
        timeout -k 5 120 env NNX_DEVICE=cuda "$tests" -# "$file~[ranks2]~[ranks4]~[ranks8]" \
          > "$log" 2>&1
      else
        timeout -k 5 120 env NNX_DEVICE=cuda NNX_CHECK_COLLECTIVES=1 mpirun -np "$ranks" \
          --oversubscribe "$tests" -# "$file[ranks$ranks]" > "$log" 2>&1
      fi
      local status=$?
      echo "ranks $ranks $file: status $status, $(sed 's/\x1b\[[0-9;]*m//g' "$log" |
        grep -aE '^(test cases|All tests passed|No test cases)' | tail -1)"
      if ((status >= 128 && ranks == 1 && traces++ < 3)) && command -v cuda-gdb > /dev/null; then
        NNX_DEVICE=cuda timeout 60 cuda-gdb -batch -ex run -ex bt --args "$tests" -# "$file" \
          2>&1 | grep -aE '^#[0-9]+' | head -25 > "$logs/bt_${file:2:-1}.txt"
      fi
      ((SECONDS < deadline)) || return
    done
  done
}

# ZeRO on the GPU: the ZeRO tests on 8 ranks sharing it (slices updated by the step kernel).
zero_ranks8() {
  step zero_ranks8_cuda_mpi 200 env NNX_DEVICE=cuda NNX_CHECK_COLLECTIVES=1 \
    mpirun -np 8 --oversubscribe "$tests" -# "[#zero_test][ranks8]"
}

ctest_cpu() {
  [ -f "$build/CTestTestfile.cmake" ] || { echo "== ctest: needs a build here"; return; }
  step ctest_cpu 1800 env NNX_DEVICE=cpu ctest --test-dir "$build" --output-on-failure -E fuzz_parsers
}

for phase in "${phases[@]}"; do
  case $phase in
    figures) figures ;;
    cases) gpu_cases ;;
    benchmarks) nnx_benchmarks ;;
    optimizers) optimizer_benchmarks ;;
    suites) suites ;;
    compare) compare_builds ;;
    zero) zero_ranks8 ;;
    ctest) ctest_cpu ;;
    by_file) by_file ;;
    *) echo "unknown phase '$phase' (figures, cases, benchmarks, optimizers, suites, compare, zero, by_file, ctest)"; failed+=("$phase") ;;
  esac
done
echo "logs in $logs, packed into $out/gpu-logs.tgz"
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed steps: ${failed[*]}"
  exit 1
fi
