#!/usr/bin/env bash
# The Fashion-MNIST example resumes exactly: a run stopped mid-epoch and resumed from its
# checkpoint logs the same losses and accuracies, byte for byte, as an uninterrupted run, on a
# data-parallel mesh (2 ranks) and on a data x model mesh (4 ranks). Bad flags exit 2.
# usage: fashion_mnist_resume.sh PATH/TO/fashion_mnist MPIRUN
set -euo pipefail
bin=$1
mpirun=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
small=(--train-records 4096 --batch 128 --epochs 2 --hidden 64)

run() {  # ranks, then flags
  local ranks=$1
  shift
  timeout 300 "$mpirun" -np "$ranks" --oversubscribe "$bin" "${small[@]}" "$@" > "$work/log" 2>&1 ||
    { cat "$work/log"; echo "FAILED: $bin $*"; exit 1; }
}

for layout in "2 1" "4 2"; do
  read -r ranks model <<< "$layout"
  run "$ranks" --model-parallel "$model" --out "$work/whole"
  run "$ranks" --model-parallel "$model" --out "$work/split" --stop-after-step 40
  lines=$(wc -l < "$work/split/losses.csv")
  [ "$lines" -eq 41 ] || { echo "the stopped run logged $lines lines, expected 41"; exit 1; }
  run "$ranks" --model-parallel "$model" --out "$work/split" --resume
  grep -q "resumed from step 40 (epoch 1, batch 8)" "$work/log" || { cat "$work/log"; exit 1; }
  steps=$(($(wc -l < "$work/whole/losses.csv") - 1))
  [ "$steps" -eq 64 ] || { echo "the whole run logged $steps steps, expected 64"; exit 1; }
  cmp "$work/whole/losses.csv" "$work/split/losses.csv"
  cmp "$work/whole/epochs.csv" "$work/split/epochs.csv"
  [ -s "$work/split/curves.png" ] || { echo "no plot written"; exit 1; }
  echo "ranks $ranks (model-parallel $model): resumed run equals the whole run over $steps steps"
  rm -rf "$work/whole" "$work/split"
done

# A stop at an epoch's last step (32 of 32 at this size) goes through the epoch's end, and the
# resumed run starts the next epoch with no step saved twice.
run 2 --out "$work/whole"
run 2 --out "$work/split" --stop-after-step 32
run 2 --out "$work/split" --resume
grep -q "resumed from step 32 (epoch 1, batch 0)" "$work/log" || { cat "$work/log"; exit 1; }
cmp "$work/whole/losses.csv" "$work/split/losses.csv"
cmp "$work/whole/epochs.csv" "$work/split/epochs.csv"
echo "a stop at an epoch's last step resumes into the next epoch and equals the whole run"
rm -rf "$work/whole" "$work/split"

# Three data ranks: test batches of 1002 leave padding in the last one, which both test metrics
# mask out, so they equal one rank's (test loss within float rounding, accuracy within two
# records).
run 1 --epochs 1 --batch 96 --out "$work/one"
run 3 --epochs 1 --batch 96 --out "$work/three"
paste -d, "$work/one/epochs.csv" "$work/three/epochs.csv" | awk -F, '
  function abs(x) { return x < 0 ? -x : x }
  NR > 1 && (abs($4 - $9) > 2e-4 || abs($5 - $10) > 1e-4) { bad = 1; print "differ: " $0 }
  END { exit bad }' || { echo "three ranks' test metrics differ from one rank's"; exit 1; }
echo "three data ranks: the padded test batch gives one rank's test metrics"
rm -rf "$work/one" "$work/three"

expect_status() {  # status, then flags; a single process
  local want=$1
  shift
  set +e
  "$bin" "$@" > "$work/log" 2>&1
  local got=$?
  set -e
  [ "$got" -eq "$want" ] || { cat "$work/log"; echo "$* exited $got, expected $want"; exit 1; }
}
expect_status 0 --help
grep -q -- "--resume" "$work/log"
expect_status 2 --epochs x
grep -q "error: --epochs needs an integer >= 1, got 'x' (see --help)" "$work/log"
expect_status 2 --no-such-flag 1
grep -q "error: unknown flag --no-such-flag" "$work/log"
expect_status 2 --resume=yes --out "$work/bad_out"
grep -q "error: --resume is a switch: true or false (1 or 0), got 'yes'" "$work/log"
expect_status 2 --lr nan --out "$work/bad_out"
grep -q "error: --lr needs a finite number, got 'nan'" "$work/log"
expect_status 2 --lr 0 --out "$work/bad_out"
grep -q "error: --lr needs a number above 0, got '0'" "$work/log"
expect_status 2 --seed 18446744073709551616
grep -q "error: --seed needs an integer" "$work/log"
expect_status 1 --data-dir "$work/none" --out "$work/none_out"
grep -q "rank 0: .*cannot open $work/none/train-images-idx3-ubyte.gz" "$work/log"
echo "flags: --help exits 0, bad flags exit 2, a missing dataset exits 1 naming the file"
