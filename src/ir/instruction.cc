#include "ir/instruction.h"

namespace loom::ir {

Computation* Instruction::called(std::string_view key) const {
  for (const CalledAttribute& attribute : attrs_.called) {
    if (attribute.key == key && !attribute.computations.empty()) {
      return attribute.computations.front();
    }
  }
  return nullptr;
}

std::vector<Computation*> Instruction::called_computations() const {
  std::vector<Computation*> result;
  for (const CalledAttribute& attribute : attrs_.called) {
    result.insert(result.end(), attribute.computations.begin(), attribute.computations.end());
  }
  return result;
}

}  // namespace loom::ir
