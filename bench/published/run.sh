#!/usr/bin/env bash
# Loom's simulated steps against published measurements of real training
# runs, each under the run's own plan on a target of its hardware: the step
# as written (the run's communication exposed, as Megatron's tensor-parallel
# collectives of 2022 were) and after async+schedule (what overlaps, as the
# runs' data-parallel reductions do). Nothing here is tuned to these
# numbers: the targets are the datasheets' (`loom targets`), every product
# in whole waves of whole tiles (the target's tiling) at the rate large
# products are measured to sustain (its matrix_efficiency: 85.9% of the
# A100's peak, 80.1% of the H100's). The last column is a sensitivity, not
# a model: the step as written with every product at the datasheet's dense
# peak, on the same target otherwise (what Loom priced before it took the
# measured rate). And the full pipeline (collective-matmul, then
# async+schedule, the gate judging every rewrite on the target): not what
# the runs did (neither decomposed its tensor-parallel collectives), but
# what overlapping them would give on the same plan.
# Usage: bench/published/run.sh LOOM_BINARY
set -uo pipefail
loom=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# name preset target published-kind published-value flags...  (kind: s, a
# step in seconds; mfu, model FLOPs utilisation in percent)
runs=(
  # Korthikanti et al. 2022, tables 3 and 5: Selene (DGX A100 80 GB), seq
  # 2048, micro-batches of one sequence, the global batch as table 3 gives
  # it; "present work" is sequence parallelism with selective
  # recomputation, the baseline tensor parallelism with full recomputation.
  # Their stages hold as many layers each, so the last stage, which adds
  # the head, paces Megatron's pipeline: --head last-stage runs the head on
  # every stage in lockstep, as long as that stage.
  "22B-present megatron-22b dgx-a100:auto s 1.10 --tensor 8 --batch 4 --sequence-parallel --recompute selective"
  "175B-present gpt3-175b dgx-a100:auto s 13.75 --tensor 8 --pipeline 8 --batch 64 --micro-batches 64 --sequence-parallel --recompute selective --schedule 1f1b --head last-stage"
  "530B-present megatron-530b dgx-a100:auto s 37.83 --tensor 8 --pipeline 35 --batch 280 --micro-batches 280 --sequence-parallel --recompute selective --schedule 1f1b --head last-stage"
  "1T-present megatron-1t dgx-a100:auto s 71.49 --tensor 8 --pipeline 64 --batch 512 --micro-batches 512 --sequence-parallel --recompute selective --schedule 1f1b --head last-stage"
  "22B-full megatron-22b dgx-a100:auto s 1.42 --tensor 8 --batch 4 --recompute full"
  "175B-full gpt3-175b dgx-a100:auto s 18.13 --tensor 8 --pipeline 8 --batch 64 --micro-batches 64 --recompute full --schedule 1f1b --head last-stage"
  "530B-full megatron-530b dgx-a100:auto s 49.05 --tensor 8 --pipeline 35 --batch 280 --micro-batches 280 --recompute full --schedule 1f1b --head last-stage"
  "1T-full megatron-1t dgx-a100:auto s 94.42 --tensor 8 --pipeline 64 --batch 512 --micro-batches 512 --recompute full --schedule 1f1b --head last-stage"
  # Dubey et al. 2024 (Llama 3), table 4: H100, seq 8192, BF16 MFU; TP8
  # PP16, the 126 layers in uneven stages, interleaved 1F1B (its virtual
  # stages, 4, assumed), micro-batches of one sequence, the optimizer state
  # sharded over the data axis; no activation checkpointing (section
  # 3.3.2: its memory optimisations let it pre-train on 8K-token sequences
  # without). Its first and last stages hold a layer fewer, for the
  # embedding and the head, so the head does not pace its pipeline: the
  # head spread over the stages (the default) comes nearest.
  "405B-8192 llama3-405b dgx-h100:auto mfu 43 --tensor 8 --pipeline 16 --data 64 --micro-batches 32 --virtual-stages 4 --sequence-parallel --schedule 1f1b --zero 1 --recompute none"
  "405B-16384 llama3-405b dgx-h100:auto mfu 41 --tensor 8 --pipeline 16 --data 128 --micro-batches 16 --virtual-stages 4 --sequence-parallel --schedule 1f1b --zero 1 --recompute none"
)
step_of() { awk '/^step time/ {print $3 * ($4 == "ms" ? 1e-3 : $4 == "us" ? 1e-6 : 1); exit}' "$1"; }
echo "| run | plan | devices | peak per device | published | Loom as written | Loom async+schedule | Loom / published (as written, async+schedule) | as written, products at the datasheet peak | full pipeline (its speed-up over async+schedule) |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for line in "${runs[@]}"; do
  read -r name preset target kind published flags <<<"$line"
  read -r -a plan <<<"$flags"
  if ! "$loom" model --model "$preset" "${plan[@]}" -o "$work/step.hlo" 2>"$work/err" ||
    ! "$loom" model --model "$preset" "${plan[@]}" --memory --target "$target" >"$work/memory" 2>>"$work/err"; then
    echo "| $name | ${plan[*]} | failed: $(head -c 200 "$work/err") ||||||"
    continue
  fi
  peak=$(awk '/peak live bytes/ {p = $(NF-1) " " $NF} /DOES NOT FIT/ {f = ", does not fit"} END {print p f}' "$work/memory")
  flops=$(awk -F': ' '/^model FLOPs/ {print $2}' "$work/memory")
  "$loom" simulate "$work/step.hlo" --target "$target" >"$work/sim" 2>&1
  "$loom" opt "$work/step.hlo" --passes=async-collectives,schedule --target "$target" -o "$work/opt.hlo" 2>/dev/null &&
    "$loom" simulate "$work/opt.hlo" --target "$target" >"$work/sim_opt" 2>&1
  "$loom" opt "$work/step.hlo" --passes=collective-matmul,async-collectives,schedule --target "$target" \
    -o "$work/full.hlo" 2>/dev/null &&
    "$loom" simulate "$work/full.hlo" --target "$target" >"$work/sim_full" 2>&1
  devices=$(awk '/^module/ {print $5; exit}' "$work/sim")
  # The same target, sized to the module (8 GPUs a DGX node), with its
  # products at the datasheet's peak.
  family=${target%%:*}
  nodes=$((devices / 8))
  "$loom" targets "$family:$nodes" --json | jq '.compute.matrix_efficiency = 1' >"$work/peak.json"
  "$loom" simulate "$work/step.hlo" --target "$work/peak.json" >"$work/sim_peak" 2>&1
  peak_flops=$("$loom" targets 2>/dev/null | awk -v t="${target%%:*}" '$1 == t {getline; getline; for (i = 1; i <= NF; i++) if ($i == "bf16") {print $(i+1) * 1e12; exit}}')
  awk -v name="$name" -v plan="${plan[*]}" -v devices="$devices" -v peak="$peak" -v kind="$kind" \
    -v published="$published" -v written="$(step_of "$work/sim")" -v scheduled="$(step_of "$work/sim_opt")" \
    -v flops="$flops" -v peak_flops="$peak_flops" -v at_peak="$(step_of "$work/sim_peak")" \
    -v full="$(step_of "$work/sim_full")" 'BEGIN {
      if (kind == "s") {
        printf "| %s | %s | %s | %s | %.2f s | %.3f s | %.3f s | %.3f, %.3f | %.3f s (%.3f) | %.3f s (%.3fx) |\n", name, plan,
          devices, peak, published, written, scheduled, written / published, scheduled / published, at_peak,
          at_peak / published, full, scheduled / full
      } else {
        mw = 100 * flops / (devices * peak_flops * written)
        ms = 100 * flops / (devices * peak_flops * scheduled)
        # The step the published MFU implies, by the same count of FLOPs.
        implied = flops / (devices * peak_flops * published / 100)
        mf = 100 * flops / (devices * peak_flops * full)
        printf "| %s | %s | %s | %s | MFU %g%% (%.3f s) | %.3f s, MFU %.1f%% | %.3f s, MFU %.1f%% | %.3f, %.3f | %.3f s (%.3f) | %.3f s, MFU %.1f%% (%.3fx) |\n",
          name, plan, devices, peak, published, implied, written, mw, scheduled, ms, written / implied,
          scheduled / implied, at_peak, at_peak / implied, full, mf, scheduled / full
      }
    }'
done
