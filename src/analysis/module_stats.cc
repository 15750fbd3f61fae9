#include "analysis/module_stats.h"

#include <algorithm>
#include <limits>
#include <set>

#include "analysis/flops.h"
#include "analysis/while_loop.h"
#include "ir/collective_groups.h"
#include "support/saturating.h"

namespace loom::analysis {
namespace {

using ir::Instruction;
using ir::Opcode;

// The collective kind an instruction is counted under (`-start` forms count
// as their collective), or "" when it is not a collective.
std::string CollectiveKind(Opcode opcode) {
  switch (opcode) {
    case Opcode::kAllGather:
    case Opcode::kAllGatherStart:
      return "all-gather";
    case Opcode::kAllReduce:
    case Opcode::kAllReduceStart:
      return "all-reduce";
    case Opcode::kReduceScatter:
      return "reduce-scatter";
    case Opcode::kAllToAll:
      return "all-to-all";
    case Opcode::kCollectivePermute:
    case Opcode::kCollectivePermuteStart:
      return "collective-permute";
    case Opcode::kCollectiveBroadcast:
      return "collective-broadcast";
    case Opcode::kRaggedAllToAll:
      return "ragged-all-to-all";
    default:
      return "";
  }
}

// How many devices take part in the collective with device 0, by XLA's
// group modes (a cross-replica-and-partition group spans every partition).
int64_t GroupSize(const Instruction& instruction, const ir::DeviceGrid& grid) {
  Expected<std::vector<int64_t>> group = ir::ParticipantGroupOf(instruction, grid, 0);
  return group.ok() ? static_cast<int64_t>(group->size()) : grid.size();
}

int64_t OperandBytes(const Instruction& instruction) {
  int64_t bytes = 0;
  for (const Instruction* operand : instruction.operands()) bytes += operand->shape().ByteSize();
  return bytes;
}

// The result of a -start op is a tuple (operand, result, context...): its
// second element is what the collective produces.
int64_t ResultBytes(const Instruction& instruction) {
  const ir::Shape& shape = instruction.shape();
  if (ir::IsAsyncStart(instruction.opcode()) && shape.IsTuple() && shape.tuple_size() >= 2) {
    return shape.tuple_element(1).ByteSize();
  }
  return shape.ByteSize();
}

int64_t RingBytes(const Instruction& instruction, const std::string& kind, int64_t n) {
  if (n <= 1) return 0;
  if (kind == "collective-permute") return OperandBytes(instruction);
  if (kind == "all-gather") return ResultBytes(instruction) * (n - 1) / n;
  if (kind == "all-reduce") return 2 * OperandBytes(instruction) * (n - 1) / n;
  return OperandBytes(instruction) * (n - 1) / n;  // reduce-scatter, all-to-all
}

// One execution of a collective of `kind`.
CollectiveStats CollectiveStatsOf(const Instruction& instruction, const std::string& kind,
                                  const ir::DeviceGrid& grid) {
  return CollectiveStats{
      .count = 1,
      .result_bytes = ResultBytes(instruction),
      .ring_bytes_per_device = RingBytes(instruction, kind, GroupSize(instruction, grid)),
  };
}

// sum += value * times, saturating at the int64_t maximum: trip counts of
// nested loops multiply, and a wrong huge number beats a negative one.
void AddTimes(int64_t& sum, int64_t value, int64_t times) {
  sum = SaturatingAdd(sum, SaturatingMul(value, times));
}

void AddTimes(CollectiveStats& sum, const CollectiveStats& value, int64_t times) {
  AddTimes(sum.count, value.count, times);
  AddTimes(sum.result_bytes, value.result_bytes, times);
  AddTimes(sum.ring_bytes_per_device, value.ring_bytes_per_device, times);
}

// What the dynamic walk adds up; DynamicStats is made from it at the end.
struct DynamicTally {
  std::map<std::string, CollectiveStats> collectives;
  int64_t dot_count = 0;
  int64_t dot_flops = 0;
  int64_t convolution_count = 0;
  int64_t convolution_flops = 0;
  std::set<const Instruction*> unknown_trip_count_loops;
};

// Keeps, number by number, the larger of `tally` and `branch` (conditional).
void MaxInto(DynamicTally& tally, const DynamicTally& branch) {
  for (const auto& [kind, collective] : branch.collectives) {
    CollectiveStats& into = tally.collectives[kind];
    into.count = std::max(into.count, collective.count);
    into.result_bytes = std::max(into.result_bytes, collective.result_bytes);
    into.ring_bytes_per_device =
        std::max(into.ring_bytes_per_device, collective.ring_bytes_per_device);
  }
  tally.dot_count = std::max(tally.dot_count, branch.dot_count);
  tally.dot_flops = std::max(tally.dot_flops, branch.dot_flops);
  tally.convolution_count = std::max(tally.convolution_count, branch.convolution_count);
  tally.convolution_flops = std::max(tally.convolution_flops, branch.convolution_flops);
  tally.unknown_trip_count_loops.insert(branch.unknown_trip_count_loops.begin(),
                                        branch.unknown_trip_count_loops.end());
}

void AddInto(DynamicTally& tally, const DynamicTally& other) {
  for (const auto& [kind, collective] : other.collectives) {
    AddTimes(tally.collectives[kind], collective, 1);
  }
  AddTimes(tally.dot_count, other.dot_count, 1);
  AddTimes(tally.dot_flops, other.dot_flops, 1);
  AddTimes(tally.convolution_count, other.convolution_count, 1);
  AddTimes(tally.convolution_flops, other.convolution_flops, 1);
  tally.unknown_trip_count_loops.insert(other.unknown_trip_count_loops.begin(),
                                        other.unknown_trip_count_loops.end());
}

// Inside a fusion only dots and convolutions are counted (see DynamicStats).
enum class WalkMode { kEverything, kProductsOnly };

// The dynamic walk of DynamicStats: every instruction of a computation that
// runs `times` times, and the computations it runs in turn.
class DynamicWalker {
 public:
  explicit DynamicWalker(const ir::DeviceGrid& grid) : grid_(grid) {}

  void Walk(const ir::Computation& computation, int64_t times, WalkMode mode,
            DynamicTally& tally) const {
    for (const auto& instruction : computation.instructions()) {
      Count(*instruction, times, mode, tally);
      WalkCallees(*instruction, times, mode, tally);
    }
  }

 private:
  void Count(const Instruction& instruction, int64_t times, WalkMode mode,
             DynamicTally& tally) const {
    if (instruction.opcode() == Opcode::kDot) {
      AddTimes(tally.dot_count, 1, times);
      AddTimes(tally.dot_flops, DotFlops(instruction), times);
    }
    if (instruction.opcode() == Opcode::kConvolution) {
      AddTimes(tally.convolution_count, 1, times);
      AddTimes(tally.convolution_flops, ConvolutionFlops(instruction), times);
    }
    if (mode == WalkMode::kProductsOnly) return;
    const std::string kind = CollectiveKind(instruction.opcode());
    if (kind.empty()) return;
    AddTimes(tally.collectives[kind], CollectiveStatsOf(instruction, kind, grid_), times);
  }

  void WalkCallees(const Instruction& instruction, int64_t times, WalkMode mode,
                   DynamicTally& tally) const {
    switch (instruction.opcode()) {
      case Opcode::kWhile:
        return WalkWhile(instruction, times, mode, tally);
      case Opcode::kConditional:
        return WalkBranches(instruction, times, mode, tally);
      case Opcode::kCall:
      case Opcode::kAsyncStart:
        for (const ir::Computation* callee : instruction.called_computations()) {
          Walk(*callee, times, mode, tally);
        }
        return;
      case Opcode::kFusion:
        for (const ir::Computation* callee : instruction.called_computations()) {
          Walk(*callee, times, WalkMode::kProductsOnly, tally);
        }
        return;
      default:
        return;  // reducers, comparators, custom-call callees: see DynamicStats
    }
  }

  // The body runs `trips` times per execution and the condition once more.
  void WalkWhile(const Instruction& loop, int64_t times, WalkMode mode, DynamicTally& tally) const {
    std::optional<int64_t> trips = KnownTripCount(loop);
    int64_t body_times = times;
    int64_t condition_times = times;
    if (trips) {
      body_times = 0;
      condition_times = 0;
      AddTimes(body_times, *trips, times);
      AddTimes(condition_times, *trips + 1, times);
    } else {
      tally.unknown_trip_count_loops.insert(&loop);
    }
    if (const ir::Computation* body = loop.called("body")) {
      Walk(*body, body_times, mode, tally);
    }
    if (const ir::Computation* condition = loop.called("condition")) {
      Walk(*condition, condition_times, mode, tally);
    }
  }

  // One branch runs per execution; which one is data: take the largest.
  void WalkBranches(const Instruction& conditional, int64_t times, WalkMode mode,
                    DynamicTally& tally) const {
    DynamicTally largest;
    for (const ir::Computation* branch : conditional.called_computations()) {
      DynamicTally branch_tally;
      Walk(*branch, times, mode, branch_tally);
      MaxInto(largest, branch_tally);
    }
    AddInto(tally, largest);
  }

  ir::DeviceGrid grid_;
};

DynamicStats ComputeDynamicStats(const ir::Module& module, const ir::DeviceGrid& grid) {
  DynamicStats stats;
  if (module.entry() == nullptr) return stats;
  DynamicTally tally;
  DynamicWalker(grid).Walk(*module.entry(), 1, WalkMode::kEverything, tally);
  stats.collectives = std::move(tally.collectives);
  for (const auto& [kind, collective] : stats.collectives) {
    AddTimes(stats.bytes_sent_per_device, collective.ring_bytes_per_device, 1);
  }
  stats.dot_count = tally.dot_count;
  stats.dot_flops = tally.dot_flops;
  stats.convolution_count = tally.convolution_count;
  stats.convolution_flops = tally.convolution_flops;
  stats.unknown_trip_count_loops = static_cast<int64_t>(tally.unknown_trip_count_loops.size());
  return stats;
}

bool IsSaturated(int64_t value) { return value == kSaturated; }

bool AnySaturated(const std::map<std::string, CollectiveStats>& collectives) {
  return std::any_of(collectives.begin(), collectives.end(), [](const auto& entry) {
    const CollectiveStats& c = entry.second;
    return IsSaturated(c.count) || IsSaturated(c.result_bytes) ||
           IsSaturated(c.ring_bytes_per_device);
  });
}

bool AnySaturated(const ModuleStats& stats) {
  const DynamicStats& dynamic = stats.dynamic;
  return IsSaturated(stats.dot_flops) || IsSaturated(stats.convolution_flops) ||
         IsSaturated(stats.entry_parameter_bytes) || AnySaturated(stats.collectives) ||
         AnySaturated(dynamic.collectives) || IsSaturated(dynamic.bytes_sent_per_device) ||
         IsSaturated(dynamic.dot_count) || IsSaturated(dynamic.dot_flops) ||
         IsSaturated(dynamic.convolution_count) || IsSaturated(dynamic.convolution_flops);
}

}  // namespace

ModuleStats ComputeStats(const ir::Module& module, const ir::VerifyReport& report) {
  ModuleStats stats;
  const ir::DeviceGrid grid = report.grid();
  stats.devices = grid.size();
  stats.computation_count = static_cast<int64_t>(module.computations().size());
  for (const auto& computation : module.computations()) {
    for (const auto& instruction : computation->instructions()) {
      ++stats.instruction_count;
      ++stats.opcode_counts[std::string(ir::OpcodeName(instruction->opcode()))];
      if (instruction->opcode() == Opcode::kDot) {
        ++stats.dot_count;
        AddTimes(stats.dot_flops, DotFlops(*instruction), 1);
      }
      if (instruction->opcode() == Opcode::kConvolution) {
        ++stats.convolution_count;
        AddTimes(stats.convolution_flops, ConvolutionFlops(*instruction), 1);
      }
      const std::string kind = CollectiveKind(instruction->opcode());
      if (kind.empty()) continue;
      AddTimes(stats.collectives[kind], CollectiveStatsOf(*instruction, kind, grid), 1);
    }
  }
  if (module.entry()) {
    for (const Instruction* param : module.entry()->parameters()) {
      if (param) AddTimes(stats.entry_parameter_bytes, param->shape().ByteSize(), 1);
    }
  }
  stats.dynamic = ComputeDynamicStats(module, grid);
  stats.saturated = AnySaturated(stats);
  return stats;
}

}  // namespace loom::analysis
