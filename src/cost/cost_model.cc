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

double ComputeTimes::Of(const ir::Instruction& instruction) const {
  const ir::Computation* computation = instruction.parent();
  if (!model_->FusesElementwise() || computation == nullptr) {
    return model_->ComputeSeconds(instruction);
  }
  return model_->FusedComputeSeconds(instruction, PlanOf(*computation));
}

void ComputeTimes::Prepare(const ir::Computation& computation) const {
  if (model_->FusesElementwise()) PlanOf(computation);
}

const analysis::FusionPlan& ComputeTimes::PlanOf(const ir::Computation& computation) const {
  std::shared_ptr<const analysis::FusionPlan>& plan = plans_[&computation];
  if (!plan) plan = std::make_shared<const analysis::FusionPlan>(computation);
  return *plan;
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
