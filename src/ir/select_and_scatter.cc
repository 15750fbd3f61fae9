#include "ir/select_and_scatter.h"

namespace loom::ir {
namespace {

// The direction that compares (b, a) as `direction` compares (a, b).
ComparisonDirection Swapped(ComparisonDirection direction) {
  switch (direction) {
    case ComparisonDirection::kLt:
      return ComparisonDirection::kGt;
    case ComparisonDirection::kLe:
      return ComparisonDirection::kGe;
    case ComparisonDirection::kGt:
      return ComparisonDirection::kLt;
    case ComparisonDirection::kGe:
      return ComparisonDirection::kLe;
    default:
      return direction;  // EQ, NE
  }
}

}  // namespace

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
  return a->parameter_number() == 0 ? direction : Swapped(direction);
}

}  // namespace loom::ir
