#!/usr/bin/env bash
# collective-matmul on the corpus, by execution: every module the pass
# rewrites (any size threshold: min-bytes=0) and that Loom can run in CI is
# compared with the original by `loom compare`, for the unidirectional loop
# ring and the bidirectional unrolled one: with the reference dot kernels
# (--deterministic) when the dots are small, with OpenBLAS otherwise. The
# others are listed with the reason they are not run.
# Usage: corpus_collective_matmul.sh LOOM_BINARY CORPUS_DIR
set -uo pipefail
loom=$1
corpus=$2
max_gflop=${LOOM_CORPUS_MAX_GFLOP:-300}  # dot GFLOP over all devices
reference_gflop=20                       # above this, OpenBLAS instead of the reference kernels
seconds=${LOOM_CORPUS_SECONDS:-30}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
compared=0
failed=0
notes=()

command -v jq >/dev/null || { echo "FAIL: jq is missing (scripts/install-deps.sh installs it)"; exit 1; }
shopt -s nullglob
for module in "$corpus"/*.hlo; do
  name=$(basename "$module")
  for passes in 'collective-matmul{min-bytes=0}' \
    'collective-matmul{min-bytes=0,direction=bidirectional,form=unrolled}'; do
    if ! "$loom" opt "$module" --passes="$passes" -o "$work/out.hlo" --json "$work/opt.json" 2>"$work/err"; then
      echo "FAIL: $name: loom opt --passes=$passes failed"
      cat "$work/err"
      failed=$((failed + 1))
      continue
    fi
    rewritten=$(jq '[.passes[].decisions[] | select(.rewritten)] | length' "$work/opt.json")
    [[ $rewritten -eq 0 ]] && continue
    devices=$("$loom" verify "$module" --json - 2>/dev/null | jq -e '.devices')
    flops=$("$loom" stats "$module" --json - 2>/dev/null | jq -e '.dot_flops + .convolution_flops')
    gflop=$(awk -v f="$flops" 'BEGIN { printf "%.3f", f / 1e9 }')
    if awk -v g="$gflop" -v n="$devices" -v max="$max_gflop" 'BEGIN { exit !(g * n > max) }'; then
      notes+=("$name ($passes): $rewritten rewritten, not run: $gflop GFLOP of dots and convolutions per device x $devices devices")
      continue
    fi
    kernels=--deterministic
    if awk -v g="$gflop" -v n="$devices" -v max="$reference_gflop" 'BEGIN { exit !(g * n > max) }'; then
      kernels=
    fi
    timeout "$seconds" "$loom" compare "$module" "$work/out.hlo" --devices "$devices" $kernels \
      --tolerance 0.01 --json "$work/compare.json" >"$work/compare" 2>"$work/err"
    code=$?
    if [[ $code -eq 124 ]]; then
      notes+=("$name ($passes): $rewritten rewritten, not run: no end within ${seconds}s")
    elif [[ $code -eq 0 ]]; then
      compared=$((compared + 1))
      echo "ok: $name ($passes, ${kernels:-OpenBLAS}): $rewritten rewritten; $(jq -r '"\([.outputs[] | select(.bitwise)] | length) of \(.outputs | length) output(s) bitwise equal; verdict \(.verdict)"' "$work/compare.json")"
    elif grep -q 'unsupported\|memory' "$work/err"; then
      notes+=("$name ($passes): $rewritten rewritten, not run: $(head -1 "$work/err" | sed 's/^[^ ]* error: //')")
    else
      echo "FAIL: $name ($passes): the rewrite changes the result"
      cat "$work/compare" "$work/err"
      failed=$((failed + 1))
    fi
  done
done

echo "rewritten but not run (${#notes[@]}):"
for line in "${notes[@]}"; do echo "  $line"; done
if [[ $compared -eq 0 ]]; then
  echo "FAIL: no rewritten corpus module ran (corpus at $corpus?)"
  failed=$((failed + 1))
fi
echo "$compared compared, $failed failed"
[[ $failed -eq 0 ]]
