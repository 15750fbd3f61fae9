#include "analysis/module_stats.h"

#include "ir/collective_groups.h"

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

int64_t DotFlops(const Instruction& dot) {
  if (!dot.attrs().dot || dot.operand_count() < 1) return 0;
  int64_t contracted = 1;
  const ir::Shape& lhs = dot.operand(0)->shape();
  for (int64_t d : dot.attrs().dot->lhs_contracting) {
    if (d >= 0 && d < lhs.rank()) contracted *= lhs.dim(d);
  }
  return 2 * dot.shape().ElementCount() * contracted;
}

}  // namespace

ModuleStats ComputeStats(const ir::Module& module, const ir::VerifyReport& report) {
  ModuleStats stats;
  const ir::DeviceGrid grid{report.replica_count, report.partition_count};
  stats.devices = grid.size();
  stats.computation_count = static_cast<int64_t>(module.computations().size());
  for (const auto& computation : module.computations()) {
    for (const auto& instruction : computation->instructions()) {
      ++stats.instruction_count;
      ++stats.opcode_counts[std::string(ir::OpcodeName(instruction->opcode()))];
      if (instruction->opcode() == Opcode::kDot) {
        ++stats.dot_count;
        stats.dot_flops += DotFlops(*instruction);
      }
      const std::string kind = CollectiveKind(instruction->opcode());
      if (kind.empty()) continue;
      CollectiveStats& collective = stats.collectives[kind];
      ++collective.count;
      collective.result_bytes += ResultBytes(*instruction);
      collective.ring_bytes_per_device +=
          RingBytes(*instruction, kind, GroupSize(*instruction, grid));
    }
  }
  if (module.entry()) {
    for (const Instruction* param : module.entry()->parameters()) {
      if (param) stats.entry_parameter_bytes += param->shape().ByteSize();
    }
  }
  return stats;
}

}  // namespace loom::analysis
