#!/usr/bin/env bash
# The MoE layer of moe_layer.sh at several expert-parallel sizes, simulated
# on a TPU v4 torus and on DGX H100 nodes: the step as written, with
# async-collectives+schedule (the honest baseline), and with the gated
# collective-matmul before them (the all-to-all exchanges), and the exposed
# communication of each; then the same with the gate judging its trials by
# the simulator instead of the cost model's estimate (judge=simulate).
# Usage: bench/moe/run.sh LOOM_BINARY [N ...]   (default N: 64 256)
set -euo pipefail
loom=$1
shift
sizes=("$@")
((${#sizes[@]})) || sizes=(64 256)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '%-6s %-16s %12s %12s %12s %8s %14s %14s %12s %8s %14s\n' N target "as written" "async+sched" \
  "+exchange" speedup "exposed before" "exposed after" "+exch (sim)" speedup "exposed after"
for n in "${sizes[@]}"; do
  "$here/moe_layer.sh" "$n" >"$work/moe.hlo"
  for target in tpu-v4 dgx-h100:auto; do
    "$loom" simulate "$work/moe.hlo" --target "$target" --baseline --json "$work/r.json" >/dev/null
    # The gate judging each trial by the simulator (judge=simulate), which
    # sees the all-to-all rounds contend on the torus.
    "$loom" opt "$work/moe.hlo" --target "$target" \
      --passes='collective-matmul{judge=simulate},async-collectives,schedule' -o "$work/sim.hlo"
    "$loom" simulate "$work/sim.hlo" --target "$target" --json "$work/s.json" >/dev/null
    jq -rs --arg n "$n" --arg t "$target" '
      def exposed: [.per_device[].exposed_communication_seconds] | add / length * 1e3;
      .[0] as $r | .[1] as $s |
      [$n, $t, ($r.as_written.step_seconds * 1e3), ($r.async_schedule.step_seconds * 1e3),
       ($r.full_pipeline.step_seconds * 1e3), $r.speedup_over_async_schedule,
       ($r.async_schedule | exposed), ($r.full_pipeline | exposed), ($s.step_seconds * 1e3),
       ($r.async_schedule.step_seconds / $s.step_seconds), ($s | exposed)] | @tsv' \
      "$work/r.json" "$work/s.json" |
      while IFS=$'\t' read -r a b c d e f g h i j k; do
        printf '%-6s %-16s %9.3f ms %9.3f ms %9.3f ms %7.3fx %11.3f ms %11.3f ms %9.3f ms %7.3fx %11.3f ms\n' \
          "$a" "$b" "$c" "$d" "$e" "$f" "$g" "$h" "$i" "$j" "$k"
      done
  done
done
