#!/usr/bin/env bash
# One mixture-of-experts FFN layer per device, expert-parallel over N
# devices (one expert each), as per-device HLO on stdout:
#   routing einsum (dispatch one-hot x tokens) -> all-to-all (dispatch)
#   -> expert FFN (dot, GELU, dot) -> all-to-all (combine) -> combine einsum.
# Shapes follow GShard/GLaM: T tokens per device, top-2 routing with
# capacity factor 1 (C = 2T/N slots per expert and source device), model
# width M, expert hidden width H, bf16.
# Usage: moe_layer.sh N [T] [M] [H]
set -euo pipefail
n=$1
t=${2:-4096}
m=${3:-8192}
h=${4:-32768}
if ((2 * t % n != 0)); then
  echo "moe_layer.sh: 2T = $((2 * t)) is not divisible by N = $n" >&2
  exit 1
fi
c=$((2 * t / n))
group=$(seq -s, 0 $((n - 1)))
cat <<HLO
HloModule moe_layer_ep$n, num_partitions=$n

ENTRY %moe {
  %x = bf16[$t,$m] parameter(0)
  %dispatch = bf16[$t,$n,$c] parameter(1)
  %combine = bf16[$t,$n,$c] parameter(2)
  %w1 = bf16[1,$m,$h] parameter(3)
  %w2 = bf16[1,$h,$m] parameter(4)
  %routed = bf16[$n,$c,$m] dot(%dispatch, %x), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  %arrived = bf16[$n,$c,$m] all-to-all(%routed), channel_id=1, replica_groups={{$group}}, dimensions={0}
  %by_source = bf16[$n,1,$c,$m] reshape(%arrived)
  %by_expert = bf16[1,$n,$c,$m] transpose(%by_source), dimensions={1,0,2,3}
  %tokens = bf16[1,$((n * c)),$m] reshape(%by_expert)
  %hidden = bf16[1,$((n * c)),$h] dot(%tokens, %w1), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  %k = bf16[] constant(1.702)
  %ks = bf16[1,$((n * c)),$h] broadcast(%k), dimensions={}
  %scaled = bf16[1,$((n * c)),$h] multiply(%hidden, %ks)
  %gate = bf16[1,$((n * c)),$h] logistic(%scaled)
  %gelu = bf16[1,$((n * c)),$h] multiply(%hidden, %gate)
  %out = bf16[1,$((n * c)),$m] dot(%gelu, %w2), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  %out_by_source = bf16[1,$n,$c,$m] reshape(%out)
  %out_back = bf16[$n,1,$c,$m] transpose(%out_by_source), dimensions={1,0,2,3}
  %returning = bf16[$n,$c,$m] reshape(%out_back)
  %returned = bf16[$n,$c,$m] all-to-all(%returning), channel_id=2, replica_groups={{$group}}, dimensions={0}
  ROOT %y = bf16[$t,$m] dot(%combine, %returned), lhs_contracting_dims={1,2}, rhs_contracting_dims={0,1}
}
HLO
