// The cost model of a Target (target.h): rooflines for compute (a product's
// FLOPs as the target's matrix units spend them, padded to whole tiles and
// waves, target.h's MatrixTiling; scalar
// arithmetic is free: it folds into the op that uses it, as XLA fuses it;
// on targets whose compiler fuses, a chain of elementwise ops is priced as
// the one kernel analysis/fusion.h makes of it), and the native algorithm
// of each collective on the target's topology.
//
// Collective times are those of the algorithms cost/collective_algorithm.h
// describes (the simulator runs the same ones as messages), summed phase by
// phase with no contention: for a group of N devices and B bytes (the
// gathered result, or the reduced input), an all-gather is a ring phase per
// torus dimension, hierarchical on switched clusters, one shared medium on
// a bus (see that header for the closed forms); reduce-scatter = all-gather
// of the same B; all-reduce = twice that; all-to-all = its N-1 rounds of
// B/N, each as long as that collective-permute. collective-permute: on a torus the slowest
// pair, h a + s bytes / bw over its dimension-ordered route of h hops, s
// the most of the permute's messages that share a link of that route (an
// all-to-all's rounds cross each other's links); switched: the busiest
// device port, a + (bytes it sends, or receives) / bw; bus: all pairs'
// bytes share the medium. The groups of one collective run at once, so a
// routed ring's messages share the links other groups' routes cross
// (AllGatherPhasesOfGroups: pairs {i, i+4} of a ring of 8, four on every
// link). Transfers in flight together are not this model's business: it
// gives each one's segments and ports (TransferSegmentsByDevice), which the
// step estimate shares (cost/transfer_flights.h) and the simulator replaces
// by every link's flows.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "analysis/flops.h"
#include "cost/cost_model.h"
#include "cost/target.h"

namespace loom::cost {

class TargetCostModel : public CostModel {
 public:
  explicit TargetCostModel(Target target) : target_(std::move(target)) {}

  const Target& target() const { return target_; }

  double ComputeSeconds(const ir::Instruction& instruction) const override;
  bool FusesElementwise() const override { return target_.compute().fuses_elementwise; }
  double FusedComputeSeconds(const ir::Instruction& instruction,
                             const analysis::FusionPlan& fusion) const override;
  double TransferSeconds(const ir::Instruction& instruction,
                         const ir::DeviceGrid& grid) const override;
  std::vector<double> TransferSecondsByDevice(const ir::Instruction& instruction,
                                              const ir::DeviceGrid& grid) const override;
  // A collective-permute's: the routes of its pairs. Other collectives'
  // links are left unknown (they run one at a time per kind).
  std::vector<int64_t> TransferLinks(const ir::Instruction& instruction,
                                     const ir::DeviceGrid& grid) const override;
  // Each phase of a collective's algorithm (collective_algorithm.h) a
  // segment, on the ports its messages take (PhasePorts); an all-to-all's
  // rounds one each; a permute one, on its routes' ports.
  TransferSegmentTable TransferSegmentsByDevice(const ir::Instruction& instruction,
                                                const ir::DeviceGrid& grid) const override;

  // The building blocks, for the gate and for tests. Groups are target
  // device ids in ring order.
  // A kernel of products `dots` that moves `bytes`: the FLOPs its products
  // spend (MatrixTiling) at the rate products of their type sustain
  // (ComputeSpec::MatrixFlops), or its bytes at the memory's bandwidth,
  // whichever is longer, and the launch.
  double DotSeconds(const analysis::KernelDots& dots, double bytes) const;
  // triangular-solve and cholesky: analysis::LinearAlgebraFlops at the
  // rate products sustain, or `bytes` of memory traffic if longer.
  double LinearAlgebraSeconds(const ir::Instruction& instruction, double bytes) const;
  double MemorySeconds(double bytes) const;
  double AllGatherSeconds(const std::vector<int64_t>& group, double bytes) const;
  double AllReduceSeconds(const std::vector<int64_t>& group, double bytes) const;
  // `bytes` per device; `devices` bounds the ids (the grid's size).
  double AllToAllSeconds(const std::vector<int64_t>& group, double bytes, int64_t devices) const;
  double PermuteSeconds(const std::vector<std::pair<int64_t, int64_t>>& pairs, double bytes) const;
  // Per device: the time of the pairs it sends or receives in (0 when none).
  std::vector<double> PermuteSecondsByDevice(const std::vector<std::pair<int64_t, int64_t>>& pairs,
                                             double bytes, int64_t devices) const;
  // Per pair: the time its message takes (0 for a device's to itself).
  std::vector<double> PermutePairSeconds(const std::vector<std::pair<int64_t, int64_t>>& pairs,
                                         double bytes) const;
  // The slowest pair's time, of the pairs with an end in [0, devices): an
  // all-to-all round's, in time proportional to the round, not to the grid.
  double SlowestPairSeconds(const std::vector<std::pair<int64_t, int64_t>>& pairs, double bytes,
                            int64_t devices) const;

 private:
  // A transfer's price depends only on what TransferKey names, while the
  // scheduler, the step estimate and each of the collective-matmul gate's
  // trials ask for it again on instructions of their own (a trial prices a
  // clone of the module): on a 16,384-device step one all-to-all takes
  // 15 rounds of 1,024 groups. So the prices are kept, up to a bound, and
  // shared by copies of the model (they price for the same target). These
  // are one transfer's prices, each made when first asked for:
  struct Prices {
    std::shared_ptr<const std::vector<double>> seconds;  // by device
    std::optional<double> slowest;
    std::shared_ptr<const TransferSegmentTable> segments;
    std::shared_ptr<const std::vector<int64_t>> links;
  };
  struct Memo {
    std::mutex mutex;
    std::unordered_map<std::string, Prices> prices;  // by TransferKey
    size_t bytes = 0;                                // of the keys and prices kept
  };
  // `field` of the prices of `op` (a transfer's synchronous op), made by
  // `compute` when not kept.
  template <typename Value, typename Compute>
  Value Memoized(const ir::Instruction& op, const ir::DeviceGrid& grid, Value Prices::*field,
                 Compute&& compute) const;
  std::shared_ptr<const std::vector<double>> SecondsByDevice(const ir::Instruction& op,
                                                             const ir::DeviceGrid& grid) const;
  std::vector<double> ComputeTransferSecondsByDevice(const ir::Instruction& op,
                                                     const ir::DeviceGrid& grid) const;
  TransferSegmentTable ComputeTransferSegmentsByDevice(const ir::Instruction& op,
                                                       const ir::DeviceGrid& grid) const;
  std::vector<int64_t> ComputeTransferLinks(const ir::Instruction& op,
                                            const ir::DeviceGrid& grid) const;

  Target target_;
  std::shared_ptr<Memo> memo_ = std::make_shared<Memo>();
};

}  // namespace loom::cost
