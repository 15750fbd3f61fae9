#!/usr/bin/env bash
# What serves the dots an all-gather feeds beyond the first
# (collective-matmul's dot-users and other-users): the simulated step after
# the full pipeline declining such gathers, with the first dot's ring caching
# its windows for the others, and with a ring for each dot, under the gate
# judged by the estimate and by the simulator, on the training steps of
# three families at 2 layers (TP8 with sequence parallelism, DP 1 and 4,
# DGX H100 and TPU v4). Each speed-up is over async+schedule, simulated.
# Under sequence parallelism every backward layer's gathered inputs feed
# the recomputed forward's product and the weight gradient's.
# Usage: bench/dot_users/run.sh LOOM_BINARY
set -uo pipefail
loom=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
step() { "$loom" simulate "$1" --target "$2" | awk '/^step time/ {print $3}'; }
echo "| model | plan | target | async+schedule | estimate: decline | estimate: cache | estimate: ring-each | simulator: decline | simulator: cache | simulator: ring-each |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for model in megatron-22b gpt3-175b llama3-70b; do
  for data in 1 4; do
    for target in dgx-h100:auto tpu-v4:auto; do
      "$loom" model --model "$model" --tensor 8 --data "$data" --sequence-parallel --layers 2 \
        -o "$work/step.hlo" || continue
      "$loom" opt "$work/step.hlo" --target "$target" --passes async-collectives,schedule \
        -o "$work/async.hlo" || continue
      async=$(step "$work/async.hlo" "$target")
      row="| $model | TP8 DP$data SP | $target | $async s"
      for judge in estimate simulate; do
        for users in dot-users=decline,other-users=decline dot-users=decline,other-users=cache \
          dot-users=ring-each,other-users=decline; do
          "$loom" opt "$work/step.hlo" --target "$target" \
            --passes "collective-matmul{judge=$judge,$users},async-collectives,schedule" \
            -o "$work/full.hlo" || continue
          full=$(step "$work/full.hlo" "$target")
          row+=" | $full s ($(awk -v a="$async" -v f="$full" 'BEGIN {printf "%.3fx", a / f}'))"
        done
      done
      echo "$row |"
    done
  done
done
