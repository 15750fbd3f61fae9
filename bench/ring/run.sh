#!/usr/bin/env bash
# Loom's rings against a hand-written ring on the bandwidth-shaped testbed
# (BRIEF section 5): P MPI processes over a loopback link shaped to 2 Gbit/s
# in a private network namespace. For each case, interleaved round by round:
#   hand ring      bench/ring/hand_ring (MPI + OpenBLAS + a communication thread)
#   hand unsplit   MPI_Allgather + sgemm, or sgemm + MPI_Reduce_scatter_block
#   loom original  the pair as written (all-gather -> dot, dot -> reduce-scatter),
#                  with Loom's ring collectives, and with MPI's (--collectives native)
#   loom ring      collective-matmul, async-collectives, schedule
# Each process runs the pair REPEATS times after a warm-up and reports its
# median; a run's figure is the slowest process's. Prints the medians over
# rounds and the ratios: loom ring / hand ring (target <= 1.10) and loom
# original / loom ring (target >= 1.2). Needs root (unshare, tc).
# Usage: bench/ring/run.sh [BUILD_DIR] [ROUNDS] [REPEATS]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(realpath "${1:-$here/../../build}")
rounds=${2:-3}
repeats=${3:-5}
loom=$build/loom
hand_ring=$build/loom_hand_ring

source "$here/../shaped_loopback.sh"
enter_shaped_loopback "$0" "$build" "$rounds" "$repeats"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpi=(--oversubscribe --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)

# The pair of each case as HLO, and Loom's ring of it.
write_ag() {  # P M K N: every rank gathers P blocks of M x K, times K x N
  local p=$1 m=$2 k=$3 n=$4
  cat >"$work/ag_$p.hlo" <<EOF
HloModule ag_dot_$p, num_partitions=$p

ENTRY %main (x: f32[$m,$k], w: f32[$k,$n]) -> f32[$((p * m)),$n] {
  %x = f32[$m,$k] parameter(0)
  %w = f32[$k,$n] parameter(1)
  %g = f32[$((p * m)),$k] all-gather(%x), channel_id=1, replica_groups={{$(seq -s, 0 $((p - 1)))}}, dimensions={0}, use_global_device_ids=true
  ROOT %y = f32[$((p * m)),$n] dot(%g, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
EOF
}
write_rs() {  # P M K N: every rank's P M x K times K x N, reduce-scattered by rows
  local p=$1 m=$2 k=$3 n=$4
  cat >"$work/rs_$p.hlo" <<EOF
HloModule dot_rs_$p, num_partitions=$p

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (x: f32[$((p * m)),$k], w: f32[$k,$n]) -> f32[$m,$n] {
  %x = f32[$((p * m)),$k] parameter(0)
  %w = f32[$k,$n] parameter(1)
  %y = f32[$((p * m)),$n] dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %r = f32[$m,$n] reduce-scatter(%y), channel_id=1, replica_groups={{$(seq -s, 0 $((p - 1)))}}, dimensions={0}, use_global_device_ids=true, to_apply=%add
}
EOF
}
ring_of() {
  "$loom" opt "$work/$1.hlo" --passes='collective-matmul{min-bytes=0}' -o "$work/$1.split.hlo"
  "$loom" opt "$work/$1.split.hlo" --target loopback-2gbit --passes=async-collectives,schedule \
    -o "$work/$1.ring.hlo"
}

loom_ms() {  # FILE P [FLAGS...]
  local file=$1 p=$2
  shift 2
  mpirun "${mpi[@]}" -np "$p" "$loom" run "$file" --devices "$p" --backend mpi --repeat "$repeats" "$@" |
    awk '/^ +[0-9]+ / { if ($2 > max) max = $2 } END { print max }'
}
hand_ms() {  # MODE P M K N
  mpirun "${mpi[@]}" -np "$2" "$hand_ring" "$1" "$3" "$4" "$5" "$repeats" | awk '/median ms/ { print $3 }'
}
median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{a[NR] = $1} END { print a[int((NR + 1) / 2)] }'; }

cases=("ag 2 512 2048 1024" "ag 4 512 2048 1024" "rs 2 1024 2048 1024")
for c in "${cases[@]}"; do
  read -r kind p m k n <<<"$c"
  "write_$kind" "$p" "$m" "$k" "$n"
  ring_of "${kind}_$p"
done

printf '%-48s %9s %9s %9s %9s %9s %10s %10s\n' case "hand ring" unsplit "loom orig" "orig MPI" \
  "loom ring" "ring/hand" "orig/ring"
for c in "${cases[@]}"; do
  read -r kind p m k n <<<"$c"
  declare -A s=()
  for ((r = 0; r < rounds; r++)); do  # interleaved, so drift hits every variant alike
    s[hand]+="$(hand_ms "$kind" "$p" "$m" "$k" "$n") "
    s[unsplit]+="$(hand_ms "$kind-native" "$p" "$m" "$k" "$n") "
    s[orig]+="$(loom_ms "$work/${kind}_$p.hlo" "$p") "
    s[native]+="$(loom_ms "$work/${kind}_$p.hlo" "$p" --collectives native) "
    s[ring]+="$(loom_ms "$work/${kind}_$p.ring.hlo" "$p") "
  done
  handt=$(median "${s[hand]}") unsplit=$(median "${s[unsplit]}")
  orig=$(median "${s[orig]}") native=$(median "${s[native]}") ringt=$(median "${s[ring]}")
  if [[ $kind == ag ]]; then label="all-gather f32[$m,$k] x$p, dot x[$k,$n]"; else
    label="dot f32[$((p * m)),$k]x[$k,$n], reduce-scatter x$p"; fi
  printf '%-48s %9.1f %9.1f %9.1f %9.1f %9.1f %9.3fx %9.3fx\n' "$label" "$handt" "$unsplit" \
    "$orig" "$native" "$ringt" "$(awk -v a="$ringt" -v b="$handt" 'BEGIN { print a / b }')" \
    "$(awk -v a="$orig" -v b="$ringt" 'BEGIN { print a / b }')"
  unset s
done
echo "(ms: median over $rounds rounds of the slowest process's median of $repeats runs;" \
  "loopback shaped to 2 Gbit/s)"
