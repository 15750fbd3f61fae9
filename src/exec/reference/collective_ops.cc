#include "exec/reference/collective_ops.h"

#include <fmt/format.h>

namespace loom::exec {
namespace {

using ir::Instruction;
using ir::Opcode;

Error At(const Instruction& instruction, const std::string& message) {
  return Error{fmt::format("%{}: {}", instruction.name(), message), instruction.loc()};
}

// Several pending collectives whose results form a tuple.
class TuplePending : public PendingCollective {
 public:
  explicit TuplePending(std::vector<PendingPtr> parts) : parts_(std::move(parts)) {}
  Expected<Tensor> Finish() override {
    std::vector<Tensor> elements;
    for (PendingPtr& part : parts_) {
      LOOM_ASSIGN_OR_RETURN(Tensor element, part->Finish());
      elements.push_back(std::move(element));
    }
    return Tensor::Tuple(std::move(elements));
  }

 private:
  std::vector<PendingPtr> parts_;
};

int64_t SingleDimension(const Instruction& instruction) {
  const auto& dims = instruction.attrs().dimensions;
  return dims && dims->size() == 1 ? dims->front() : -1;
}

using StartOne = std::function<Expected<PendingPtr>(const Tensor& operand, uint64_t tag)>;

// One operand: its collective. Several: one collective each, as a tuple.
Expected<PendingPtr> PerOperand(std::span<const Tensor> operands, CollectiveRuntime& runtime,
                                const StartOne& start) {
  if (operands.size() == 1) return start(operands.front(), runtime.NextTag());
  std::vector<PendingPtr> parts;
  for (const Tensor& operand : operands) {
    LOOM_ASSIGN_OR_RETURN(PendingPtr part, start(operand, runtime.NextTag()));
    parts.push_back(std::move(part));
  }
  return PendingPtr(std::make_unique<TuplePending>(std::move(parts)));
}

}  // namespace

Expected<PendingPtr> StartCollectiveOp(const Instruction& instruction,
                                       std::span<const Tensor> operands, CollectiveRuntime& runtime,
                                       const Reducer& reducer) {
  Communicator& comm = runtime.comm();
  const Opcode opcode = instruction.opcode();
  if (opcode == Opcode::kCollectivePermute || opcode == Opcode::kCollectivePermuteStart) {
    LOOM_ASSIGN_OR_RETURN(const auto pairs,
                          ir::GlobalSourceTargetPairs(instruction, runtime.grid()));
    return PerOperand(operands, runtime, [&](const Tensor& operand, uint64_t tag) {
      return StartCollectivePermute(comm, tag, pairs, operand);
    });
  }
  LOOM_ASSIGN_OR_RETURN(const Group group,
                        ir::ParticipantGroupOf(instruction, runtime.grid(), comm.rank()));
  const int64_t dimension = SingleDimension(instruction);
  switch (opcode) {
    case Opcode::kAllGather:
    case Opcode::kAllGatherStart:
      return PerOperand(operands, runtime, [&](const Tensor& operand, uint64_t tag) {
        return StartAllGather(comm, tag, group, operand, dimension);
      });
    case Opcode::kReduceScatter:
      return PerOperand(operands, runtime, [&](const Tensor& operand, uint64_t tag) {
        return StartReduceScatter(comm, tag, group, operand, dimension, reducer);
      });
    case Opcode::kAllReduce:
    case Opcode::kAllReduceStart:
      return PerOperand(operands, runtime, [&](const Tensor& operand, uint64_t tag) {
        return StartAllReduce(comm, tag, group, operand, reducer);
      });
    case Opcode::kAllToAll:
      if (instruction.attrs().dimensions) {
        return PerOperand(operands, runtime, [&](const Tensor& operand, uint64_t tag) {
          return StartAllToAll(comm, tag, group, operand, dimension);
        });
      }
      return StartAllToAllTuple(comm, runtime.NextTag(), group,
                                std::vector<Tensor>(operands.begin(), operands.end()));
    default:
      return At(instruction,
                fmt::format("collective {} is not executed by Loom", ir::OpcodeName(opcode)));
  }
}

}  // namespace loom::exec
