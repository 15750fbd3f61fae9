// Turns the literal text of a `constant(...)` (as the IR keeps it) into a
// Tensor of the instruction's shape.
#pragma once

#include <string_view>

#include "exec/tensor.h"
#include "ir/instruction.h"
#include "support/status.h"

namespace loom::exec {

// Parses `literal` — a scalar (`0`, `-inf`, `nan`, `true`, `1e-05`) or nested
// braces with one level per dimension (`{ {1, 2}, {3, 4} }`) — into a tensor
// of `shape`. Integers are read exactly; floats are read as double and
// rounded to the element type. `{...}` (a literal elided by the printer) and
// tuple literals are errors.
Expected<Tensor> ParseLiteral(std::string_view literal, const ir::Shape& shape);

// ParseLiteral for a constant instruction; errors name the op and its line.
Expected<Tensor> EvaluateConstant(const ir::Instruction& constant);

}  // namespace loom::exec
