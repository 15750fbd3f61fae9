#!/usr/bin/env bash
# Joint scheduling across mesh axes (src/pass/joint_schedule.h), simulated:
# a module with a tensor-parallel ring and a data-parallel all-reduce, on
# targets where the two share links and one where they do not. For each:
# the contention-free estimate, the step with per-axis scheduling
# (collective-matmul, async-collectives, schedule) and with joint-schedule
# after it, the ratio, each device's mean exposed communication, and what
# joint-schedule did. With TRACE_DIR, both timelines of every target are
# written there as Chrome traces (open in Perfetto: the "link ..." counter
# tracks show each link's occupancy).
# Usage: bench/joint/run.sh LOOM_BINARY [MODULE] [TRACE_DIR]
#        (default module: examples/two_axes_tp4_dp2.hlo)
set -euo pipefail
loom=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
module=${2:-$here/../../examples/two_axes_tp4_dp2.hlo}
traces=${3:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[[ -n $traces ]] && mkdir -p "$traces"

printf '%-14s %13s %13s %13s %8s %15s %15s\n' target "no contention" "per-axis" joint speedup \
  "exposed before" "exposed after"
for target in ${TARGETS:-dgx-h100 tpu-v4:8x1x1 tpu-v4:4x2x1}; do
  name=${target//:/-}
  "$loom" opt "$module" --target "$target" --passes=collective-matmul,async-collectives,schedule \
    -o "$work/per_axis.hlo"
  "$loom" opt "$work/per_axis.hlo" --target "$target" --passes=joint-schedule --explain \
    -o "$work/joint.hlo" >"$work/explain"
  for variant in per_axis joint; do
    trace=()
    [[ -n $traces ]] && trace=(--trace "$traces/$name.$variant.json")
    "$loom" simulate "$work/$variant.hlo" --target "$target" "${trace[@]}" --json "$work/$variant.json" >/dev/null
  done
  jq -rs --arg t "$target" '
    def exposed: [.per_device[].exposed_communication_seconds] | add / length * 1e3;
    [$t, (.[0].cost_model_step_seconds * 1e3), (.[0].step_seconds * 1e3), (.[1].step_seconds * 1e3),
     (.[0].step_seconds / .[1].step_seconds), (.[0] | exposed), (.[1] | exposed)] | @tsv' \
    "$work/per_axis.json" "$work/joint.json" |
    while IFS=$'\t' read -r t free a b ratio ea eb; do
      printf '%-14s %10.3f ms %10.3f ms %10.3f ms %7.3fx %12.3f ms %12.3f ms\n' "$t" "$free" "$a" "$b" \
        "$ratio" "$ea" "$eb"
    done
  sed 's/^joint-schedule: /    /' "$work/explain"
done
