// How long an instruction takes on one device of a target: the one
// interface the collective-matmul gate, the scheduler and the simulator ask.
//
// Times are seconds. Compute ops follow a roofline (FLOPs over the rate
// products of the element type sustain, or bytes over memory bandwidth,
// whichever is larger)
// plus a fixed launch cost; ops that only rename or alias values
// (parameter, constant, get-tuple-element, tuple, bitcast, ...) cost
// nothing. Collectives cost what their native algorithm takes on the
// target's topology for the group each device is in (see target_cost.h);
// the -start of an asynchronous pair carries the transfer time and its
// -done none: the transfer runs while the device computes.
#pragma once

#include <compare>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "analysis/fusion.h"
#include "ir/collective_groups.h"
#include "ir/instruction.h"

namespace loom::cost {

// Bytes of all of `instruction`'s operands.
double OperandBytes(const ir::Instruction& instruction);

// The collective a transfer instruction runs: itself (a collective or a
// -start), the collective an async-start wraps (ir::WrappedCollective), or
// nullptr.
const ir::Instruction* TransferOp(const ir::Instruction& instruction);

// A device's network ports, one bit each (cost/collective_algorithm.h's
// PortOfLink says which link ends at which port): what concurrent transfers
// share in the step estimate.
using PortMask = uint32_t;

// A stretch of one transfer on one device: how long it takes with the ports
// to itself, the ports it uses meanwhile, and how many of its own messages
// share the busiest link of its routes (what its time already pays for: two
// rings of every other chip on one torus line, 2; a bus phase, every
// message of its step). A collective's phases (an all-reduce's ring across
// nodes, then in each node) are one segment each.
struct TransferSegment {
  double seconds = 0;
  PortMask ports = 0;  // none: it shares nothing
  double flows = 1;
  bool operator==(const TransferSegment&) const = default;
  auto operator<=>(const TransferSegment&) const = default;
};

// Every device's segments of one transfer, the devices that run the same
// ones (the same phases on the same kinds of port) sharing a row.
struct TransferSegmentTable {
  std::vector<std::vector<TransferSegment>> distinct;
  std::vector<int32_t> row_of_device;  // an index into `distinct`, or -1: none

  const std::vector<TransferSegment>& Of(int64_t device) const;
};

class CostModel {
 public:
  virtual ~CostModel() = default;

  // Device time of a compute instruction (0 for collectives, their -start
  // and -done, and for aliasing ops). A while, call or conditional counts
  // its own launch only; their bodies are costed instruction by instruction.
  virtual double ComputeSeconds(const ir::Instruction& instruction) const = 0;

  // Whether the target's compiler fuses chains of elementwise ops into one
  // kernel (analysis/fusion.h), as XLA does on TPUs and GPUs; Loom's own
  // executor runs every op by itself.
  virtual bool FusesElementwise() const { return false; }
  // ComputeSeconds of an instruction of the computation `fusion` describes,
  // where the target fuses: an op fused into its users launches nothing
  // and writes nothing, and its users do not read it back.
  virtual double FusedComputeSeconds(const ir::Instruction& instruction,
                                     const analysis::FusionPlan& fusion) const {
    (void)fusion;
    return ComputeSeconds(instruction);
  }

  // Transfer time of a collective, a collective-permute, or the -start (or
  // async-start) of one, on `grid`: the slowest group's time. 0 for
  // anything else.
  virtual double TransferSeconds(const ir::Instruction& instruction,
                                 const ir::DeviceGrid& grid) const = 0;

  // The same for each device of `grid` (its own group, its own pairs): what
  // the step estimate of each device uses. By default every device gets
  // TransferSeconds.
  virtual std::vector<double> TransferSecondsByDevice(const ir::Instruction& instruction,
                                                      const ir::DeviceGrid& grid) const {
    return std::vector<double>(static_cast<size_t>(grid.size()),
                               TransferSeconds(instruction, grid));
  }

  // The links the transfer occupies (sorted, on the numbering of
  // cost::RouteLinks), or nothing when they are not known. A device runs
  // its transfers of one kind one at a time, in program order, except that
  // two whose links are both known and disjoint (a bidirectional ring's
  // two directions on a torus) run at once: the rule the step estimate and
  // the simulator share. By default nothing is known.
  virtual std::vector<int64_t> TransferLinks(const ir::Instruction& instruction,
                                             const ir::DeviceGrid& grid) const {
    (void)instruction;
    (void)grid;
    return {};
  }

  // Each device's segments of the transfer, whose seconds add up to its
  // TransferSecondsByDevice. By default one segment that uses no port: the
  // transfer shares nothing with the others in flight.
  virtual TransferSegmentTable TransferSegmentsByDevice(const ir::Instruction& instruction,
                                                        const ir::DeviceGrid& grid) const;
};

// The compute time of each instruction as the step estimate, the scheduler
// and the simulator price it: FusedComputeSeconds with the fusion plan of
// its computation where the model fuses, else ComputeSeconds. A plan is made
// once per computation, so a ComputeTimes is valid while the program's data
// flow stays as it was (reordering instructions is fine); its copies share
// the plans, whichever copy makes them (a scheduler's replays and the step
// estimate's device classes run copies over the same computations). Not for
// use from two threads at once.
class ComputeTimes {
 public:
  explicit ComputeTimes(const CostModel& model) : model_(&model) {}
  double Of(const ir::Instruction& instruction) const;
  // What computes the products of the kernel rooted at `instruction`: the
  // dot an output fusion sums (analysis::FusionPlan), where the model
  // fuses; else the instruction itself.
  const ir::Instruction& KernelProduct(const ir::Instruction& instruction) const;

 private:
  const analysis::FusionPlan& PlanOf(const ir::Computation& computation) const;

  const CostModel* model_;
  using Plans =
      std::unordered_map<const ir::Computation*, std::shared_ptr<const analysis::FusionPlan>>;
  std::shared_ptr<Plans> plans_ = std::make_shared<Plans>();
};

// Whether transfers with these links (CostModel::TransferLinks) may run at
// once: both known and disjoint.
bool LinksDisjoint(const std::vector<int64_t>& a, const std::vector<int64_t>& b);

}  // namespace loom::cost
