#!/usr/bin/env bash
# CoCoNet's overlap measured for real (issue 17; pass/ring/chunked_reduction.h):
# a row-parallel dot followed by its all-reduce, on 2 (and 4) MPI processes
# joined by a loopback link shaped to 2 Gbit/s inside a private network
# namespace (as bench/overlap). Times, interleaved in one run: the dot alone,
# the all-reduce alone, the pair as written (the all-reduce after the dot;
# async-collectives and schedule leave it so, nothing being independent of
# it), the pair chunked into k = 2, 4, 8 and 16 (collective-matmul{chunks=k},
# CoCoNet's form), the ring of whole steps, the ring with each step in
# k = 2, 4, 8 and 16 chunks (step-chunks=k, FLUX's finer tiles), each then
# through async-collectives and schedule, and the gate's own choice for the
# loopback-2gbit target. Prints each median, the speed-up over the pair as
# written, and how much of the shorter of dot and all-reduce was hidden:
# (dot alone + all-reduce alone - pair) / min(dot alone, all-reduce alone).
# Needs root (unshare, tc).
# Usage: bench/chunked/run.sh [LOOM_BINARY] [RUNS] [PROCESSES...]   (default 5 runs; 2 4)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
loom=$(realpath "${1:-$here/../../build/loom}")
runs=${2:-5}
shift $(($# > 2 ? 2 : $#))
processes=("$@")
((${#processes[@]})) || processes=(2 4)

source "$here/../shaped_loopback.sh"
enter_shaped_loopback "$0" "$loom" "$runs" "${processes[@]}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The row-parallel product of a 2048-token block: x[2048, K/n] . w[K/n, 2048]
# summed over the n devices (16 MiB of f32 to all-reduce; K = 4096, so that
# on 2 processes the dot takes about as long as the all-reduce).
module() {  # N WHAT: pair | dot | all-reduce
  local n=$1 k=$((4096 / $1)) groups
  groups=$(seq -s, 0 $(($1 - 1)))
  cat <<HLO
HloModule row_parallel_$2, num_partitions=$n
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
ENTRY %main {
  %x = f32[2048,$k] parameter(0)
  %w = f32[$k,2048] parameter(1)
  %y = f32[2048,2048] parameter(2)
HLO
  case $2 in
    dot) echo "  ROOT %p = f32[2048,2048] dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}" ;;
    all-reduce) echo "  ROOT %s = f32[2048,2048] all-reduce(%y), channel_id=1, replica_groups={{$groups}}, use_global_device_ids=true, to_apply=%add" ;;
    pair)
      echo "  %p = f32[2048,2048] dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}"
      echo "  ROOT %s = f32[2048,2048] all-reduce(%p), channel_id=1, replica_groups={{$groups}}, use_global_device_ids=true, to_apply=%add"
      ;;
  esac
  echo "}"
}

time_once() {  # FILE N: the slowest device's time, ms
  mpirun -np "$2" --oversubscribe --mca btl self,tcp --mca btl_tcp_if_include lo \
    --mca oob_tcp_if_include lo "$loom" run "$1" --devices "$2" --backend mpi |
    awk '/^ +[0-9]+ / { if ($2 > max) max = $2 } END { print max }'
}
decompose() {  # IN OPTIONS OUT: collective-matmul{min-bytes=0,OPTIONS}, async, schedule
  "$loom" opt "$1" --passes="collective-matmul{min-bytes=0,$2}" -o "$3.rewritten"
  "$loom" opt "$3.rewritten" --target loopback-2gbit --passes=async-collectives,schedule -o "$3"
}
median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{a[NR] = $1} END { print a[int((NR + 1) / 2)] }'; }

for n in "${processes[@]}"; do
  for what in pair dot all-reduce; do module "$n" "$what" >"$work/$what.hlo"; done
  variants=(dot all-reduce pair)
  # kK: the pair cut into K chunks; ring: the ring of whole steps; ring-sK:
  # the ring with each step in K chunks (and the result gathered by piece).
  for k in 2 4 8 16; do
    decompose "$work/pair.hlo" "chunks=$k" "$work/k$k.hlo"
    variants+=("k$k")
  done
  decompose "$work/pair.hlo" "form=unrolled" "$work/ring.hlo"
  variants+=(ring)
  for k in 2 4 8 16; do
    decompose "$work/pair.hlo" "form=unrolled,step-chunks=$k" "$work/ring-s$k.hlo"
    variants+=("ring-s$k")
  done
  "$loom" opt "$work/pair.hlo" --target loopback-2gbit --explain \
    --passes=collective-matmul,async-collectives,schedule -o "$work/gate.hlo" >"$work/gate.txt"
  variants+=(gate)
  declare -A samples=()
  for ((i = 0; i < runs; i++)); do
    for v in "${variants[@]}"; do samples[$v]+="$(time_once "$work/$v.hlo" "$n") "; done
  done
  declare -A ms=()
  for v in "${variants[@]}"; do ms[$v]=$(median "${samples[$v]}"); done
  echo "$n processes (loopback shaped to 2 Gbit/s, median of $runs):"
  grep -o 'rewritten .*' "$work/gate.txt" | sed 's/^/  gate: /' | cut -c1-200 || echo "  gate: declined"
  printf '  %-12s %10s %10s %8s\n' variant "ms" speedup hidden
  for v in "${variants[@]}"; do
    awk -v v="$v" -v t="${ms[$v]}" -v pair="${ms[pair]}" -v d="${ms[dot]}" -v c="${ms[all-reduce]}" 'BEGIN {
      short = d < c ? d : c
      if (v == "dot" || v == "all-reduce") printf "  %-12s %10.1f\n", v, t
      else printf "  %-12s %10.1f %9.3fx %7.0f%%\n", v, t, pair / t, 100 * (d + c - t) / short }'
  done
done
