#!/usr/bin/env bash
# How jobs end (nnx's exit protocol, on 2 ranks): an uncaught error prints once, with its rank, and
# ends every rank with status 1; a rank that returns from main while another waits in a
# collective ends the job within seconds (also when another rank, outside that collective, left
# first); a collective that one rank never reaches ends the job
# after NNX_COLLECTIVE_TIMEOUT; under NNX_CHECK_COLLECTIVES=1, ranks waiting on each other over
# different communicators end the job within seconds, naming each call, while a rank that still
# computes is waited for; a rank that reads another's input directly and then leaves does not
# end the job while a slower reader still reads (on 3 and on 66 ranks); normal and unevenly
# finishing jobs exit 0.
# usage: exit_test.sh PATH/TO/nnx_exit_probe MPIRUN
set -uo pipefail
probe=$1
mpirun=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
log=$(mktemp)
trap 'rm -f "$log"' EXIT
failures=0

# expect MODE STATUS MAX_SECONDS PATTERN [env...]  (RANKS=3 in env for 3 ranks)
expect() {
  local mode=$1 want=$2 max=$3 pattern=$4
  shift 4
  local start=$SECONDS ranks=2
  for e in "$@"; do [[ $e == RANKS=* ]] && ranks=${e#RANKS=}; done
  env "$@" timeout $((max > 120 ? max : 120)) "$mpirun" -np "$ranks" --oversubscribe "$probe" \
    "$mode" > "$log" 2>&1
  local got=$? took=$((SECONDS - start))
  local ok=1
  if [ "$want" = nonzero ]; then [ "$got" -ne 0 ] && [ "$got" -ne 124 ] || ok=0
  else [ "$got" -eq "$want" ] || ok=0; fi
  [ "$took" -le "$max" ] || ok=0
  grep -q -- "$pattern" "$log" || ok=0
  if [ $ok = 1 ]; then
    echo "ok: $mode: status $got in ${took}s"
  else
    echo "FAILED: $mode: status $got (wanted $want) in ${took}s (at most $max), pattern '$pattern'"
    cat "$log"
    failures=$((failures + 1))
  fi
}

expect uncaught 1 30 "nnx: rank 1: \[main\] the data file is corrupt (rank 1 alone)"
count=$(grep -c "the data file is corrupt" "$log")
[ "$count" -eq 1 ] || { echo "FAILED: the error printed $count times"; failures=$((failures + 1)); }
if grep -q "terminate called\|Backtrace\|backtrace" "$log"; then
  echo "FAILED: terminate noise in the output"; cat "$log"; failures=$((failures + 1))
fi
expect early_return nonzero 30 "nnx: rank 0: rank 1 has left main while this rank waits in"
expect skipped nonzero 30 "has waited 3 s (NNX_COLLECTIVE_TIMEOUT)" NNX_COLLECTIVE_TIMEOUT=3
expect second_leaver nonzero 30 "nnx: rank 0: rank 1 has left main while this rank waits in all_reduce over 'pair'" RANKS=3
expect cross_wait nonzero 30 "collectives wait on each other across communicators" \
  NNX_CHECK_COLLECTIVES=1
for site in "rank 0: all_gather #[0-9]* over 'data' (ranks 0,1), from tests/sharding/exit_probe.cpp:" \
            "rank 1: barrier #[0-9]* over 'side' (ranks 0,1), in "; do
  grep -q "$site" "$log" || { echo "FAILED: no '$site' in the message"; cat "$log"; failures=$((failures + 1)); }
done
expect slow_chain 0 30 "finished slow_chain" RANKS=3 NNX_CHECK_COLLECTIVES=1
expect read_then_left 0 30 "finished read_then_left" RANKS=3
grep -q "through MPI" "$log" &&
  echo "note: read_then_left went through MPI (no direct reads here): its waits were not direct"
# The same with 66 ranks: those that leave include members past the 64th (about 14 GiB).
available_kib=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
if [ "$available_kib" -ge $((16 << 20)) ]; then
  expect read_then_left 0 180 "finished read_then_left" RANKS=66
  grep -q "through MPI" "$log" && echo "note: read_then_left on 66 ranks went through MPI"
else
  echo "skipped: read_then_left on 66 ranks needs 16 GiB available," \
    "this machine has $((available_kib >> 20)) GiB"
fi
expect normal 0 30 "finished normal"
expect slow_finish 0 30 "finished slow_finish"
exit $((failures > 0))
