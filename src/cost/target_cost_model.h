// The cost model of a Target (target.h): rooflines for compute, and the
// native algorithm of each collective on the target's topology.
//
// Collective times are latency-bandwidth forms (Thakur, Rabenseifner &
// Gropp 2005) over the links the algorithm uses, for a group of N devices
// and B bytes (the gathered result, or the reduced input):
//
//   torus, group a sub-box of the torus: one ring phase per dimension the
//     group spans (sizes n_1..n_k), each over both directions of that
//     dimension when it wraps around (bidirectional ring), else one:
//       all-gather = sum_i (n_i-1) a + (n_i-1)/n_i * B_i / (w_i bw),
//       B_i = B * n_1...n_i / N, w_i = 2 with wraparound, 1 without;
//     any other group: a unidirectional ring in group order whose step
//     takes the longest hop path: (N-1) (h a + B/N / bw).
//   switched: inside one node a ring over NVSwitch,
//       (N-1) a_nv + (N-1)/N * B / bw_nv;
//     across nodes, hierarchical: first a ring across nodes among the
//     devices of one local index, each through its own NIC, over
//     B/(devices per node) (shards of B/N), then a ring inside each node
//     over all of B (blocks of B/(devices per node)).
//   bus: every byte crosses the one medium: (N-1) a + (N-1) B / bw.
//
//   reduce-scatter = all-gather of the same B; all-reduce = twice that;
//   all-to-all is costed as an all-gather of its buffer (the same bytes per
//   device leave each device); collective-permute: on a torus the slowest
//   pair, h a + bytes / bw over its dimension-ordered route; switched: the
//   busiest device port, a + (bytes it sends, or receives) / bw; bus: all
//   pairs' bytes share the medium. Contention between concurrent transfers is the
//   simulator's business, not this model's.
#pragma once

#include <utility>
#include <vector>

#include "cost/cost_model.h"
#include "cost/target.h"

namespace loom::cost {

class TargetCostModel : public CostModel {
 public:
  explicit TargetCostModel(Target target) : target_(std::move(target)) {}

  const Target& target() const { return target_; }

  double ComputeSeconds(const ir::Instruction& instruction) const override;
  double TransferSeconds(const ir::Instruction& instruction,
                         const ir::DeviceGrid& grid) const override;

  // The building blocks, for the gate and for tests. Groups are target
  // device ids in ring order.
  double DotSeconds(double flops, double bytes, ir::PrimitiveType type) const;
  double MemorySeconds(double bytes) const;
  double AllGatherSeconds(const std::vector<int64_t>& group, double bytes) const;
  double AllReduceSeconds(const std::vector<int64_t>& group, double bytes) const;
  double PermuteSeconds(const std::vector<std::pair<int64_t, int64_t>>& pairs, double bytes) const;

 private:
  double TorusGatherSeconds(const TorusTopology& torus, const std::vector<int64_t>& group,
                            double bytes) const;
  double SwitchedGatherSeconds(const SwitchedTopology& switched, const std::vector<int64_t>& group,
                               double bytes) const;
  // Hops between two devices by dimension-ordered routing.
  int64_t TorusHops(const TorusTopology& torus, int64_t a, int64_t b) const;

  Target target_;
};

}  // namespace loom::cost
