#include "ir/clone.h"

#include <fmt/format.h>

#include <unordered_map>

namespace loom::ir {
namespace {

// The copies made so far, by original.
struct CloneMap {
  std::unordered_map<const Computation*, Computation*> computations;
  std::unordered_map<const Instruction*, Instruction*> instructions;
};

Error Outside(const Instruction& instruction, std::string_view what) {
  return Error{fmt::format("internal error cloning the module: %{} names {} outside it",
                           instruction.name(), what),
               instruction.loc()};
}

// Fills `copy`, a shell of `original` with its name, opcode and shape: its
// location, operands, attributes and literal, operands and control
// predecessors those of the copy, callees the copied computations.
Status FillClone(const Instruction& original, const CloneMap& map, Instruction& copy) {
  copy.set_loc(original.loc());
  if (original.parameter_number()) copy.set_parameter_number(*original.parameter_number());
  copy.set_literal(original.literal());
  for (const Instruction* operand : original.operands()) {
    auto it = map.instructions.find(operand);
    if (it == map.instructions.end()) return Outside(original, "an operand");
    copy.AppendOperand(it->second);
  }
  Attributes& attrs = copy.mutable_attrs();
  attrs = original.attrs();
  for (Instruction*& predecessor : attrs.control_predecessors) {
    auto it = map.instructions.find(predecessor);
    if (it == map.instructions.end()) return Outside(original, "a control predecessor");
    predecessor = it->second;
  }
  for (CalledAttribute& called : attrs.called) {
    for (Computation*& callee : called.computations) {
      auto it = map.computations.find(callee);
      if (it == map.computations.end()) return Outside(original, "a computation");
      callee = it->second;
    }
  }
  return OkStatus();
}

}  // namespace

Expected<std::unique_ptr<Module>> CloneModule(const Module& module) {
  auto copy = std::make_unique<Module>(module.name());
  copy->set_loc(module.loc());
  copy->set_num_partitions(module.num_partitions());
  copy->set_replica_count(module.replica_count());
  copy->set_is_scheduled(module.is_scheduled());
  for (const RawAttribute& attribute : module.header_attributes()) {
    copy->AddHeaderAttribute(attribute);
  }
  for (const DebugSection& section : module.debug_sections()) copy->AddDebugSection(section);
  CloneMap map;
  // Every computation first, empty: a callee may come after its caller.
  for (const auto& computation : module.computations()) {
    auto empty = std::make_unique<Computation>(computation->name());
    empty->set_loc(computation->loc());
    map.computations[computation.get()] = copy->AddComputation(std::move(empty));
  }
  for (const auto& computation : module.computations()) {
    Computation* into = map.computations.at(computation.get());
    // Shells first, so that an operand or a control predecessor later in
    // the text has its copy when it is named.
    for (const auto& instruction : computation->instructions()) {
      map.instructions[instruction.get()] = into->AddInstruction(std::make_unique<Instruction>(
          instruction->name(), instruction->opcode(), instruction->shape()));
    }
    for (const auto& instruction : computation->instructions()) {
      LOOM_RETURN_IF_ERROR(FillClone(*instruction, map, *map.instructions.at(instruction.get())));
    }
    if (computation->root() != nullptr) {
      auto it = map.instructions.find(computation->root());
      if (it == map.instructions.end()) {
        return Error{fmt::format("internal error cloning the module: the root of %{} is not "
                                 "one of its instructions",
                                 computation->name()),
                     computation->loc()};
      }
      into->set_root(it->second);
    }
  }
  if (module.entry() != nullptr) copy->set_entry(map.computations.at(module.entry()));
  return copy;
}

}  // namespace loom::ir
