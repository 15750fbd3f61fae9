#!/usr/bin/env bash
# Real overlap on one machine (BRIEF section 5): two MPI processes joined by
# a loopback link shaped to 2 Gbit/s inside a private network namespace.
# Times, side by side in one run, the transfer alone, the dot alone, (a) the
# transfer then the dot, and (b) collective-permute-start, dot,
# collective-permute-done; prints the medians and their ratios to
# max(transfer alone, dot alone). Needs root (unshare, tc).
# Usage: bench/overlap/run.sh [LOOM_BINARY] [RUNS]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
loom=$(realpath "${1:-$here/../../build/loom}")
runs=${2:-5}

source "$here/../shaped_loopback.sh"
enter_shaped_loopback "$0" "$loom" "$runs"

# The slowest device's time of one run of a module, in ms.
time_once() {
  mpirun -np 2 --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
    "$loom" run "$here/$1.hlo" --devices 2 --backend mpi |
    awk '/^ +[0-9]+ / { if ($2 > max) max = $2 } END { print max }'
}

variants=(transfer_alone dot_alone transfer_then_dot transfer_overlapped_dot)
declare -A samples
for ((i = 0; i < runs; i++)); do  # interleaved, so drift hits every variant alike
  for v in "${variants[@]}"; do samples[$v]+="$(time_once "$v") "; done
done
median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{a[NR] = $1} END { print a[int((NR + 1) / 2)] }'; }

declare -A ms
for v in "${variants[@]}"; do ms[$v]=$(median "${samples[$v]}"); done
bound=$(awk -v a="${ms[transfer_alone]}" -v b="${ms[dot_alone]}" 'BEGIN { print (a > b ? a : b) }')
printf '%-26s %10s %16s\n' variant "median ms" "/ max(alone)"
for v in "${variants[@]}"; do
  printf '%-26s %10.1f %16.3f\n' "$v" "${ms[$v]}" "$(awk -v x="${ms[$v]}" -v b="$bound" 'BEGIN { print x / b }')"
done
printf 'serial / overlapped: %.3f   (%d runs each, 2 processes, loopback shaped to 2 Gbit/s)\n' \
  "$(awk -v a="${ms[transfer_then_dot]}" -v b="${ms[transfer_overlapped_dot]}" 'BEGIN { print a / b }')" "$runs"
