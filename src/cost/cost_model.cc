#include "cost/cost_model.h"

#include "ir/async.h"
#include "ir/computation.h"

namespace loom::cost {

double OperandBytes(const ir::Instruction& instruction) {
  double bytes = 0;
  for (const ir::Instruction* operand : instruction.operands()) {
    bytes += static_cast<double>(operand->shape().ByteSize());
  }
  return bytes;
}

const ir::Instruction* TransferOp(const ir::Instruction& instruction) {
  if (instruction.opcode() == ir::Opcode::kAsyncStart) return ir::WrappedCollective(instruction);
  if (ir::IsCollective(instruction.opcode()) || ir::IsAsyncStart(instruction.opcode())) {
    return &instruction;
  }
  return nullptr;
}

bool LinksDisjoint(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  if (a.empty() || b.empty()) return false;
  for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    if (a[i] == b[j]) return false;
    a[i] < b[j] ? ++i : ++j;
  }
  return true;
}

}  // namespace loom::cost
