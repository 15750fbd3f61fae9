// Structural equality of modules, for round-trip tests: the same header,
// computations, instructions (names, opcodes, shapes with layouts, operands
// by name, attributes) and debug sections. Source locations are ignored.
// And of computations, for passes that treat copies of one alike (a
// pipeline's phase loops each run their own copy of a layer's body).
#pragma once

#include <string>

#include "ir/module.h"

namespace loom::ir {

// A description of the first difference, or "" when the modules are equal.
std::string FirstDifference(const Module& a, const Module& b);

// The first difference between two computations as programs, or "" where
// they are copies of one: equal but for their own names, their callees'
// names (the callees themselves such copies) and their channel ids' numbers.
std::string BodyDifference(const Computation& a, const Computation& b);

}  // namespace loom::ir
