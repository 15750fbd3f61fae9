// Prints modules back to HLO text in one canonical form: every computation
// with its full signature, operands by name, Loom's typed attributes first
// and the attributes it keeps verbatim after them. Parsing the print gives
// the same module, and printing is a fixed point after one round.
#pragma once

#include <string>

#include "ir/module.h"

namespace loom::ir {

std::string PrintModule(const Module& module);
std::string PrintComputation(const Computation& computation, bool is_entry);
// `%name = f32[8]{0} add(%a, %b), attr=...` (no ROOT, no indentation).
std::string PrintInstruction(const Instruction& instruction);

}  // namespace loom::ir
