#!/usr/bin/env bash
# Usage: subcommands.sh LOOM_BINARY REPO_ROOT
#
# End-to-end checks of the `loom` CLI: --help of every subcommand, `fmt` is a
# fixed point, `verify` and `stats` accept the bundled example, outputs that
# are not regular files are written in place, a missing file and an unknown
# subcommand are errors.
set -uo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 LOOM_BINARY REPO_ROOT" >&2
  exit 2
fi
loom=$1
root=$2
example=$root/examples/mlp_block_tp4.hlo

# shellcheck source=harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/harness.sh"

for sub in "" fmt verify stats opt targets simulate; do
  label="loom ${sub:+$sub }--help"
  # shellcheck disable=SC2086
  if run "$loom" $sub --help; then
    if [[ -s $tmp/out || -s $tmp/err ]]; then ok "$label"; else fail "$label" "printed nothing"; fi
  else
    fail "$label" "exit status $?"
  fi
done

# fmt: the canonical print is a fixed point.
if run "$loom" fmt "$example"; then
  cp "$tmp/out" "$tmp/fmt1.hlo"
  if run "$loom" fmt "$tmp/fmt1.hlo"; then
    if cmp -s "$tmp/fmt1.hlo" "$tmp/out"; then
      ok "loom fmt is a fixed point"
    else
      diff -u "$tmp/fmt1.hlo" "$tmp/out" | head -20 >"$tmp/err"
      : >"$tmp/out"
      fail "loom fmt is a fixed point" "fmt(fmt(example)) differs from fmt(example)"
    fi
  else
    fail "loom fmt is a fixed point" "fmt of the formatted example exited with status $?"
  fi
else
  fail "loom fmt example" "exit status $?"
fi

# fmt -o writes the same text to a file.
if run "$loom" fmt "$example" -o "$tmp/fmt_o.hlo" && cmp -s "$tmp/fmt_o.hlo" "$tmp/fmt1.hlo"; then
  ok "loom fmt -o"
else
  fail "loom fmt -o" "no file written, or it differs from fmt's stdout"
fi

if run "$loom" verify "$example"; then
  ok "loom verify example"
else
  fail "loom verify example" "exit status $?"
fi

if run "$loom" stats "$example"; then
  missing=()
  for word in all-gather reduce-scatter dot; do
    grep -qi -- "$word" "$tmp/out" || missing+=("$word")
  done
  grep -qi 'flop' "$tmp/out" || missing+=("FLOPs")
  if [[ ${#missing[@]} -eq 0 ]]; then
    ok "loom stats example"
  else
    fail "loom stats example" "output does not mention: ${missing[*]}"
  fi
  # The dynamic section. The example has no loops, so it repeats the static
  # numbers: 3/4 of the 4 MiB gathered and of the 4 MiB reduce-scattered, two
  # 2x2048x1024x1024 dots. Peak live bytes (bf16[2048,1024] = 4 MiB): the
  # 5 MiB of parameters, %h, the four GELU broadcasts, %h.sq and %h.cube are
  # live at %h.cube, 5 + 7 x 4 = 33 MiB (tests/analysis/module_stats_test.cc
  # goes through it).
  missing=()
  for pattern in 'per device, dynamic' \
    'bytes sent: +6\.00 MiB \(all-gather 3\.00 MiB, reduce-scatter 3\.00 MiB\)' \
    'dot FLOPs: +8\.590 GFLOP' 'peak live bytes: +33\.00 MiB'; do
    grep -qE -- "$pattern" "$tmp/out" || missing+=("'$pattern'")
  done
  if grep -q 'unknown trip count' "$tmp/out"; then missing+=("no unknown trip count"); fi
  if [[ ${#missing[@]} -eq 0 ]]; then
    ok "loom stats example: dynamic numbers"
  else
    fail "loom stats example: dynamic numbers" "output does not match: ${missing[*]}"
  fi
else
  fail "loom stats example" "exit status $?"
fi
# The kernels over one run: the demo block's two dots and its GELU, one
# kernel of 13 ops, which together are the estimate's compute (41.227 us).
# Fused, the GELU's intermediates take no buffers: the peak is the 5 MiB of
# parameters, %h and %gelu (or %x.full and %h), 5 + 2 x 4 = 13 MiB.
if run "$loom" stats "$example" --target tpu-v4-2x2x1 --kernels 3 &&
  grep -q '3 kernel runs, 41.227 us in all' "$tmp/out" &&
  grep -qE 'peak live bytes: +13\.00 MiB fused as on tpu-v4-2x2x1' "$tmp/out" &&
  grep -q '%gelu in %mlp_block: bf16\[2048,1024\] multiply, 12 op(s) fused into it' "$tmp/out" &&
  [[ $(grep -c ' dot$' "$tmp/out") -eq 2 ]]; then
  ok "loom stats --kernels (and the peak fused as on the target)"
else
  fail "loom stats --kernels" "not the demo block's three kernels"
fi
# Where that peak is and what makes it up: %h and %gelu, the largest.
if run "$loom" stats "$example" --target tpu-v4-2x2x1 --peak-buffers 2 &&
  grep -q 'peak live bytes fused as on tpu-v4-2x2x1: 13.00 MiB, at %gelu in %mlp_block' "$tmp/out" &&
  grep -qE '^ +4\.00 MiB  %h in %mlp_block: bf16\[2048,1024\] dot$' "$tmp/out" &&
  grep -qE '^ +4\.00 MiB  %gelu in %mlp_block: bf16\[2048,1024\] multiply$' "$tmp/out" &&
  grep -qE '^ +5\.00 MiB  the other 7$' "$tmp/out"; then
  ok "loom stats --peak-buffers"
else
  fail "loom stats --peak-buffers" "not the demo block's peak and its largest buffers"
fi
run "$loom" stats "$example" --kernels 3
if [[ $? -eq 1 ]] && grep -q -- "--kernels needs --target" "$tmp/err"; then
  ok "loom stats --kernels without --target: error"
else
  fail "loom stats --kernels without --target" "not refused with its reason"
fi

# opt: the demo block's pairs are rewritten (without a target, by the size
# threshold), the output verifies, and every decision is explained.
if run "$loom" opt "$example" --passes=collective-matmul --explain -o "$tmp/ring.hlo" \
  --json "$tmp/opt.json" && [[ $(grep -c . "$tmp/out") -eq 2 ]] &&
  jq -e '[.passes[0].decisions[] | select(.rewritten)] | length == 2' "$tmp/opt.json" >/dev/null &&
  run "$loom" verify "$tmp/ring.hlo" &&
  ! grep -q 'all-gather\|reduce-scatter' "$tmp/ring.hlo"; then
  ok "loom opt --passes=collective-matmul --explain"
else
  fail "loom opt --passes=collective-matmul --explain" "not two rewrites, or the output is wrong"
fi

# opt with a target: the gate gives the scheduled step with and without the
# rewrites; the whole pipeline to a schedule verifies and says it is scheduled.
if run "$loom" opt "$root/examples/mlp_block_tp8_large.hlo" --target tpu-v4-4x4x4 --estimate \
  --explain --passes=collective-matmul,async-collectives,schedule -o "$tmp/sched.hlo" \
  --json "$tmp/opt.json" && grep -q 'estimated step on' "$tmp/out" &&
  jq -e '.estimate.after_seconds < .estimate.before_seconds and
    ([.passes[0].decisions[] | select(.rewritten)] | length > 0)' "$tmp/opt.json" >/dev/null &&
  grep -q 'is_scheduled=true' "$tmp/sched.hlo" && run "$loom" verify "$tmp/sched.hlo"; then
  ok "loom opt --target --estimate, scheduled"
else
  fail "loom opt --target --estimate, scheduled" "no estimates, or not a scheduled valid module"
fi

# opt --dump-dir: the module as read and after each pass, numbered in order;
# each verifies and the last is what -o wrote. --print-after-all prints the
# same modules, each under its header line.
pipeline=collective-matmul,async-collectives,schedule
if run "$loom" opt "$example" --target tpu-v4 --passes=$pipeline --dump-dir "$tmp/dump" \
  -o "$tmp/dumped.hlo" && [[ $(ls "$tmp/dump" | tr '\n' ' ') == \
  "00-input.hlo 01-collective-matmul.hlo 02-async-collectives.hlo 03-schedule.hlo " ]] &&
  cmp -s "$tmp/dump/03-schedule.hlo" "$tmp/dumped.hlo" && run "$loom" verify "$tmp/dump/01-collective-matmul.hlo" &&
  run "$loom" opt "$example" --target tpu-v4 --passes=$pipeline --print-after-all -o /dev/null &&
  [[ $(grep -c '^// after pass [123]: ' "$tmp/err") -eq 3 ]] &&
  grep -q '^// after pass 2: async-collectives$' "$tmp/err"; then
  ok "loom opt --dump-dir, --print-after-all"
else
  fail "loom opt --dump-dir, --print-after-all" "wrong files or headers"
fi

# Bad pass specifications and targets: exit 1 with one line naming the problem.
for args in "--passes=no-such-pass" "--passes=collective-matmul{form=spiral}" \
  "--passes=schedule" "--passes=collective-matmul --target tpu-v9" \
  "--passes=collective-matmul --target $tmp/missing.json"; do
  # shellcheck disable=SC2086
  run "$loom" opt "$example" $args
  status=$?
  if [[ $status -eq 1 && $(wc -l <"$tmp/err") -eq 1 && ! -s $tmp/out ]]; then
    ok "loom opt $args: error"
  else
    fail "loom opt $args: error" "exit status $status, $(wc -l <"$tmp/err") line(s) on stderr"
  fi
done

# targets: the catalog lists every kind, and a target's JSON reads back.
if run "$loom" targets && grep -q 'tpu-v4-8x16x16' "$tmp/out" && grep -q 'dgx-h100-x4' "$tmp/out" &&
  grep -q 'loopback-2gbit' "$tmp/out" && run "$loom" targets dgx-h100 --json &&
  cp "$tmp/out" "$tmp/t.json" && run "$loom" targets "$tmp/t.json" --json &&
  cmp -s "$tmp/out" "$tmp/t.json"; then
  ok "loom targets, and JSON round trip"
else
  fail "loom targets, and JSON round trip" "missing targets or the JSON does not read back"
fi

# simulate: the table, a JSON report and a trace Perfetto opens; the same
# times as the cost model where nothing contends (to the rounding of sums
# taken in another order); --compare and knobs.
if run "$loom" simulate "$example" --target tpu-v4-4x4x4 --json "$tmp/sim.json" \
  --trace "$tmp/sim.trace.json" && grep -q '^step time' "$tmp/out" &&
  jq -e '(.step_seconds * 1e9 | round) == 117132 and
    (.step_seconds - .cost_model_step_seconds | fabs) <= 1e-12 * .step_seconds' \
    "$tmp/sim.json" >/dev/null &&
  jq -e '[.traceEvents[] | select(.ph == "X")] | length > 0' "$tmp/sim.trace.json" >/dev/null; then
  ok "loom simulate: table, JSON, trace"
else
  fail "loom simulate: table, JSON, trace" "missing output"
fi
# --trace-devices: a trace of the first two devices (every device replayed),
# where the default shows all 4 of the example's; 0 is refused.
if run "$loom" simulate "$example" --target tpu-v4-4x4x4 --every-device \
  --trace "$tmp/all.trace.json" &&
  jq -e '[.traceEvents[] | select(.ph == "X") | .pid] | unique == [0, 1, 2, 3]' \
    "$tmp/all.trace.json" >/dev/null &&
  run "$loom" simulate "$example" --target tpu-v4-4x4x4 --every-device \
    --trace "$tmp/two.trace.json" --trace-devices 2 &&
  jq -e '[.traceEvents[] | select(.ph == "X") | .pid] | unique == [0, 1]' \
    "$tmp/two.trace.json" >/dev/null &&
  ! run "$loom" simulate "$example" --target tpu-v4-4x4x4 --trace "$tmp/none.json" \
    --trace-devices 0; then
  ok "loom simulate --trace-devices"
else
  fail "loom simulate --trace-devices" "$(cat "$tmp/out" "$tmp/err")"
fi
if run "$loom" simulate --compare "$example" "$tmp/ring.hlo" --target dgx-h100 \
  --json "$tmp/compare.json" && grep -q '^speedup of B over A: ' "$tmp/out" &&
  jq -e '.speedup == .a.step_seconds / .b.step_seconds' "$tmp/compare.json" >/dev/null; then
  ok "loom simulate --compare"
else
  fail "loom simulate --compare" "no speedup line"
fi
step_seconds() { jq -e '.step_seconds' "$1"; }
run "$loom" simulate "$example" --target tpu-v4-4x4x4 --json "$tmp/base.json"
base=$(step_seconds "$tmp/base.json")
run "$loom" simulate "$example" --target tpu-v4-4x4x4 --compute-scale 2=1.5 --json "$tmp/slow.json"
slow=$(step_seconds "$tmp/slow.json")
if [[ -n $base && -n $slow ]] && awk -v a="$base" -v b="$slow" 'BEGIN { exit !(b > a) }'; then
  ok "loom simulate --compute-scale: a straggler slows the step ($base -> $slow s)"
else
  fail "loom simulate --compute-scale" "step $base -> $slow s"
fi
# Errors: an unknown target, a module larger than the target (exit 1), a
# malformed link scale (an option error, exit 2).
for args in "$example --target tpu-v9" "$example --target dgx-h100 --link-scale 0-9=0.5x" \
  "$root/examples/mlp_block_tp8_large.hlo --target tpu-v4-2x2x1"; do
  # shellcheck disable=SC2086
  run "$loom" simulate $args
  status=$?
  want=1
  [[ $args == *--link-scale* ]] && want=2
  if [[ $status -eq $want && $(wc -l <"$tmp/err") -eq 1 ]]; then
    ok "loom simulate $args: error"
  else
    fail "loom simulate $args: error" "exit status $status, $(wc -l <"$tmp/err") line(s) on stderr"
  fi
done

# A missing file: exit 1 and a message naming it.
nofile=$tmp/does_not_exist.hlo
for sub in fmt verify stats; do
  run "$loom" "$sub" "$nofile"
  status=$?
  if [[ $status -ne 1 ]]; then
    fail "loom $sub MISSING" "exit status $status, expected 1"
  elif ! grep -qF "$nofile" "$tmp/err"; then
    fail "loom $sub MISSING" "stderr does not name the file"
  else
    ok "loom $sub MISSING"
  fi
done

# Outputs that are not regular files are written in place, never replaced:
# /dev/null stays a device, a pipe stays a pipe (and gets the module), a
# symbolic link stays a link to the file it names.
run "$loom" opt "$example" --passes=async-collectives -o /dev/null
if [[ $? -eq 0 && -c /dev/null ]]; then ok "loom opt -o /dev/null"; else
  fail "loom opt -o /dev/null" "exit status or /dev/null is no longer a device"
fi
run "$loom" simulate "$example" --target tpu-v4 --json /dev/null --trace /dev/null
if [[ $? -eq 0 && -c /dev/null ]]; then ok "loom simulate --json/--trace /dev/null"; else
  fail "loom simulate --json/--trace /dev/null" "exit status or /dev/null is no longer a device"
fi
mkfifo "$tmp/pipe"
(cat "$tmp/pipe" >"$tmp/from_pipe") &
reader=$!
run "$loom" fmt "$example" -o "$tmp/pipe"
status=$?
wait "$reader"
if [[ $status -eq 0 && -p $tmp/pipe ]] && grep -q "^HloModule mlp_block_tp4" "$tmp/from_pipe"; then
  ok "loom fmt -o PIPE"
else
  fail "loom fmt -o PIPE" "exit status $status, or the pipe was replaced or got nothing"
fi
echo old >"$tmp/target.hlo"
ln -s "$tmp/target.hlo" "$tmp/link.hlo"
run "$loom" fmt "$example" -o "$tmp/link.hlo"
if [[ $? -eq 0 && -L $tmp/link.hlo ]] && grep -q "^HloModule" "$tmp/target.hlo"; then
  ok "loom fmt -o SYMLINK"
else
  fail "loom fmt -o SYMLINK" "the link was replaced or its target not written"
fi
if compgen -G "$tmp/*.tmp.*" >/dev/null; then
  fail "loom -o temporaries" "left behind: $(ls "$tmp" | grep '\.tmp\.')"
else
  ok "loom -o leaves no temporary"
fi

# Bad option values: exit 2 and one line naming the option, before anything
# runs (CLI11's own codes and two-line messages are not the contract).
while IFS='|' read -r option args; do
  # shellcheck disable=SC2086
  run "$loom" run "$example" --devices 4 $args
  status=$?
  if [[ $status -eq 2 && $(wc -l <"$tmp/err") -eq 1 ]] && grep -q "^loom: $option" "$tmp/err"; then
    ok "loom run $args"
  else
    fail "loom run $args" "exit status $status, $(wc -l <"$tmp/err") line(s), wanted 2 and one naming $option"
  fi
done <<'EOF_CASES'
--timeout|--timeout nan
--timeout|--timeout inf
--timeout|--timeout 1e400
--timeout|--timeout -1
--timeout|--timeout 0
--seed|--seed -1
--seed|--seed 18446744073709551616
--devices|--devices 0
--devices|--devices 99999999999999999999
EOF_CASES
run "$loom" simulate "$example" --target tpu-v4 --compute-scale 9=1.5
if [[ $? -eq 1 ]] && grep -q "device 9, but module mlp_block_tp4 runs on 4 devices" "$tmp/err"; then
  ok "loom simulate --compute-scale past the module's devices"
else
  fail "loom simulate --compute-scale 9=1.5" "not refused"
fi

# A chain of 4,000 nested calls: every subcommand refuses it at the one
# depth bound, with a location, instead of running out of stack.
{
  echo "HloModule chain"
  for ((i = 3999; i >= 1; i--)); do
    echo "%c$i (p: f32[2]) -> f32[2] {"
    echo "  %p = f32[2] parameter(0)"
    if ((i < 3999)); then echo "  ROOT %r = f32[2] call(%p), to_apply=%c$((i + 1))"; else
      echo "  ROOT %r = f32[2] negate(%p)"; fi
    echo "}"
  done
  echo "ENTRY %main {"
  echo "  %x = f32[2] parameter(0)"
  echo "  ROOT %r = f32[2] call(%x), to_apply=%c1"
  echo "}"
} >"$tmp/chain.hlo"
for args in "verify" "stats" "simulate --target tpu-v4" "run --devices 1" "opt --passes=async-collectives"; do
  # shellcheck disable=SC2086
  run "$loom" $args "$tmp/chain.hlo"
  status=$?
  if [[ $status -eq 1 ]] && grep -qE "chain.hlo:[0-9]+:[0-9]+: error: calls nest more than 256" "$tmp/err"; then
    ok "loom $args on 4,000 nested calls"
  else
    fail "loom $args on 4,000 nested calls" "exit status $status"
  fi
done

# An unknown subcommand: a non-zero exit (and no crash).
run "$loom" frobnicate "$example"
status=$?
if [[ $status -ne 0 && $status -lt 124 ]]; then
  ok "loom UNKNOWN-SUBCOMMAND"
else
  fail "loom UNKNOWN-SUBCOMMAND" "exit status $status"
fi


# model: every preset builds at full size under a plan that divides it, in
# well under a second; the step verifies and `loom fmt` is a fixed point of
# it (text -> IR -> text). A small step runs; a plan that does not divide
# the model is refused with the reason.
for spec in "tiny 2 2" "tiny-gqa 2 2" "tiny-bert 2 2" "bert-480b 8 256" "gpt3-175b 8 16" \
  "megatron-22b 8 8" "megatron-530b 8 32" "megatron-1t 8 64" "paxml-1t 8 256" "paxml-500b 16 64" \
  "llama3-8b 8 4" "llama3-70b 8 16" "llama3-405b 8 256" "speech-10b 8 16"; do
  read -r preset tensor data <<<"$spec"
  if run_cpu_timed "$loom" model --model "$preset" --tensor "$tensor" --data "$data" \
    -o "$tmp/step.hlo" && [[ $cpu_ms -lt 5000 ]] &&
    run "$loom" verify "$tmp/step.hlo" --json "$tmp/verify.json" &&
    jq -e --argjson n $((tensor * data)) '.devices == $n' "$tmp/verify.json" >/dev/null &&
    "$loom" fmt "$tmp/step.hlo" -o "$tmp/step2.hlo" && cmp -s "$tmp/step.hlo" "$tmp/step2.hlo"; then
    ok "loom model $preset (tensor $tensor, data $data): ${cpu_ms} ms of processor time, verifies, fmt fixed point"
  else
    fail "loom model $preset (tensor $tensor, data $data)" "does not build, verify or round-trip"
  fi
done
if run "$loom" model --model tiny --tensor 2 --data 2 -o "$tmp/tiny.hlo" &&
  run "$loom" run "$tmp/tiny.hlo" --devices 4 --json "$tmp/tiny.json" &&
  jq -e '.per_device | length == 4' "$tmp/tiny.json" >/dev/null; then
  ok "loom model tiny runs on 4 devices"
else
  fail "loom model tiny runs on 4 devices" "run failed"
fi
# The bf16 step with sequence parallelism (bf16 gathers and scatters around
# the products): collective-matmul in deterministic mode rewrites its pairs,
# and the rewritten step computes bitwise what the original does.
if run "$loom" model --model tiny --tensor 2 --sequence-parallel -o "$tmp/bf16.hlo" &&
  grep -q "bf16\[[0-9,]*\] reduce-scatter(" "$tmp/bf16.hlo" &&
  run "$loom" opt "$tmp/bf16.hlo" --deterministic --passes='collective-matmul{min-bytes=0}' \
    --explain -o "$tmp/bf16_rings.hlo" && grep -q "rewritten" "$tmp/out" &&
  run "$loom" compare "$tmp/bf16.hlo" "$tmp/bf16_rings.hlo" --devices 2 --deterministic &&
  grep -q "bitwise equal on every device" "$tmp/out"; then
  ok "loom model bf16 SP step: collective-matmul rewrites its pairs, bitwise the original"
else
  fail "loom model bf16 SP step" "no rewrite, or not bitwise the original"
fi
# --baseline's full pipeline as a variant: async-collectives alone in its
# place (nothing scheduled between a start and its done) is the step as
# written exactly, slower than async+schedule (the default full pipeline is
# 1.000x over async+schedule here); a pipeline that does not parse says which.
if run "$loom" model --model tiny --tensor 2 --sequence-parallel -o "$tmp/sp.hlo" &&
  run "$loom" simulate "$tmp/sp.hlo" --target dgx-h100:auto --baseline \
    --full-pipeline async-collectives &&
  grep -qE "full pipeline over async\+schedule: 0\.[0-9]+x; over as written: 1\.000x" "$tmp/out" &&
  ! run "$loom" simulate "$tmp/sp.hlo" --target dgx-h100:auto --baseline --full-pipeline nope &&
  grep -q "the full pipeline: unknown pass 'nope'" "$tmp/err"; then
  ok "loom simulate --baseline --full-pipeline: a variant in the full pipeline's place"
else
  fail "loom simulate --baseline --full-pipeline" "no variant, or no error naming it"
fi
if run "$loom" model --model tiny --tensor 2 --memory --target dgx-h100 &&
  grep -q "fits dgx-h100" "$tmp/out" &&
  grep -Eq "^  peak live bytes, fused as on dgx-h100 +[0-9.]+ MiB$" "$tmp/out" &&
  grep -Eq "^model FLOPs of the step \(PaLM's count\): [0-9.]+e\+[0-9]+$" "$tmp/out" &&
  run "$loom" model --model llama3-405b --tensor 8 --data 2 --memory --target dgx-h100:auto &&
  grep -q "DOES NOT FIT dgx-h100-x2" "$tmp/out" &&
  grep -q "^  its peak is at %while.1 in %main, running %" "$tmp/out" &&
  grep -q "^    the 5 largest of the [0-9]* buffers live there:" "$tmp/out"; then
  ok "loom model --memory: the tiny step fits an H100 (its peak fused as there, its model FLOPs), the 405B step on 16 does not, and says what is live at its peak"
else
  fail "loom model --memory" "$(cat "$tmp/out" "$tmp/err")"
fi
# Ring attention with interleaved stages runs on 8 devices; Llama 3's
# all-gather context parallelism gives collective-matmul the gather of k
# before the scores' product, which it makes a ring, bitwise the original.
if run "$loom" model --model tiny --context-parallel 2 --pipeline 2 --virtual-stages 2 \
  --micro-batches 2 --layers 4 --tensor 2 -o "$tmp/cp.hlo" &&
  run "$loom" run "$tmp/cp.hlo" --devices 8 --json "$tmp/cp.json" &&
  jq -e '.per_device | length == 8' "$tmp/cp.json" >/dev/null &&
  run "$loom" model --model tiny --context-parallel 2 --context-form all-gather -o "$tmp/ag.hlo" &&
  run "$loom" opt "$tmp/ag.hlo" --deterministic --passes='collective-matmul{min-bytes=0}' \
    --explain -o "$tmp/ag_rings.hlo" &&
  grep -q "rewritten %all-gather / %dot.1 in forward_layer" "$tmp/out" &&
  run "$loom" compare "$tmp/ag.hlo" "$tmp/ag_rings.hlo" --devices 2 --deterministic &&
  grep -q "bitwise equal on every device" "$tmp/out"; then
  ok "loom model: ring attention with interleaved stages runs; all-gather CP's k gather becomes a ring"
else
  fail "loom model --context-parallel" "$(cat "$tmp/out" "$tmp/err")"
fi
run "$loom" model --model tiny --pipeline 2 --virtual-stages 2 --layers 4
if [[ $? -eq 1 ]] && grep -q "needs micro_batches (1) >= pipeline (2)" "$tmp/err"; then
  ok "loom model: interleaved stages without enough micro-batches are refused"
else
  fail "loom model --virtual-stages 2" "not refused with its reason"
fi
run "$loom" model --model tiny --tensor 3
if [[ $? -eq 1 ]] && grep -q "heads (4) does not divide by the tensor axis (3)" "$tmp/err"; then
  ok "loom model: a plan that does not divide the model is refused"
else
  fail "loom model --tensor 3" "not refused with its reason"
fi

# Fusion: the demo block's scheduled step on a TPU v4 slice, fused as XLA
# compiles it and, on the same target with fuses_elementwise false, op by op
# (the README's 185.0 against 276.9 us).
if run "$loom" targets tpu-v4-2x2x1 --json &&
  sed 's/"fuses_elementwise": true/"fuses_elementwise": false/' "$tmp/out" >"$tmp/unfused.json" &&
  run "$loom" opt "$example" --target tpu-v4-2x2x1 --estimate --passes=async-collectives,schedule -o /dev/null &&
  grep -q "after  185.037 us" "$tmp/err" "$tmp/out" &&
  run "$loom" opt "$example" --target "$tmp/unfused.json" --estimate --passes=async-collectives,schedule -o /dev/null &&
  grep -q "after  276.923 us" "$tmp/err" "$tmp/out"; then
  ok "loom opt --estimate: the demo block fused (185.037 us) and op by op (276.923 us)"
else
  fail "fusion on the demo block" "not the README's steps"
fi

# The gate unrolls no ring longer than max-unrolled-steps (16), also when it
# tries every candidate forced into one form: on 512 GPUs the head's
# gradient all-reduce once came out as a 512-step unrolled ring that the
# estimate liked and the simulator did not (0.955x).
if run "$loom" model --model paxml-500b --tensor 8 --data 64 --sequence-parallel --layers 2 \
  -o "$tmp/p500.hlo" &&
  run "$loom" opt "$tmp/p500.hlo" --target dgx-h100:auto --passes=collective-matmul --explain \
    -o /dev/null && grep -q "rewritten" "$tmp/out" && ! grep -q "N=512): [a-z]* unrolled" "$tmp/out"; then
  ok "loom opt: the gate keeps a ring of 512 steps a loop"
else
  fail "loom opt: paxml-500b on 512 GPUs" "a 512-step ring unrolled, or nothing rewritten"
fi

# study: the table on stdout, the reports in the directory; a spec that is
# not one is refused naming the file.
cat >"$tmp/study.json" <<'JSON'
{"models": ["tiny"], "plans": [{"tensor": 2}, {"tensor": 2, "data": 2, "zero_stage": 1}],
 "targets": ["dgx-h100:auto"]}
JSON
if run "$loom" study "$tmp/study.json" -o "$tmp/study" && grep -q "| tiny | tp2_dp2_zero1 | dgx-h100 | 4 |" "$tmp/out" &&
  [[ ! -s $tmp/err ]] && jq -e '.cases | length == 2' "$tmp/study/study.json" >/dev/null &&
  [[ $(wc -l <"$tmp/study/study.csv") -eq 3 ]] && grep -q '</svg>' "$tmp/study/speedup.svg" &&
  grep -q '</svg>' "$tmp/study/exposed.svg" && grep -q '</svg>' "$tmp/study/mfu.svg"; then
  ok "loom study: table, CSV, JSON and three plots; no progress bar off a terminal"
else
  fail "loom study" "missing output"
fi
echo '{"models": ["tiny"], "plans": [{}]}' >"$tmp/bad_study.json"
run "$loom" study "$tmp/bad_study.json"
if [[ $? -eq 1 ]] && grep -q "bad_study.json: 'targets' must be a non-empty array" "$tmp/err"; then
  ok "loom study: a bad spec is refused naming the file"
else
  fail "loom study bad spec" "not refused with its reason"
fi

finish
