#!/usr/bin/env bash
# Every corpus module that Loom can execute runs on both backends (threads,
# and MPI processes under mpirun) with bitwise-identical outputs. The ones
# that cannot run are listed with the reason: an op Loom does not execute,
# more memory or compute than a CI machine has, or no end within the time
# bound. A crash, any difference between the backends, or a failure for a
# reason not on the allow-list below fails the test: a regression that
# refuses more ops must not pass as "cannot run".
# Usage: corpus_backends.sh LOOM_BINARY CORPUS_DIR
set -uo pipefail
loom=$1
corpus=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
max_gflop=${LOOM_CORPUS_MAX_GFLOP:-200}  # dot and convolution GFLOP over all devices
seconds=${LOOM_CORPUS_SECONDS:-30}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ran=0
failed=0
skipped=()

# Why a corpus module may fail to run, as extended regular expressions over
# its error: ops the executor does not run, and what a CI machine lacks.
known_reasons=(
  'unsupported custom-call (Boh|Sharding)'
  'may hold up to .* more than the .* this run may use'
)
is_known_reason() {
  local reason
  for reason in "${known_reasons[@]}"; do
    if grep -qE -- "$reason" <<<"$1"; then return 0; fi
  done
  return 1
}

# Device, shape and checksum of every output, from `loom run --json`.
checksums() { jq -r '.per_device[] | .device as $d | .outputs[] | "\($d) \(.shape) \(.checksum)"' "$1"; }

command -v jq >/dev/null || { echo "FAIL: jq is missing (scripts/install-deps.sh installs it)"; exit 1; }
shopt -s nullglob
for module in "$corpus"/*.hlo; do
  name=$(basename "$module")
  devices=$("$loom" verify "$module" --json - 2>/dev/null | jq -e '.devices')
  if [[ -z $devices ]]; then
    echo "FAIL: $name does not verify"
    failed=$((failed + 1))
    continue
  fi
  flops=$("$loom" stats "$module" --json - 2>/dev/null | jq -e '.dot_flops + .convolution_flops')
  gflop=$(awk -v f="$flops" 'BEGIN { printf "%.3f", f / 1e9 }')
  if awk -v g="$gflop" -v n="$devices" -v max="$max_gflop" 'BEGIN { exit !(g * n > max) }'; then
    skipped+=("$name: too much compute for a CI run: $gflop GFLOP of dots and convolutions per device x $devices devices")
    continue
  fi
  timeout "$seconds" "$loom" run "$module" --devices "$devices" --seed 1 --json - >"$work/threads" 2>"$work/err"
  code=$?
  if [[ $code -eq 124 ]]; then
    skipped+=("$name: no end within ${seconds}s on $devices devices")
    continue
  elif [[ $code -eq 1 ]]; then
    reason=$(head -1 "$work/err" | sed 's/^[^ ]* error: //')
    if is_known_reason "$reason"; then
      skipped+=("$name: $reason")
    else
      echo "FAIL: $name cannot run for a reason not on the allow-list: $reason"
      failed=$((failed + 1))
    fi
    continue
  elif [[ $code -ne 0 ]]; then
    echo "FAIL: $name crashed on threads (exit $code)"
    cat "$work/err"
    failed=$((failed + 1))
    continue
  fi
  timeout $((seconds * 2)) mpirun --oversubscribe --mca btl self,vader -np "$devices" \
    "$loom" run "$module" --devices "$devices" --seed 1 --backend mpi --json - >"$work/mpi" 2>"$work/err"
  code=$?
  if [[ $code -ne 0 ]]; then
    echo "FAIL: $name failed under MPI (exit $code)"
    cat "$work/err"
    failed=$((failed + 1))
  elif ! checksums "$work/threads" >"$work/sums_threads" || [[ ! -s $work/sums_threads ]] ||
    ! checksums "$work/mpi" >"$work/sums_mpi"; then
    echo "FAIL: $name: loom run --json gave no checksums"
    failed=$((failed + 1))
  elif ! diff "$work/sums_threads" "$work/sums_mpi" >"$work/diff"; then
    echo "FAIL: $name: threads and MPI outputs differ"
    cat "$work/diff"
    failed=$((failed + 1))
  else
    ran=$((ran + 1))
    echo "ok: $name on $devices devices, bitwise equal on both backends"
  fi
done

echo "cannot run (${#skipped[@]}):"
for line in "${skipped[@]}"; do echo "  $line"; done
if [[ $ran -eq 0 ]]; then
  echo "FAIL: no corpus module ran (corpus at $corpus?)"
  failed=$((failed + 1))
fi
echo "$ran passed, $failed failed"
[[ $failed -eq 0 ]]
