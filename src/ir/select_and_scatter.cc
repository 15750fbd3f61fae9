#include "ir/select_and_scatter.h"

namespace loom::ir {
std::optional<ComparisonDirection> SelectComparison(const Computation& select) {
  const Instruction* root = select.root();
  if (root == nullptr || root->opcode() != Opcode::kCompare || root->operand_count() != 2 ||
      select.instruction_count() != 3 || !root->attrs().direction) {
    return std::nullopt;
  }
  // TOTALORDER orders NaNs and signed zeros: not the default comparison.
  if (const RawAttribute* type = root->attrs().FindRaw("type");
      type != nullptr && type->value == "TOTALORDER") {
    return std::nullopt;
  }
  const Instruction* a = root->operand(0);
  const Instruction* b = root->operand(1);
  if (a->opcode() != Opcode::kParameter || b->opcode() != Opcode::kParameter || a == b) {
    return std::nullopt;
  }
  const ComparisonDirection direction = *root->attrs().direction;
  return a->parameter_number() == 0 ? direction : SwappedDirection(direction);
}

}  // namespace loom::ir
