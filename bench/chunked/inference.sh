#!/usr/bin/env bash
# Simulated serving steps of the Megatron 8.3B GPT-2 (loom model --model
# megatron-8.3b): prefill of a 1024-token prompt and decode of one token
# against 1024 cached ones, batch 8, under 8-way tensor parallelism on one
# DGX H100 node, 16-way over two, and 8-way with 2 pipeline stages over two
# (4 micro-batches of 2 sequences). For each: the step as written
# (synchronous all-reduces after the row-parallel products), with
# async-collectives+schedule, with the gated pipeline (rings or chunks where
# they pay), and with the all-reduces forced into k chunks (k = 2, 4); then
# per layer (the step over the 72 layers): the dots' time and the exposed
# all-reduce time of async+schedule (per layer of a stage: the step over
# its 72 / stages layers).
# Usage: bench/chunked/inference.sh LOOM_BINARY
set -euo pipefail
loom=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
layers=72
printf '%-8s %-5s %-13s %11s %11s %11s %11s %11s %12s %12s\n' step tp target "as written" \
  "async+sched" gated "chunks=2" "chunks=4" "dot/layer" "exposed/layer"
for step in prefill decode; do
  for config in "8 1 dgx-h100" "16 1 dgx-h100:2" "8 2 dgx-h100:2"; do
    read -r tp pp target <<<"$config"
    "$loom" model --model megatron-8.3b --tensor "$tp" --pipeline "$pp" --micro-batches $((pp == 1 ? 1 : 4)) \
      --step "$step" --context 1024 --batch 8 --seq 1024 -o "$work/m.hlo"
    "$loom" simulate --baseline "$work/m.hlo" --target "$target" --json "$work/b.json" >/dev/null
    for k in 2 4; do
      "$loom" opt "$work/m.hlo" --passes="collective-matmul{min-bytes=0,chunks=$k}" -o "$work/c.hlo"
      "$loom" opt "$work/c.hlo" --target "$target" --passes=async-collectives,schedule -o "$work/c$k.hlo"
      "$loom" simulate "$work/c$k.hlo" --target "$target" --json "$work/c$k.json" >/dev/null
    done
    jq -rs --arg s "$step" --arg tp "$tp$( ((pp > 1)) && echo "x$pp")" --arg t "$target" \
      --argjson l "$((layers / pp))" '
      .[0] as $b |
      [$s, $tp, $t, ($b.as_written.step_seconds * 1e3), ($b.async_schedule.step_seconds * 1e3),
       ($b.full_pipeline.step_seconds * 1e3), (.[1].step_seconds * 1e3), (.[2].step_seconds * 1e3),
       ($b.async_schedule.op_kinds.dot.seconds_per_device / $l * 1e6),
       ($b.async_schedule.op_kinds["all-reduce"].exposed_seconds / $b.async_schedule.devices / $l * 1e6)]
      | @tsv' \
      "$work/b.json" "$work/c2.json" "$work/c4.json" |
      while IFS=$'\t' read -r s p t a b c d e f g; do
        printf '%-8s %-5s %-13s %8.3f ms %8.3f ms %8.3f ms %8.3f ms %8.3f ms %9.1f us %9.1f us\n' \
          "$s" "$p" "$t" "$a" "$b" "$c" "$d" "$e" "$f" "$g"
      done
  done
done
