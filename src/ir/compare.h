// Structural equality of modules, for round-trip tests: the same header,
// computations, instructions (names, opcodes, shapes with layouts, operands
// by name, attributes) and debug sections. Source locations are ignored.
#pragma once

#include <string>

#include "ir/module.h"

namespace loom::ir {

// A description of the first difference, or "" when the modules are equal.
std::string FirstDifference(const Module& a, const Module& b);

}  // namespace loom::ir
