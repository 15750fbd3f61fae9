#include "ir/computation.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace loom::ir {

Instruction* Computation::AddInstruction(std::unique_ptr<Instruction> instruction) {
  instruction->set_parent(this);
  instructions_.push_back(std::move(instruction));
  return instructions_.back().get();
}

Instruction* Computation::InsertInstructionBefore(std::unique_ptr<Instruction> instruction,
                                                  const Instruction* before) {
  auto it = std::find_if(instructions_.begin(), instructions_.end(),
                         [&](const auto& owned) { return owned.get() == before; });
  LOOM_CHECK(it != instructions_.end(), "no instruction to insert before in " + name_);
  instruction->set_parent(this);
  return instructions_.insert(it, std::move(instruction))->get();
}

void Computation::RemoveInstruction(const Instruction* instruction) {
  LOOM_CHECK(Users(instruction).empty() && root_ != instruction,
             "removing " + instruction->name() + ", which is still used");
  std::erase_if(instructions_, [&](const auto& owned) { return owned.get() == instruction; });
}

void Computation::ReplaceAllUsesWith(const Instruction* from, Instruction* to) {
  for (const auto& user : instructions_) {
    if (user.get() == to) continue;
    for (int64_t i = 0; i < user->operand_count(); ++i) {
      if (user->operand(i) == from) user->ReplaceOperand(i, to);
    }
  }
  if (root_ == from) root_ = to;
}

bool Computation::ReorderInstructions(const std::vector<const Instruction*>& order) {
  if (order.size() != instructions_.size()) return false;
  std::unordered_map<const Instruction*, size_t> position;
  for (size_t i = 0; i < instructions_.size(); ++i) position[instructions_[i].get()] = i;
  std::vector<std::unique_ptr<Instruction>> reordered(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    auto it = position.find(order[i]);
    if (it == position.end() || !instructions_[it->second]) {
      // Not ours, or named twice: put back what was moved and give up.
      for (size_t j = 0; j < i; ++j)
        instructions_[MustFind(position, order[j])] = std::move(reordered[j]);
      return false;
    }
    reordered[i] = std::move(instructions_[it->second]);
  }
  instructions_ = std::move(reordered);
  return true;
}

bool Computation::OrderDefinitionsFirst() {
  // Depth-first from each instruction in order, emitting an instruction
  // once everything it reads is emitted (iteratively: a long chain must not
  // exhaust the stack).
  enum class Mark { kNone, kOpen, kDone };
  std::unordered_map<const Instruction*, Mark> mark;
  for (const auto& instruction : instructions_) mark[instruction.get()] = Mark::kNone;
  std::vector<const Instruction*> order;
  order.reserve(instructions_.size());
  const auto inputs = [](const Instruction& instruction) {
    std::vector<const Instruction*> in(instruction.operands().begin(),
                                       instruction.operands().end());
    const auto& control = instruction.attrs().control_predecessors;
    in.insert(in.end(), control.begin(), control.end());
    return in;
  };
  for (const auto& start : instructions_) {
    if (mark[start.get()] != Mark::kNone) continue;
    // (instruction, inputs visited so far)
    std::vector<std::pair<const Instruction*, size_t>> stack = {{start.get(), 0}};
    mark[start.get()] = Mark::kOpen;
    while (!stack.empty()) {
      auto& [instruction, next] = stack.back();
      const std::vector<const Instruction*> in = inputs(*instruction);
      if (next == in.size()) {
        mark[instruction] = Mark::kDone;
        order.push_back(instruction);
        stack.pop_back();
        continue;
      }
      const Instruction* input = in[next++];
      const auto it = mark.find(input);
      if (it == mark.end() || it->second == Mark::kDone) continue;  // another computation's
      if (it->second == Mark::kOpen) return false;                  // a cycle
      it->second = Mark::kOpen;
      stack.emplace_back(input, 0);
    }
  }
  return ReorderInstructions(order);
}

bool Computation::DependsOn(const Instruction& value, const Instruction& on) const {
  std::vector<const Instruction*> pending = {&value};
  std::unordered_set<const Instruction*> seen;
  while (!pending.empty()) {
    const Instruction* at = pending.back();
    pending.pop_back();
    if (at == &on) return true;
    if (!seen.insert(at).second) continue;
    for (const Instruction* operand : at->operands()) pending.push_back(operand);
    for (const Instruction* control : at->attrs().control_predecessors) pending.push_back(control);
  }
  return false;
}

Instruction* Computation::FindInstruction(std::string_view name) const {
  for (const auto& instruction : instructions_) {
    if (instruction->name() == name) return instruction.get();
  }
  return nullptr;
}

std::vector<Instruction*> Computation::parameters() const {
  std::vector<Instruction*> params;
  for (const auto& instruction : instructions_) {
    if (instruction->opcode() != Opcode::kParameter) continue;
    const int64_t number = instruction->parameter_number().value_or(-1);
    if (number < 0 || number > instruction_count()) continue;
    if (static_cast<int64_t>(params.size()) <= number) {
      params.resize(static_cast<size_t>(number) + 1, nullptr);
    }
    params[static_cast<size_t>(number)] = instruction.get();
  }
  return params;
}

std::vector<Instruction*> Computation::Users(const Instruction* instruction) const {
  std::vector<Instruction*> users;
  for (const auto& candidate : instructions_) {
    const auto& operands = candidate->operands();
    if (std::find(operands.begin(), operands.end(), instruction) != operands.end()) {
      users.push_back(candidate.get());
    }
  }
  return users;
}

}  // namespace loom::ir
