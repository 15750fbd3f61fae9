#include "cost/cost_model.h"

#include <map>

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

const ir::Instruction& ComputeTimes::KernelProduct(const ir::Instruction& instruction) const {
  const ir::Computation* computation = instruction.parent();
  if (!model_->FusesElementwise() || computation == nullptr) return instruction;
  const ir::Instruction* product = PlanOf(*computation).OutputFusedProduct(instruction);
  return product != nullptr ? *product : instruction;
}

const analysis::FusionPlan& ComputeTimes::PlanOf(const ir::Computation& computation) const {
  std::shared_ptr<const analysis::FusionPlan>& plan = (*plans_)[&computation];
  if (!plan) plan = std::make_shared<const analysis::FusionPlan>(computation);
  return *plan;
}

const std::vector<TransferSegment>& TransferSegmentTable::Of(int64_t device) const {
  static const std::vector<TransferSegment> kNone;
  if (device < 0 || device >= static_cast<int64_t>(row_of_device.size())) return kNone;
  const int32_t row = row_of_device[static_cast<size_t>(device)];
  return row < 0 ? kNone : distinct[static_cast<size_t>(row)];
}

TransferSegmentTable CostModel::TransferSegmentsByDevice(const ir::Instruction& instruction,
                                                         const ir::DeviceGrid& grid) const {
  TransferSegmentTable table;
  std::map<double, int32_t> row_of_seconds;
  for (const double seconds : TransferSecondsByDevice(instruction, grid)) {
    auto [it, inserted] =
        row_of_seconds.try_emplace(seconds, static_cast<int32_t>(table.distinct.size()));
    if (inserted) table.distinct.push_back({TransferSegment{seconds, 0, 1}});
    table.row_of_device.push_back(it->second);
  }
  return table;
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
