#include "ir/reduction.h"

namespace loom::ir {

std::optional<Opcode> CommutativeBinaryReducer(const Computation& reducer) {
  const Instruction* root = reducer.root();
  if (root == nullptr || root->operand_count() != 2 || reducer.instruction_count() != 3) {
    return std::nullopt;
  }
  const Instruction* a = root->operand(0);
  const Instruction* b = root->operand(1);
  if (a->opcode() != Opcode::kParameter || b->opcode() != Opcode::kParameter || a == b) {
    return std::nullopt;
  }
  switch (root->opcode()) {
    case Opcode::kAdd:
    case Opcode::kMultiply:
    case Opcode::kMaximum:
    case Opcode::kMinimum:
    case Opcode::kAnd:
    case Opcode::kOr:
    case Opcode::kXor:
      return root->opcode();
    default:
      return std::nullopt;
  }
}

bool ReturnsSecondParameter(const Computation& combiner) {
  const Instruction* root = combiner.root();
  return root != nullptr && root->opcode() == Opcode::kParameter && root->parameter_number() == 1 &&
         combiner.parameters().size() == 2;
}

}  // namespace loom::ir
