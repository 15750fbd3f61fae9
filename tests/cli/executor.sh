#!/usr/bin/env bash
# The executor end to end, on both backends:
#  - `loom compare` of all-gather + dot against its hand-written ring is
#    bitwise equal with the deterministic kernels and equal within rounding
#    (or bitwise) with OpenBLAS, whichever kernel OpenBLAS picks for this CPU
#    (threads and MPI); a wrong ring is caught (exit 1) even when rounding
#    differences are accepted;
#  - collective-matmul's all-to-all exchanges, and its rings in deterministic
#    mode, are bitwise the original's result on both backends (deterministic
#    kernels);
#  - `loom run` writes outputs and a trace; both backends give the same checksums;
#  - a failing device stops every device, the command exits non-zero within
#    the timeout naming the device and the error, and leaves no outputs;
#  - a device that never arrives fails the run after --timeout, and so does
#    a device that is alone in a collective the others skipped.
# Usage: executor.sh LOOM_BINARY REPO_ROOT
set -uo pipefail
loom=$1
root=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun=(mpirun --oversubscribe --mca btl self,vader)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0
failed=0

pass() { passed=$((passed + 1)); }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }

# expect_exit CODE DESCRIPTION -- COMMAND...: runs with a 60 s bound.
expect_exit() {
  local want=$1 what=$2
  shift 3
  timeout 60 "$@" >"$work/out" 2>"$work/err"
  local got=$?
  if [[ $got -eq $want ]]; then pass; else fail "$what: exit $got, wanted $want"; cat "$work/err"; fi
}

ring=$root/examples/ring
command -v jq >/dev/null || { echo "FAIL: jq is missing (scripts/install-deps.sh installs it)"; exit 1; }
# Device, output checksum and sum of every output of `loom run --json`.
checksums='.per_device[] | .device as $d | .outputs[] | "\($d) \(.checksum) \(.sum)"'
for backend in threads mpi; do
  launcher=()
  [[ $backend == mpi ]] && launcher=("${mpirun[@]}" -np 4)
  expect_exit 0 "compare ring ($backend, deterministic)" -- "${launcher[@]}" "$loom" compare \
    "$ring/ag_dot.hlo" "$ring/ag_dot_ring.hlo" --devices 4 --backend "$backend" --deterministic \
    --json "$work/verdict.json"
  jq -e '.verdict == "bitwise" and .deterministic' "$work/verdict.json" >/dev/null && pass ||
    fail "compare ($backend, deterministic) not bitwise"
  expect_exit 0 "compare ring ($backend, OpenBLAS)" -- "${launcher[@]}" "$loom" compare \
    "$ring/ag_dot.hlo" "$ring/ag_dot_ring.hlo" --devices 4 --backend "$backend" \
    --tolerance rounding --json "$work/verdict.json"
  jq -e '.verdict == "bitwise" or .verdict == "rounding"' "$work/verdict.json" >/dev/null &&
    pass || fail "compare ($backend, OpenBLAS) neither bitwise nor rounding"
done

# Rewrites against the original, bitwise on both backends with the
# deterministic kernels: the all-to-all pairwise exchanges (before and after
# a dot), and deterministic mode's rings although bidirectional ones are
# asked for (reduce-scatter, all-reduce, the mlp block's gather and scatter).
lit=$root/tests/lit/collective-matmul
exchange='collective-matmul{min-bytes=0}'
both_ways='collective-matmul{min-bytes=0,direction=bidirectional}'
for case in "$lit/all_to_all_before_dot.hlo 8 $exchange" "$lit/all_to_all_after_dot.hlo 4 $exchange" \
  "$lit/all_to_all_through_transpose_and_reshape.hlo 4 $exchange" \
  "$lit/deterministic.hlo 4 $both_ways --deterministic" "$lit/reduce_scatter.hlo 4 $both_ways --deterministic" \
  "$lit/all_reduce_splits.hlo 4 $both_ways --deterministic" \
  "$root/examples/mlp_block_tp4.hlo 4 $both_ways --deterministic"; do
  read -r module devices passes mode <<<"$case"
  name=$(basename "$module" .hlo)${mode:+ ($mode)}
  expect_exit 0 "opt $name" -- "$loom" opt "$module" --passes="$passes" $mode -o "$work/rewritten.hlo"
  for backend in threads mpi; do
    launcher=()
    [[ $backend == mpi ]] && launcher=("${mpirun[@]}" -np "$devices")
    expect_exit 0 "compare $name ($backend)" -- "${launcher[@]}" "$loom" compare "$module" \
      "$work/rewritten.hlo" --devices "$devices" --backend "$backend" --deterministic \
      --json "$work/verdict.json"
    jq -e '.verdict == "bitwise"' "$work/verdict.json" >/dev/null && pass ||
      fail "compare $name ($backend) not bitwise"
  done
done

# A ring that turns the wrong way computes the blocks in the wrong places.
sed 's/{{1,0},{2,1},{3,2},{0,3}}/{{0,1},{1,2},{2,3},{3,0}}/' "$ring/ag_dot_ring.hlo" >"$work/wrong.hlo"
expect_exit 1 "compare wrong ring" -- "$loom" compare "$ring/ag_dot.hlo" "$work/wrong.hlo" --devices 4 \
  --json "$work/verdict.json"
jq -e '.verdict == "differ" and .outputs[0].verdict == "DIFFER"' "$work/verdict.json" >/dev/null &&
  pass || fail "wrong ring not reported as DIFFER"
expect_exit 1 "compare wrong ring, rounding accepted" -- "$loom" compare "$ring/ag_dot.hlo" \
  "$work/wrong.hlo" --devices 4 --tolerance rounding --json "$work/verdict.json"
jq -e '.verdict == "differ" and (.outputs[0].rounding | not)' "$work/verdict.json" >/dev/null &&
  pass || fail "wrong ring passed as rounding"
expect_exit 2 "compare --tolerance nonsense (an option error)" -- "$loom" compare "$ring/ag_dot.hlo" \
  "$ring/ag_dot.hlo" --devices 4 --tolerance nan
expect_exit 0 "compare within tolerance" -- "$loom" compare "$ring/ag_dot.hlo" "$ring/ag_dot.hlo" \
  --devices 4 --tolerance 1e-6

# run: outputs, trace, and the same checksums on both backends.
expect_exit 0 "run threads" -- "$loom" run "$ring/ag_dot_ring.hlo" --devices 4 --seed 7 \
  --out "$work/out_threads" --trace "$work/trace.json" --json "$work/run.json"
jq -r "$checksums" "$work/run.json" >"$work/sums_threads"
[[ -f $work/out_threads/device3/output0.npy ]] && pass || fail "run wrote no device3/output0.npy"
jq -e '[.traceEvents[] | select(.ph == "X" and .tid >= 1 and (.cat | startswith("collective-permute")))] |
  length > 0' "$work/trace.json" >/dev/null && pass || fail "trace lacks transfers on their own tracks"
expect_exit 0 "run mpi" -- "${mpirun[@]}" -np 4 "$loom" run "$ring/ag_dot_ring.hlo" --devices 4 \
  --seed 7 --backend mpi --out "$work/out_mpi" --json "$work/run.json"
jq -r "$checksums" "$work/run.json" >"$work/sums_mpi"
cmp -s "$work/sums_threads" "$work/sums_mpi" && [[ -s $work/sums_mpi ]] && pass ||
  fail "threads and MPI checksums differ"
cmp -s "$work/out_threads/device2/output0.npy" "$work/out_mpi/device2/output0.npy" && pass ||
  fail "threads and MPI outputs differ"

# A failing device: exit non-zero, name device 2 and the error, no outputs.
modules=$root/tests/exec/modules
for backend in threads mpi; do
  launcher=()
  [[ $backend == mpi ]] && launcher=("${mpirun[@]}" -np 4)
  start=$(date +%s)
  timeout 60 "${launcher[@]}" "$loom" run "$modules/device_fault.hlo" --devices 4 \
    --backend "$backend" --timeout 20 --out "$work/fault_$backend" >"$work/out" 2>"$work/err"
  code=$?
  elapsed=$(($(date +%s) - start))
  [[ $code -ne 0 && $code -ne 124 ]] && pass || fail "device fault ($backend): exit $code"
  grep -q "device 2: unsupported custom-call injected_failure" "$work/err" && pass ||
    { fail "device fault ($backend): message"; cat "$work/err"; }
  [[ $elapsed -lt 20 ]] && pass || fail "device fault ($backend) took ${elapsed}s"
  [[ ! -e $work/fault_$backend/device0 ]] && pass || fail "device fault ($backend) left outputs"

  timeout 60 "${launcher[@]}" "$loom" run "$modules/device_hang.hlo" --devices 4 \
    --backend "$backend" --timeout 1 >"$work/out" 2>"$work/err"
  code=$?
  [[ $code -ne 0 && $code -ne 124 ]] && pass || fail "device hang ($backend): exit $code"
  grep -q "timed out after 1000 ms waiting for data from device 2" "$work/err" && pass ||
    { fail "device hang ($backend): message"; cat "$work/err"; }

  # One lone waiter, each device in turn: a clean timeout naming it, no
  # crash, no MPI error from a message taken for another.
  for lone in 0 1 2 3; do
    sed "s/%lone = u32\[\] constant(3)/%lone = u32[] constant($lone)/" \
      "$modules/lone_waiter.hlo" >"$work/lone.hlo"
    timeout 60 "${launcher[@]}" "$loom" run "$work/lone.hlo" --devices 4 \
      --backend "$backend" --timeout 1 >"$work/out" 2>"$work/err"
    code=$?
    [[ $code -eq 1 ]] && pass || fail "lone waiter $lone ($backend): exit $code"
    grep -q "device $lone: timed out after 1000 ms" "$work/err" && pass ||
      { fail "lone waiter $lone ($backend): message"; cat "$work/err"; }
    grep -qiE "segmentation|signal|MPI_ERR" "$work/err" && fail "lone waiter $lone ($backend): crashed" || pass
  done
done

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
