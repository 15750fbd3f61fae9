#include "analysis/fusion.h"

#include <utility>

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

bool FoldsIntoUsers(const Instruction& instruction) {
  const Opcode opcode = instruction.opcode();
  return instruction.shape().IsArray() && instruction.shape().ElementCount() <= 1 &&
         opcode != Opcode::kDot && opcode != Opcode::kReduce && opcode != Opcode::kCustomCall;
}

namespace {

using Uses = std::vector<std::pair<const Instruction*, int64_t>>;  // (user, operand index)

// Whether `user` takes operand `index` into its own kernel.
bool TakesIn(const Instruction& user, int64_t index) {
  if (IsLoopFusible(user.opcode())) return true;
  if (user.opcode() == Opcode::kReduce) return index < user.operand_count() / 2;  // not the inits
  if (user.opcode() == Opcode::kDynamicUpdateSlice) return index == 1;
  return false;
}

bool Duplicable(Opcode opcode) { return opcode == Opcode::kBroadcast || opcode == Opcode::kIota; }

// Ops a dot reads its operand through.
bool FeedsADotInPlace(Opcode opcode) {
  switch (opcode) {
    case Opcode::kConvert:
    case Opcode::kBitcast:
    case Opcode::kReshape:
    case Opcode::kTranspose:
    case Opcode::kBroadcast:
    case Opcode::kCopy:
    case Opcode::kSlice:
    case Opcode::kDynamicSlice:
      return true;
    default:
      return false;
  }
}

// Whether the chain of ops a dot reads through, from `op` down, starts at a
// value in memory rather than inside a loop kernel. Reshapes and bitcasts
// only rename their operand, whoever else reads it.
bool StartsInMemory(const Instruction& op,
                    const std::unordered_map<const Instruction*, Uses>& uses) {
  const Instruction* value = op.operand(0);
  while (FeedsADotInPlace(value->opcode())) {
    const bool renames = value->opcode() == Opcode::kReshape || value->opcode() == Opcode::kBitcast;
    auto it = uses.find(value);
    if (!renames && (it == uses.end() || it->second.size() != 1)) break;
    value = value->operand(0);
  }
  return !IsLoopFusible(value->opcode()) || FoldsIntoUsers(*value);
}

bool ReduceRowFitsOnChip(const Instruction& reduce) {
  if (!reduce.shape().IsArray() || reduce.operand_count() != 2) return false;  // variadic: no
  const int64_t outputs = reduce.shape().ElementCount();
  const int64_t inputs = reduce.operand(0)->shape().ElementCount();
  return outputs > 0 && inputs / outputs <= kMaxFusedReduceRow;
}

}  // namespace

FusionPlan::FusionPlan(const ir::Computation& computation) {
  std::unordered_map<const Instruction*, Uses> uses;
  for (const auto& instruction : computation.instructions()) {
    for (int64_t i = 0; i < instruction->operand_count(); ++i) {
      uses[instruction->operand(i)].emplace_back(instruction.get(), i);
    }
  }
  // The kernel each instruction is computed in, by its root; nullptr for a
  // duplicated op, in several. Users come after their operands, so walking
  // backwards every user's kernel is known when its operand is decided.
  std::unordered_map<const Instruction*, const Instruction*> kernel;
  std::unordered_set<const Instruction*> in_dot;  // fused into dots
  const auto& instructions = computation.instructions();
  for (auto it = instructions.rbegin(); it != instructions.rend(); ++it) {
    const Instruction& producer = **it;
    kernel[&producer] = &producer;
    const auto found = uses.find(&producer);
    if (found == uses.end() || computation.root() == &producer || !producer.shape().IsArray() ||
        FoldsIntoUsers(producer)) {
      continue;
    }
    const Uses& users = found->second;
    bool only_dots = FeedsADotInPlace(producer.opcode());
    for (const auto& [user, index] : users) {
      only_dots &= user->opcode() == Opcode::kDot || in_dot.count(user) > 0;
    }
    if (only_dots && StartsInMemory(producer, uses)) {
      fused_.insert(&producer);
      in_dot.insert(&producer);
      kernel[&producer] = users.size() == 1 ? kernel[users.front().first] : nullptr;
      continue;
    }
    const bool fusible = IsLoopFusible(producer.opcode()) ||
                         (producer.opcode() == Opcode::kReduce && ReduceRowFitsOnChip(producer));
    if (!fusible) continue;
    const Instruction* shared = kernel[users.front().first];
    bool one_kernel = true;
    bool all_take_in = true;
    for (const auto& [user, index] : users) {
      all_take_in &= TakesIn(*user, index) && in_dot.count(user) == 0 && !FoldsIntoUsers(*user);
      one_kernel &= shared != nullptr && kernel[user] == shared;
    }
    if (!all_take_in || (!one_kernel && !Duplicable(producer.opcode()))) continue;
    fused_.insert(&producer);
    kernel[&producer] = one_kernel ? shared : nullptr;
  }
  // Each kernel's reads: the operands, from outside it, of its root and of
  // everything fused into it (a fused op's operand is fused into the same
  // kernel, or read from memory).
  for (const auto& owned : instructions) {
    const Instruction* root = owned.get();
    if (FusedIntoUsers(*root)) continue;
    std::vector<OperandRead>& reads = reads_[root];
    std::vector<const Instruction*> members = {root};
    std::unordered_set<const Instruction*> visited = {root};
    while (!members.empty()) {
      const Instruction* member = members.back();
      members.pop_back();
      for (int64_t i = 0; i < member->operand_count(); ++i) {
        const Instruction* operand = member->operand(i);
        if (!FusedIntoUsers(*operand)) {
          reads.push_back({member, i});
        } else if (visited.insert(operand).second) {
          members.push_back(operand);
        }
      }
    }
  }
}

const std::vector<OperandRead>& FusionPlan::KernelReads(const Instruction& root) const {
  static const std::vector<OperandRead> kNone;
  const auto it = reads_.find(&root);
  return it == reads_.end() ? kNone : it->second;
}

}  // namespace loom::analysis
