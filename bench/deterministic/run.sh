#!/usr/bin/env bash
# What deterministic mode (`loom opt --deterministic`: only rewrites that keep
# every sum in the original's order) costs, simulated and in real execution.
#
# Simulated: the mlp block of examples/mlp_block_tp8_large.hlo with the full
# gated pipeline, with and without --deterministic, on a TPU v4 slice and a
# DGX H100 node (the gate's one choice the mode changes is the bidirectional
# reduce-scatter ring on the torus).
#
# Real: examples/mlp_block_tp4.hlo with both rings forced bidirectional
# (deterministic mode makes the reduce-scatter's unidirectional), then
# async-collectives and schedule, run on the threads backend: the plain
# pipeline against the deterministic one, each with the same dot kernels
# (OpenBLAS; then the deterministic kernels), alternated ROUNDS times, the
# median device time of each; and the deterministic pipeline's result is
# checked bitwise against the original with the deterministic kernels.
# Usage: bench/deterministic/run.sh LOOM_BINARY [ROUNDS]   (default 5; 5 take about 35 s)
set -euo pipefail
loom=$1
rounds=${2:-5}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
examples=$here/../../examples
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "simulated step, gated pipeline (examples/mlp_block_tp8_large.hlo):"
printf '  %-16s %14s %14s %8s\n' target "any order" deterministic cost
for target in tpu-v4-2x2x2 dgx-h100; do
  for mode in plain deterministic; do
    flag=
    [[ $mode == deterministic ]] && flag=--deterministic
    "$loom" simulate "$examples/mlp_block_tp8_large.hlo" --target "$target" --baseline $flag \
      --json "$work/$mode.json" >/dev/null
  done
  plain=$(jq '.full_pipeline.step_seconds * 1e3' "$work/plain.json")
  exact=$(jq '.full_pipeline.step_seconds * 1e3' "$work/deterministic.json")
  printf '  %-16s %11.3f ms %11.3f ms %+7.1f%%\n' "$target" "$plain" "$exact" \
    "$(awk -v a="$plain" -v b="$exact" 'BEGIN { print 100 * (b / a - 1) }')"
done

module=$examples/mlp_block_tp4.hlo
# The rings forced (no target: the gate declines them for this small block),
# then scheduled for a target.
ring='collective-matmul{min-bytes=0,direction=bidirectional}'
"$loom" opt "$module" --passes="$ring" -o "$work/plain.ring.hlo"
"$loom" opt "$module" --passes="$ring" --deterministic -o "$work/exact.ring.hlo"
for mode in plain exact; do
  "$loom" opt "$work/$mode.ring.hlo" --target tpu-v4-2x2x1 --passes=async-collectives,schedule \
    -o "$work/$mode.hlo"
done
for mode in plain exact; do
  "$loom" compare "$module" "$work/$mode.hlo" --devices 4 --deterministic --tolerance rounding \
    --json "$work/v.json" >/dev/null
  echo "$mode pipeline against the original, deterministic kernels: $(jq -r .verdict "$work/v.json")"
done

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
time_of() {  # the slowest device's median over the run's repeats, in ms
  "$loom" run "$1" --devices 4 --repeat 3 $2 --json - | jq '[.per_device[].seconds] | max * 1e3'
}
echo "real execution, threads backend, 4 devices ($rounds alternated rounds, median):"
printf '  %-24s %12s %14s %8s\n' kernels "any order" deterministic ratio
for kernels in OpenBLAS deterministic; do
  flag=
  [[ $kernels == deterministic ]] && flag=--deterministic
  : >"$work/a"
  : >"$work/b"
  for ((i = 0; i < rounds; ++i)); do
    time_of "$work/plain.hlo" "$flag" >>"$work/a"
    time_of "$work/exact.hlo" "$flag" >>"$work/b"
  done
  a=$(median <"$work/a")
  b=$(median <"$work/b")
  printf '  %-24s %9.2f ms %11.2f ms %7.3fx\n' "$kernels" "$a" "$b" \
    "$(awk -v a="$a" -v b="$b" 'BEGIN { print b / a }')"
done
