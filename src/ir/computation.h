// A computation: an ordered list of instructions with one root. The order is
// the text order, which for a scheduled module is the schedule.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/instruction.h"

namespace loom::ir {

class Module;

class Computation {
 public:
  explicit Computation(std::string name) : name_(std::move(name)) {}
  Computation(const Computation&) = delete;
  Computation& operator=(const Computation&) = delete;

  const std::string& name() const { return name_; }
  SourceLoc loc() const { return loc_; }
  void set_loc(SourceLoc loc) { loc_ = loc; }

  // Appends an instruction and takes ownership of it.
  Instruction* AddInstruction(std::unique_ptr<Instruction> instruction);
  // Inserts before `before` (which must belong to this computation).
  Instruction* InsertInstructionBefore(std::unique_ptr<Instruction> instruction,
                                       const Instruction* before);
  // Removes an instruction that nothing uses any more.
  void RemoveInstruction(const Instruction* instruction);
  // Points every user of `from` (and the root, if it is `from`) at `to`.
  void ReplaceAllUsesWith(const Instruction* from, Instruction* to);
  // Puts the instructions in `order`, which must hold each of them exactly
  // once (a scheduler's output); false, and nothing changed, otherwise. The
  // caller keeps every definition ahead of its uses.
  bool ReorderInstructions(const std::vector<const Instruction*>& order);
  // Moves each instruction after its operands and control predecessors,
  // keeping the rest of the order (a stable topological sort): after a
  // rewrite has pointed earlier instructions at a value defined later.
  // False, and nothing changed, where the operands form a cycle.
  bool OrderDefinitionsFirst();
  // Whether `value` reads `on`, through operands or control predecessors,
  // directly or not (both of this computation).
  bool DependsOn(const Instruction& value, const Instruction& on) const;

  const std::vector<std::unique_ptr<Instruction>>& instructions() const { return instructions_; }
  int64_t instruction_count() const { return static_cast<int64_t>(instructions_.size()); }
  Instruction* FindInstruction(std::string_view name) const;

  Instruction* root() const { return root_; }
  void set_root(Instruction* root) { root_ = root; }

  // Parameters ordered by parameter number; a missing number is a nullptr.
  std::vector<Instruction*> parameters() const;
  // Instructions that use `instruction` as an operand, in order.
  std::vector<Instruction*> Users(const Instruction* instruction) const;

  Module* parent() const { return parent_; }
  void set_parent(Module* parent) { parent_ = parent; }

 private:
  std::string name_;
  SourceLoc loc_;
  std::vector<std::unique_ptr<Instruction>> instructions_;
  Instruction* root_ = nullptr;
  Module* parent_ = nullptr;
};

}  // namespace loom::ir
