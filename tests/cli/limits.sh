#!/usr/bin/env bash
# Usage: limits.sh LOOM_BINARY REPO_ROOT
#
# Hostile and careless inputs at Loom's limits, end to end: each must end in
# a clear error (exit 1, or 2 for an option) within seconds, never a signal,
# an abort, a hang or a silently wrong success. The modules are in
# tests/cli/limits/.
set -uo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 LOOM_BINARY REPO_ROOT" >&2
  exit 2
fi
loom=$1
root=$2
limits=$root/tests/cli/limits
example=$root/examples/mlp_block_tp4.hlo
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun=(mpirun --oversubscribe --mca btl self,vader)

# shellcheck source=harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/harness.sh"

# expect NAME CODE PATTERN -- CMD...: CMD exits CODE within 60 s and its
# stderr matches the extended regular expression PATTERN.
expect() {
  local name=$1 want=$2 pattern=$3
  shift 4
  timeout 60 "$@" >"$tmp/out" 2>"$tmp/err"
  local code=$?
  if [[ $code -ne $want ]]; then
    fail "$name" "exit $code, wanted $want"
  elif [[ -n $pattern ]] && ! grep -qE -- "$pattern" "$tmp/err"; then
    fail "$name" "stderr does not match: $pattern"
  else
    ok "$name"
  fi
}

# Memory: sizes that wrap int64_t when summed, and the address-space limit.
expect "run: 16 x s8[2^59] is refused up front" 1 "may hold up to at least 8.00 EiB per device" -- \
  "$loom" run "$limits/huge_sum_of_sizes.hlo" --devices 1
expect "stats: sizes past int64_t" 0 "" -- "$loom" stats "$limits/huge_sum_of_sizes.hlo"
expect "run: under ulimit -v" 1 "the address-space limit \(ulimit -v\)" -- \
  bash -c "ulimit -v 2000000 && exec '$loom' run '$limits/three_gib.hlo' --devices 1"

# Loops: a while loop that never ends is bounded by --timeout, on both
# backends; a simulation that would replay 2^62 transfers is refused.
expect "run: an endless while loop (threads)" 1 "device 0: the while loop ran longer than the timeout of 1000 ms" -- \
  "$loom" run "$limits/endless_while.hlo" --devices 1 --timeout 1
if command -v mpirun >/dev/null; then
  expect "run: an endless while loop (mpi)" 1 "the while loop ran longer than the timeout of 1000 ms" -- \
    "${mpirun[@]}" -np 2 "$loom" run "$limits/endless_while.hlo" --devices 2 --backend mpi --timeout 1
fi
# A device that fails after its run (its outputs cannot be written) ends the
# MPI job at once, naming itself, instead of leaving the others waiting
# for its report. An immutable folder makes only device 1 fail (needs
# chattr and a file system that has the flag: skipped otherwise).
if command -v mpirun >/dev/null && mkdir -p "$tmp/outdir/device1.partial" &&
  touch "$tmp/outdir/device1.partial/output0.npy" && chattr +i "$tmp/outdir/device1.partial" 2>/dev/null; then
  start=$SECONDS
  expect "run: a device that cannot write its outputs (mpi)" 1 "device 1: .*Operation not permitted" -- \
    "${mpirun[@]}" -np 4 "$loom" run "$root/examples/ring/ag_dot.hlo" --devices 4 --backend mpi \
    --out "$tmp/outdir" --timeout 30
  chattr -i "$tmp/outdir/device1.partial"
  if ((SECONDS - start < 20)); then
    ok "run: ... and the job ends before the timeout"
  else
    fail "run: a device that cannot write its outputs (mpi)" "took $((SECONDS - start)) s"
  fi
else
  echo "skip run: a device that cannot write its outputs (no mpirun or no chattr +i here)"
fi
expect "simulate: nested 2^31-trip loops of transfers" 1 "would move at least [0-9]{19} messages .*--max-messages" -- \
  "$loom" simulate "$limits/nested_transfer_loops.hlo" --target tpu-v4
# A whole step on 16128 GPUs is refused before its plans fill memory: the
# tape is first compiled with its plans only counted (under 2 GB of address space,
# in well under the 60 s).
if "$loom" model --model llama3-405b --tensor 8 --pipeline 18 --data 112 --micro-batches 16 \
  --batch 1792 -o "$tmp/l405.hlo"; then
  expect "simulate: Llama 3 405B on 16128 H100s, refused up front" 1 "would move at least [0-9]+ messages .*--max-messages" -- \
    bash -c 'ulimit -v 2000000 && exec "$0" "$@"' "$loom" simulate "$tmp/l405.hlo" --target dgx-h100:auto \
    --max-messages 50000000
else
  fail "model: Llama 3 405B on 16128 H100s" "loom model failed"
fi
# Loom's largest grid, 2^20 devices, of a module that moves nothing: the
# simulator's state per device is a few hundred bytes (a std::deque per
# transfer stream made it 4.8 GB), and joint-schedule, with no transfer to
# hold back, simulates nothing.
cat >"$tmp/million.hlo" <<'HLO'
HloModule million, num_partitions=1048576

ENTRY e {
  p = f32[4] parameter(0)
  ROOT a = f32[4] add(p, p)
}
HLO
for target in tpu-v4:auto dgx-h100:auto; do
  expect "simulate: 2^20 devices on $target, under 2 GB" 0 "" -- \
    bash -c 'ulimit -v 2000000 && exec "$0" "$@"' "$loom" simulate "$tmp/million.hlo" --target "$target"
done
expect "opt: joint-schedule of 2^20 devices and no transfer, under 1 GB" 0 "" -- \
  bash -c 'ulimit -v 1000000 && exec "$0" "$@"' "$loom" opt "$tmp/million.hlo" --target tpu-v4:auto \
  --passes=async-collectives,schedule,joint-schedule --explain -o /dev/null
grep -q "joint-schedule: no two transfers of one computation cross a common link" "$tmp/out" &&
  ok "opt: ... and says why it simulated nothing" ||
  fail "opt: joint-schedule of 2^20 devices" "no explanation"
# The permute moves nothing, so only the steps walked bound this one.
expect "simulate: nested 2^31-trip loops of empty transfers" 1 "would replay at least 9223372036854775807 steps over its 4 devices .*--max-steps" -- \
  "$loom" simulate "$limits/empty_transfer_loops.hlo" --target tpu-v4
expect "stats: nested 2^31-trip loops" 0 "" -- "$loom" stats "$limits/nested_transfer_loops.hlo"
if grep -q "bytes sent: *at least 8.00 EiB" "$tmp/out" && grep -q "largest value, 9223372036854775807" "$tmp/out"; then
  ok "stats: a saturated sum says so"
else
  fail "stats: a saturated sum says so" "no 'at least' or no note"
fi
# 48 levels of computations that call the next one twice: 2^48 inlined steps.
{
  echo "HloModule doubling"
  echo
  echo "c0 {"
  echo "  p = f32[2] parameter(0)"
  echo "  ROOT r = f32[2] add(p, p)"
  echo "}"
  for i in $(seq 1 48); do
    echo
    echo "c$i {"
    echo "  p = f32[2] parameter(0)"
    echo "  a = f32[2] call(p), to_apply=c$((i - 1))"
    echo "  ROOT b = f32[2] call(a), to_apply=c$((i - 1))"
    echo "}"
  done
  echo
  echo "ENTRY e {"
  echo "  p = f32[2] parameter(0)"
  echo "  ROOT r = f32[2] call(p), to_apply=c48"
  echo "}"
} >"$tmp/doubling.hlo"
for sub in verify stats "simulate --target tpu-v4" "run --devices 1"; do
  # shellcheck disable=SC2086  # $sub is a subcommand and its options
  expect "$sub: calls that double at every level" 1 \
    "doubling.hlo:[0-9]+:1: error: %c22 runs more than 16777216 instructions with its calls inlined" -- \
    "$loom" $sub "$tmp/doubling.hlo"
done

# Reading: a device that never ends.
expect "verify /dev/zero" 1 "larger than 1024 MiB" -- "$loom" verify /dev/zero

# Attributes XLA does not define: warned about, with their place.
expect "verify: unknown attributes are warned about" 0 \
  "unknown_attribute.hlo:5:[0-9]+: warning: attribute 'shardng' is not one XLA's HLO defines" -- \
  "$loom" verify "$limits/unknown_attribute.hlo"
grep -q "1:[0-9]*: warning: module attribute 'num_partition'" "$tmp/err" &&
  ok "verify: unknown header attribute" ||
  fail "verify: unknown header attribute" "no warning"
expect "verify: the example has no warnings" 0 "" -- "$loom" verify "$example"
[[ ! -s $tmp/err ]] && ok "verify: silent on a clean module" ||
  fail "verify: silent on a clean module" "stderr not empty"

# .npy inputs of another dtype are refused, not converted (an f32 NaN must
# not become an s32 0). Loom writes the f32 file itself.
cat >"$tmp/f32.hlo" <<'HLO'
HloModule f32

ENTRY e {
  ROOT c = f32[4] constant({nan, 1, 2, 3})
}
HLO
cat >"$tmp/s32.hlo" <<'HLO'
HloModule s32

ENTRY e {
  p = s32[4] parameter(0)
  ROOT r = s32[4] add(p, p)
}
HLO
"$loom" run "$tmp/f32.hlo" --devices 1 --out "$tmp/f32out" >/dev/null 2>&1
mkdir -p "$tmp/in" && cp "$tmp/f32out/device0/output0.npy" "$tmp/in/param0.npy"
expect "run: an f32 .npy for an s32 parameter" 1 "dtype '<f4' does not match the parameter's s32" -- \
  "$loom" run "$tmp/s32.hlo" --devices 1 --inputs "$tmp/in"
printf 'x' >>"$tmp/f32out/device0/output0.npy"
sed -i 's/s32/f32/g' "$tmp/s32.hlo"
cp "$tmp/f32out/device0/output0.npy" "$tmp/in/param0.npy"
expect "run: a .npy with bytes past its data" 1 "bytes after the 16 B of data" -- \
  "$loom" run "$tmp/s32.hlo" --devices 1 --inputs "$tmp/in"

# Options: an error names the option, on one line, exit 2.
expect "compare --tolerance nan" 2 "tolerance.*'nan' is neither 'rounding' nor a finite number" -- \
  "$loom" compare "$example" "$example" --devices 4 --tolerance nan
expect "simulate --compute-scale garbage" 2 "compute-scale" -- \
  "$loom" simulate "$example" --target tpu-v4 --compute-scale 3=x
expect "simulate --max-messages -1" 2 "max-messages" -- \
  "$loom" simulate "$example" --target tpu-v4 --max-messages -1
expect "simulate --max-steps -1" 2 "max-steps" -- \
  "$loom" simulate "$example" --target tpu-v4 --max-steps -1

finish
