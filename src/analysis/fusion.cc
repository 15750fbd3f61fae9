#include "analysis/fusion.h"

#include <unordered_map>
#include <vector>

#include "ir/opcode.h"

namespace loom::analysis {

using ir::Instruction;
using ir::Opcode;

bool IsLoopFusible(Opcode opcode) {
  if (ir::IsElementwiseUnary(opcode) || ir::IsElementwiseBinary(opcode)) return true;
  switch (opcode) {
    case Opcode::kConvert:
    case Opcode::kSelect:
    case Opcode::kClamp:
    case Opcode::kCompare:
    case Opcode::kBroadcast:
    case Opcode::kIota:
    case Opcode::kTranspose:
    case Opcode::kSlice:
    case Opcode::kDynamicSlice:
    case Opcode::kConcatenate:
    case Opcode::kPad:
    case Opcode::kReverse:
    case Opcode::kReshape:
    case Opcode::kBitcast:
      return true;
    default:
      return false;
  }
}

namespace {

// Whether `user` takes operand `index` into its own kernel.
bool TakesIn(const Instruction& user, int64_t index) {
  if (IsLoopFusible(user.opcode())) return true;
  if (user.opcode() == Opcode::kReduce) return index < user.operand_count() / 2;  // not the inits
  if (user.opcode() == Opcode::kDynamicUpdateSlice) return index == 1;
  return false;
}

bool Duplicable(Opcode opcode) { return opcode == Opcode::kBroadcast || opcode == Opcode::kIota; }

}  // namespace

FusionPlan::FusionPlan(const ir::Computation& computation) {
  // Every use of every value: (user, operand index).
  std::unordered_map<const Instruction*, std::vector<std::pair<const Instruction*, int64_t>>> uses;
  for (const auto& instruction : computation.instructions()) {
    for (int64_t i = 0; i < instruction->operand_count(); ++i) {
      uses[instruction->operand(i)].emplace_back(instruction.get(), i);
    }
  }
  for (const auto& owned : computation.instructions()) {
    const Instruction& producer = *owned;
    if (!IsLoopFusible(producer.opcode()) || computation.root() == &producer ||
        !producer.shape().IsArray()) {
      continue;
    }
    auto it = uses.find(&producer);
    if (it == uses.end() || it->second.empty()) continue;
    if (it->second.size() > 1 && !Duplicable(producer.opcode())) continue;
    bool all_take_in = true;
    for (const auto& [user, index] : it->second) all_take_in &= TakesIn(*user, index);
    if (all_take_in) fused_.insert(&producer);
  }
}

}  // namespace loom::analysis
