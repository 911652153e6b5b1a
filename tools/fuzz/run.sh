#!/usr/bin/env bash
# Builds the checkpoint format fuzzers (libFuzzer + ASan + UBSan) and runs each for the given
# seconds over a scratch copy of its seed corpus. Usage: run.sh [seconds=20] [build_dir]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
seconds=${1:-20}
build=$(mkdir -p "${2:-$root/build/fuzz}" && cd "${2:-$root/build/fuzz}" && pwd)
mkdir -p "$build/inc/nnx"
ln -sfn "$root/checkpoint" "$build/inc/nnx/checkpoint"
ln -sfn "$root/core" "$build/inc/nnx/core"
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I"$build/inc")
# The torch-free format layer only (checkpoint/ also holds the torch-based save and restore).
sources=("$root/core/error.cpp" "$root/checkpoint/detail/parse_util.cpp"
         "$root/checkpoint/detail/tiling.cpp" "$root/checkpoint/detail/write_pace.cpp")
for f in crc32c dtype file_io safetensors manifest; do
  sources+=("$root/checkpoint/$f.cpp")
done
status=0
for target in manifest safetensors; do
  echo "== building fuzz_$target"
  clang++ "${flags[@]}" "$root/tools/fuzz/fuzz_$target.cpp" "${sources[@]}" -lfmt \
    -o "$build/fuzz_$target"
  corpus="$build/corpus_$target"
  rm -rf "$corpus" && cp -r "$root/tools/fuzz/corpus/$target" "$corpus"
  seeds=$(ls "$corpus" | wc -l)
  echo "== running fuzz_$target for ${seconds}s over $seeds seeds"
  rc=0
  (cd "$build" && "./fuzz_$target" -max_total_time="$seconds" -print_final_stats=1 \
    -dict="$root/tools/fuzz/$target.dict" -artifact_prefix="$build/crash_${target}_" \
    "$corpus" >"$build/fuzz_$target.log" 2>&1) || rc=$?
  grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)|^stat::(number_of_executed_units|average_exec_per_sec|new_units_added)|SUMMARY' \
    "$build/fuzz_$target.log" || true
  if [ "$rc" -ne 0 ]; then
    echo "!! fuzz_$target found a crash (exit $rc): see $build/fuzz_$target.log"
    status=1
  fi
  echo "== fuzz_$target: $(( $(ls "$corpus" | wc -l) - seeds )) new inputs in the scratch corpus"
done
exit $status
