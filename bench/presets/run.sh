#!/usr/bin/env bash
# Every model preset at full size under a published (or, where none is
# published, a stated) plan: the step built, verified and round-tripped
# through `loom fmt`, its memory per device, and its step as written
# simulated on a target of that many chips, each with a 60 s limit. A step
# the simulator cannot take within its --max-messages budget (the default)
# says so.
# Usage: bench/presets/run.sh LOOM_BINARY
set -uo pipefail
loom=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# preset target tensor data pipeline micro-batches extra-flags  (source of the plan)
plans=(
  "megatron-8.3b dgx-h100:auto 8 64 1 1 -"              # Shoeybi 2019: 512 GPUs, TP8
  "megatron-22b dgx-h100:auto 8 1 1 1 --sequence-parallel"  # Korthikanti 2022: TP8 (the preset's batch)
  # Narayanan 2021 table 1 (TP, PP, GPUs, batch), micro-batches of one
  # sequence as its runs take them, in its 1F1B order; its stages hold as
  # many layers each, so the last, which adds the head, paces the pipeline
  # (--head=last-stage: the head on every stage in lockstep).
  "gpt3-175b dgx-h100:auto 8 16 8 96 --schedule=1f1b --head=last-stage"        # TP8 PP8, 1024 GPUs
  "megatron-530b dgx-h100:auto 8 8 35 280 --schedule=1f1b --head=last-stage"   # TP8 PP35, 2240 GPUs
  "megatron-1t dgx-h100:auto 8 6 64 512 --schedule=1f1b --head=last-stage"     # TP8 PP64, 3072 GPUs
  "llama3-8b dgx-h100:auto 8 16 1 8 --sequence-parallel" # plan assumed: TP8 DP16, 8 micro-batches of 4
  "llama3-70b dgx-h100:auto 8 16 4 32 --sequence-parallel --schedule=1f1b" # plan assumed: TP8 PP4 DP16
  # Dubey 2024 table 4: TP8 PP16 DP128 on 16,384 GPUs, 16 sequences a
  # replica, 126 layers in uneven stages (the first and last a layer
  # short), an interleaved 1F1B schedule, the optimizer state sharded over
  # the data axis (section 3.3.2); its virtual stages (4) assumed.
  "llama3-405b dgx-h100:auto 8 128 16 16 --sequence-parallel --virtual-stages=4 --schedule=1f1b --zero=1"
  "paxml-1t tpu-v4:auto 8 256 1 1 --sequence-parallel --zero=3" # paxml mesh [1,256,8], 2048 chips
  "paxml-500b tpu-v4:auto 16 64 1 1 --sequence-parallel --zero=3" # paxml mesh [1,64,16], 1024 chips
    "bert-480b tpu-v4:auto 8 256 1 1 --sequence-parallel --zero=3" # MLPerf v1.1 mesh [256,8], 2048 chips
  "speech-10b tpu-v4:auto 4 32 1 1 --sequence-parallel --zero=3" # plan assumed: 128 chips, the paper's smallest slice
  "t5-500b tpu-v4:auto 8 256 1 1 --sequence-parallel --zero=3" # plan assumed: GSPMD 2D in traffic, 2048 chips
  # Du 2022: 1,024 TPU v4 chips, Adafactor, GSPMD; the mesh assumed: the 64
  # experts over a data axis of 64 (one per chip), d_ff over a model axis
  # of 16, each device routing its own rows (sequence parallelism), the
  # other weights sharded over both axes as GSPMD's 2D sharding shards them
  # (ZeRO-3 in traffic).
  "glam-1.2t tpu-v4:auto 16 64 1 1 --sequence-parallel --optimizer=adafactor --zero=3"
)
echo "| preset | plan | devices | build | instructions | verify + fmt | memory per device (peak) | simulated step (as written) | HFU | simulation |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for line in "${plans[@]}"; do
  read -r preset target t d p mb extra <<<"$line"
  flags=(--tensor "$t" --data "$d" --pipeline "$p" --micro-batches "$mb")
  [[ $extra != "-" ]] && read -r -a more <<<"$extra" && flags+=("${more[@]}")
  devices=$((t * d * p))
  start=$(date +%s%N)
  if ! "$loom" model --model "$preset" "${flags[@]}" -o "$work/step.hlo" 2>"$work/err"; then
    echo "| $preset | ${flags[*]} | $devices | failed: $(head -c 200 "$work/err") |||||||"
    continue
  fi
  build_ms=$((($(date +%s%N) - start) / 1000000))
  instructions=$(grep -c ' = ' "$work/step.hlo")
  checked="no"
  "$loom" verify "$work/step.hlo" >/dev/null 2>&1 && "$loom" fmt "$work/step.hlo" -o "$work/fmt.hlo" &&
    cmp -s "$work/step.hlo" "$work/fmt.hlo" && checked="yes"
  # What a device holds by the plan's arithmetic, and the program's peak
  # live bytes (which the fit is judged by).
  memory=$("$loom" model --model "$preset" "${flags[@]}" --memory --target "$target" 2>&1 |
    awk '/together/ {held = $2 " " $3} /peak live bytes/ {peak = $(NF-1) " " $NF}
         /DOES NOT FIT/ {fit = ", does not fit"} END {print held " (peak " peak fit ")"}')
  sim_start=$(date +%s%N)
  timeout 60 "$loom" simulate "$work/step.hlo" --target "$target" >"$work/sim" 2>&1
  status=$?
  sim_s=$(awk -v ns=$(($(date +%s%N) - sim_start)) 'BEGIN {printf "%.1f s", ns / 1e9}')
  if [[ $status -eq 0 ]]; then
    step=$(awk '/^step time/ {print $3, $4; exit}' "$work/sim")
    hfu=$(awk '/^MFU/ {print $2; exit}' "$work/sim")
    echo "| $preset | ${flags[*]} | $devices | ${build_ms} ms | $instructions | $checked | $memory | $step | $hfu | $sim_s |"
  elif [[ $status -eq 124 ]]; then
    echo "| $preset | ${flags[*]} | $devices | ${build_ms} ms | $instructions | $checked | $memory | over 60 s | | |"
  else
    why=$(grep -o 'would [a-z]* at least [0-9]* [a-z]*' "$work/sim" | head -1)
    echo "| $preset | ${flags[*]} | $devices | ${build_ms} ms | $instructions | $checked | $memory | refused: ${why:-$(head -c 120 "$work/sim")} | | $sim_s |"
  fi
done
