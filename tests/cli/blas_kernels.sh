#!/usr/bin/env bash
# The executor's exactness claims under every OpenBLAS kernel this CPU can
# run. Debian's OpenBLAS picks its kernels by CPU at run time, and a block of
# a product is not bitwise the same rows of the whole product on every kernel,
# so a claim that holds on one CPU can fail on another. Forcing each kernel
# with OPENBLAS_CORETYPE makes such a claim fail here, wherever this runs.
#
# Per kernel:
#  - deterministic kernels: the all-gather ring and the demo block's rewrite
#    are bitwise equal to their originals, and their outputs are the same bits
#    under every BLAS kernel (the deterministic dot does not use the BLAS);
#  - OpenBLAS: the same comparisons, as plain `loom compare` with no
#    --tolerance, pass on every kernel: bitwise or within the rounding of
#    reordered sums, never more (the default asks for what the kernels
#    guarantee);
#  - the collective-matmul property test (generated cases, every ring form,
#    both kernels, with its derived bounds);
#  - the threads and MPI backends give bitwise the same outputs.
# Kernels the CPU lacks the instructions for are skipped and listed.
# Usage: blas_kernels.sh LOOM_BINARY LOOM_TESTS_BINARY REPO_ROOT
set -uo pipefail
command -v jq >/dev/null || { echo "FAIL: jq is missing (scripts/install-deps.sh installs it)"; exit 1; }
loom=$1
unit_tests=$2
root=$3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun=(mpirun --oversubscribe --mca btl self,vader)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }

# Each kernel OpenBLAS can be forced to, and the CPU flags its code needs.
kernels=(
  "Prescott:pni"
  "Core2:ssse3"
  "Nehalem:sse4_2"
  "Sandybridge:avx"
  "Haswell:avx2 fma"
  "Zen:avx2 fma"
  "SkylakeX:avx512f avx512cd avx512bw avx512dq avx512vl"
  "Cooperlake:avx512f avx512cd avx512bw avx512dq avx512vl avx512_bf16"
)
cpu_flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
lacks() {
  local missing=()
  for flag in $1; do [[ $cpu_flags == *" $flag "* ]] || missing+=("$flag"); done
  echo "${missing[*]}"
}

ring=$root/examples/ring
"$loom" opt "$root/examples/mlp_block_tp4.hlo" --passes=collective-matmul -o "$work/demo_ring.hlo" ||
  fail "loom opt of the demo block"
pairs=("ag_dot:$ring/ag_dot.hlo:$ring/ag_dot_ring.hlo"
  "demo_block:$root/examples/mlp_block_tp4.hlo:$work/demo_ring.hlo")

# compare_as KERNEL NAME A B MODE: MODE deterministic (must be bitwise) or
# openblas (the default tolerance: bitwise or within rounding). Prints the
# verdict line.
compare_as() {
  local kernel=$1 name=$2 a=$3 b=$4 mode=$5 flags=() expect
  expect='.verdict == "bitwise" or .verdict == "rounding"'
  if [[ $mode == deterministic ]]; then
    flags=(--deterministic)
    expect='.verdict == "bitwise"'
  fi
  OPENBLAS_CORETYPE=$kernel timeout 300 "$loom" compare "$a" "$b" --devices 4 "${flags[@]}" \
    --json "$work/compare.json" >"$work/compare" 2>&1
  local code=$?
  if [[ $code -ne 0 ]] || ! jq -e "$expect" "$work/compare.json" >/dev/null; then
    fail "$kernel: $name ($mode): exit $code"
    cat "$work/compare"
    return
  fi
  echo "    $name, $mode: $(jq -r '"\(.verdict) (worst error \(.worst_error_over_envelope) of the envelope)"' "$work/compare.json")"
}

declare -A seen
tried=()
skipped=()
for entry in "${kernels[@]}"; do
  kernel=${entry%%:*}
  missing=$(lacks "${entry#*:}")
  if [[ -n $missing ]]; then
    skipped+=("$kernel (this CPU lacks ${missing// /, })")
    continue
  fi
  # What OpenBLAS really runs: it maps some names onto others.
  actual=$(OPENBLAS_CORETYPE=$kernel "$loom" run "$ring/ag_dot.hlo" --devices 4 --json - |
    jq -r '.dot_kernels | select(startswith("OpenBLAS ")) | ltrimstr("OpenBLAS ")')
  if [[ -z $actual ]]; then
    fail "$kernel: loom run does not say which OpenBLAS kernel it used"
    continue
  fi
  if [[ -n ${seen[$actual]:-} ]]; then
    skipped+=("$kernel (OpenBLAS runs it as $actual, already tried)")
    continue
  fi
  seen[$actual]=1
  tried+=("$kernel")
  echo "kernel $kernel (OpenBLAS reports $actual)"
  for pair in "${pairs[@]}"; do
    IFS=: read -r name a b <<<"$pair"
    compare_as "$kernel" "$name" "$a" "$b" deterministic
    compare_as "$kernel" "$name" "$a" "$b" openblas
    # The deterministic outputs do not depend on the BLAS kernel at all.
    OPENBLAS_CORETYPE=$kernel "$loom" run "$b" --devices 4 --deterministic --seed 3 \
      --out "$work/det_${kernel}_$name" >/dev/null 2>&1 || fail "$kernel: run $name --deterministic"
    if [[ -d $work/det_first_$name ]]; then
      diff -r "$work/det_first_$name" "$work/det_${kernel}_$name" >/dev/null ||
        fail "$kernel: deterministic outputs of $name differ from those under ${tried[0]}"
    else
      mv "$work/det_${kernel}_$name" "$work/det_first_$name"
    fi
  done
  # 250 of the property test's cases per kernel, a different 250 each (the
  # unit test itself runs 500 under the default kernel).
  LOOM_PROPERTY_CASES=250 LOOM_PROPERTY_SEED=$((1000 * ${#tried[@]})) \
    OPENBLAS_CORETYPE=$kernel "$unit_tests" --gtest_filter='CollectiveMatmulProperty.*' \
    >"$work/property" 2>&1 && echo "    property test: $(grep -m1 'bitwise and' "$work/property" | sed 's/^\[ property \] //')" ||
    { fail "$kernel: collective-matmul property test"; tail -30 "$work/property"; }
  rm -rf "$work/threads" "$work/mpi"
  OPENBLAS_CORETYPE=$kernel "$loom" run "$ring/ag_dot_ring.hlo" --devices 4 --seed 5 \
    --out "$work/threads" >/dev/null 2>&1 || fail "$kernel: run on threads"
  OPENBLAS_CORETYPE=$kernel timeout 120 "${mpirun[@]}" -x OPENBLAS_CORETYPE -np 4 "$loom" run \
    "$ring/ag_dot_ring.hlo" --devices 4 --seed 5 --backend mpi --out "$work/mpi" >/dev/null 2>&1 ||
    fail "$kernel: run on MPI"
  if diff -r "$work/threads" "$work/mpi" >/dev/null; then
    echo "    threads and MPI: bitwise equal outputs"
  else
    fail "$kernel: threads and MPI outputs differ"
  fi
done

echo "kernels tried: ${tried[*]}"
echo "kernels skipped (${#skipped[@]}):"
for line in "${skipped[@]}"; do echo "  $line"; done
if [[ ${#tried[@]} -eq 0 ]]; then fail "no OpenBLAS kernel could be tried"; fi
echo "${#tried[@]} kernel(s) tried, $failed failure(s)"
[[ $failed -eq 0 ]]
