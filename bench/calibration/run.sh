#!/usr/bin/env bash
# The simulator against reality (BRIEF section 5): each module runs as two
# MPI processes over a loopback link shaped to 2 Gbit/s in a private
# network namespace, and `loom simulate --target loopback-2gbit` predicts
# its step; prints the median measured time of the slowest device, the
# prediction and the error. The target's figures come from the primitives
# (a transfer alone, a dot alone: bench/overlap); the composites (one after
# the other, overlapped, the collective-matmul pairs and their rings
# scheduled for the target) test the prediction.
# Needs root (unshare, tc).
# Usage: bench/calibration/run.sh [LOOM_BINARY] [RUNS]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
loom=$(realpath "${1:-$here/../../build/loom}")
runs=${2:-3}
target=loopback-2gbit

source "$here/../shaped_loopback.sh"
enter_shaped_loopback "$0" "$loom" "$runs"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The modules: the overlap bench's four, and two collective-matmul pairs
# before and after the rewrite (ring, async transfers, list schedule).
declare -a names paths
add() { names+=("$1"); paths+=("$2"); }
for v in transfer_alone dot_alone transfer_then_dot transfer_overlapped_dot; do
  add "$v" "$here/../overlap/$v.hlo"
done
for m in ag_dot_2 dot_rs_2; do
  add "$m" "$here/$m.hlo"
  "$loom" opt "$here/$m.hlo" --passes='collective-matmul{min-bytes=0}' -o "$work/$m.ring.hlo"
  "$loom" opt "$work/$m.ring.hlo" --target $target --passes=async-collectives,schedule \
    -o "$work/$m.scheduled.hlo"
  add "$m ring, scheduled" "$work/$m.scheduled.hlo"
done

time_once() {  # the slowest device's time of one run, in ms
  mpirun -np 2 --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
    "$loom" run "$1" --devices 2 --backend mpi |
    awk '/^ +[0-9]+ / { if ($2 > max) max = $2 } END { print max }'
}
median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{a[NR] = $1} END { print a[int((NR + 1) / 2)] }'; }

declare -A samples
for ((i = 0; i < runs; i++)); do  # interleaved, so drift hits every module alike
  for ((m = 0; m < ${#names[@]}; m++)); do samples[$m]+="$(time_once "${paths[$m]}") "; done
done

printf '%-32s %12s %12s %8s\n' module "measured ms" "simulated ms" error
for ((m = 0; m < ${#names[@]}; m++)); do
  measured=$(median "${samples[$m]}")
  simulated=$("$loom" simulate "${paths[$m]}" --target $target |
    awk '/^step time/ { v = $3; u = $4; if (u == "us") v /= 1000; if (u == "s") v *= 1000; print v }')
  printf '%-32s %12.1f %12.1f %+7.1f%%\n' "${names[$m]}" "$measured" "$simulated" \
    "$(awk -v s="$simulated" -v m="$measured" 'BEGIN { print 100 * (s - m) / m }')"
done
echo "($runs runs each, median of the slowest device; 2 processes; loopback shaped to 2 Gbit/s)"
